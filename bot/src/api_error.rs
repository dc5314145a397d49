//! The error every HTTP API route answers with (admin, notify, and the token check before
//! them): a status and a JSON `{"error": …}` body.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An API error: a status and a JSON `{"error": …}` body.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No or a bad token: 401.
    #[error("{0}")]
    Unauthorized(String),
    /// A malformed body: 400.
    #[error("{0}")]
    BadRequest(String),
    /// No such workstream: 404.
    #[error("{0}")]
    NotFound(String),
    /// Not to be changed (an MCP prompt template): 403.
    #[error("{0}")]
    Forbidden(String),
    /// The name is taken: 409.
    #[error("{0}")]
    Conflict(String),
    /// The database failed: 500 (retry later).
    #[error("database error; try again later")]
    Store(#[from] sandpiper_agent::store::StoreError),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Store(e) => {
                tracing::warn!(error = %e, "HTTP API: database error");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        let body = Json(json!({ "error": self.to_string() }));
        if status == StatusCode::UNAUTHORIZED {
            (status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (status, body).into_response()
        }
    }
}
