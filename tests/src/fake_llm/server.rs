//! The HTTP side: routes, recording each request, and streaming the rendered reply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::script::Reply;
use super::{Protocol, RecordedRequest, Shared, anthropic, openai};

/// One piece of a rendered response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Bytes to send, usually one complete SSE event.
    Frame(String),
    /// Wait this long before the next step.
    Pause(Duration),
    /// Abort the connection without finishing the body.
    Disconnect,
}

impl Step {
    /// An SSE event with only a data line (OpenAI style).
    pub(super) fn data(data: impl std::fmt::Display) -> Self {
        Self::Frame(format!("data: {data}\n\n"))
    }

    /// A named SSE event (Anthropic style).
    pub(super) fn event(name: &str, data: impl std::fmt::Display) -> Self {
        Self::Frame(format!("event: {name}\ndata: {data}\n\n"))
    }
}

/// The routes of both protocols, sharing one script.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(openai_endpoint))
        .route("/v1/messages", post(anthropic_endpoint))
        .route("/v1/models", get(models_endpoint))
        .route("/props", get(props_endpoint))
        .route("/api/show", post(ollama_show_endpoint))
        .route("/api/v0/models", get(lm_studio_models_endpoint))
        .fallback(unknown_endpoint)
        .layer(DefaultBodyLimit::disable())
        .with_state(shared)
}

async fn openai_endpoint(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(&shared, Protocol::OpenAi, &headers, &body)
}

async fn anthropic_endpoint(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(&shared, Protocol::Anthropic, &headers, &body)
}

/// `GET /v1/models`: the model, with its window where the enforced window's server says it.
async fn models_endpoint(State(shared): State<Arc<Shared>>) -> Response {
    let limit = shared.ledger().limit;
    axum::Json(super::window::models(limit.as_ref())).into_response()
}

/// `GET /props`: llama.cpp's server properties, only when a llama.cpp window is enforced or
/// slots are set.
async fn props_endpoint(State(shared): State<Arc<Shared>>) -> Response {
    let (limit, slots) = {
        let ledger = shared.ledger();
        (ledger.limit, ledger.slots)
    };
    let props = limit.as_ref().and_then(super::window::props);
    found_or_404(match slots {
        Some(slots) => Some(super::window::with_slots(props, slots)),
        None => props,
    })
}

/// `POST /api/show`: Ollama's model details, only when an Ollama window is enforced.
async fn ollama_show_endpoint(State(shared): State<Arc<Shared>>) -> Response {
    let limit = shared.ledger().limit;
    found_or_404(limit.as_ref().and_then(super::window::ollama_show))
}

/// `GET /api/v0/models`: LM Studio's model list, only when an LM Studio window is enforced.
async fn lm_studio_models_endpoint(State(shared): State<Arc<Shared>>) -> Response {
    let limit = shared.ledger().limit;
    found_or_404(limit.as_ref().and_then(super::window::lm_studio_models))
}

/// A discovery answer, or the 404 a server without that endpoint gives.
fn found_or_404(body: Option<Value>) -> Response {
    match body {
        Some(body) => axum::Json(body).into_response(),
        None => (StatusCode::NOT_FOUND, "404 page not found").into_response(),
    }
}

async fn unknown_endpoint(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    let message = format!(
        "fake LLM: no endpoint at {uri} (expected POST /v1/chat/completions or /v1/messages)"
    );
    shared.record_error(message.clone());
    (StatusCode::NOT_FOUND, message).into_response()
}

