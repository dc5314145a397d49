//! The MCP (Model Context Protocol) client: external tool servers over stdio or streamable
//! HTTP, their tools, resources and prompts.
//!
//! [`McpManager`] owns one connection per configured server and publishes what they offer as
//! a copy-on-write [`McpCatalog`]; [`McpManager::generation`] says when it changed (push
//! notifications, periodic and manual refresh). Each server has a circuit breaker so a failing
//! server costs the model one clear error, not a minute per call.
//!
//! - [`config`]: checks on the server configuration (owned by [`crate::config`]): reading
//!   `mcp.json`, server names.
//! - `connection`: connecting, the client handler that receives list-changed notifications,
//!   and listing one server.
//! - `convert`: MCP content into text and images for the model.
//! - `breaker`: the per-server circuit breaker.
//! - `refresh`: connecting, re-listing and publishing the catalog.
//! - `slot`: one server's state inside the manager; `stderr_tail`: what it last wrote to
//!   stderr; `tasks`: background refresh.
//! - `manager`: [`McpManager`].

mod breaker;
pub mod config;
mod connection;
mod convert;
mod error;
mod manager;
mod refresh;
mod slot;
mod stderr_tail;
mod tasks;

use std::time::{Duration, Instant};

pub use config::{
    McpServerConfig, check_server_names, load_mcp_json, parse_mcp_json, validate_server_name,
};
pub use error::McpError;
pub use manager::McpManager;

use crate::config::McpConfig;
use crate::model::ImagePart;
use crate::process::env::ChildEnv;

/// The prefix of every MCP tool name the model sees.
pub const TOOL_PREFIX: &str = "mcp__";

/// The name the model sees for `tool` of `server`: `mcp__{server}__{tool}`.
pub fn full_tool_name(server: &str, tool: &str) -> String {
    format!("{TOOL_PREFIX}{server}__{tool}")
}

/// Splits `mcp__{server}__{tool}` into `(server, tool)`; `None` if it is not an MCP name.
pub fn split_tool_name(full_name: &str) -> Option<(&str, &str)> {
    let rest = full_name.strip_prefix(TOOL_PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// A tool offered by an MCP server, as the model will see it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// The server's configured name.
    pub server: String,
    /// The tool's own name on that server.
    pub name: String,
    /// `mcp__{server}__{name}`: the name the model calls.
    pub full_name: String,
    /// The server's description (may be empty).
    pub description: String,
    /// The JSON schema of the arguments.
    pub input_schema: serde_json::Value,
}

/// A fixed resource (one URI) a server offers for `read_resource`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpResource {
    /// The server's configured name.
    pub server: String,
    /// The URI to read.
    pub uri: String,
    /// The server's name for it.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// Its MIME type, if known.
    pub mime_type: Option<String>,
}

/// A family of resources addressed by an RFC 6570 URI template (`db://tables/{table}`).
#[derive(Debug, Clone, PartialEq)]
pub struct McpResourceTemplate {
    /// The server's configured name.
    pub server: String,
    /// The template, e.g. `db://tables/{table}`.
    pub uri_template: String,
    /// The server's name for it.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
}

/// One argument of a prompt template.
#[derive(Debug, Clone, PartialEq)]
pub struct McpPromptArgument {
    /// Its name.
    pub name: String,
    /// What to pass.
    pub description: Option<String>,
    /// Whether the prompt needs it.
    pub required: bool,
}

/// A reusable prompt template a server offers for `use_prompt`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpPrompt {
    /// The server's configured name.
    pub server: String,
    /// The prompt's name on that server.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// Its arguments.
    pub arguments: Vec<McpPromptArgument>,
}

