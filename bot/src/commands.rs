//! The informational commands `tools` and `mcp`, and the output of those and of `config
//! check`. The command functions are the binary's edge, as [`crate::init::run`] is: they
//! print, and their errors are reported by `main` as they are.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use sandpiper_agent::mcp::McpManager;

use sandpiper_agent::Config;
use sandpiper_agent::config::ConfigSource;
use sandpiper_agent::tools::ToolRegistry;

/// `sandpiper tools`: one row per built-in tool, with the approval rule the pipeline enforces:
/// `auto-approve` is the JSON's default, and `asks anyway for` the calls of an auto-approved
/// tool that ask all the same. A note says what skips asking for a whole session.
pub fn tools_table(registry: &ToolRegistry) -> String {
    let mut rows = vec![[
        "name".to_owned(),
        "auto-approve".to_owned(),
        "agent".to_owned(),
        "task_agent".to_owned(),
        "primary_key".to_owned(),
        "asks anyway for".to_owned(),
    ]];
    let yn = |b: bool| if b { "yes" } else { "no" }.to_owned();
    for t in registry.iter() {
        let s = &t.spec;
        let raised = match (s.auto_approve, t.tool.asks_for()) {
            (true, Some(calls)) => calls.to_owned(),
            _ => "-".to_owned(),
        };
        rows.push([
            s.name.clone(),
            yn(s.auto_approve),
            yn(s.agent),
            yn(s.task_agent),
            s.primary_key.clone().unwrap_or_else(|| "-".into()),
            raised,
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out.push_str(TOOLS_LEGEND);
    out
}

/// What the columns of [`tools_table`] mean.
const TOOLS_LEGEND: &str = "\n\
auto-approve     runs without asking (else every call asks; `--yes` in chat and an always-allow\n\
                 grant in a workstream skip asking for that tool)\n\
agent            offered to a plan sub-agent (the `plan` tool), not whether the main agent may use it\n\
task_agent       offered to a task sub-agent (the `task` tool)\n\
primary_key      the argument shown in a call's header\n\
asks anyway for  calls of an auto-approved tool that still ask\n";

/// `sandpiper tools` with MCP servers: their tools, with the server and whether they run
/// unasked (`auto_approve` in the server's configuration).
pub fn mcp_tools_table(mcp: &sandpiper_agent::mcp::McpManager, config: &Config) -> String {
    let catalog = mcp.catalog();
    let mut out = String::from("\nMCP tools:\n");
    if catalog.tools.is_empty() {
        out.push_str("  (none listed; `sandpiper mcp list` shows each server's state)\n");
        return out;
    }
    let rows: Vec<[String; 3]> = catalog
        .tools
        .iter()
        .map(|t| {
            let unasked = config
                .mcp
                .servers
                .get(&t.server)
                .is_some_and(|s| s.auto_approve().contains(&t.name));
            let first = t.description.lines().next().unwrap_or_default();
            [
                t.full_name.clone(),
                if unasked { "yes" } else { "no" }.to_owned(),
                sandpiper_channels::visible::escape_invisible(first).into_owned(),
            ]
        })
        .collect();
    let header = [
        "name".to_owned(),
        "auto-approve".to_owned(),
        "description".to_owned(),
    ];
    let widths: Vec<usize> = (0..2)
        .map(|c| {
            rows.iter()
                .chain([&header])
                .map(|r| r[c].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in [&header].into_iter().chain(&rows) {
        let line = format!(
            "{:<w0$}  {:<w1$}  {}",
            row[0],
            row[1],
            row[2],
            w0 = widths[0],
            w1 = widths[1]
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// The MCP servers that failed to connect, with their error.
pub fn mcp_failed(mcp: &sandpiper_agent::mcp::McpManager) -> Vec<String> {
    mcp.status()
        .into_iter()
        .filter(|s| !s.connected || s.error.is_some())
        .map(|s| s.name)
        .collect()
}

pub use sandpiper_channels::commands::answers::{mcp_list, mcp_refresh};

/// What `sandpiper mcp refresh` cannot do, said after its report: it is a process of its own,
/// so it refreshed its own connections and left a running `serve` untouched. Reaching the
/// running server needs an authenticated endpoint (the service JWTs of issue 12), which does
/// not exist yet; until then chat's `/mcp refresh` is the way.
pub const MCP_REFRESH_SCOPE: &str = "note: this refreshed the MCP servers of this command's own \
process only; a running `sandpiper serve` keeps its connections. Refresh those from chat with \
`/mcp refresh [server]` (Discord) or `/sandpiper mcp refresh [server]` (Slack); reaching the \
running server from here needs its authenticated service endpoint, which is not built yet.\n";

/// `sandpiper mcp refresh [SERVER]`: the report, then [`MCP_REFRESH_SCOPE`]. Errors in full:
/// whoever runs the binary on the machine administers it.
pub fn mcp_refresh_cli(reports: &[sandpiper_agent::mcp::RefreshReport]) -> String {
    format!("{}{MCP_REFRESH_SCOPE}", mcp_refresh(reports, true))
}

/// `sandpiper mcp`'s subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum McpCommand {
    /// Connected servers and their tools.
    List,
    /// Re-list tools, resources and prompts (reconnecting a disconnected server) and show what
    /// was added and removed — in this command's own process only: a running `serve` is
    /// refreshed from chat with `/mcp refresh [server]`.
    Refresh {
        /// Only this server.
        server: Option<String>,
    },
}

/// `sandpiper tools`: the built-in tools, then the configured MCP servers' (an error when
/// one of them failed). `protected` are the files MCP servers may not read.
pub async fn tools(config: &Config, protected: &[PathBuf]) -> anyhow::Result<()> {
    print!("{}", tools_table(&ToolRegistry::builtin()?));
    if config.mcp.servers.is_empty() {
        return Ok(());
    }
    let mcp = mcp_first_attempts(config, protected).await;
    print!("{}", mcp_tools_table(&mcp, config));
    let failed = mcp_failed(&mcp);
    mcp.shutdown().await;
    mcp_verdict(&failed)
}

/// `sandpiper mcp list` (an error when a server failed) and `sandpiper mcp refresh`.
pub async fn mcp(
    command: McpCommand,
    config: &Config,
    protected: &[PathBuf],
) -> anyhow::Result<()> {
    let mcp = mcp_first_attempts(config, protected).await;
    let (text, failed) = match command {
        McpCommand::List => (mcp_list(&mcp, true), mcp_failed(&mcp)),
        // Its report names each server's error; a refresh that failed is not a
        // broken installation.
        McpCommand::Refresh { server } => (
            mcp_refresh_cli(&mcp.refresh(server.as_deref()).await),
            Vec::new(),
        ),
    };
    print!("{text}");
    mcp.shutdown().await;
    mcp_verdict(&failed)
}

/// The configured MCP servers, started for one command. They connect in the background;
/// the command reports their first attempt.
async fn mcp_first_attempts(config: &Config, protected: &[PathBuf]) -> Arc<McpManager> {
    let mcp = crate::wiring::start_mcp_once(config, protected).await;
    mcp.first_attempts(config.mcp.connect_timeout + std::time::Duration::from_secs(1))
        .await;
    mcp
}

/// A command that listed MCP servers fails when one of them did.
fn mcp_verdict(failed: &[String]) -> anyhow::Result<()> {
    if !failed.is_empty() {
        anyhow::bail!("MCP server {} failed (see above)", failed.join(", "));
    }
    Ok(())
}

/// `sandpiper config check`: where the config came from and its effective values, secrets
/// redacted.
pub fn config_report(
    config: &Config,
    channels: &sandpiper_channels::config::ChannelsConfig,
    source: &ConfigSource,
) -> String {
    let key_env = config.model.effective_api_key_env();
    let key_state = if config.model.api_key.is_some() {
        format!("set (from ${key_env})")
    } else {
        format!("not set (${key_env} is empty; fine for local servers without a key)")
    };
    let model = &config.model;
    let window = match model.context_window {
        Some(tokens) => format!("{tokens} tokens (from model.context_window)"),
        None => {
            let fallback =
                sandpiper_agent::turn::context::window::known_default(model.provider, &model.model);
            let asks = match model.provider {
                sandpiper_agent::config::Provider::Openai => {
                    "asked of the server on first use (/props n_ctx, /v1/models, LM Studio, Ollama); if it does not say, "
                }
                sandpiper_agent::config::Provider::Anthropic => "",
            };
            format!("{asks}{fallback}")
        }
    };
    let output = match model.max_tokens {
        Some(tokens) => format!("at most {tokens} tokens an answer (model.max_tokens)"),
        None => format!(
            "at most {} tokens an answer, a quarter of the window when it is under 32k (set model.max_tokens to choose)",
            sandpiper_agent::config::DEFAULT_MAX_TOKENS
        ),
    };
    let context = format!(
        "# context window: {window}\n# output limit: {output}, less when the window leaves less\n# compaction: when a request would fill {:.0}% of the window (agent.compact_threshold)\n",
        config.agent.compact_threshold * 100.0
    );
    format!(
        "# configuration is valid\n# source: {source}\n# model: {} via {} at {}\n# api key: {key_state}\n{context}\n{}\n{}",
        config.model.model,
        match config.model.provider {
            sandpiper_agent::config::Provider::Openai => "openai",
            sandpiper_agent::config::Provider::Anthropic => "anthropic",
        },
        config.model.shown_base_url(),
        config.to_redacted_toml(),
        channels.to_redacted_toml()
    )
}

/// What `config check` learns from where it runs.
pub struct Facts<'a> {
    /// Where `sandpiper chat` started here works.
    pub console_workdir: std::path::PathBuf,
    /// Where a Discord thread's tools work under `serve` (`discord:ID` standing for one).
    pub platform_workdirs: std::path::PathBuf,
    /// The environment (token variables).
    pub env: &'a dyn sandpiper_agent::config::Env,
}

/// The part of `config check` that is not in the file: where tools work, which database file,
/// whether each chat platform will start (and why not), and warnings.
pub fn config_facts(
    config: &Config,
    channels: &sandpiper_channels::config::ChannelsConfig,
    facts: &Facts<'_>,
) -> String {
    let mut out = String::from("\n# what this configuration does here\n");
    let _ = writeln!(
        out,
        "# chat works in: {} (`sandpiper chat --workdir DIR` or [tools] workdir to change)",
        facts.console_workdir.display()
    );
    let _ = writeln!(
        out,
        "# serve's threads work in: {}",
        facts.platform_workdirs.display()
    );
    match crate::defaults::database_file(config) {
        Some(file) if file.exists() => {
            let _ = writeln!(out, "# database: {} (SQLite)", file.display());
        }
        Some(file) => {
            let _ = writeln!(
                out,
                "# database: {} (SQLite; not created yet: the first chat or serve creates it)",
                file.display()
            );
        }
        None => {
            let _ = writeln!(
                out,
                "# database: {}",
                sandpiper_agent::config::redact_url(&config.database.url)
            );
        }
    }
    let discord = &channels.discord;
    let _ = match &discord.token {
        Some(_) => writeln!(
            out,
            "# discord: starts with serve (token from ${})",
            discord.token_env
        ),
        None => writeln!(
            out,
            "# discord: off: ${} is not set ([discord] token_env names the variable)",
            discord.token_env
        ),
    };
    let slack = &channels.slack;
    let mode_needs = match slack.mode {
        sandpiper_channels::config::SlackMode::Socket => (
            &slack.app_token,
            &slack.app_token_env,
            "Socket Mode needs the app-level token",
        ),
        sandpiper_channels::config::SlackMode::Events => (
            &slack.signing_secret,
            &slack.signing_secret_env,
            "the Events API needs the signing secret",
        ),
    };
    let _ = match (&slack.bot_token, mode_needs) {
        (None, _) => writeln!(
            out,
            "# slack: off: ${} is not set ([slack] bot_token_env names the variable)",
            slack.bot_token_env
        ),
        (Some(_), (None, var, why)) => writeln!(
            out,
            "# slack: will not start: {why} in ${var}, which is not set"
        ),
        (Some(_), (Some(_), _, _)) => writeln!(out, "# slack: starts with serve"),
    };
    // A variable named on purpose in the file but missing from the environment.
    let named = [
        (&discord.token_env, "DISCORD_TOKEN", "[discord] token_env"),
        (
            &slack.bot_token_env,
            "SLACK_BOT_TOKEN",
            "[slack] bot_token_env",
        ),
        (
            &slack.app_token_env,
            "SLACK_APP_TOKEN",
            "[slack] app_token_env",
        ),
        (
            &slack.signing_secret_env,
            "SLACK_SIGNING_SECRET",
            "[slack] signing_secret_env",
        ),
    ];
    for (var, default, key) in named {
        if var.as_str() != default && facts.env.var(var).is_none() {
            let _ = writeln!(out, "# warning: {key} names ${var}, which is not set");
        }
    }
    out
}

/// What to set when the configured model cannot work: no API key for a provider's public
/// endpoint. `None` when a key is there or the endpoint is another (a local server needs none).
pub fn missing_api_key(config: &Config) -> Option<String> {
    let model = &config.model;
    if model.api_key.is_some() || model.base_url.is_some() {
        return None;
    }
    Some(format!(
        "no API key for {}: set {} (or [model] api_key_env to the variable that holds it), or \
         point sandpiper at a local server with SANDPIPER_MODEL_BASE_URL (e.g. \
         http://127.0.0.1:11434/v1) and SANDPIPER_MODEL",
        model.shown_base_url(),
        model.effective_api_key_env()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_table_lists_every_tool() {
        let table = tools_table(&ToolRegistry::builtin().unwrap());
        let lines: Vec<&str> = table.lines().collect();
        let cut = |l: &str| l.trim_end().to_owned();
        assert_eq!(
            cut(lines[0]),
            "name           auto-approve  agent  task_agent  primary_key  asks anyway for"
        );
        assert_eq!(
            cut(lines[1]),
            "bash           no            no     yes         command      -"
        );
        assert_eq!(
            cut(lines[2]),
            "read_file      yes           yes    yes         path         reads outside the \
             workstream's directory"
        );
        assert_eq!(
            cut(lines[8]),
            "web_fetch      no            yes    yes         url          -"
        );
        assert_eq!(
            cut(lines[10]),
            "task           no            no     no          prompt       -"
        );
        assert_eq!(
            cut(lines[11]),
            "plan           no            no     no          prompt       -"
        );
        assert_eq!(
            cut(lines[12]),
            "memory         yes           no     no          name         saves and deletes at \
             global scope (and deletes with no scope)"
        );
        assert_eq!(
            cut(lines[13]),
            "recall         yes           no     no          query        -"
        );
        assert_eq!(
            cut(lines[14]),
            "notify         yes           yes    yes         message      -"
        );
        assert_eq!(
            cut(lines[15]),
            "read_resource  no            yes    yes         uri          -"
        );
        assert_eq!(
            cut(lines[17]),
            "watch          yes           no     no          name         create (its command runs \
             unattended, like bash); cancel, unless the thread's owner asked"
        );
        assert_eq!(lines[18], "");
        assert!(
            lines[19].starts_with("auto-approve     runs without asking"),
            "{table}"
        );
        assert!(lines[20].contains("grant in a workstream"), "{table}");
        assert!(
            lines[21].starts_with("agent            offered to a plan sub-agent"),
            "{table}"
        );
        assert_eq!(lines.len(), 25);
    }

    #[tokio::test]
    async fn mcp_output_without_servers() {
        let mcp = sandpiper_agent::mcp::McpManager::empty();
        assert_eq!(
            mcp_list(&mcp, true),
            "no MCP servers configured ([mcp.servers.NAME] or --mcp-config FILE)\n"
        );
        let report = sandpiper_agent::mcp::RefreshReport {
            server: "gh".into(),
            added: vec!["mcp__gh__a".into()],
            removed: vec![],
            error: None,
        };
        assert_eq!(
            mcp_refresh(&[report], false),
            "gh: added [mcp__gh__a], removed []\n"
        );
        assert_eq!(mcp_refresh(&[], true), "no MCP servers configured\n");
        assert_eq!(
            mcp_refresh_cli(&[]),
            format!("no MCP servers configured\n{MCP_REFRESH_SCOPE}")
        );
    }

    #[test]
    fn config_report_redacts_the_key() {
        let mut c = Config::for_test();
        c.model.api_key = Some(sandpiper_agent::config::Secret::new("sk-secret-123"));
        let mut channels = sandpiper_channels::config::ChannelsConfig::default();
        channels.discord.token = Some(sandpiper_agent::config::Secret::new("discord-secret"));
        let r = config_report(&c, &channels, &ConfigSource::Defaults);
        assert!(!r.contains("sk-secret-123"), "{r}");
        assert!(!r.contains("discord-secret"), "{r}");
        assert!(r.contains("[discord]") && r.contains("[slack]"), "{r}");
        assert!(r.contains("set (from $OPENAI_API_KEY)"));
    }
}
