//! Test helpers shared by the provider tests: small servers on 127.0.0.1 and stream collection.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use futures::StreamExt;

use crate::config::{ModelConfig, Provider, Secret};
use crate::model::{ModelError, ModelEvent, ModelStream, RetryPolicy};

/// Installs the ring crypto provider (needed before any reqwest client is built).
pub(crate) fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// All events of a stream up to the first error, and that error.
pub(crate) async fn collect(mut stream: ModelStream) -> (Vec<ModelEvent>, Option<ModelError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(e) => events.push(e),
            Err(e) => return (events, Some(e)),
        }
    }
    (events, None)
}

/// An SSE body with one `data:` event per entry.
pub(crate) fn sse(data: &[&str]) -> String {
    data.iter().map(|d| format!("data: {d}\n\n")).collect()
}

/// A model configuration pointing at a test server.
pub(crate) fn config(provider: Provider, base_url: &str, key: Option<&str>) -> ModelConfig {
    ModelConfig {
        provider,
        base_url: Some(base_url.to_owned()),
        model: "test-model".into(),
        api_key: key.map(Secret::new),
        timeout: Duration::from_secs(10),
        max_retries: 2,
        ..ModelConfig::default()
    }
}

/// Retries with millisecond backoff so that tests stay fast.
pub(crate) fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

async fn serve(router: axum::Router) -> String {
    install_crypto();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}")
}

/// A server answering every request with `body` as `content_type`; returns its base URL.
pub(crate) async fn serve_raw(content_type: &'static str, body: &'static str) -> String {
    serve(
        axum::Router::new().fallback(move || async move { ([(CONTENT_TYPE, content_type)], body) }),
    )
    .await
}

/// A server that sends the headers and `first` as an event stream, then stalls forever.
pub(crate) async fn serve_stalling(first: &'static str) -> String {
    serve(axum::Router::new().fallback(move || async move {
        let chunks = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(
            first.as_bytes(),
        ))])
        .chain(futures::stream::pending());
        (
            [(CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(chunks),
        )
    }))
    .await
}
