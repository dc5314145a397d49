//! One connection to one server: spawning or dialing it, the client handler that turns
//! list-changed notifications into a refresh signal, and listing what the server offers.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;

use rmcp::model::{ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientCacheConfig, ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, oneshot};

use crate::process::env::ChildEnv;
use crate::process::tree::{Containment, ProcessTree};

use super::stderr_tail::StderrTail;

use super::{
    McpError, McpPrompt, McpPromptArgument, McpResource, McpResourceTemplate, McpServerConfig,
    McpTool, full_tool_name,
};

/// A live client session with one server.
pub(crate) type Client = RunningService<RoleClient, Handler>;

/// Receives server notifications. List changes only signal the server's watcher task, which
/// debounces them and re-lists; the handler itself never blocks the connection.
///
/// It also holds a stdio server's [`ProcessTree`]: the handler lives exactly as long as the
/// connection (inside the handshake future, then inside the running service), so however
/// the connection ends — a handshake that timed out, a failed listing, a crash, shutdown, or
/// the process exiting its runtime — the server and everything it started are killed with
/// it, never left as orphans.
#[derive(Debug, Clone)]
pub(crate) struct Handler {
    server: String,
    list_changed: mpsc::Sender<()>,
    _processes: Option<Arc<ProcessTree>>,
}

impl Handler {
    fn signal(&self, what: &'static str) {
        tracing::debug!(server = %self.server, what, "MCP list changed");
        // A full channel means a refresh is already pending: nothing to add.
        let _ = self.list_changed.try_send(());
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info =
            ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        info.client_info = Implementation::new("sandpiper", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signal("tools");
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signal("resources");
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signal("prompts");
    }
}

/// What one server offers, plus whether it pushes changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Listing {
    pub tools: Vec<McpTool>,
    pub resources: Vec<McpResource>,
    pub templates: Vec<McpResourceTemplate>,
    pub prompts: Vec<McpPrompt>,
    /// The server declared `listChanged` for tools (so periodic polling is not needed).
    pub pushes_tools: bool,
}

/// Where a connection's stderr goes: its lines into `tail`; `done` is dropped when the
/// process's stderr closes (so a failed start can wait for its last words).
pub(crate) struct StderrSink {
    pub tail: Arc<StderrTail>,
    pub done: oneshot::Sender<()>,
}

/// Spawns or dials the server and completes the MCP handshake (not bounded here: the caller
/// applies the connect timeout; dropping the future kills a stdio server's processes).
pub(crate) async fn connect(
    server: &str,
    config: &McpServerConfig,
    base_env: &ChildEnv,
    list_changed: mpsc::Sender<()>,
    stderr_sink: StderrSink,
) -> Result<Client, McpError> {
    let mut handler = Handler {
        server: server.to_owned(),
        list_changed,
        _processes: None,
    };
    let fail = |message: String| McpError::Connect {
        server: server.to_owned(),
        message,
    };
    match config {
        McpServerConfig::Stdio {
            command, args, env, ..
        } => {
            // Only the allow-list and the server's own `env`: not the bot's tokens.
            let mut cmd = base_env.clone().with_vars(env).command(command);
            cmd.args(args);
            // Its own process group, a cgroup where possible, and a marker every descendant
            // inherits: ending the connection ends all of it.
            let mut tree = ProcessTree::prepare(&mut cmd, Containment::Auto);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| fail(format!("cannot start `{command}`: {e}")))?;
            tree.started(transport.id());
            handler._processes = Some(Arc::new(tree));
            if let Some(stderr) = stderr {
                let server = server.to_owned();
                tokio::spawn(async move {
                    let StderrSink { tail, done } = stderr_sink;
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %server, line = %line, "MCP server stderr");
                        tail.push(&line);
                    }
                    drop(done);
                });
            }
            handler
                .serve(transport)
                .await
                .map_err(|e| fail(format!("handshake failed: {e}")))
        }
        McpServerConfig::Http { url, headers, .. } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let mut custom = HashMap::new();
            for (name, value) in headers {
                if name.eq_ignore_ascii_case("authorization")
                    && let Some(token) = value.strip_prefix("Bearer ")
                {
                    config = config.auth_header(token.trim());
                    continue;
                }
                // Never echo the value: headers carry secrets.
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| fail(format!("invalid header name `{name}`")))?;
                let value = reqwest::header::HeaderValue::from_str(value)
                    .map_err(|_| fail(format!("invalid value for header `{name}`")))?;
                custom.insert(name, value);
            }
            let transport =
                StreamableHttpClientTransport::from_config(config.custom_headers(custom));
            handler.serve(transport).await.map_err(|e| {
                let shown = crate::config::redact_url(url);
                fail(crate::config::scrub_url(
                    &format!("handshake with {shown} failed: {e}"),
                    url,
                ))
            })
        }
    }
}

/// Lists tools, and resources and prompts when the server declares those capabilities.
pub(crate) async fn list(server: &str, client: &Client) -> Result<Listing, rmcp::ServiceError> {
    // Always ask the server: a refresh must see the current lists, not a cached page.
    client
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let capabilities = client
        .peer_info()
        .map(|info| info.capabilities.clone())
        .unwrap_or_default();
    let mut listing = Listing {
        pushes_tools: capabilities
            .tools
            .as_ref()
            .is_some_and(|t| t.list_changed == Some(true)),
        ..Listing::default()
    };
    if capabilities.tools.is_some() {
        let mut tools: Vec<McpTool> = client
            .list_all_tools()
            .await?
            .into_iter()
            .map(|tool| McpTool {
                server: server.to_owned(),
                full_name: full_tool_name(server, &tool.name),
                name: tool.name.into_owned(),
                description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
            })
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        listing.tools = tools;
    }
    if capabilities.resources.is_some() {
        listing.resources = client
            .list_all_resources()
            .await?
            .into_iter()
            .map(|r| McpResource {
                server: server.to_owned(),
                uri: r.uri.clone(),
                name: r.name.clone(),
                description: r.description.clone(),
                mime_type: r.mime_type.clone(),
            })
            .collect();
        listing.resources.sort_by(|a, b| a.uri.cmp(&b.uri));
        listing.templates = client
            .list_all_resource_templates()
            .await?
            .into_iter()
            .map(|t| McpResourceTemplate {
                server: server.to_owned(),
                uri_template: t.uri_template.clone(),
                name: t.name.clone(),
                description: t.description.clone(),
            })
            .collect();
        listing
            .templates
            .sort_by(|a, b| a.uri_template.cmp(&b.uri_template));
    }
    if capabilities.prompts.is_some() {
        listing.prompts = client
            .list_all_prompts()
            .await?
            .into_iter()
            .map(|p| McpPrompt {
                server: server.to_owned(),
                name: p.name,
                description: p.description,
                arguments: p
                    .arguments
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| McpPromptArgument {
                        name: a.name,
                        description: a.description,
                        required: a.required.unwrap_or(false),
                    })
                    .collect(),
            })
            .collect();
        listing.prompts.sort_by(|a, b| a.name.cmp(&b.name));
    }
    Ok(listing)
}
