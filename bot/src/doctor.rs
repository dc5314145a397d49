//! `sandpiper doctor`: checks a deployment the way `serve` would use it and prints one line
//! per check — `ok`, `FAIL` (with what to do) or `skip` (not configured) — then exits
//! non-zero when anything failed. Each check talks to the real thing once: the database
//! (opened and migrated, never created), the model endpoint (`GET /models`), Discord (`GET /users/@me`,
//! the application's intents), Slack (`auth.test`, its scopes, Socket Mode's
//! `apps.connections.open`), every MCP server (started, tools listed, ended), the tool
//! sandbox, and the HTTP listen addresses.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandpiper_agent::Config;
use sandpiper_agent::config::{ConfigError, ConfigSource, ProcessEnv};
use sandpiper_channels::config::{ChannelsConfig, DiscordConfig, SlackConfig, SlackMode};

/// How long one platform request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The Message Content intent is enabled for the application (`GATEWAY_MESSAGE_CONTENT`),
/// or allowed while the bot is in fewer than 100 servers (`..._LIMITED`).
const MESSAGE_CONTENT_FLAGS: u64 = (1 << 19) | (1 << 18);

/// The bot permissions the README's invite URL asks for: View Channels, Send Messages, Send
/// Messages in Threads, Create Public Threads, Manage Threads, Read Message History, Attach
/// Files, Embed Links.
pub const DISCORD_PERMISSIONS: u64 = 326_417_632_256;

/// The bot scopes of the README's Slack app manifest.
pub const SLACK_MANIFEST_SCOPES: [&str; 13] = [
    "app_mentions:read",
    "chat:write",
    "channels:history",
    "channels:read",
    "groups:history",
    "groups:read",
    "im:history",
    "im:write",
    "files:write",
    "reactions:write",
    "users:read",
    "usergroups:read",
    "commands",
];

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It works; what was seen.
    Ok(String),
    /// It does not; what is wrong and what to do.
    Fail(String),
    /// Not configured (or, for the database, not created yet), so not checked; how to turn
    /// it on.
    Skip(String),
}

/// One printed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`config`, `database`, `mcp github`, …).
    pub name: String,
    /// How it went.
    pub verdict: Verdict,
}

impl Check {
    fn new(name: impl Into<String>, verdict: Verdict) -> Self {
        Self {
            name: name.into(),
            verdict,
        }
    }

    /// The line `doctor` prints.
    pub fn line(&self) -> String {
        let (word, text) = match &self.verdict {
            Verdict::Ok(t) => ("ok  ", t),
            Verdict::Fail(t) => ("FAIL", t),
            Verdict::Skip(t) => ("skip", t),
        };
        format!("{word}  {:<14} {text}", self.name)
    }
}

/// Runs every check, prints each line as it is known, and returns how many failed.
pub async fn run(
    loaded: Result<(Config, ConfigSource), ConfigError>,
    mcp_config: Option<&Path>,
) -> usize {
    let mut print = |c: &Check| println!("{}", c.line());
    let (config, channels, protected) = match load(loaded, mcp_config) {
        Ok(loaded) => loaded,
        Err(failed) => {
            print(&failed);
            return 1;
        }
    };
    let checks = checks(&config, &channels, &protected, &mut print).await;
    checks
        .iter()
        .filter(|c| matches!(c.verdict, Verdict::Fail(_)))
        .count()
}

/// The first check: the configuration (the file, `[discord]` and `[slack]`, `--mcp-config`)
/// loads. Its `ok` line is printed here; a failure is returned as the line to print.
fn load(
    loaded: Result<(Config, ConfigSource), ConfigError>,
    mcp_config: Option<&Path>,
) -> Result<(Config, ChannelsConfig, Vec<PathBuf>), Check> {
    let fail = |e: &dyn std::fmt::Display| {
        Check::new(
            "config",
            Verdict::Fail(format!(
                "{e} — fix it and check with `sandpiper config check`"
            )),
        )
    };
    let (mut config, source) = loaded.map_err(|e| fail(&e))?;
    let channels = ChannelsConfig::load(&source, &ProcessEnv).map_err(|e| fail(&e))?;
    if let Some(path) = mcp_config {
        config.mcp.merge_json_file(path).map_err(|e| fail(&e))?;
    }
    let (from, protected) = match &source {
        ConfigSource::File(path) => (
            std::path::absolute(path)
                .unwrap_or_else(|_| path.clone())
                .display()
                .to_string(),
            vec![path.clone()],
        ),
        ConfigSource::Defaults => (
            "no file: built-in defaults and the environment".into(),
            Vec::new(),
        ),
    };
    println!("{}", Check::new("config", Verdict::Ok(from)).line());
    Ok((config, channels, protected))
}

