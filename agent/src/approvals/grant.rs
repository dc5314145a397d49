//! What an Always allow allows: a whole tool, a command pattern of a tool (`bash` running
//! `git status …`), or every tool of an MCP server. Stored as text in `tool_grants.tool`
//! (`bash`, `bash:git status`, `mcp__github__*`), written with `Display` and read back with
//! `FromStr`, so the format lives here only.

use std::fmt;
use std::str::FromStr;

/// One always-allow grant of a workstream.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grant {
    /// Every call of the tool (a built-in, or one MCP tool `mcp__<server>__<tool>`).
    Tool(String),
    /// Calls of `tool` whose command starts with `prefix`, whole words (see
    /// [`pattern`](super::pattern)).
    Pattern {
        /// The tool (`bash`).
        tool: String,
        /// Whole words the command starts with (`git status`).
        prefix: String,
    },
    /// Every tool of an MCP server.
    Server(String),
}

impl Grant {
    /// The tool a stored grant is about (`bash` for `bash:git status`; `mcp__github__*` for
    /// a server).
    pub fn tool_of(stored: &str) -> &str {
        stored.split_once(':').map_or(stored, |(tool, _)| tool)
    }

    /// Whether this grant lets `tool` run `command` (the bash command, when the tool has one)
    /// without asking.
    pub fn allows(&self, tool: &str, command: Option<&str>) -> bool {
        match self {
            Grant::Tool(t) => t == tool,
            Grant::Server(server) => crate::connectors::server_of(tool) == Some(server.as_str()),
            Grant::Pattern { tool: t, prefix } => {
                t == tool && command.is_some_and(|c| super::pattern::allowed(c, &[prefix.as_str()]))
            }
        }
    }

    /// How the grant is shown to people: `bash`, `` bash `git status` ``, `every tool of MCP
    /// server github`.
    pub fn describe(&self) -> String {
        match self {
            Grant::Tool(t) => t.clone(),
            Grant::Pattern { tool, prefix } => format!("{tool} `{prefix}`"),
            Grant::Server(s) => format!("every tool of MCP server {s}"),
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::Tool(t) => f.write_str(t),
            Grant::Pattern { tool, prefix } => write!(f, "{tool}:{prefix}"),
            Grant::Server(s) => write!(f, "mcp__{s}__*"),
        }
    }
}

/// A stored grant text that is none of the three forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a grant: expected a tool name, `tool:command prefix` or `mcp__server__*`")]
pub struct BadGrant(pub String);

impl FromStr for Grant {
    type Err = BadGrant;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadGrant(s.to_owned());
        if let Some(server) = s
            .strip_prefix("mcp__")
            .and_then(|rest| rest.strip_suffix("__*"))
        {
            if server.is_empty() || server.contains("__") {
                return Err(bad());
            }
            return Ok(Grant::Server(server.to_owned()));
        }
        if let Some((tool, prefix)) = s.split_once(':') {
            let prefix = prefix.split_whitespace().collect::<Vec<_>>().join(" ");
            if tool.is_empty() || prefix.is_empty() {
                return Err(bad());
            }
            return Ok(Grant::Pattern {
                tool: tool.to_owned(),
                prefix,
            });
        }
        if s.is_empty() || s.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        Ok(Grant::Tool(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn grants_read_back_as_written() {
        for (text, grant) in [
            ("bash", Grant::Tool("bash".into())),
            (
                "mcp__github__create_issue",
                Grant::Tool("mcp__github__create_issue".into()),
            ),
            (
                "bash:git status",
                Grant::Pattern {
                    tool: "bash".into(),
                    prefix: "git status".into(),
                },
            ),
            ("mcp__github__*", Grant::Server("github".into())),
        ] {
            assert_eq!(text.parse::<Grant>(), Ok(grant.clone()));
            assert_eq!(grant.to_string(), text);
        }
        for bad in ["", "bash:", ":git", "mcp____*", "two words"] {
            assert_eq!(bad.parse::<Grant>(), Err(BadGrant(bad.into())), "{bad}");
        }
        assert_eq!(Grant::tool_of("bash:git status"), "bash");
        assert_eq!(Grant::tool_of("bash"), "bash");
    }

    #[test]
    fn a_grant_allows_what_it_names() {
        let tool = Grant::Tool("bash".into());
        assert!(tool.allows("bash", Some("rm -rf x")));
        assert!(!tool.allows("write_file", None));
        let server = Grant::Server("github".into());
        assert!(server.allows("mcp__github__create_issue", None));
        assert!(!server.allows("mcp__gitlab__create_issue", None));
        assert!(!server.allows("bash", None));
        let pattern: Grant = "bash:git status".parse().unwrap();
        assert!(pattern.allows("bash", Some("git status --short")));
        assert!(!pattern.allows("bash", Some("git push")));
        assert!(!pattern.allows("bash", None));
        assert!(!pattern.allows("write_file", Some("git status")));
    }
}
