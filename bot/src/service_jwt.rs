//! Service JWTs as the HTTP endpoints check them: the implementation lives in
//! [`sandpiper_agent::service_jwt`], where the notify tool signs its tokens with it.
//!
//! [`require`] is the one place a route checks its token: as a route layer it runs before
//! the handler's extractors, so a request without a valid token is refused before a byte of
//! its body is read (a client that sends headers and never the body cannot hold the
//! connection on an authenticated route).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use sandpiper_agent::service_jwt::*;

use crate::api_error::ApiError;

/// What a route layer of [`require`] checks tokens with.
#[derive(Debug, Clone)]
pub struct Required {
    /// The shared secret.
    pub key: Arc<ServiceKey>,
    /// The audience the route's tokens must name.
    pub audience: &'static str,
    /// The route's name in log lines (`notify`, `admin API`).
    pub route: &'static str,
}

/// Lets a request with a valid bearer token for the route's audience through, its
/// [`Claims`] in the request's extensions; refuses anything else with 401 before the body is
/// read.
pub async fn require(
    axum::extract::State(required): axum::extract::State<Required>,
    mut req: Request,
    next: Next,
) -> Response {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match verify_bearer(Some(&required.key), header, required.audience) {
        Ok(claims) => {
            req.extensions_mut().insert(claims);
            next.run(req).await
        }
        Err(e) => {
            tracing::info!(
                route = required.route,
                method = %req.method(),
                path = req.uri().path(),
                error = %e,
                "HTTP request refused"
            );
            ApiError::Unauthorized(e.to_string()).into_response()
        }
    }
}
