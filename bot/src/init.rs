//! `sandpiper init [--path FILE]`: a commented starter configuration — database, model,
//! Discord and Slack, approvals, tools — from a few answers. On a terminal it asks (each
//! question shows its default, Enter keeps it); otherwise the flags (and their defaults)
//! decide. It never overwrites: an existing file is an error that names it.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use sandpiper_agent::config::Provider;

/// The flags of `sandpiper init`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct InitArgs {
    /// Where to write (else `--config`, else `./sandpiper.toml`).
    #[arg(long, value_name = "FILE")]
    pub path: Option<PathBuf>,
    /// `sqlite://FILE` (the default, `sqlite://sandpiper.db` beside the written file) or
    /// `postgres://…`.
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// `openai` (any OpenAI-compatible server) or `anthropic`.
    #[arg(long, value_name = "openai|anthropic", value_parser = parse_provider)]
    pub provider: Option<Provider>,
    /// The model's name.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// A self-hosted or local server's API base (e.g. `http://127.0.0.1:11434/v1`).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Write the Discord section switched on (the token comes from `DISCORD_TOKEN`).
    #[arg(long)]
    pub discord: bool,
    /// Write the Slack section switched on (tokens from `SLACK_BOT_TOKEN`, `SLACK_APP_TOKEN`).
    #[arg(long)]
    pub slack: bool,
    /// Never ask, even on a terminal.
    #[arg(long)]
    pub no_input: bool,
}

/// What the starter file is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Answers {
    /// `[database] url`.
    pub database: String,
    /// `[model] provider`.
    pub provider: Provider,
    /// `[model] model`.
    pub model: String,
    /// `[model] base_url`.
    pub base_url: Option<String>,
    /// Whether Discord's channels are listed (uncommented).
    pub discord: bool,
    /// Whether Slack's section is filled in.
    pub slack: bool,
}

impl Answers {
    /// The answers the flags give, defaults for the rest.
    pub fn from_flags(args: &InitArgs) -> Self {
        let provider = args.provider.unwrap_or(Provider::Openai);
        Self {
            database: args
                .database
                .clone()
                .unwrap_or_else(|| "sqlite://sandpiper.db".into()),
            provider,
            model: args
                .model
                .clone()
                .unwrap_or_else(|| default_model(provider).into()),
            base_url: args.base_url.clone(),
            discord: args.discord,
            slack: args.slack,
        }
    }
}

/// `openai` or `anthropic`.
fn parse_provider(s: &str) -> Result<Provider, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "openai" => Ok(Provider::Openai),
        "anthropic" => Ok(Provider::Anthropic),
        other => Err(format!(
            "unknown provider `{other}`: use openai (any OpenAI-compatible server) or anthropic"
        )),
    }
}

fn default_model(provider: Provider) -> &'static str {
    match provider {
        Provider::Openai => "gpt-4.1-mini",
        Provider::Anthropic => "claude-sonnet-4-5",
    }
}

/// Why `init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The file exists; nothing was changed.
    #[error("{0} already exists; sandpiper init never overwrites a file (pass --path for another)")]
    Exists(PathBuf),
    /// Writing failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An answer was not understood.
    #[error("{0}")]
    Answer(String),
}

/// `sandpiper init`: asks (on a terminal) or takes the flags, writes the file, says what next.
pub fn run(args: &InitArgs, config_flag: Option<&Path>) -> anyhow::Result<()> {
    let path = args
        .path
        .clone()
        .or_else(|| config_flag.map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("sandpiper.toml"));
    if path.exists() {
        return Err(InitError::Exists(path).into());
    }
    let mut answers = Answers::from_flags(args);
    if !args.no_input && std::io::stdin().is_terminal() {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        let mut out = std::io::stderr();
        answers = ask(answers, &mut input, &mut out)?;
    }
    write_new(&path, &render(&answers))?;
    println!("wrote {}", path.display());
    println!("next: set the secrets named in it in the environment, then run `sandpiper doctor`");
    Ok(())
}

