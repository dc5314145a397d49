//! `sandpiper serve`: the long-running gateway's HTTP endpoints (`/health`; Slack's Events API
//! routes are merged in when `[slack] mode = "events"`). The Discord and Slack connections are
//! started beside it in `main.rs`.

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