/// Everything the connected servers offer; replaced as a whole when anything changes, so a
/// reader holding an `Arc` sees one consistent snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpCatalog {
    /// Tools, sorted by server then name.
    pub tools: Vec<McpTool>,
    /// Fixed resources, sorted by server then URI.
    pub resources: Vec<McpResource>,
    /// Resource templates, sorted by server then template.
    pub templates: Vec<McpResourceTemplate>,
    /// Prompts, sorted by server then name.
    pub prompts: Vec<McpPrompt>,
    /// Configured servers that have not listed anything yet (still connecting, or failing
    /// and being retried), sorted by name: a turn says their tools are missing.
    pub unavailable: Vec<UnavailableServer>,
}

/// A configured server whose tools are not offered yet, as the system message names it.
#[derive(Debug, Clone, PartialEq)]
pub struct UnavailableServer {
    /// The server's configured name.
    pub server: String,
    /// Why: connecting, failed (retrying), cooling off, misconfigured.
    pub state: ServerState,
}

/// Where one configured server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// A connection attempt is under way (at start, or reconnecting).
    Connecting,
    /// Connected and listed.
    Connected,
    /// The last attempt failed; it is retried with backoff.
    Failed,
    /// Failed repeatedly: the breaker keeps calls and reconnects off for a while.
    CoolingOff,
    /// Not connected and not failing (closed, or lost and not yet retried).
    Disconnected,
    /// Misconfigured (a bad name): never connects.
    Invalid,
}

impl ServerState {
    /// The word `/ready`, `/mcp list` and the logs use.
    pub const fn as_str(self) -> &'static str {
        match self {
            ServerState::Connecting => "connecting",
            ServerState::Connected => "connected",
            ServerState::Failed => "failed",
            ServerState::CoolingOff => "cooling_off",
            ServerState::Disconnected => "disconnected",
            ServerState::Invalid => "invalid",
        }
    }

    /// Every state, for metrics that list each one.
    pub const ALL: [ServerState; 6] = [
        ServerState::Connecting,
        ServerState::Connected,
        ServerState::Failed,
        ServerState::CoolingOff,
        ServerState::Disconnected,
        ServerState::Invalid,
    ];
}

/// A server filter, named like the policy it stands for.
struct Allows<F>(F);

impl<F: Fn(&str) -> bool> Allows<F> {
    fn allows_server(&self, server: &str) -> bool {
        (self.0)(server)
    }
}

impl McpCatalog {
    /// Whether no server is configured: nothing listed, nothing still connecting.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
            && self.resources.is_empty()
            && self.templates.is_empty()
            && self.prompts.is_empty()
            && self.unavailable.is_empty()
    }

    /// The tool the model calls `full_name`, if any.
    pub fn tool(&self, full_name: &str) -> Option<&McpTool> {
        self.tools.iter().find(|t| t.full_name == full_name)
    }

    /// The server `read_resource(uri)` reaches: the one listing the URI, else the first whose
    /// template matches it.
    pub fn resource_server(&self, uri: &str) -> Option<&str> {
        self.resources
            .iter()
            .find(|r| r.uri == uri)
            .map(|r| r.server.as_str())
            .or_else(|| {
                self.templates
                    .iter()
                    .find(|t| convert::template_matches(&t.uri_template, uri))
                    .map(|t| t.server.as_str())
            })
    }

    /// The server `use_prompt(name)` reaches: named in `mcp__{server}__{prompt}` or
    /// `server/prompt`, else the only server offering a prompt of that name.
    pub fn prompt_server<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        // As `use_prompt` reads it: the `mcp__` form first (a prompt name may hold a `/`).
        if let Some((server, _)) = split_tool_name(name).or_else(|| name.split_once('/')) {
            return Some(server);
        }
        let mut owners = self.prompts.iter().filter(|p| p.name == name);
        match (owners.next(), owners.next()) {
            (Some(only), None) => Some(only.server.as_str()),
            _ => None,
        }
    }

    /// Only the tools, resources, templates and prompts of the servers `allows` lets through
    /// (connector policy restricts a turn's catalog with it: `connectors::Effective::restrict`).
    pub fn only(&self, allows: impl Fn(&str) -> bool) -> McpCatalog {
        let policy = Allows(allows);
        McpCatalog {
            tools: self
                .tools
                .iter()
                .filter(|t| policy.allows_server(&t.server))
                .cloned()
                .collect(),
            resources: self
                .resources
                .iter()
                .filter(|r| policy.allows_server(&r.server))
                .cloned()
                .collect(),
            templates: self
                .templates
                .iter()
                .filter(|t| policy.allows_server(&t.server))
                .cloned()
                .collect(),
            prompts: self
                .prompts
                .iter()
                .filter(|p| policy.allows_server(&p.server))
                .cloned()
                .collect(),
            unavailable: self
                .unavailable
                .iter()
                .filter(|u| policy.allows_server(&u.server))
                .cloned()
                .collect(),
        }
    }
}

