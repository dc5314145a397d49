//! `sandpiper serve`: the long-running gateway's HTTP endpoints: `/health` (cheap liveness) and
//! `/ready` (database, platforms, workstreams, the model, each MCP server; 503 when not
//! ready). Slack's Events API
//! routes, the admin and notify APIs and `/metrics` are merged in by [`crate::node`].

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

/// What `/health` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    /// Always `ok` while the process serves requests.
    pub status: &'static str,
    /// MCP counts, when MCP servers are configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpHealth>,
}

/// MCP counts for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct McpHealth {
    /// Connected servers.
    pub servers: usize,
    /// Resources across connected servers.
    pub resources: usize,
    /// Prompts across connected servers.
    pub prompts: usize,
}

/// The health of a gateway with these MCP servers (MCP counts only when some are configured).
pub fn health_of(mcp: &sandpiper_agent::mcp::McpManager) -> Health {
    let status = mcp.status();
    let mcp = (!status.is_empty()).then(|| {
        let connected = status.iter().filter(|s| s.connected);
        McpHealth {
            servers: status.iter().filter(|s| s.connected).count(),
            resources: connected.clone().map(|s| s.resources).sum(),
            prompts: connected.map(|s| s.prompts).sum(),
        }
    });
    Health { status: "ok", mcp }
}

/// Computes the current health; shared with the handler.
pub type HealthSource = Arc<dyn Fn() -> Health + Send + Sync>;

/// The HTTP routes.
pub fn router(health: HealthSource) -> Router {
    Router::new()
        .route("/health", get(health_handler))
        .with_state(health)
}

async fn health_handler(State(health): State<HealthSource>) -> Json<Health> {
    Json(health())
}

/// What `/ready` reports: what an operator and a load balancer need to know about this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// `ready`, or `not ready` (answered with 503) when the database or a configured
    /// platform is down (or an MCP server, with `[mcp] required_for_ready`).
    pub status: &'static str,
    /// sandpiper's version.
    pub version: &'static str,
    /// Whether the database answers.
    pub database: DatabaseState,
    /// Each configured chat platform's connection.
    pub platforms: std::collections::BTreeMap<&'static str, sandpiper_channels::status::Connection>,
    /// Workstreams in memory and in the database (`null` when the database is down).
    pub workstreams: WorkstreamCounts,
    /// The model endpoint (`ok` or `degraded`; a degraded model does not make the node not
    /// ready: nothing else a node does needs it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::model_check::ModelState>,
    /// Every configured MCP server, when some are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpReadiness>,
}

/// The MCP servers as `/ready` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpReadiness {
    /// Connected servers.
    pub connected: usize,
    /// Whether a server that is not connected makes the node not ready
    /// (`[mcp] required_for_ready`).
    pub required_for_ready: bool,
    /// Each configured server, by name.
    pub servers: Vec<McpServerReadiness>,
}

/// One MCP server in `/ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerReadiness {
    /// Its configured name.
    pub name: String,
    /// `connecting`, `connected`, `failed`, `cooling_off`, `disconnected` or `invalid`.
    pub state: &'static str,
    /// Tools it lists.
    pub tools: usize,
    /// Its last error, cleared by success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `/ready`'s view of `mcp`, `None` when no server is configured.
pub fn mcp_readiness(
    mcp: &sandpiper_agent::mcp::McpManager,
    required_for_ready: bool,
) -> Option<McpReadiness> {
    let status = mcp.status();
    (!status.is_empty()).then(|| McpReadiness {
        connected: status.iter().filter(|s| s.connected).count(),
        required_for_ready,
        servers: status
            .into_iter()
            .map(|s| McpServerReadiness {
                name: s.name,
                state: s.state.as_str(),
                tools: s.tools,
                last_error: s.error,
            })
            .collect(),
    })
}

/// The database as `/ready` sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatabaseState {
    /// Whether it answered.
    pub ok: bool,
    /// Why not (the driver's message, URL secrets never included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Workstream counts for `/ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkstreamCounts {
    /// Held in memory on this node.
    pub live: usize,
    /// In the database.
    pub stored: Option<i64>,
}

/// A platform's name and how to ask for its connection.
pub type PlatformProbe = (&'static str, sandpiper_channels::status::Probe);

/// What `/ready` asks.
#[derive(Clone)]
pub struct ReadySource {
    /// The agent (database, live workstreams, MCP).
    pub agent: sandpiper_agent::Agent,
    /// The configured platforms.
    pub platforms: Vec<PlatformProbe>,
    /// The model endpoint's last check, when the node checks it.
    pub model: Option<crate::model_check::ModelHealth>,
}

/// How this node stands now.
pub async fn readiness(source: &ReadySource) -> Readiness {
    let store = source.agent.store();
    let ping = tokio::time::timeout(std::time::Duration::from_secs(2), store.ping()).await;
    let database = match ping {
        Ok(Ok(())) => DatabaseState {
            ok: true,
            error: None,
        },
        Ok(Err(e)) => DatabaseState {
            ok: false,
            error: Some(e.to_string()),
        },
        Err(_) => DatabaseState {
            ok: false,
            error: Some("no answer within 2 s".into()),
        },
    };
    let stored = match database.ok {
        true => store.stored_counts().await.ok().map(|c| c.workstreams),
        false => None,
    };
    let platforms: std::collections::BTreeMap<_, _> = source
        .platforms
        .iter()
        .map(|(name, probe)| (*name, probe()))
        .collect();
    let mcp = mcp_readiness(
        source.agent.mcp(),
        source.agent.config().mcp.required_for_ready,
    );
    let mcp_ok = mcp
        .as_ref()
        .is_none_or(|m| !m.required_for_ready || m.connected == m.servers.len());
    let ready = database.ok && platforms.values().all(|c| c.connected) && mcp_ok;
    Readiness {
        status: if ready { "ready" } else { "not ready" },
        version: crate::registry::VERSION,
        database,
        platforms,
        workstreams: WorkstreamCounts {
            live: source.agent.live_workstreams(),
            stored,
        },
        model: source.model.as_ref().map(|m| m.state()),
        mcp,
    }
}

/// `GET /ready`: 200 when ready, else 503, with [`Readiness`] either way.
pub fn ready_router(source: ReadySource) -> Router {
    Router::new()
        .route("/ready", get(ready_handler))
        .with_state(source)
}

async fn ready_handler(State(source): State<ReadySource>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let report = readiness(&source).await;
    let status = match report.status {
        "ready" => axum::http::StatusCode::OK,
        _ => axum::http::StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(report)).into_response()
}