/// Records the request, takes the next scripted reply and renders it for `protocol`.
fn answer(shared: &Shared, protocol: Protocol, headers: &HeaderMap, raw: &[u8]) -> Response {
    let mut problems = Vec::new();
    let body = serde_json::from_slice::<Value>(raw).unwrap_or_else(|e| {
        problems.push(format!("request body is not JSON ({e})"));
        Value::String(String::from_utf8_lossy(raw).into_owned())
    });
    if body.get("stream") != Some(&Value::Bool(true)) {
        problems.push("request does not ask for \"stream\": true".to_owned());
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model")
        .to_owned();
    let request = RecordedRequest {
        protocol,
        headers: header_map(headers),
        body,
    };
    let (index, reply) = shared.take_reply(request, problems);
    let Some(reply) = reply else {
        let message = format!("fake LLM script exhausted: request #{index} had no scripted reply");
        return error_response(protocol, StatusCode::INTERNAL_SERVER_ERROR, &message, None);
    };
    match reply {
        Reply::Stream(stream) => {
            let steps = match protocol {
                Protocol::OpenAi => openai::render(&stream, &model),
                Protocol::Anthropic => anthropic::render(&stream, &model),
            };
            event_stream(
                with_pauses(steps, stream.hold, stream.chunk_delay),
                shared.shutdown.clone(),
            )
        }
        Reply::HttpError {
            status,
            message,
            retry_after,
        } => {
            let code = StatusCode::from_u16(status).unwrap_or_else(|_| {
                shared.record_error(format!(
                    "scripted HTTP status {status} is invalid; sent 500"
                ));
                StatusCode::INTERNAL_SERVER_ERROR
            });
            error_response(protocol, code, &message, retry_after)
        }
        Reply::Refused { status, body } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (
                code,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
        Reply::Garbage => {
            let steps = match protocol {
                Protocol::OpenAi => openai::garbage(),
                Protocol::Anthropic => anthropic::garbage(),
            };
            event_stream(steps, shared.shutdown.clone())
        }
        Reply::Stall(duration) => {
            event_stream(vec![Step::Pause(duration)], shared.shutdown.clone())
        }
    }
}

/// Lower-case header names to values (repeated headers joined with ", ").
fn header_map(headers: &HeaderMap) -> HashMap<String, String> {
    let mut map: HashMap<String, String> = HashMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        map.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    map
}

fn error_response(
    protocol: Protocol,
    status: StatusCode,
    message: &str,
    retry_after: Option<u64>,
) -> Response {
    let body = match protocol {
        Protocol::OpenAi => openai::error_body(status, message),
        Protocol::Anthropic => anthropic::error_body(status, message),
    };
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, secs.into());
    }
    response
}

/// Puts `hold` before the first frame and `delay` between consecutive frames.
fn with_pauses(steps: Vec<Step>, hold: Duration, delay: Duration) -> Vec<Step> {
    let mut paced = Vec::with_capacity(steps.len() * 2 + 1);
    if !hold.is_zero() {
        paced.push(Step::Pause(hold));
    }
    for (i, step) in steps.into_iter().enumerate() {
        if i > 0 && !delay.is_zero() {
            paced.push(Step::Pause(delay));
        }
        paced.push(step);
    }
    paced
}

/// A 200 `text/event-stream` response fed by a task that plays `steps`. The task stops (and the
/// connection is aborted) when the client goes away or the [`super::FakeLlm`] is dropped.
fn event_stream(steps: Vec<Step>, mut shutdown: watch::Receiver<bool>) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        for step in steps {
            match step {
                Step::Frame(text) => {
                    if tx.send(Ok(Bytes::from(text))).await.is_err() {
                        return; // client went away
                    }
                }
                Step::Pause(duration) => {
                    let stopped = tokio::select! {
                        () = tokio::time::sleep(duration) => false,
                        _ = shutdown.wait_for(|stop| *stop) => true,
                    };
                    if stopped {
                        let _ = tx
                            .send(Err(std::io::Error::other("fake LLM stopped")))
                            .await;
                        return;
                    }
                }
                Step::Disconnect => {
                    let _ = tx
                        .send(Err(std::io::Error::other("fake LLM scripted disconnect")))
                        .await;
                    return;
                }
            }
        }
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response()
}
