//! Events API mode: Slack posts events, interactions and slash commands to
//! `/slack/events`, `/slack/interactions` and `/slack/commands`. Every request's
//! `X-Slack-Signature` (HMAC-SHA256 of `v0:{timestamp}:{body}` with the signing secret) and
//! `X-Slack-Request-Timestamp` (at most 5 minutes old) are checked first: a forged or stale
//! request gets 401 and nothing is processed. What can be checked without the body — both
//! headers there, a `v0=` signature of the right length, a fresh timestamp — is checked before
//! the body is read ([`precheck`]), so a client without them cannot hold a connection waiting
//! for a body (the HTTP server's body deadline bounds the rest). Valid ones are answered at once and handled in
//! the background. A redelivery (`X-Slack-Retry-Num`), or the same request reaching another
//! node, is recognised by its event id (events) or trigger id (interactions, commands).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use slack_morphism::prelude::*;
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;

use super::delivery::{self, Delivery};
use super::socket::command_response;
use super::{Ctx, Stopping, commands, events, take_on};

#[derive(Clone)]
struct Http {
    ctx: Arc<Ctx>,
    verifier: SlackEventSignatureVerifier,
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
enum HttpError {
    /// Missing, forged or stale signature: not from Slack.
    #[error("bad or missing Slack signature")]
    Unsigned,
    /// Signed but not something we understand.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// This node is stopping; Slack retries the request, and the balancer sends it elsewhere.
    #[error(transparent)]
    Stopping(#[from] Stopping),
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = match self {
            HttpError::Unsigned => StatusCode::UNAUTHORIZED,
            HttpError::Malformed(_) => StatusCode::BAD_REQUEST,
            HttpError::Stopping(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, self.to_string()).into_response()
    }
}

/// The routes, sharing `ctx`.
pub(crate) fn router(ctx: Arc<Ctx>, signing_secret: &str) -> Router {
    let verifier =
        SlackEventSignatureVerifier::new(&SlackSigningSecret::new(signing_secret.into()));
    Router::new()
        .route("/slack/events", post(on_events))
        .route("/slack/interactions", post(on_interactions))
        .route("/slack/commands", post(on_commands))
        .route_layer(axum::middleware::from_fn(before_the_body))
        .with_state(Http { ctx, verifier })
}

/// `v0=` and 64 hex digits of HMAC-SHA256.
const SIGNATURE_LEN: usize = 3 + 64;

/// What a Slack request's headers must show before its body is worth reading: both signature
/// headers, a `v0=` signature of the right shape, and a timestamp within 5 minutes of `now`
/// (unix seconds). The signature itself needs the body; [`verified`] checks it.
fn precheck(signature: Option<&str>, timestamp: Option<&str>, now: i64) -> Result<(), HttpError> {
    let (Some(signature), Some(timestamp)) = (signature, timestamp) else {
        return Err(HttpError::Unsigned);
    };
    let Some(hex) = signature.strip_prefix("v0=") else {
        return Err(HttpError::Unsigned);
    };
    if signature.len() != SIGNATURE_LEN || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(HttpError::Unsigned);
    }
    let sent: i64 = timestamp.trim().parse().map_err(|_| HttpError::Unsigned)?;
    if (now - sent).abs() > SlackEventSignatureVerifier::MAX_TIMESTAMP_AGE_SECONDS {
        return Err(HttpError::Unsigned);
    }
    Ok(())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Refuses with 401, unread, a request whose headers fail [`precheck`].
async fn before_the_body(req: Request, next: Next) -> Response {
    let checked = {
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        precheck(
            header(SlackEventSignatureVerifier::SLACK_SIGNED_HASH_HEADER),
            header(SlackEventSignatureVerifier::SLACK_SIGNED_TIMESTAMP),
            unix_now(),
        )
    };
    match checked {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::info!(path = %req.uri().path(), "refused an unsigned or stale Slack request before its body");
            e.into_response()
        }
    }
}

/// The body, once its signature checks out.
fn verified(http: &Http, headers: &HeaderMap, body: &Bytes) -> Result<String, HttpError> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or(HttpError::Unsigned)
    };
    let signature = header(SlackEventSignatureVerifier::SLACK_SIGNED_HASH_HEADER)?;
    let timestamp = header(SlackEventSignatureVerifier::SLACK_SIGNED_TIMESTAMP)?;
    let body = std::str::from_utf8(body).map_err(|_| HttpError::Unsigned)?;
    http.verifier
        .verify(signature, body, timestamp)
        .map_err(|e| {
            tracing::warn!(error = %e, "refused a Slack request with a bad signature");
            HttpError::Unsigned
        })?;
    Ok(body.to_owned())
}