/// Every check after the configuration's, each handed to `seen` as soon as it is done.
/// `protected` are the config files (hidden from MCP servers, as `serve` hides them).
pub async fn checks(
    config: &Config,
    channels: &ChannelsConfig,
    protected: &[PathBuf],
    seen: &mut dyn FnMut(&Check),
) -> Vec<Check> {
    let mut out = Vec::new();
    let mut push = |c: Check| {
        seen(&c);
        out.push(c);
    };
    push(database(config).await);
    push(model(config).await);
    push(discord(&channels.discord).await);
    push(slack(&channels.slack).await);
    for c in mcp(config, protected).await {
        push(c);
    }
    push(sandbox(config));
    for c in listen(config) {
        push(c);
    }
    out
}

/// Opens the database as `serve` would, without creating it: a SQLite file that is not
/// there yet is reported (`serve` and `chat` create it), not made.
async fn database(config: &Config) -> Check {
    let url = sandpiper_agent::store::redact_url(&config.database.url);
    if let Some(none) = crate::defaults::no_database_yet(config) {
        return Check::new("database", Verdict::Skip(none));
    }
    match crate::wiring::open_existing_store(config).await {
        Ok(store) => {
            let verdict = match store.ping().await {
                Ok(()) => Verdict::Ok(format!("{url}: opened, migrations current")),
                Err(e) => Verdict::Fail(format!("{url}: opened but does not answer: {e}")),
            };
            store.close().await;
            Check::new("database", verdict)
        }
        Err(e) => Check::new(
            "database",
            Verdict::Fail(format!(
                "{e} — check [database] url (or SANDPIPER_DATABASE_URL) and that the server runs"
            )),
        ),
    }
}

async fn model(config: &Config) -> Check {
    let m = &config.model;
    let verdict = match crate::model_check::check(m).await {
        Ok(()) => Verdict::Ok(format!(
            "{} at {}: answers",
            m.model,
            crate::model_check::shown_models_url(m)
        )),
        Err(e) => Verdict::Fail(e),
    };
    Check::new("model", verdict)
}

fn client() -> Result<reqwest::Client, String> {
    crate::wiring::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))
}

async fn get_json(
    client: &reqwest::Client,
    url: &str,
    auth: &str,
) -> Result<(reqwest::StatusCode, serde_json::Value), String> {
    let response = client
        .get(url)
        .header(reqwest::header::AUTHORIZATION, auth)
        .send()
        .await
        .map_err(|e| format!("{url} is unreachable: {e}"))?;
    let status = response.status();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    Ok((status, body))
}

async fn discord(config: &DiscordConfig) -> Check {
    let Some(token) = &config.token else {
        return Check::new(
            "discord",
            Verdict::Skip(format!("not configured (set {})", config.token_env)),
        );
    };
    let verdict = match discord_verdict(config, token.expose()).await {
        Ok(ok) => Verdict::Ok(ok),
        Err(e) => Verdict::Fail(e),
    };
    Check::new("discord", verdict)
}

async fn discord_verdict(config: &DiscordConfig, token: &str) -> Result<String, String> {
    let client = client()?;
    let base = discord_api(config);
    let auth = format!("Bot {token}");
    let (status, me) = get_json(&client, &format!("{base}/users/@me"), &auth).await?;
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return Err(discord_token_refused(config));
    }
    if !status.is_success() {
        return Err(format!("GET /users/@me answered {status}"));
    }
    let name = me["username"].as_str().unwrap_or("?").to_owned();
    let (status, app) =
        get_json(&client, &format!("{base}/oauth2/applications/@me"), &auth).await?;
    if !status.is_success() {
        return Err(format!(
            "bot {name}: GET /oauth2/applications/@me answered {status}"
        ));
    }
    let app_id = app["id"].as_str().unwrap_or("APP_ID");
    let invite = format!(
        "https://discord.com/oauth2/authorize?client_id={app_id}&scope=bot+applications.commands&permissions={DISCORD_PERMISSIONS}"
    );
    let flags = app["flags"].as_u64().unwrap_or(0);
    if flags & MESSAGE_CONTENT_FLAGS == 0 {
        return Err(format!(
            "bot {name}: the Message Content intent is off: turn it on under Bot → Privileged \
             Gateway Intents (invite: {invite})"
        ));
    }
    Ok(format!(
        "bot {name}, Message Content intent on; invite: {invite}"
    ))
}

