//! What can go wrong talking to MCP servers, phrased for the user and the model.

use std::time::Duration;

/// Why an MCP operation failed. Every message is meant to be shown as is: to the user (status,
/// `/mcp`) or to the model (a failed tool call it can recover from).
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The configuration is wrong (bad server name, unreadable `mcp.json`, missing `command`):
    /// show it to the operator; the server stays off until the configuration is fixed.
    #[error("invalid MCP configuration: {0}")]
    BadConfig(String),
    /// No configured server has this name: tell the model which servers exist.
    #[error("unknown MCP server `{server}`")]
    UnknownServer {
        /// The name asked for.
        server: String,
    },
    /// The server does not offer this tool (any more): the model should pick another one.
    #[error("unknown MCP tool `{tool}`")]
    UnknownTool {
        /// The full name asked for (`mcp__server__tool`).
        tool: String,
    },
    /// No server offers this prompt, or the name is ambiguous.
    #[error("unknown MCP prompt `{name}`{hint}")]
    UnknownPrompt {
        /// The name asked for.
        name: String,
        /// Extra guidance, e.g. the candidates of an ambiguous name (may be empty).
        hint: String,
    },
    /// No server lists this resource URI (or a template matching it).
    #[error("no MCP server offers the resource `{uri}`")]
    UnknownResource {
        /// The URI asked for.
        uri: String,
    },
    /// The server did not answer in time; the request was cancelled. Retrying may help.
    #[error("MCP server `{server}` did not answer within {} ms; the request was cancelled", after.as_millis())]
    Timeout {
        /// The server's name.
        server: String,
        /// The bound that was exceeded.
        after: Duration,
    },
    /// The server failed repeatedly and is cut off for a while: try later or use something else.
    #[error("MCP server `{server}` is cooling off after repeated failures; retry in {} s", retry_in.as_secs().max(1))]
    CoolingOff {
        /// The server's name.
        server: String,
        /// How long until calls are attempted again.
        retry_in: Duration,
    },
    /// The server answered with an error (bad arguments, internal error): show it to the model.
    #[error("MCP server `{server}` returned an error: {message}")]
    Server {
        /// The server's name.
        server: String,
        /// The server's message.
        message: String,
    },
    /// The connection was lost (the process exited, the HTTP session ended). The next call or
    /// refresh reconnects.
    #[error(
        "MCP server `{server}` disconnected (the process exited or the connection dropped); it will be reconnected on the next call"
    )]
    Disconnected {
        /// The server's name.
        server: String,
    },
    /// Connecting (spawning the process, the HTTP handshake, listing) failed.
    #[error("could not connect to MCP server `{server}`: {message}")]
    Connect {
        /// The server's name.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// Two tools would have the same `mcp__server__tool` name; the later one is not offered.
    /// Ask the server's maintainer (or the operator) to rename one.
    #[error("MCP tool {second} is refused: its name `{full_name}` is already taken by {first}")]
    DuplicateTool {
        /// The name both would have.
        full_name: String,
        /// The tool that keeps the name (`` `tool` of server `s` ``).
        first: String,
        /// The refused one.
        second: String,
    },
    /// The manager was shut down.
    #[error("MCP is shut down")]
    ShutDown,
}

impl McpError {
    /// Whether this failure counts towards a server's circuit breaker (the server, not the
    /// request, is at fault).
    pub fn is_server_failure(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. } | Self::Disconnected { .. } | Self::Connect { .. }
        )
    }
}