/// Asks each question on `out`, reading answers from `input`; an empty answer keeps the
/// default shown.
pub fn ask(
    defaults: Answers,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<Answers, InitError> {
    let mut question = |q: &str, default: &str| -> Result<String, InitError> {
        let _ = write!(out, "{q} [{default}]: ");
        let _ = out.flush();
        let mut line = String::new();
        input
            .read_line(&mut line)
            .map_err(|e| InitError::Answer(format!("cannot read the answer: {e}")))?;
        let line = line.trim();
        Ok(if line.is_empty() {
            default.to_owned()
        } else {
            line.to_owned()
        })
    };
    let yes = |s: &str| matches!(s.to_ascii_lowercase().as_str(), "y" | "yes");
    let yn = |b: bool| if b { "y" } else { "n" };
    let database = question(
        "Database (sqlite://FILE, or postgres://… for several nodes)",
        &defaults.database,
    )?;
    let provider_default = match defaults.provider {
        Provider::Openai => "openai",
        Provider::Anthropic => "anthropic",
    };
    let provider: Provider = question(
        "Model provider (openai: any OpenAI-compatible server; anthropic)",
        provider_default,
    )
    .and_then(|answer| parse_provider(&answer).map_err(InitError::Answer))?;
    let model_default = if provider == defaults.provider {
        defaults.model.clone()
    } else {
        default_model(provider).to_owned()
    };
    let model = question("Model", &model_default)?;
    let base_url = question(
        "API base URL of a local or self-hosted server (- for the provider's own)",
        defaults.base_url.as_deref().unwrap_or("-"),
    )?;
    let discord = yes(&question("Use Discord? (y/n)", yn(defaults.discord))?);
    let slack = yes(&question("Use Slack? (y/n)", yn(defaults.slack))?);
    Ok(Answers {
        database,
        provider,
        model,
        base_url: (base_url != "-").then_some(base_url),
        discord,
        slack,
    })
}

/// Creates `path` with `text`, failing if it exists (checked by the kernel, so a file that
/// appeared meanwhile is not overwritten either).
fn write_new(path: &Path, text: &str) -> Result<(), InitError> {
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(InitError::Exists(path.to_owned()));
        }
        Err(source) => {
            return Err(InitError::Write {
                path: path.to_owned(),
                source,
            });
        }
    };
    file.write_all(text.as_bytes())
        .map_err(|source| InitError::Write {
            path: path.to_owned(),
            source,
        })
}

