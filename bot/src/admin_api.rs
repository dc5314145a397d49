//! The admin HTTP API on `sandpiper serve`'s port, behind a bearer service JWT with audience
//! `sandpiper-admin` (see [`crate::service_jwt`]), checked before a body is read. A node
//! without a service secret does not serve these routes (404).
//!
//! - `GET`/`PATCH /v1/api/workstreams/{id}/connectors`: a thread's connector tier; `{id}` is
//!   the workstream key as `/status` shows it (`discord:<thread id>`, URL-encoded).
//! - `GET`/`PATCH /v1/api/channels/{id}/connectors`: a channel's tier (`discord:<channel id>`,
//!   `slack:<team>:<channel>`).
//!
//! `PATCH` bodies are `{"connector_ids": [...]}` (set; `[]` allows nothing) or
//! `{"connector_ids": null}` (clear: the tier says nothing). Responses carry the tier's own
//! `connector_ids`, the `effective` set (`null` = unrestricted) and its `source` tier.
//! (`/v1/api/watches/{id}/connectors` waits for watches.)
//!
//! - `GET`/`POST /v1/api/prompt-templates`, `GET`/`PUT`/`DELETE
//!   /v1/api/prompt-templates/{name}`: prompt templates under governance (see `templates`).

mod templates;

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::routing::get;
use axum::{Json, Router};
use sandpiper_agent::Agent;
use sandpiper_agent::connectors::ConnectorView;
use serde_json::{Value, json};

pub use crate::api_error::ApiError;
use crate::service_jwt::{ADMIN_AUDIENCE, Claims, Required, ServiceKey};

/// What the handlers share.
#[derive(Clone)]
struct AdminState {
    agent: Agent,
}

/// The admin routes, for tokens signed with `key`.
pub fn router(agent: Agent, key: ServiceKey) -> Router {
    let required = Required {
        key: Arc::new(key),
        audience: ADMIN_AUDIENCE,
        route: "admin API",
    };
    Router::new()
        .route(
            "/v1/api/workstreams/{id}/connectors",
            get(get_workstream).patch(patch_workstream),
        )
        .route(
            "/v1/api/channels/{id}/connectors",
            get(get_channel).patch(patch_channel),
        )
        .route(
            "/v1/api/prompt-templates",
            get(templates::list).post(templates::create),
        )
        .route(
            "/v1/api/prompt-templates/{name}",
            get(templates::get_one)
                .put(templates::update)
                .delete(templates::delete),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            required,
            crate::service_jwt::require,
        ))
        .with_state(AdminState { agent })
}

/// The tier's own list, the effective set and its source.
fn body(id: &str, own: &Option<Vec<String>>, view: &ConnectorView) -> Json<Value> {
    Json(json!({
        "id": id,
        "connector_ids": own,
        "channel": view.channel,
        "effective": view.effective.allowed,
        "source": view.effective.source,
    }))
}

/// `{"connector_ids": [...] | null}`: the key must be there (an explicit null clears).
fn parse_body(body: &Value) -> Result<Option<Vec<String>>, ApiError> {
    let bad = |m: &str| ApiError::BadRequest(m.to_owned());
    let field = body
        .as_object()
        .and_then(|o| o.get("connector_ids"))
        .ok_or_else(|| bad("body must be {\"connector_ids\": [...] | null}"))?;
    if field.is_null() {
        return Ok(None);
    }
    let items = field
        .as_array()
        .ok_or_else(|| bad("connector_ids must be a list of MCP server names or null"))?;
    let mut ids = Vec::with_capacity(items.len());
    for item in items {
        let name = item
            .as_str()
            .ok_or_else(|| bad("connector_ids must hold strings"))?
            .trim();
        sandpiper_agent::mcp::validate_server_name(name)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if !ids.iter().any(|i| i == name) {
            ids.push(name.to_owned());
        }
    }
    ids.sort();
    Ok(Some(ids))
}

async fn get_workstream(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let view = state.agent.workstream_connectors(&id).await?;
    if !view.exists {
        return Err(ApiError::NotFound(format!("no workstream `{id}`")));
    }
    Ok(body(&id, &view.tiers.workstream, &view))
}

async fn patch_workstream(
    State(state): State<AdminState>,
    Extension(claims): Extension<Claims>,
    Path(id): Path<String>,
    Json(request): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    let ids = parse_body(&request)?;
    let store = state.agent.store();
    if !store.set_workstream_connectors(&id, ids.as_deref()).await? {
        return Err(ApiError::NotFound(format!("no workstream `{id}`")));
    }
    tracing::info!(workstream = %id, by = %claims.sub, connectors = ?ids, "thread connectors changed over HTTP");
    let view = state.agent.workstream_connectors(&id).await?;
    Ok(body(&id, &view.tiers.workstream, &view))
}

fn check_channel(id: &str) -> Result<(), ApiError> {
    let parts: Vec<&str> = id.split(':').collect();
    let ok = match parts.as_slice() {
        ["discord", c] => !c.is_empty(),
        ["slack", team, c] => !team.is_empty() && !c.is_empty(),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "`{id}` is not a channel: use discord:<channel id> or slack:<team>:<channel>"
        )))
    }
}

async fn get_channel(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_channel(&id)?;
    let view = state.agent.channel_connectors(&id).await?;
    Ok(body(&id, &view.tiers.channel, &view))
}

async fn patch_channel(
    State(state): State<AdminState>,
    Extension(claims): Extension<Claims>,
    Path(id): Path<String>,
    Json(request): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    check_channel(&id)?;
    let ids = parse_body(&request)?;
    let by = format!("service:{}", claims.sub);
    state
        .agent
        .store()
        .set_channel_connectors(&id, ids.as_deref(), Some(&by))
        .await?;
    tracing::info!(channel = %id, by = %claims.sub, connectors = ?ids, "channel connectors changed over HTTP");
    let view = state.agent.channel_connectors(&id).await?;
    Ok(body(&id, &view.tiers.channel, &view))
}
