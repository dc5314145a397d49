//! What a node knows only about itself (its chat connections, its MCP servers, whether its
//! model answers, its running turns), written to the database every few seconds
//! ([`Store::put_node_status`](sandpiper_agent::store::Store::put_node_status)) so that any
//! node's status page shows every node. A node whose status has not been written for
//! [`FRESH_FOR`] could not be reached.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sandpiper_agent::Agent;
use sandpiper_agent::activity::TurnPhase;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::serve::PlatformProbe;

/// How often a node writes its status.
pub(super) const WRITE_EVERY: Duration = Duration::from_secs(5);
/// A status older than this is from a node that could not be reached.
pub(super) const FRESH_FOR: Duration = Duration::from_secs(20);
/// How long the model endpoint has to accept a connection.
const MODEL_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A node's own status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct NodeStatus {
    /// Its chat connections.
    pub channels: Vec<ChannelState>,
    /// Its MCP servers.
    pub mcp: Vec<McpServerState>,
    /// Its model endpoint.
    pub model: ModelReach,
    /// Workstreams with a turn running there now.
    pub live: Vec<LiveEntry>,
    /// Workstreams it holds in memory.
    pub held: usize,
}

/// One chat connection (Discord's shards, Slack's connections).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ChannelState {
    /// `discord`, `slack`.
    pub platform: String,
    /// Whether events arrive and messages go out.
    pub connected: bool,
    /// What the platform says (`connected`, `resuming`, `socket mode`, …).
    pub state: String,
}

/// One MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct McpServerState {
    /// Its configured name.
    pub name: String,
    /// `connected`, `connecting`, `cooling off` or `failed`.
    pub state: String,
    /// Tools listed.
    pub tools: usize,
    /// Resources listed.
    pub resources: usize,
    /// Prompts listed.
    pub prompts: usize,
    /// The last error, when there is one.
    pub error: Option<String>,
}

/// Whether the model's endpoint accepts connections.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ModelReach {
    /// `host:port` probed (no path, no credentials).
    pub endpoint: String,
    /// `None` until probed (or when it is the provider's default and not probed).
    pub reachable: Option<bool>,
    /// Why not.
    pub error: Option<String>,
}

/// A running turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LiveEntry {
    /// Workstream key.
    pub workstream: String,
    /// `thinking`, `running a tool`, `waiting for approval`.
    pub state: String,
    /// The tool, for the last two.
    pub tool: Option<String>,
}

/// Builds this node's status (the model probe's last result is kept between calls).
#[derive(Clone)]
pub(super) struct LocalStatus {
    agent: Agent,
    platforms: Vec<PlatformProbe>,
    model: Arc<Mutex<ModelReach>>,
}

impl LocalStatus {
    /// The status of `agent`'s node, with these platform connections.
    pub(super) fn new(agent: Agent, platforms: Vec<PlatformProbe>) -> Self {
        let endpoint = model_endpoint(agent.config().model.base_url.as_deref());
        Self {
            agent,
            platforms,
            model: Arc::new(Mutex::new(ModelReach {
                endpoint: endpoint.unwrap_or_else(|| "the provider's default".into()),
                reachable: None,
                error: None,
            })),
        }
    }

    /// The agent.
    pub(super) fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The status now.
    pub(super) fn now(&self) -> NodeStatus {
        let mut live: Vec<LiveEntry> = self
            .agent
            .activity()
            .live()
            .into_iter()
            .map(|(workstream, turn)| {
                let (state, tool) = match turn.phase {
                    TurnPhase::Thinking => ("thinking", None),
                    TurnPhase::RunningTool(t) => ("running a tool", Some(t)),
                    TurnPhase::WaitingForApproval(t) => ("waiting for approval", Some(t)),
                };
                LiveEntry {
                    workstream,
                    state: state.into(),
                    tool,
                }
            })
            .collect();
        live.sort_by(|a, b| a.workstream.cmp(&b.workstream));
        NodeStatus {
            channels: self
                .platforms
                .iter()
                .map(|(name, probe)| {
                    let c = probe();
                    ChannelState {
                        platform: (*name).into(),
                        connected: c.connected,
                        state: c.state,
                    }
                })
                .collect(),
            mcp: self
                .agent
                .mcp()
                .status()
                .into_iter()
                .map(|s| McpServerState {
                    state: match (&s.cooling_off_until, s.connected, &s.error) {
                        (Some(_), _, _) => "cooling off",
                        (None, true, _) => "connected",
                        (None, false, Some(_)) => "failed",
                        (None, false, None) => "connecting",
                    }
                    .into(),
                    name: s.name,
                    tools: s.tools,
                    resources: s.resources,
                    prompts: s.prompts,
                    error: s.error,
                })
                .collect(),
            model: self
                .model
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            live,
            held: self.agent.live_workstreams(),
        }
    }

    /// Tries a connection to the model's endpoint and keeps the answer.
    async fn probe_model(&self) {
        let endpoint = model_endpoint(self.agent.config().model.base_url.as_deref());
        let Some(endpoint) = endpoint else {
            return;
        };
        let reach = match tokio::time::timeout(
            MODEL_PROBE_TIMEOUT,
            tokio::net::TcpStream::connect(&endpoint),
        )
        .await
        {
            Ok(Ok(_)) => (Some(true), None),
            Ok(Err(e)) => (Some(false), Some(e.to_string())),
            Err(_) => (Some(false), Some("no answer within 2 s".to_owned())),
        };
        let mut model = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        model.endpoint = endpoint;
        (model.reachable, model.error) = reach;
    }

    /// Writes this node's status as `node` every [`WRITE_EVERY`] until `shutdown`.
    pub(super) async fn write_until(self, node: String, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(WRITE_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => break,
            }
            self.probe_model().await;
            let status = match serde_json::to_string(&self.now()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot encode this node's status");
                    continue;
                }
            };
            if let Err(e) = self.agent.store().put_node_status(&node, &status).await {
                tracing::warn!(node = %node, error = %e, "cannot write this node's status for the status page");
            }
        }
    }
}

/// `host:port` of a base URL (the scheme's port when none is written).
fn model_endpoint(base_url: Option<&str>) -> Option<String> {
    let url = url::Url::parse(base_url?).ok()?;
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    // An IPv6 host comes in brackets already.
    Some(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_probed_endpoint_has_no_path_or_credentials() {
        assert_eq!(
            model_endpoint(Some("https://key:secret@llm.internal/v1")),
            Some("llm.internal:443".into())
        );
        assert_eq!(
            model_endpoint(Some("http://127.0.0.1:8080/v1")),
            Some("127.0.0.1:8080".into())
        );
        assert_eq!(model_endpoint(None), None);
        assert_eq!(model_endpoint(Some("not a url")), None);
    }
}
