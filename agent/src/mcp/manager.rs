//! [`McpManager`]: every configured server, the published catalog, and the call paths
//! (bounded, circuit-broken, reconnecting).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use super::connection::Client;
use super::slot::{Slot, classify, millis};
use super::{
    McpCallOutput, McpCatalog, McpError, McpOptions, McpServerConfig, RefreshReport, ServerState,
    ServerStatus, UnavailableServer, check_server_names, convert, split_tool_name, tasks,
};

/// The MCP client side of sandpiper: one connection per configured server, shared by every
/// workstream. Cheap to query (`catalog()` is a snapshot); calls are bounded by
/// [`McpOptions::call_timeout`] and a per-server circuit breaker.
pub struct McpManager {
    pub(crate) options: McpOptions,
    pub(crate) slots: BTreeMap<String, Arc<Slot>>,
    pub(crate) catalog: Mutex<Arc<McpCatalog>>,
    pub(crate) generation: watch::Sender<u64>,
    pub(crate) shutdown: CancellationToken,
    /// Servers whose first connection attempt has not ended yet.
    pub(crate) starting: watch::Sender<BTreeSet<String>>,
    /// When the servers started connecting: a turn waits for them until
    /// [`McpOptions::startup_timeout`] after this.
    pub(crate) started: Instant,
    /// The background connects, waited for at shutdown (so their processes are ended).
    pub(crate) connects: TaskTracker,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("servers", &self.slots.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl McpManager {
    /// Starts connecting every server in the background, each attempt bounded by
    /// `connect_timeout`, and returns at once: start-up (the chat prompt, `/health`) never
    /// waits for a server. A server's tools join the catalog when it has listed them; one
    /// that fails or hangs is recorded (see [`McpManager::status`]) and retried with backoff
    /// and the breaker; one with a bad name never connects. [`McpManager::first_attempts`]
    /// waits for the first round when a caller needs it (`mcp list`);
    /// [`McpManager::await_startup`] is how a turn waits for the servers still starting.
    pub async fn start(
        servers: BTreeMap<String, McpServerConfig>,
        options: McpOptions,
    ) -> Arc<McpManager> {
        let mut slots = BTreeMap::new();
        let mut receivers = Vec::new();
        let refused: BTreeMap<String, String> =
            check_server_names(servers.keys().map(String::as_str))
                .into_iter()
                .map(|(name, error)| (name, error.to_string()))
                .collect();
        for (name, config) in servers {
            let invalid = refused.get(&name).cloned();
            if let Some(error) = &invalid {
                tracing::error!(server = %name, error = %error, "MCP server rejected");
            }
            let (signal, receiver) = mpsc::channel(1);
            slots.insert(
                name.clone(),
                Arc::new(Slot::new(name.clone(), config, invalid, signal)),
            );
            receivers.push((name, receiver));
        }
        let manager = Arc::new(Self::new(slots, options));
        let valid: BTreeSet<String> = manager
            .slots
            .values()
            .filter(|slot| slot.invalid.is_none())
            .map(|slot| slot.name.clone())
            .collect();
        manager.starting.send_replace(valid.clone());
        manager.rebuild_catalog();
        for name in valid {
            // In the caller's span (a node's), so its lines carry the node's id.
            manager.connects.spawn(
                tasks::connect_until_listed(
                    Arc::downgrade(&manager),
                    name,
                    manager.shutdown.clone(),
                )
                .in_current_span(),
            );
        }
        manager.connects.close();
        for (name, receiver) in receivers {
            tokio::spawn(tasks::watch_list_changes(
                Arc::downgrade(&manager),
                name,
                receiver,
                manager.shutdown.clone(),
            ));
        }
        if !manager.options.refresh_interval.is_zero() && !manager.slots.is_empty() {
            tokio::spawn(tasks::poll(
                Arc::downgrade(&manager),
                manager.options.refresh_interval,
                manager.shutdown.clone(),
            ));
        }
        manager
    }

    /// A manager without servers (MCP not configured).
    pub fn empty() -> Arc<McpManager> {
        Arc::new(Self::new(BTreeMap::new(), McpOptions::default()))
    }

    fn new(slots: BTreeMap<String, Arc<Slot>>, options: McpOptions) -> Self {
        Self {
            options,
            slots,
            catalog: Mutex::new(Arc::new(McpCatalog::default())),
            generation: watch::channel(0).0,
            shutdown: CancellationToken::new(),
            starting: watch::channel(BTreeSet::new()).0,
            started: Instant::now(),
            connects: TaskTracker::new(),
        }
    }

    /// Waits (at most `limit`) until every server's first connection attempt has ended,
    /// connected or not; true if they all did. For one-shot commands (`mcp list`, `doctor`)
    /// that report what the servers did; a long-running process never needs to wait.
    pub async fn first_attempts(&self, limit: Duration) -> bool {
        self.wait_starting(limit, BTreeSet::is_empty).await
    }

    /// Waits for the servers still making their first connection attempt, until
    /// [`McpOptions::startup_timeout`] after start, so that a turn starting meanwhile is
    /// offered their tools. `None` at once without servers or when the start-up time is
    /// over; otherwise the
    /// servers that are not connected (still starting, failed, misconfigured), for the turn
    /// to say it goes on without them.
    pub async fn await_startup(&self) -> Option<Vec<UnavailableServer>> {
        let left = self.startup_left();
        if self.slots.is_empty() || left.is_zero() {
            return None;
        }
        self.wait_starting(left, BTreeSet::is_empty).await;
        let unavailable = self
            .slots
            .values()
            .filter_map(|slot| {
                let state = slot.server_state(&slot.state());
                (state != ServerState::Connected).then(|| UnavailableServer {
                    server: slot.name.clone(),
                    state,
                })
            })
            .collect();
        Some(unavailable)
    }

    /// Waits (within the start-up time) for `server`'s first connection attempt, for a call
    /// to a tool it has not listed yet; true if the server is connected now.
    pub async fn await_server(&self, server: &str) -> bool {
        self.wait_starting(self.startup_left(), |starting| !starting.contains(server))
            .await;
        self.slots
            .get(server)
            .is_some_and(|slot| slot.server_state(&slot.state()) == ServerState::Connected)
    }

    /// The servers still making their first connection attempt.
    pub fn starting(&self) -> Vec<String> {
        self.starting.borrow().iter().cloned().collect()
    }

    /// What is left of the start-up time.
    pub fn startup_left(&self) -> Duration {
        self.options
            .startup_timeout
            .saturating_sub(self.started.elapsed())
    }

    /// Waits at most `limit` until `done` holds for the servers still starting.
    async fn wait_starting(
        &self,
        limit: Duration,
        done: impl Fn(&BTreeSet<String>) -> bool,
    ) -> bool {
        let mut starting = self.starting.subscribe();
        tokio::time::timeout(limit, starting.wait_for(|s| done(s)))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The current snapshot of tools, resources and prompts (tools sorted by server, name).
    pub fn catalog(&self) -> Arc<McpCatalog> {
        self.catalog
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Bumped whenever the catalog changes; wait on it to rebuild tool lists.
    pub fn generation(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The configuration of `server` (e.g. for its `auto_approve` list).
    pub fn server_config(&self, server: &str) -> Option<McpServerConfig> {
        self.slots.get(server).map(|slot| slot.config.clone())
    }

    /// Calls `mcp__{server}__{tool}`. Errors are for the model (unknown tool, timeout,
    /// cooling off, disconnected); a tool that ran and failed comes back with `is_error`.
    pub async fn call_tool(
        &self,
        full_name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<McpCallOutput, McpError> {
        let unknown = || McpError::UnknownTool {
            tool: full_name.to_owned(),
        };
        let (server, tool) = split_tool_name(full_name).ok_or_else(unknown)?;
        let slot = self.slot(server)?;
        {
            let state = slot.state();
            if state.listed && !state.listing.tools.iter().any(|t| t.name == tool) {
                return Err(unknown());
            }
        }
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let started = Instant::now();
        let result = self
            .run(slot, |client| async move { client.call_tool(params).await })
            .await
            .map(|result| self.capped(convert::call_result(result)));
        tracing::info!(
            server,
            tool,
            elapsed_ms = millis(started.elapsed()),
            ok = result.is_ok(),
            is_error = result.as_ref().is_ok_and(|o| o.is_error),
            "MCP tool call"
        );
        result
    }

    /// Reads a resource from the server that lists it (or a template matching it).
    pub async fn read_resource(&self, uri: &str) -> Result<McpCallOutput, McpError> {
        let catalog = self.catalog();
        let server = catalog
            .resource_server(uri)
            .map(str::to_owned)
            .ok_or_else(|| McpError::UnknownResource {
                uri: uri.to_owned(),
            })?;
        let slot = self.slot(&server)?;
        let params = ReadResourceRequestParams::new(uri);
        self.run(
            slot,
            |client| async move { client.read_resource(params).await },
        )
        .await
        .map(|result| self.capped(convert::resource_result(result)))
    }

    /// A result bounded by [`McpOptions::max_output_bytes`] and
    /// [`McpOptions::max_image_bytes`].
    fn capped(&self, out: McpCallOutput) -> McpCallOutput {
        convert::capped(
            out,
            self.options.max_output_bytes,
            self.options.max_image_bytes,
        )
    }

    /// Expands a prompt (`"prompt"`, `"server/prompt"` or `"mcp__server__prompt"`) into
    /// `[role]: content` blocks joined with blank lines.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: BTreeMap<String, String>,
    ) -> Result<String, McpError> {
        let unknown = |hint: String| McpError::UnknownPrompt {
            name: name.to_owned(),
            hint,
        };
        let (server, prompt) = match name.split_once('/').or_else(|| split_tool_name(name)) {
            Some((server, prompt)) => (server.to_owned(), prompt.to_owned()),
            None => {
                let catalog = self.catalog();
                let owners: Vec<&str> = catalog
                    .prompts
                    .iter()
                    .filter(|p| p.name == name)
                    .map(|p| p.server.as_str())
                    .collect();
                match owners.as_slice() {
                    [server] => ((*server).to_owned(), name.to_owned()),
                    [] => return Err(unknown(String::new())),
                    many => {
                        let list: Vec<String> =
                            many.iter().map(|s| format!("{s}/{name}")).collect();
                        return Err(unknown(format!(
                            "; several servers offer it, use one of: {}",
                            list.join(", ")
                        )));
                    }
                }
            }
        };
        let slot = self.slot(&server)?;
        if !self
            .catalog()
            .prompts
            .iter()
            .any(|p| p.server == server && p.name == prompt)
        {
            return Err(unknown(String::new()));
        }
        let args = arguments
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        let params = GetPromptRequestParams::new(prompt).with_arguments(args);
        self.run(
            slot,
            |client| async move { client.get_prompt(params).await },
        )
        .await
        .map(convert::prompt_result)
    }

    /// Re-lists one server (or all), reconnecting disconnected ones, and reports which tools
    /// appeared or disappeared.
    pub async fn refresh(&self, server: Option<&str>) -> Vec<RefreshReport> {
        let targets: Vec<&Arc<Slot>> = match server {
            None => self.slots.values().collect(),
            Some(name) => match self.slots.get(name) {
                Some(slot) => vec![slot],
                None => {
                    return vec![RefreshReport {
                        server: name.to_owned(),
                        error: Some(
                            McpError::UnknownServer {
                                server: name.to_owned(),
                            }
                            .to_string(),
                        ),
                        ..RefreshReport::default()
                    }];
                }
            },
        };
        futures::future::join_all(targets.into_iter().map(|slot| self.refresh_slot(slot))).await
    }

    /// The health of every configured server, by name.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.slots.values().map(|slot| slot.status()).collect()
    }

    /// Stops background tasks and closes every connection; every server's processes (and
    /// what they started) are ended, including those of attempts still connecting.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.connects.close();
        if tokio::time::timeout(Duration::from_secs(3), self.connects.wait())
            .await
            .is_err()
        {
            tracing::warn!("MCP connection attempts did not stop within 3 s");
        }
        let closes = self
            .slots
            .values()
            .filter_map(|slot| slot.take_client())
            .map(|client| async move {
                match Arc::try_unwrap(client) {
                    Ok(client) => {
                        let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
                    }
                    Err(shared) => shared.cancellation_token().cancel(),
                }
            });
        futures::future::join_all(closes).await;
        tracing::info!(servers = self.slots.len(), "MCP shut down");
    }

    fn slot(&self, server: &str) -> Result<&Arc<Slot>, McpError> {
        let slot = self
            .slots
            .get(server)
            .ok_or_else(|| McpError::UnknownServer {
                server: server.to_owned(),
            })?;
        match &slot.invalid {
            Some(error) => Err(McpError::BadConfig(error.clone())),
            None => Ok(slot),
        }
    }

    /// The common call path: shut down? cooling off? connect if needed, bounded call, then
    /// breaker accounting.
    async fn run<T, F, Fut>(&self, slot: &Slot, call: F) -> Result<T, McpError>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        if self.shutdown.is_cancelled() {
            return Err(McpError::ShutDown);
        }
        slot.check_breaker()?;
        let client = match self.ensure_client(slot).await {
            Ok(client) => client,
            Err(error) => {
                slot.record_failure(&error, None, &self.options);
                return Err(error);
            }
        };
        let after = self.options.call_timeout;
        let result = match tokio::time::timeout(after, call(client.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(classify(&slot.name, error, after)),
            Err(_) => Err(McpError::Timeout {
                server: slot.name.clone(),
                after,
            }),
        };
        match &result {
            Ok(_) => slot.record_success(),
            Err(error) if error.is_server_failure() => {
                slot.record_failure(error, Some(&client), &self.options)
            }
            Err(_) => {}
        }
        result
    }

    /// The live client, reconnecting (and re-listing) if the connection is gone.
    async fn ensure_client(&self, slot: &Slot) -> Result<Arc<Client>, McpError> {
        if let Some(client) = slot.live_client() {
            return Ok(client);
        }
        let _guard = slot.connect_lock.lock().await;
        if let Some(client) = slot.live_client() {
            return Ok(client);
        }
        let client = self.connect_slot(slot).await?;
        self.rebuild_catalog();
        Ok(client)
    }
}
