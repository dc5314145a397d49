//! What every request body gets, whichever route reads it: a size cap (413) and a deadline for
//! the whole body (408). Nothing here reads a body; a route that answers without reading it
//! (a 401, a 404) costs the server nothing, and hyper closes the connection after the answer.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};

/// The cap and the deadline every request body gets.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimits {
    /// Largest body, in bytes.
    pub(super) max_bytes: usize,
    /// Time for the whole body, from when the request's headers are in.
    pub(super) read_timeout: Duration,
}

/// The error a body gives once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub(super) struct BodyTimeout(Duration);

/// Refuses a body announced larger than the cap at once, caps one streamed without a length,
/// and cuts one that is still arriving at the deadline: the route's read fails, and the
/// answer becomes 408 (with `Connection: close`) whatever the route made of the failure.
pub(super) async fn limit(req: Request, next: Next, limits: BodyLimits) -> Response {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limits.max_bytes as u64) {
        return too_large(limits.max_bytes);
    }
    let expired = Arc::new(AtomicBool::new(false));
    let req = req.map(|body| {
        let limited = http_body_util::Limited::new(body, limits.max_bytes);
        Body::new(Deadline {
            inner: limited,
            sleep: Box::pin(tokio::time::sleep(limits.read_timeout)),
            after: limits.read_timeout,
            expired: expired.clone(),
        })
    });
    let response = next.run(req).await;
    if expired.load(Ordering::Acquire) {
        tracing::info!(
            timeout_ms = limits.read_timeout.as_millis() as u64,
            "HTTP request body too slow; closing the connection"
        );
        return too_slow(limits.read_timeout);
    }
    response
}

/// A body that fails with [`BodyTimeout`] once `sleep` has run out.
struct Deadline<B> {
    inner: B,
    sleep: Pin<Box<tokio::time::Sleep>>,
    after: Duration,
    expired: Arc<AtomicBool>,
}

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // The deadline first: a client trickling a byte at a time is always "ready".
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(BodyTimeout(self.after).into())));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn too_large(max: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        axum::Json(serde_json::json!({
            "error": format!("request body larger than {max} bytes")
        })),
    )
        .into_response()
}

fn too_slow(after: Duration) -> Response {
    let mut response = (
        StatusCode::REQUEST_TIMEOUT,
        axum::Json(serde_json::json!({
            "error": format!("the request body did not arrive within {} ms", after.as_millis())
        })),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
