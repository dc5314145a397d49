//! Checks on the MCP server configuration ([`McpServerConfig`], which the config module
//! owns): reading an `mcp.json` file with MCP's error type, and server names.

use std::collections::BTreeMap;
use std::path::Path;

pub use crate::config::{McpServerConfig, parse_mcp_json};

use super::McpError;

/// Reads a standard MCP JSON file (`{"mcpServers": {"name": {...}}}`, as Claude Desktop,
/// Cursor and others write it; VS Code's `{"servers": ...}` is accepted too). Servers marked
/// `"disabled": true` are skipped. Names are checked later, by [`validate_server_name`] at start.
pub fn load_mcp_json(path: &Path) -> Result<BTreeMap<String, McpServerConfig>, McpError> {
    crate::config::read_mcp_json(path).map_err(McpError::BadConfig)
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
