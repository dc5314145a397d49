//! `[mcp]`: the MCP servers (TOML `[mcp.servers.NAME]` or the standard `mcp.json` that other
//! MCP clients read) and the client's timeouts. Plain data: the MCP client (`crate::mcp`)
//! reads it and turns it into its options, so configuration depends on nothing above it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, duration};

/// How long one MCP tool call, resource read or prompt may take, unless configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting to one MCP server may take, unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a turn waits for a server still making its first connection, unless configured.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often servers without list-changed notifications are re-listed, unless configured.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(4 * 60 * 60);

/// `[mcp]` and `[mcp.servers.NAME]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Servers by name (`command`/`args`/`env`, or `type = "http"` with `url`/`headers`).
    pub servers: BTreeMap<String, McpServerConfig>,
    /// How often servers without list-changed notifications are re-listed; `0` disables.
    #[serde(with = "duration")]
    pub refresh_interval: Duration,
    /// How long one MCP tool call, resource read or prompt may take.
    #[serde(with = "duration")]
    pub call_timeout: Duration,
    /// How long one attempt to connect to a server may take (servers connect in the
    /// background; a failed or timed-out one is retried with backoff).
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    /// How long after start a turn waits for a server that has not connected yet (each
    /// server counts from the process's start): its tools are there from the first message.
    /// A server still starting after that is left out of the turn, which says so.
    #[serde(with = "duration")]
    pub startup_timeout: Duration,
    /// Whether a configured server that is not connected makes `/ready` answer 503. Off by
    /// default, so one broken server does not take a node out of its load balancer.
    pub required_for_ready: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            servers: Default::default(),
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            required_for_ready: false,
        }
    }
}

impl McpConfig {
    /// Adds the servers of a standard `mcpServers` JSON file (`--mcp-config`). A name that
    /// is already configured is an error.
    pub fn merge_json_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let servers = read_mcp_json(path).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: format!("invalid MCP configuration: {e}"),
        })?;
        for (name, server) in servers {
            if self.servers.contains_key(&name) {
                return Err(ConfigError::Invalid {
                    key: format!("mcp.servers.{name}"),
                    source_name: path.display().to_string(),
                    message: "this server is also configured in the TOML file".into(),
                });
            }
            self.servers.insert(name, server);
        }
        Ok(())
    }
}

/// One MCP server: a child process speaking stdio, or a streamable-HTTP endpoint.
///
/// In TOML and JSON a server with `command` is stdio; one with `type = "http"` (or
/// `"streamable-http"`) or only a `url` is HTTP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawServer", into = "RawServer")]
pub enum McpServerConfig {
    /// A local process started with `command args...`, talking MCP on stdin/stdout.
    Stdio {
        /// The program (looked up on `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (values are secrets: never logged).
        env: BTreeMap<String, String>,
        /// Tool names (without the `mcp__server__` prefix) that run without approval.
        auto_approve: Vec<String>,
    },
    /// A remote server speaking streamable HTTP.
    Http {
        /// The endpoint, e.g. `https://mcp.example.com/mcp`.
        url: String,
        /// Extra request headers (values are secrets: never logged). An `Authorization: Bearer`
        /// header is sent as the bearer token.
        headers: BTreeMap<String, String>,
        /// Tool names (without the `mcp__server__` prefix) that run without approval.
        auto_approve: Vec<String>,
    },
}

impl McpServerConfig {
    /// Tool names (without prefix) the operator trusts to run without approval.
    pub fn auto_approve(&self) -> &[String] {
        match self {
            Self::Stdio { auto_approve, .. } | Self::Http { auto_approve, .. } => auto_approve,
        }
    }
}

/// The wire shape shared by TOML and `mcp.json`; checked into [`McpServerConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
struct RawServer {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<String, String>,
    #[serde(default, alias = "autoApprove", skip_serializing_if = "Vec::is_empty")]
    auto_approve: Vec<String>,
    /// Some clients mark servers `"disabled": true`; [`parse_mcp_json`] skips those.
    #[serde(default, skip_serializing)]
    disabled: bool,
}

impl TryFrom<RawServer> for McpServerConfig {
    type Error = String;