/// Discord's REST API under the configured base.
fn discord_api(config: &DiscordConfig) -> String {
    format!("{}/api/v10", config.api_base_url.trim_end_matches('/'))
}

/// What is wrong when Discord refuses the bot token (401): `doctor`'s and `serve`'s one
/// wording.
fn discord_token_refused(config: &DiscordConfig) -> String {
    format!(
        "the token in {} is not valid (401): reset it under Bot in the developer portal",
        config.token_env
    )
}

/// `serve`'s question before it connects: does Discord refuse the token? serenity's gateway
/// retries a refused token every few seconds forever, saying only that it failed; asked once
/// here (`GET /users/@me`), a 401 stops start-up with what to do. Any other answer, or none
/// (Discord unreachable), is left to the gateway's own retries.
pub async fn refused_discord_token(config: &DiscordConfig) -> Option<String> {
    let token = config.token.as_ref()?;
    let client = client().ok()?;
    let url = format!("{}/users/@me", discord_api(config));
    let (status, _) = get_json(&client, &url, &format!("Bot {}", token.expose()))
        .await
        .ok()?;
    (status == reqwest::StatusCode::UNAUTHORIZED).then(|| discord_token_refused(config))
}

async fn slack(config: &SlackConfig) -> Check {
    let Some(token) = &config.bot_token else {
        return Check::new(
            "slack",
            Verdict::Skip(format!("not configured (set {})", config.bot_token_env)),
        );
    };
    let verdict = match slack_verdict(config, token.expose()).await {
        Ok(ok) => Verdict::Ok(ok),
        Err(e) => Verdict::Fail(e),
    };
    Check::new("slack", verdict)
}

async fn slack_post(
    client: &reqwest::Client,
    base: &str,
    method: &str,
    token: &str,
) -> Result<(serde_json::Value, Vec<String>), String> {
    let url = format!("{base}/{method}");
    let response = client
        .post(&url)
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| format!("{url} is unreachable: {e}"))?;
    let scopes = response
        .headers()
        .get("x-oauth-scopes")
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(',')
                .map(|x| x.trim().to_owned())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let body: serde_json::Value = response
        .json()
        .await
        .map_err(|e| format!("{method}: not a Slack answer: {e}"))?;
    Ok((body, scopes))
}

async fn slack_verdict(config: &SlackConfig, token: &str) -> Result<String, String> {
    let client = client()?;
    let base = config.api_base_url.trim_end_matches('/');
    let (auth, scopes) = slack_post(&client, base, "auth.test", token).await?;
    if auth["ok"] != serde_json::Value::Bool(true) {
        return Err(format!(
            "auth.test: {} — check {} (the Bot User OAuth Token, xoxb-…)",
            auth["error"].as_str().unwrap_or("refused"),
            config.bot_token_env
        ));
    }
    let bot = auth["user"].as_str().unwrap_or("?");
    let team = auth["team"].as_str().unwrap_or("?");
    let missing: Vec<&str> = SLACK_MANIFEST_SCOPES
        .iter()
        .copied()
        .filter(|s| !scopes.iter().any(|have| have == s))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "bot {bot} in {team}: the token lacks the manifest's scopes {}: add them under \
             OAuth & Permissions and reinstall the app",
            missing.join(", ")
        ));
    }
    let mut ok = format!("bot {bot} in {team}, scopes match the manifest");
    match config.mode {
        SlackMode::Socket => {
            let Some(app) = &config.app_token else {
                return Err(format!(
                    "{ok}, but Socket Mode needs the app-level token (xapp-…) in {}",
                    config.app_token_env
                ));
            };
            let (open, _) =
                slack_post(&client, base, "apps.connections.open", app.expose()).await?;
            if open["ok"] != serde_json::Value::Bool(true) {
                return Err(format!(
                    "{ok}, but Socket Mode refused: {} — check {} (scope connections:write) \
                     and that Socket Mode is on for the app",
                    open["error"].as_str().unwrap_or("refused"),
                    config.app_token_env
                ));
            }
            let _ = write!(ok, ", Socket Mode on");
        }
        SlackMode::Events => {
            if config.signing_secret.is_none() {
                return Err(format!(
                    "{ok}, but the Events API needs the signing secret in {}",
                    config.signing_secret_env
                ));
            }
            let _ = write!(ok, ", Events API (signing secret set)");
        }
    }
    Ok(ok)
}

