//! `POST /v1/api/notify` on gateway nodes: the notify tool of any node (this one included)
//! hands a notification to a gateway connected to the chat platforms, which delivers it
//! ([`sandpiper_channels::notify::Notifier`]).
//!
//! Only a bearer service JWT with audience `sandpiper-channel` gets in (see
//! [`crate::service_jwt`]), checked before the body is read; anything else is 401 with a JSON
//! error. The body is the tool's
//! parameters as JSON (`message`, optional `title`, `username` or `channel_type` +
//! `channel_id`, the sending `workstream`, the resolved `user_id` and `requested_by`):
//! malformed is 400, a username without a
//! linked identity 404, otherwise 200 with `{"results": [{"target", "status"}]}` where each
//! status is `sent` or `failed: <reason>`. A node without a secret does not serve the route.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::routing::post;
use axum::{Json, Router};
use sandpiper_agent::notify::{NotifyRequest, NotifyResponse};
use sandpiper_channels::notify::{DeliverError, Notifier};

use crate::admin_api::ApiError;
use crate::service_jwt::{CHANNEL_AUDIENCE, Claims, Required, ServiceKey};
use sandpiper_agent::metrics::Metrics;

/// What the handler shares.
#[derive(Clone)]
struct NotifyState {
    notifier: Notifier,
    metrics: Metrics,
}

/// The notify route, on a node with a service key.
pub fn router(notifier: Notifier, key: ServiceKey, metrics: Metrics) -> Router {
    let required = Required {
        key: Arc::new(key),
        audience: CHANNEL_AUDIENCE,
        route: "notify",
    };
    Router::new()
        .route("/v1/api/notify", post(notify))
        .route_layer(axum::middleware::from_fn_with_state(
            required,
            crate::service_jwt::require,
        ))
        .with_state(NotifyState { notifier, metrics })
}

async fn notify(
    State(state): State<NotifyState>,
    Extension(claims): Extension<Claims>,
    body: Bytes,
) -> Result<Json<NotifyResponse>, ApiError> {
    let request: NotifyRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body must be {{\"message\", \"title\"?, \"username\" | \"channel_type\" + \
             \"channel_id\", \"workstream\"?}}: {e}"
        ))
    })?;
    let results = state
        .notifier
        .deliver(&request)
        .await
        .map_err(|e| match e {
            DeliverError::BadRequest(e) => ApiError::BadRequest(e.to_string()),
            DeliverError::NotFound(why) => ApiError::NotFound(why),
            DeliverError::Store(e) => ApiError::Store(e),
        })?;
    for r in &results {
        state.metrics.notify_delivery(r.is_sent());
    }
    tracing::info!(
        by = %claims.sub,
        workstream = request.workstream.as_deref().unwrap_or("-"),
        sent = results.iter().filter(|r| r.is_sent()).count(),
        failed = results.iter().filter(|r| !r.is_sent()).count(),
        "notify: delivered"
    );
    Ok(Json(NotifyResponse { results }))
}
