//! The HTTP server under `sandpiper serve`'s routes, hardened for a public port (Slack's Events
//! API mode exposes it): a client must send its request headers within
//! `header_read_timeout` (on every request of a kept-alive connection too) and the whole body
//! within `body_read_timeout` after them (else 408), at most `max_connections` are served at
//! once (further ones wait in the kernel's backlog) and at most `max_connections_per_peer` from
//! one host (further ones are refused with 503 at once), and a request body
//! larger than `max_body_bytes` gets 413 whichever route reads it. Routes check who is asking
//! before they read a body, so a client that sends headers and never the body holds a
//! connection only on a route it may use, and only until the body deadline.
//!
//! `axum::serve` sets no header-read timeout, so connections are served with hyper's HTTP/1
//! builder directly. HTTP/1 only: every client of these endpoints (Slack, load balancers,
//! `curl`) speaks it, and HTTP/2 would need limits of its own.

mod body;
pub(crate) mod peers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
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
    let _ = bound.send(listener.local_addr()?);
    serve_on(listener, router, limits, shutdown).await
}

/// [`run`] on a socket bound before (`serve` binds first, so a taken port stops it before
/// the chat platforms connect).
pub async fn serve_on(
    listener: TcpListener,
    router: Router,
    limits: &ServerConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
        body_read_timeout_ms = limits.body_read_timeout.as_millis() as u64,
        max_connections = limits.max_connections,
        max_connections_per_peer = limits.max_connections_per_peer,
        max_body_bytes = limits.max_body_bytes,
        "HTTP endpoints listening"
    );
    let body_limits = body::BodyLimits {
        max_bytes: limits.max_body_bytes,
        read_timeout: limits.body_read_timeout,
    };
    let router = router.layer(axum::middleware::from_fn(move |req, next| {
        body::limit(req, next, body_limits)
    }));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_peer = peers::PeerLimit::new(limits.max_connections_per_peer);
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
        let Some(peer_slot) = per_peer.admit(peer.ip()) else {
            refuse(&stream, peer);
            continue;
        };
        // Every request knows the TCP peer it came from (the status page limits sign-ins
        // per client with it).
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            router.clone(),
            move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        ));
        let timeout = limits.header_read_timeout;
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slots = (slot, peer_slot);
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

/// Tells a peer over its cap so, as far as the socket takes it without waiting, and closes.
fn refuse(stream: &tokio::net::TcpStream, peer: SocketAddr) {
    tracing::debug!(%peer, "refused an HTTP connection: too many open from this peer");
    let body = r#"{"error":"too many connections from your address"}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}
