//! The operations endpoints, `/ready` ([`crate::serve`]) and `/metrics` ([`crate::metrics`]):
//! they tell whoever reaches them the version, the platforms' state and the traffic, which a
//! node whose port is public (Slack's Events API mode) need not tell the internet. So they can
//! be served on their own address (`[server] ops_listen`, see [`crate::node`]) and can require
//! a bearer token (`[server] ops_token_env`, default `SANDPIPER_OPS_TOKEN`), checked here
//! before anything is computed. `/health` stays public: it says only `ok`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandpiper_agent::Agent;
use sandpiper_agent::config::Secret;

use crate::serve::ReadySource;

/// `/ready` and `/metrics`, behind `token` when one is configured; `http` is what the
/// node's HTTP servers counted.
pub fn router(
    ready: ReadySource,
    agent: Agent,
    http: crate::metrics::HttpRequests,
    token: Option<Secret>,
) -> Router {
    let metrics = crate::metrics::MetricsSource {
        agent,
        platforms: ready.platforms.clone(),
        http,
    };
    let router = crate::serve::ready_router(ready).merge(crate::metrics::router(metrics));
    match token {
        Some(token) => router.route_layer(axum::middleware::from_fn_with_state(
            Arc::new(token),
            require_token,
        )),
        None => router,
    }
}

/// Whether `header` (an `Authorization` value) is `Bearer <token>`, compared in constant time.
pub fn bearer_matches(header: Option<&str>, token: &Secret) -> bool {
    let Some((scheme, given)) = header.and_then(|h| h.trim().split_once(' ')) else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && constant_time_eq(given.trim(), token.expose())
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_token(State(token): State<Arc<Secret>>, req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if bearer_matches(header, &token) {
        return next.run(req).await;
    }
    tracing::info!(
        path = %req.uri().path(),
        "operations endpoint refused: no or a wrong bearer token"
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(serde_json::json!({
            "error": "this endpoint needs `Authorization: Bearer <token>` with the operations token"
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_as_a_bearer_passes() {
        let token = Secret::new("s3cret-ops-token");
        for (header, ok) in [
            (Some("Bearer s3cret-ops-token"), true),
            (Some("bearer  s3cret-ops-token "), true),
            (Some("Bearer s3cret-ops-tokeN"), false),
            (Some("Bearer s3cret-ops-token-and-more"), false),
            (Some("Bearer s3cret"), false),
            (Some("Basic s3cret-ops-token"), false),
            (Some("s3cret-ops-token"), false),
            (Some("Bearer "), false),
            (None, false),
        ] {
            assert_eq!(bearer_matches(header, &token), ok, "{header:?}");
        }
    }
}