async fn mcp(config: &Config, protected: &[PathBuf]) -> Vec<Check> {
    if config.mcp.servers.is_empty() {
        return vec![Check::new(
            "mcp",
            Verdict::Skip("no servers configured ([mcp.servers.NAME] or --mcp-config)".into()),
        )];
    }
    let manager = crate::wiring::start_mcp_once(config, protected).await;
    manager
        .first_attempts(config.mcp.connect_timeout + Duration::from_secs(1))
        .await;
    let checks = manager
        .status()
        .into_iter()
        .map(|s| {
            let verdict = if s.connected {
                Verdict::Ok(format!("started, {} tools", s.tools))
            } else {
                let mut text = s
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("not connected ({})", s.state.as_str()));
                if let Some(last) = s.stderr_tail.last() {
                    let _ = write!(text, "; its stderr: {last}");
                }
                text.push_str(" — check its command and arguments, or run it by hand");
                Verdict::Fail(text)
            };
            Check::new(format!("mcp {}", s.name), verdict)
        })
        .collect();
    manager.shutdown().await;
    checks
}

fn sandbox(config: &Config) -> Check {
    let hidden = sandpiper_agent::tools::path_policy::database_files(&config.database.url);
    let confinement = sandpiper_agent::process::confine::Confinement::probe(&hidden);
    let verdict = match confinement.report() {
        Some(r) => match &r.files {
            sandpiper_agent::process::confine::FileHiding::No(why) => Verdict::Fail(format!(
                "tools can read the config and database files: {why} — allow user namespaces \
                 (kernel.unprivileged_userns_clone=1), or run in a container that permits them"
            )),
            files => Verdict::Ok(format!(
                "files hidden ({}), Landlock ABI {}, bot process protected: {}, signals \
                 scoped to each call: {}{}, cgroups out of calls' reach: {}, bash calls from a \
                 standing spawner: {}",
                files.as_str(),
                r.landlock_abi,
                r.bot_process,
                r.signals_scoped,
                if r.signals_scoped {
                    ""
                } else {
                    " (needs Landlock ABI 6, Linux 6.12+: calls can signal the bot and each other)"
                },
                r.cgroups_covered,
                r.spawner
            )),
        },
        None => Verdict::Fail("tools run unconfined".into()),
    };
    Check::new("tool sandbox", verdict)
}

fn listen(config: &Config) -> Vec<Check> {
    let mut addrs = vec![("listen", config.server.listen)];
    if let Some(ops) = config.server.ops_listen {
        addrs.push(("ops_listen", ops));
    }
    addrs
        .into_iter()
        .map(|(key, addr)| {
            let verdict = match std::net::TcpListener::bind(addr) {
                Ok(_) => Verdict::Ok(format!("{addr} is free")),
                Err(e) => Verdict::Fail(format!(
                    "cannot listen on {addr}: {e} — stop what holds it or change [server] {key}"
                )),
            };
            Check::new(format!("http {key}"), verdict)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_aligned_and_say_the_verdict_first() {
        let c = Check::new("model", Verdict::Fail("no API key".into()));
        assert_eq!(c.line(), "FAIL  model          no API key");
        let c = Check::new("discord", Verdict::Skip("not configured".into()));
        assert_eq!(c.line(), "skip  discord        not configured");
    }

    #[test]
    fn the_scopes_checked_are_the_fake_slacks_manifest() {
        assert_eq!(
            SLACK_MANIFEST_SCOPES,
            sandpiper_tests::fake_slack::MANIFEST_SCOPES
        );
    }
}