/// A TOML basic string holding `s`.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The starter file for `a`.
pub fn render(a: &Answers) -> String {
    let provider = match a.provider {
        Provider::Openai => "openai",
        Provider::Anthropic => "anthropic",
    };
    let key_env = match a.provider {
        Provider::Openai => "OPENAI_API_KEY",
        Provider::Anthropic => "ANTHROPIC_API_KEY",
    };
    let base_url = match &a.base_url {
        Some(url) => format!("base_url = {}", quoted(url)),
        None => {
            "# base_url = \"http://127.0.0.1:11434/v1\"   # a local or self-hosted server".into()
        }
    };
    let discord_channels = if a.discord {
        "channels = []          # channel ids the bot answers in; empty: every channel it sees"
    } else {
        "# channels = [123456789012345678]"
    };
    let slack = if a.slack {
        "mode = \"socket\"        # Socket Mode: no public URL needed (\"events\" for the Events API)\n\
         bot_token_env = \"SLACK_BOT_TOKEN\"   # xoxb-…\n\
         app_token_env = \"SLACK_APP_TOKEN\"   # xapp-… (Socket Mode)"
    } else {
        "# mode = \"socket\"\n# bot_token_env = \"SLACK_BOT_TOKEN\"\n# app_token_env = \"SLACK_APP_TOKEN\""
    };
    format!(
        r#"# sandpiper configuration, written by `sandpiper init`. Every key is optional; see
# sandpiper.example.toml for all of them. Secrets are never written here: each section names
# the environment variable that holds its secret. Check with `sandpiper doctor`.

[database]
# SQLite file (created if missing; a relative path is relative to this file's directory), or
# postgres://user@host/db to share one database between several nodes.
url = {database}

[model]
# "openai": OpenAI and any OpenAI-compatible server (vLLM, llama.cpp, Ollama, NIM);
# "anthropic": the Anthropic Messages API.
provider = "{provider}"
model = {model}
{base_url}
# The API key comes from this variable (local servers need none).
api_key_env = "{key_env}"

[discord]
# The bot token comes from DISCORD_TOKEN (or the variable named by token_env). Enable the
# Message Content intent in the developer portal; `sandpiper doctor` prints the invite URL.
{discord_channels}
# Roles whose members may approve tool calls besides a thread's owner.
approver_roles = []

[slack]
{slack}

[approval]
# Tool calls that write, run commands or reach the network wait for a person's approval.
auto_approve = false
# An approval not decided in this time counts as denied.
timeout = "30m"

[tools]
# Each workstream works in its own directory under this one.
# workdir = "/var/lib/sandpiper/workstreams"
# Environment variables passed to tools by name (the bot's tokens never are).
pass_env = []
bash_timeout = "120s"

[server]
# /health, /ready and /metrics.
listen = "127.0.0.1:8090"

[log]
# "text" or "json" (one object per line); the level comes from SANDPIPER_LOG or RUST_LOG.
format = "text"
"#,
        database = quoted(&a.database),
        model = quoted(&a.model),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn parses(text: &str) {
        let path = Path::new("sandpiper.toml");
        let config = sandpiper_agent::Config::from_toml(text, path)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(&file, text).unwrap();
        sandpiper_channels::config::ChannelsConfig::load(
            &sandpiper_agent::config::ConfigSource::File(file),
            &sandpiper_agent::config::ProcessEnv,
        )
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let _ = config;
    }

    #[test]
    fn every_starter_file_is_a_valid_config() {
        for (discord, slack, base_url) in [
            (false, false, None),
            (true, true, Some("http://127.0.0.1:11434/v1".to_owned())),
        ] {
            let a = Answers {
                discord,
                slack,
                base_url,
                ..Answers::from_flags(&InitArgs::default())
            };
            let text = render(&a);
            parses(&text);
            let config =
                sandpiper_agent::Config::from_toml(&text, Path::new("sandpiper.toml")).unwrap();
            assert_eq!(config.database.url, "sqlite://sandpiper.db");
            assert_eq!(config.model.base_url, a.base_url);
        }
        let quoted = Answers {
            model: "we\"ird\\name".into(),
            ..Answers::from_flags(&InitArgs::default())
        };
        let config =
            sandpiper_agent::Config::from_toml(&render(&quoted), Path::new("s.toml")).unwrap();
        assert_eq!(config.model.model, "we\"ird\\name");
    }

    #[test]
    fn questions_take_answers_and_keep_defaults_on_enter() {
        let defaults = Answers::from_flags(&InitArgs::default());
        let mut input =
            std::io::Cursor::new("postgres://sp@db/sp\nanthropic\n\nhttp://10.0.0.5:8000\ny\n\n");
        let mut out = Vec::new();
        let a = ask(defaults, &mut input, &mut out).unwrap();
        assert_eq!(
            a,
            Answers {
                database: "postgres://sp@db/sp".into(),
                provider: Provider::Anthropic,
                model: "claude-sonnet-4-5".into(),
                base_url: Some("http://10.0.0.5:8000".into()),
                discord: true,
                slack: false,
            }
        );
        let asked = String::from_utf8(out).unwrap();
        assert!(asked.contains("Model [claude-sonnet-4-5]: "), "{asked}");
        let mut bad = std::io::Cursor::new("\nmistral\n");
        let err = ask(
            Answers::from_flags(&InitArgs::default()),
            &mut bad,
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("mistral"), "{err}");
    }

    #[test]
    fn an_existing_file_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandpiper.toml");
        std::fs::write(&path, "# mine\n").unwrap();
        let err = write_new(&path, "new").unwrap_err();
        assert!(matches!(err, InitError::Exists(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# mine\n");
        let fresh = dir.path().join("new.toml");
        write_new(&fresh, "x = 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "x = 1\n");
    }
}