/// Bounds and schedules of the MCP client.
#[derive(Debug, Clone, PartialEq)]
pub struct McpOptions {
    /// How long one tool call, resource read or prompt may take before it is cancelled.
    pub call_timeout: Duration,
    /// How long connecting (spawn or HTTP handshake, plus the first listing) may take.
    pub connect_timeout: Duration,
    /// How long after start a turn waits for servers still making their first attempt.
    pub startup_timeout: Duration,
    /// How often servers without list-changed notifications are re-listed; `ZERO` disables.
    pub refresh_interval: Duration,
    /// Consecutive failures (timeouts, transport errors, crashes) that trip the breaker.
    pub failure_threshold: u32,
    /// The first cool-off after a trip; doubled on each repeated trip.
    pub cooldown_base: Duration,
    /// The longest cool-off.
    pub cooldown_max: Duration,
    /// The environment stdio servers start from (each adds its own configured `env`); never
    /// sandpiper's own, which holds its tokens.
    pub child_env: ChildEnv,
    /// Longest text of a tool result or resource, cut like built-in tool output
    /// (`[tools] max_output_bytes`).
    pub max_output_bytes: usize,
    /// Largest image (decoded bytes) passed on; a larger one is replaced by a note.
    pub max_image_bytes: usize,
    /// Whether a server whose connection attempt failed is tried again in the background
    /// (long-running processes); one-shot commands that report the first attempt turn it
    /// off.
    pub retry_connects: bool,
}

/// Largest image an MCP result may carry to the model.
pub const MAX_IMAGE_BYTES: usize = 4 * 1024 * 1024;

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            call_timeout: crate::config::DEFAULT_CALL_TIMEOUT,
            connect_timeout: crate::config::DEFAULT_CONNECT_TIMEOUT,
            startup_timeout: crate::config::DEFAULT_STARTUP_TIMEOUT,
            refresh_interval: crate::config::DEFAULT_REFRESH_INTERVAL,
            failure_threshold: 3,
            cooldown_base: Duration::from_secs(30),
            cooldown_max: Duration::from_secs(300),
            child_env: ChildEnv::allow_listed(&crate::config::ProcessEnv),
            max_output_bytes: crate::config::ToolsConfig::default().max_output_bytes,
            max_image_bytes: MAX_IMAGE_BYTES,
            retry_connects: true,
        }
    }
}

/// The manager options `[mcp]` gives; the rest keep their defaults.
impl From<&McpConfig> for McpOptions {
    fn from(config: &McpConfig) -> Self {
        Self {
            call_timeout: config.call_timeout,
            connect_timeout: config.connect_timeout,
            startup_timeout: config.startup_timeout,
            refresh_interval: config.refresh_interval,
            ..Self::default()
        }
    }
}

/// What a tool call or resource read produced, ready to become a tool's output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpCallOutput {
    /// Text parts joined with newlines (embedded resources and binary summaries included).
    pub text: String,
    /// Image parts.
    pub images: Vec<ImagePart>,
    /// The server reported the call as failed (`isError`); the model should see the text.
    pub is_error: bool,
}

