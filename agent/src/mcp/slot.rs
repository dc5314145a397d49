//! One configured server inside the manager: its live client (if any), last listing, last
//! error and circuit breaker, behind a std mutex that is never held across `.await`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use tokio::sync::mpsc;

use super::breaker::Breaker;
use super::connection::{Client, Listing};
use super::stderr_tail::StderrTail;
use super::{McpError, McpOptions, McpServerConfig, ServerState, ServerStatus};

/// One configured server.
pub(crate) struct Slot {
    pub name: String,
    pub config: McpServerConfig,
    /// Why this server can never connect (a bad name); it still shows in `status()`.
    pub invalid: Option<String>,
    /// Handed to each connection's handler: list-changed notifications land here.
    pub signal: mpsc::Sender<()>,
    /// Serializes connecting and re-listing this server.
    pub connect_lock: tokio::sync::Mutex<()>,
    /// The last lines the server's process wrote to stderr (stdio servers).
    pub stderr: Arc<StderrTail>,
    state: Mutex<SlotState>,
}

#[derive(Default)]
pub(crate) struct SlotState {
    pub client: Option<Arc<Client>>,
    pub listing: Listing,
    /// Whether a listing ever succeeded (an empty listing before that means "unknown").
    pub listed: bool,
    pub error: Option<String>,
    pub breaker: Breaker,
    /// A connection attempt is under way (or about to start, before the first one).
    pub connecting: bool,
}

impl Slot {
    pub(crate) fn new(
        name: String,
        config: McpServerConfig,
        invalid: Option<String>,
        signal: mpsc::Sender<()>,
    ) -> Self {
        Self {
            state: Mutex::new(SlotState {
                error: invalid.clone(),
                connecting: invalid.is_none(),
                ..SlotState::default()
            }),
            name,
            config,
            invalid,
            signal,
            connect_lock: tokio::sync::Mutex::new(()),
            stderr: Arc::default(),
        }
    }

    /// The state; a poisoned lock is recovered (the state stays consistent field by field).
    pub(crate) fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The client if its connection is still up; a dead one is dropped and recorded.
    pub(crate) fn live_client(&self) -> Option<Arc<Client>> {
        let dead = {
            let mut state = self.state();
            match &state.client {
                Some(client) if !client.is_transport_closed() => return Some(client.clone()),
                Some(_) => {
                    state.error = Some(
                        McpError::Disconnected {
                            server: self.name.clone(),
                        }
                        .to_string(),
                    );
                    state.client.take()
                }
                None => None,
            }
        };
        drop(dead);
        None
    }

    /// `Err(CoolingOff)` while the breaker is open.
    pub(crate) fn check_breaker(&self) -> Result<(), McpError> {
        self.state()
            .breaker
            .check(Instant::now())
            .map_err(|retry_in| McpError::CoolingOff {
                server: self.name.clone(),
                retry_in,
            })
    }

    /// A call or listing succeeded.
    pub(crate) fn record_success(&self) {
        let mut state = self.state();
        state.breaker.record_success();
        state.error = None;
    }

    /// A server-caused failure: counts towards the breaker; a lost connection (or a trip)
    /// drops the client so the next attempt reconnects.
    pub(crate) fn record_failure(
        &self,
        error: &McpError,
        client: Option<&Arc<Client>>,
        options: &McpOptions,
    ) {
        let mut dropped = None;
        let tripped = {
            let mut state = self.state();
            state.error = Some(error.to_string());
            let tripped = state.breaker.record_failure(Instant::now(), options);
            let same = match (client, &state.client) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, _) => true,
                _ => false,
            };
            if same && (tripped.is_some() || matches!(error, McpError::Disconnected { .. })) {
                dropped = state.client.take();
            }
            tripped
        };
        drop(dropped);
        if let Some(cooldown) = tripped {
            tracing::warn!(server = %self.name, cooldown_ms = millis(cooldown), error = %error,
                "MCP server failed repeatedly; cutting it off");
        }
    }

    /// Stores a fresh connection and listing; returns the replaced client (drop it outside).
    pub(crate) fn connected(&self, client: Arc<Client>, listing: Listing) -> Option<Arc<Client>> {
        let mut state = self.state();
        state.listing = listing;
        state.listed = true;
        state.error = None;
        state.client.replace(client)
    }

    /// Stores a fresh listing from the live client.
    pub(crate) fn listed(&self, listing: Listing) {
        let mut state = self.state();
        state.listing = listing;
        state.listed = true;
    }

    /// Full names of the listed tools.
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.state()
            .listing
            .tools
            .iter()
            .map(|t| t.full_name.clone())
            .collect()
    }

    /// Takes the client away (shutdown).
    pub(crate) fn take_client(&self) -> Option<Arc<Client>> {
        self.state().client.take()
    }

    /// Where the server stands now.
    pub(crate) fn server_state(&self, state: &SlotState) -> ServerState {
        let connected = state
            .client
            .as_ref()
            .is_some_and(|c| !c.is_transport_closed());
        if self.invalid.is_some() {
            ServerState::Invalid
        } else if connected {
            ServerState::Connected
        } else if state.connecting {
            ServerState::Connecting
        } else if state.breaker.open_until(Instant::now()).is_some() {
            ServerState::CoolingOff
        } else if state.error.is_some() {
            ServerState::Failed
        } else {
            ServerState::Disconnected
        }
    }

    /// This server's health.
    pub(crate) fn status(&self) -> ServerStatus {
        let state = self.state();
        let server_state = self.server_state(&state);
        ServerStatus {
            name: self.name.clone(),
            state: server_state,
            connected: server_state == ServerState::Connected,
            stderr_tail: self.stderr.lines(),
            tools: state.listing.tools.len(),
            resources: state.listing.resources.len() + state.listing.templates.len(),
            prompts: state.listing.prompts.len(),
            error: state.error.clone(),
            cooling_off_until: state.breaker.open_until(Instant::now()),
        }
    }
}

/// Turns an rmcp error into ours: JSON-RPC errors are the server answering (not a failure of
/// the server), transport errors mean the connection is gone.
pub(crate) fn classify(server: &str, error: ServiceError, after: Duration) -> McpError {
    match error {
        ServiceError::McpError(data) => McpError::Server {
            server: server.to_owned(),
            message: data.message.into_owned(),
        },
        ServiceError::TransportClosed
        | ServiceError::TransportSend(_)
        | ServiceError::Cancelled { .. } => McpError::Disconnected {
            server: server.to_owned(),
        },
        ServiceError::Timeout { .. } => McpError::Timeout {
            server: server.to_owned(),
            after,
        },
        other => McpError::Server {
            server: server.to_owned(),
            message: other.to_string(),
        },
    }
}

/// Milliseconds for log fields.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
