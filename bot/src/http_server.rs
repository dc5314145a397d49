//! The HTTP server under `sandpiper serve`'s routes, hardened for a public port (Slack's Events
//! API mode exposes it): a client must send its request headers within
//! `header_read_timeout` (on every request of a kept-alive connection too), at most
//! `max_connections` are served at once (further ones wait in the kernel's backlog), and a
//! request body larger than `max_body_bytes` gets 413 whichever route reads it.
//!
//! `axum::serve` sets no header-read timeout, so connections are served with hyper's HTTP/1
//! builder directly. HTTP/1 only: every client of these endpoints (Slack, load balancers,
//! `curl`) speaks it, and HTTP/2 would need limits of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use sandpiper_agent::config::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How long open connections may take to finish their requests after shutdown is asked.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (out of file descriptors, say) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listen` within `limits` until `shutdown` is cancelled, then lets open
/// requests finish (for at most [`DRAIN_DEADLINE`]). The bound address goes to `bound` as soon
/// as the socket listens (port 0 picks a free port).
pub async fn run(
    listen: SocketAddr,
    router: Router,
    limits: &ServerConfig,
    shutdown: CancellationToken,
    bound: tokio::sync::oneshot::Sender<SocketAddr>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
        max_connections = limits.max_connections,
        max_body_bytes = limits.max_body_bytes,
        "HTTP endpoints listening"
    );
    let _ = bound.send(addr);
    let max_body = limits.max_body_bytes;
    let router = router.layer(axum::middleware::from_fn(move |req, next| {
        limit_body(req, next, max_body)
    }));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept an HTTP connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let timeout = limits.header_read_timeout;
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let served = tokio::select! {
                served = conn.as_mut() => served,
                () = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_DEADLINE, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections still open after the drain deadline; closing them");
    }
    Ok(())
}

/// Refuses a body announced larger than `max` at once, and caps one that is streamed without a
/// length: a route reading past `max` fails, and axum's extractors answer 413.
async fn limit_body(req: Request, next: Next, max: usize) -> Response {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > max as u64) {
        return too_large(max);
    }
    let req = req.map(|body| Body::new(http_body_util::Limited::new(body, max)));
    next.run(req).await
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