/// What one server's refresh changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefreshReport {
    /// The server's configured name.
    pub server: String,
    /// Full names of tools that appeared.
    pub added: Vec<String>,
    /// Full names of tools that disappeared.
    pub removed: Vec<String>,
    /// Why the refresh failed, if it did (the previous listing is kept).
    pub error: Option<String>,
}

/// One server's health, for `/mcp`, `/ready` and logs.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStatus {
    /// The server's configured name.
    pub name: String,
    /// Where it stands.
    pub state: ServerState,
    /// Whether a live connection exists (`state == Connected`).
    pub connected: bool,
    /// The last lines its process wrote to stderr (stdio servers), oldest first.
    pub stderr_tail: Vec<String>,
    /// Number of tools listed.
    pub tools: usize,
    /// Number of resources and templates listed.
    pub resources: usize,
    /// Number of prompts listed.
    pub prompts: usize,
    /// The last error (bad config, failed connect, crash), cleared by success.
    pub error: Option<String>,
    /// When the circuit breaker lets calls through again, if it is open.
    pub cooling_off_until: Option<Instant>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_round_trip() {
        let full = full_tool_name("git-hub", "search_repos");
        assert_eq!(full, "mcp__git-hub__search_repos");
        assert_eq!(split_tool_name(&full), Some(("git-hub", "search_repos")));
        assert_eq!(split_tool_name("mcp__a__b__c"), Some(("a", "b__c")));
        assert_eq!(split_tool_name("bash"), None);
        assert_eq!(split_tool_name("mcp____x"), None);
    }

    fn catalog() -> McpCatalog {
        let prompt = |server: &str, name: &str| McpPrompt {
            server: server.into(),
            name: name.into(),
            description: None,
            arguments: Vec::new(),
        };
        McpCatalog {
            tools: ["a", "b"]
                .iter()
                .map(|s| McpTool {
                    server: (*s).into(),
                    name: "t".into(),
                    full_name: full_tool_name(s, "t"),
                    description: String::new(),
                    input_schema: serde_json::json!({}),
                })
                .collect(),
            resources: vec![McpResource {
                server: "a".into(),
                uri: "a://doc".into(),
                name: "doc".into(),
                description: None,
                mime_type: None,
            }],
            templates: vec![McpResourceTemplate {
                server: "b".into(),
                uri_template: "b://items/{id}".into(),
                name: "item".into(),
                description: None,
            }],
            prompts: vec![
                prompt("a", "greet"),
                prompt("b", "greet"),
                prompt("b", "only_b"),
            ],
            unavailable: vec![UnavailableServer {
                server: "a".into(),
                state: ServerState::Connecting,
            }],
        }
    }

    #[test]
    fn resources_and_prompts_name_the_server_they_reach() {
        let c = catalog();
        assert_eq!(c.resource_server("a://doc"), Some("a"));
        assert_eq!(c.resource_server("b://items/7"), Some("b"));
        assert_eq!(c.resource_server("c://nothing"), None);
        assert_eq!(c.prompt_server("mcp__b__greet"), Some("b"));
        assert_eq!(c.prompt_server("a/greet"), Some("a"));
        assert_eq!(c.prompt_server("mcp__b__x/y"), Some("b"));
        assert_eq!(c.prompt_server("only_b"), Some("b"));
        // Offered by two servers: the manager refuses to guess, and so does the policy.
        assert_eq!(c.prompt_server("greet"), None);
    }

    #[test]
    fn a_restricted_catalog_keeps_only_allowed_servers() {
        let r = catalog().only(|server| server == "b");
        assert_eq!(
            r.tools
                .iter()
                .map(|t| t.full_name.as_str())
                .collect::<Vec<_>>(),
            ["mcp__b__t"]
        );
        assert!(r.resources.is_empty());
        assert_eq!(r.templates.len(), 1);
        assert!(r.prompts.iter().all(|p| p.server == "b") && r.prompts.len() == 2);
        assert!(r.unavailable.is_empty());
        let all = catalog().only(|_| true);
        assert_eq!(all, catalog());
    }
}