fn form(body: &str) -> HashMap<String, String> {
    form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect()
}

async fn on_events(
    State(http): State<Http>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    let body = verified(&http, &headers, &body)?;
    let value: Value =
        serde_json::from_str(&body).map_err(|e| HttpError::Malformed(e.to_string()))?;
    if value["type"] == "url_verification" {
        let challenge = value["challenge"].as_str().unwrap_or_default();
        return Ok(axum::Json(json!({"challenge": challenge})).into_response());
    }
    if let Some(retry) = headers.get("x-slack-retry-num") {
        tracing::debug!(?retry, "slack redelivered an event");
    }
    match serde_json::from_value::<SlackPushEvent>(value) {
        Ok(SlackPushEvent::EventCallback(event)) => {
            let ctx = http.ctx.clone();
            take_on(&http.ctx, events::handle(ctx, event))?;
        }
        Ok(other) => tracing::debug!(?other, "ignored a Slack push event"),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    }
    Ok(StatusCode::OK.into_response())
}

async fn on_interactions(
    State(http): State<Http>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    let body = verified(&http, &headers, &body)?;
    let payload = form(&body)
        .remove("payload")
        .ok_or_else(|| HttpError::Malformed("no payload".into()))?;
    let event: SlackInteractionEvent =
        serde_json::from_str(&payload).map_err(|e| HttpError::Malformed(e.to_string()))?;
    let ctx = http.ctx.clone();
    take_on(&http.ctx, delivery::handle_interaction(ctx, event))?;
    Ok(StatusCode::OK.into_response())
}

async fn on_commands(
    State(http): State<Http>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    let body = verified(&http, &headers, &body)?;
    let fields: serde_json::Map<String, Value> = form(&body)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let event: SlackCommandEvent = serde_json::from_value(Value::Object(fields))
        .map_err(|e| HttpError::Malformed(e.to_string()))?;
    // A command delivered before (to this node or another) was answered then.
    let first = delivery::first_delivery(&http.ctx, Delivery::Trigger(&event.trigger_id.0)).await;
    let reply = if first {
        commands::ack(&http.ctx, event)
    } else {
        None
    };
    Ok(match reply {
        Some(_) => axum::Json(command_response(reply)).into_response(),
        None => StatusCode::OK.into_response(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_without_a_fresh_well_formed_signature_are_refused_before_the_body() {
        let now = 1_700_000_000;
        let good = format!("v0={}", "ab".repeat(32));
        let ts = now.to_string();
        let old = (now - 301).to_string();
        let ahead = (now + 301).to_string();
        let short = format!("v0={}", "ab".repeat(31));
        let not_hex = format!("v0={}", "zz".repeat(32));
        let v1 = format!("v1={}", "ab".repeat(32));
        for (what, signature, timestamp, ok) in [
            ("fresh", Some(good.as_str()), Some(ts.as_str()), true),
            ("no signature", None, Some(ts.as_str()), false),
            ("no timestamp", Some(good.as_str()), None, false),
            ("stale", Some(good.as_str()), Some(old.as_str()), false),
            (
                "from the future",
                Some(good.as_str()),
                Some(ahead.as_str()),
                false,
            ),
            ("not a number", Some(good.as_str()), Some("soon"), false),
            ("short", Some(short.as_str()), Some(ts.as_str()), false),
            ("not hex", Some(not_hex.as_str()), Some(ts.as_str()), false),
            ("other version", Some(v1.as_str()), Some(ts.as_str()), false),
        ] {
            assert_eq!(precheck(signature, timestamp, now).is_ok(), ok, "{what}");
        }
    }
}