    fn try_from(raw: RawServer) -> Result<Self, String> {
        let kind = raw.kind.as_deref().map(str::to_ascii_lowercase);
        let http = match kind.as_deref() {
            Some("http" | "streamable-http" | "streamable_http" | "streamablehttp") => true,
            Some("stdio") => false,
            Some("sse") => {
                return Err("the legacy HTTP+SSE transport is not supported; use streamable HTTP (`type = \"http\"`)".into());
            }
            Some(other) => {
                return Err(format!(
                    "unknown server type `{other}` (expected `stdio` or `http`)"
                ));
            }
            None => raw.command.is_none() && raw.url.is_some(),
        };
        if http {
            let url = raw.url.ok_or("an HTTP server needs a `url`")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "`url` must start with http:// or https://, got `{url}`"
                ));
            }
            Ok(Self::Http {
                url,
                headers: raw.headers,
                auto_approve: raw.auto_approve,
            })
        } else {
            let command = raw
                .command
                .filter(|c| !c.trim().is_empty())
                .ok_or("a stdio server needs a `command` (or set `type = \"http\"` and a `url`)")?;
            Ok(Self::Stdio {
                command,
                args: raw.args,
                env: raw.env,
                auto_approve: raw.auto_approve,
            })
        }
    }
}

impl From<McpServerConfig> for RawServer {
    fn from(config: McpServerConfig) -> Self {
        match config {
            McpServerConfig::Stdio {
                command,
                args,
                env,
                auto_approve,
            } => Self {
                command: Some(command),
                args,
                env,
                auto_approve,
                ..Self::default()
            },
            McpServerConfig::Http {
                url,
                headers,
                auto_approve,
            } => Self {
                kind: Some("http".into()),
                url: Some(url),
                headers,
                auto_approve,
                ..Self::default()
            },
        }
    }
}

/// Reads and parses an MCP JSON file; the error names the file and says what is wrong.
pub(crate) fn read_mcp_json(path: &Path) -> Result<BTreeMap<String, McpServerConfig>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_mcp_json(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a standard MCP JSON file (`{"mcpServers": {"name": {...}}}`, as Claude Desktop,
/// Cursor and others write it; VS Code's `{"servers": ...}` is accepted too). Servers marked
/// `"disabled": true` are skipped. Names are checked later, when the MCP client starts.
pub fn parse_mcp_json(text: &str) -> Result<BTreeMap<String, McpServerConfig>, String> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default, rename = "mcpServers", alias = "servers")]
        servers: Option<BTreeMap<String, serde_json::Value>>,
    }
    let file: File = serde_json::from_str(text).map_err(|e| e.to_string())?;
    const SHAPE: &str = r#"expected {"mcpServers": {"NAME": {"command": "…", "args": […]}}}"#;
    let servers = file
        .servers
        .ok_or_else(|| format!("no `mcpServers` object found ({SHAPE})"))?;
    if servers.is_empty() {
        // Most likely a wrong shape, not a wish for no servers: say so rather than run
        // without the tools the person expected.
        return Err(format!("the server list is empty ({SHAPE})"));
    }
    let mut out = BTreeMap::new();
    for (name, value) in servers {
        let raw: RawServer =
            serde_json::from_value(value).map_err(|e| format!("server `{name}`: {e}"))?;
        if raw.disabled {
            continue;
        }
        let config = McpServerConfig::try_from(raw).map_err(|e| format!("server `{name}`: {e}"))?;
        out.insert(name, config);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_forms() {
        #[derive(Deserialize)]
        struct T {
            servers: BTreeMap<String, McpServerConfig>,
        }
        let t: T = toml::from_str(
            r#"
            [servers.github]
            command = "npx"
            args = ["-y", "server-github"]
            env = { TOKEN = "x" }
            [servers.remote]
            type = "http"
            url = "https://mcp.example.com/mcp"
            auto_approve = ["search"]
            "#,
        )
        .expect("parse");
        assert_eq!(
            t.servers["github"],
            McpServerConfig::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "server-github".into()],
                env: BTreeMap::from([("TOKEN".into(), "x".into())]),
                auto_approve: vec![],
            }
        );
        assert_eq!(t.servers["remote"].auto_approve(), ["search".to_string()]);
        let back = toml::to_string(&t.servers["remote"]).expect("serialize");
        assert!(back.contains("type = \"http\""), "{back}");
    }

    #[test]
    fn json_file_and_errors() {
        let servers = parse_mcp_json(
            r#"{"mcpServers": {
                "a": {"command": "x", "args": ["1"], "env": {"K": "V"}},
                "b": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp", "headers": {"X": "y"}},
                "c": {"url": "https://h/mcp", "autoApprove": ["t"]},
                "off": {"command": "y", "disabled": true}
            }}"#,
        )
        .expect("parse");
        assert_eq!(servers.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(matches!(servers["c"], McpServerConfig::Http { .. }));
        assert!(parse_mcp_json(r#"{"mcpServers": {"a": {"args": []}}}"#).is_err());
        assert!(
            parse_mcp_json(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#).is_err()
        );
    }
}
