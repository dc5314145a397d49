//! How MCP servers are configured: TOML (`[mcp.servers.NAME]`) or the standard `mcp.json`
//! (`{"mcpServers": {...}}`) that other MCP clients read.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::McpError;

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
    /// Some clients mark servers `"disabled": true`; [`load_mcp_json`] skips those.
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

/// Reads a standard MCP JSON file (`{"mcpServers": {"name": {...}}}`, as Claude Desktop,
/// Cursor and others write it; VS Code's `{"servers": ...}` is accepted too). Servers marked
/// `"disabled": true` are skipped. Names are checked later, by [`validate_server_name`] at start.
pub fn load_mcp_json(path: &Path) -> Result<BTreeMap<String, McpServerConfig>, McpError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| McpError::BadConfig(format!("cannot read {}: {e}", path.display())))?;
    parse_mcp_json(&text).map_err(|e| McpError::BadConfig(format!("{}: {e}", path.display())))
}

/// [`load_mcp_json`] on text already read.
pub fn parse_mcp_json(text: &str) -> Result<BTreeMap<String, McpServerConfig>, String> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default, rename = "mcpServers", alias = "servers")]
        servers: Option<BTreeMap<String, serde_json::Value>>,
    }
    let file: File = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let servers = file.servers.ok_or("no `mcpServers` object found")?;
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

/// Checks a server name: non-empty, only `A-Z a-z 0-9 _ -`, no `__` and no `_` at the end.
/// Tool names `mcp__{server}__{tool}` are split at the first `__` after `mcp__`, so a server
/// `a_` with tool `b` (`mcp__a___b`) would read as server `a` with tool `_b`.
pub fn validate_server_name(name: &str) -> Result<(), McpError> {
    if name.is_empty() {
        return Err(McpError::BadConfig(
            "an MCP server name must not be empty".into(),
        ));
    }
    if name.contains("__") {
        return Err(McpError::BadConfig(format!(
            "MCP server name `{name}` contains `__`, which is reserved as the separator in \
             tool names (mcp__{{server}}__{{tool}}); rename the server"
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(McpError::BadConfig(format!(
            "MCP server name `{name}` contains `{bad}`; use only letters, digits, `_` and `-`"
        )));
    }
    if name.ends_with('_') {
        return Err(McpError::BadConfig(format!(
            "MCP server name `{name}` ends with `_`, so its tool names (mcp__{name}__<tool>) \
             would read as another server's: `mcp__{name}__b` is also server `{}` with tool \
             `_b`; rename the server",
            name.trim_end_matches('_')
        )));
    }
    Ok(())
}

/// Checks every configured server name ([`validate_server_name`]); a bad name whose tool
/// names would collide with another configured server's names both servers in its error.
/// Returns the refused names with why.
pub fn check_server_names<'a>(
    names: impl IntoIterator<Item = &'a str> + Clone,
) -> Vec<(String, McpError)> {
    names
        .clone()
        .into_iter()
        .filter_map(|name| {
            let error = validate_server_name(name).err()?;
            // `a_` and `a`, or `a__x` and `a`: the server its tool names would be read as.
            let example = super::full_tool_name(name, "b");
            let read_as = super::split_tool_name(&example)
                .filter(|(server, _)| *server != name)
                .and_then(|(server, tool)| {
                    names
                        .clone()
                        .into_iter()
                        .find(|other| *other == server)
                        .map(|other| (other, tool))
                });
            let error = match read_as {
                Some((other, tool)) => McpError::BadConfig(format!(
                    "MCP servers `{name}` and `{other}` would make the same tool names \
                     (`{example}` is also `{other}`'s tool `{tool}`); {}",
                    error
                        .to_string()
                        .trim_start_matches("invalid MCP configuration: ")
                )),
                None => error,
            };
            Some((name.to_owned(), error))
        })
        .collect()
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

    #[test]
    fn server_names() {
        assert!(validate_server_name("git-hub_2").is_ok());
        for bad in ["", "bad__name", "a b", "é", "a.b"] {
            assert!(validate_server_name(bad).is_err(), "{bad}");
        }
        let msg = validate_server_name("bad__name")
            .expect_err("rejected")
            .to_string();
        assert!(msg.contains("`__`"), "{msg}");
        let msg = validate_server_name("a_")
            .expect_err("rejected")
            .to_string();
        assert!(msg.contains("ends with `_`"), "{msg}");
        assert!(validate_server_name("_a").is_ok());
    }

    #[test]
    fn colliding_servers_are_refused_naming_both() {
        let refused = check_server_names(["a", "a_", "ok", "z_"]);
        let refused: Vec<(String, String)> = refused
            .into_iter()
            .map(|(name, e)| (name, e.to_string()))
            .collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!(refused[0].0, "a_");
        assert!(
            refused[0]
                .1
                .starts_with("invalid MCP configuration: MCP servers `a_` and `a` would make the same tool names (`mcp__a___b` is also `a`'s tool `_b`)"),
            "{}",
            refused[0].1
        );
        assert_eq!(refused[1].0, "z_");
        assert!(refused[1].1.contains("ends with `_`"), "{}", refused[1].1);
    }
}
