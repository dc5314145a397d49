//! A scripted LLM server that speaks the real wire protocols on 127.0.0.1, so end-to-end tests
//! drive the real provider clients (HTTP, SSE parsing, delta assembly, retries, timeouts).
//!
//! ```ignore
//! let llm = FakeLlm::start(vec![
//!     tool_call("call_1", "bash", json!({"command": "ls"})),
//!     text("done"),
//! ])
//! .await;
//! // point the agent at llm.openai_base_url() or llm.anthropic_base_url(), run a turn...
//! llm.verify(); // every tool call got a result, no request found the script empty
//! ```
//!
//! # Layout
//! - this file: [`FakeLlm`], the running server, and what it recorded.
//! - `script.rs`: [`Reply`] and its builders; format-agnostic.
//! - `server.rs`: the axum routes; records a request, takes the next reply, streams it.
//! - `openai.rs` / `anthropic.rs`: render a reply in each provider's SSE format.
//! - `tests/`: tests of the fake itself through a real HTTP client (dev-deps: reqwest, rustls
//!   with `ring`, pretty_assertions).

mod anthropic;
mod openai;
mod script;
mod server;
#[cfg(test)]
mod tests;
pub mod window;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

pub use script::{
    Ending, Reply, StreamedReply, TokenUsage, ToolCallSpec, text, text_then_tool_call, tool_call,
    tool_call_raw, tool_calls,
};
pub use window::{ContextLimit, Flavor};

/// Which wire protocol a request used (decided by the endpoint it hit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

/// One request the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The endpoint that was hit.
    pub protocol: Protocol,
    /// Headers by lower-case name (repeated headers joined with ", ").
    pub headers: HashMap<String, String>,
    /// The JSON body (a JSON string holding the raw text if the body was not JSON).
    pub body: Value,
}

/// A running scripted LLM server. Each request consumes the next [`Reply`], rendered in the
/// protocol of the endpoint hit. Dropping it stops the server and aborts open streams.
#[derive(Debug)]
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

/// What a person said in a message of a request: its content without the context note that
/// sandpiper appends to the newest message (the time, memories, hints).
pub fn said(content: &str) -> &str {
    content
        .split_once("\n\n<context>\n")
        .map_or(content, |(said, _)| said)
}

impl FakeLlm {
    /// Binds 127.0.0.1 on a free port and serves `script` in order.
    ///
    /// # Panics
    /// If no local port can be bound.
    pub async fn start(script: Vec<Reply>) -> FakeLlm {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake LLM: bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("fake LLM: local address of the listener");
        let (stop, shutdown) = watch::channel(false);
        let (count, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            ledger: Mutex::new(Ledger {
                script: script.into(),
                ..Ledger::default()
            }),
            count,
            shutdown: shutdown.clone(),
        });
        let app = server::router(Arc::clone(&shared));
        let mut signal = shutdown;
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = signal.wait_for(|stop| *stop).await;
            });
            let _ = serve.await;
        });
        FakeLlm { addr, shared, stop }
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL for an OpenAI-compatible client, which POSTs `{base}/chat/completions`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Base URL for an Anthropic client, which POSTs `{base}/v1/messages`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers every request the script has no reply for with `respond(body)`: for tests
    /// whose requests arrive in no fixed order (many threads, several nodes).
    pub fn respond_with(&self, respond: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        self.shared.ledger().responder = Some(Arc::new(respond));
    }

    /// Enforces a context window from now on, as the server `limit.flavor` names does: too
    /// large requests are refused with that server's error (without taking a reply), answers
    /// are cut at the output limit, `usage` reports the real prompt size, and `GET /props` or
    /// `GET /v1/models` say the window where that server says it.
    pub fn set_window(&self, limit: ContextLimit) {
        self.shared.ledger().limit = Some(limit);
    }

    /// Answers `GET /props` as a llama.cpp server with `slots` parallel slots does (its
    /// `total_slots`), from now on.
    pub fn set_slots(&self, slots: u32) {
        self.shared.ledger().slots = Some(slots);
    }

    /// The requests refused for their size or history: `(request index, HTTP status, body)`.
    pub fn refusals(&self) -> Vec<(usize, u16, Value)> {
        self.shared.ledger().refused.clone()
    }

    /// Appends a reply to the script while the test runs.
    pub fn push(&self, reply: Reply) {
        self.shared.ledger().script.push_back(reply);
    }

    /// Every request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared
            .ledger()
            .requests
            .iter()
            .map(|r| r.body.clone())
            .collect()
    }

    /// The headers of every request, in order (lower-case names), to check `authorization` or
    /// `x-api-key`.
    pub fn request_headers(&self) -> Vec<HashMap<String, String>> {
        self.shared
            .ledger()
            .requests
            .iter()
            .map(|r| r.headers.clone())
            .collect()
    }

    /// Every request with its protocol, headers and body, in order.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.shared.ledger().requests.clone()
    }

    /// Waits until at least `n` requests arrived and returns all bodies.
    ///
    /// # Panics
    /// If fewer than `n` arrived within `timeout`.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let mut count = self.shared.count.subscribe();
        let arrived = tokio::time::timeout(timeout, count.wait_for(|c| *c >= n)).await;
        if !matches!(arrived, Ok(Ok(_))) {
            let got = self.requests();
            panic!(
                "fake LLM: expected {n} requests within {timeout:?}, got {}: {got:#?}",
                got.len()
            );
        }
        self.requests()
    }

    /// Replies not yet consumed.
    pub fn remaining(&self) -> usize {
        self.shared.ledger().script.len()
    }

    /// Checks the conversation was well-formed.
    ///
    /// # Panics
    /// Listing every problem: a tool call id sent in a (normally ended) reply that no later
    /// request answered (OpenAI: a `{"role":"tool","tool_call_id":ID}` message; Anthropic: a
    /// `tool_result` block with `tool_use_id: ID`), a request that found the script empty, a
    /// request that was not JSON or did not ask for `"stream": true`, or a hit on an unknown path.
    pub fn verify(&self) {
        let problems = self.shared.ledger().problems();
        if !problems.is_empty() {
            panic!(
                "fake LLM verification failed:\n  - {}",
                problems.join("\n  - ")
            );
        }
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        // Stops accepting, closes idle connections and aborts streams still playing.
        let _ = self.stop.send(true);
    }
}

/// State shared between the [`FakeLlm`] handle and the request handlers.
#[derive(Debug)]
struct Shared {
    ledger: Mutex<Ledger>,
    /// Number of requests received, for [`FakeLlm::wait_for_requests`].
    count: watch::Sender<usize>,
    /// Becomes `true` (or closes) when the [`FakeLlm`] is dropped.
    shutdown: watch::Receiver<bool>,
}

impl Shared {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record_error(&self, message: String) {
        self.ledger().errors.push(message);
    }

    /// Records `request` (and its `problems`), then pops the next reply. Returns the request's
    /// index and the reply, `None` (recorded as an error) when the script is empty.
    fn take_reply(
        &self,
        request: RecordedRequest,
        problems: Vec<String>,
    ) -> (usize, Option<Reply>) {
        let mut ledger = self.ledger();
        let index = ledger.requests.len();
        let refusal = ledger
            .limit
            .as_ref()
            .and_then(|limit| window::refusal(limit, &request.body));
        ledger.requests.push(request);
        for problem in problems {
            ledger.errors.push(format!("request #{index}: {problem}"));
        }
        if let Some((status, body)) = refusal {
            ledger.refused.push((index, status, body.clone()));
            self.count.send_replace(index + 1);
            return (index, Some(Reply::Refused { status, body }));
        }
        let limit = ledger.limit;
        let reply = ledger.script.pop_front().or_else(|| {
            let body = &ledger.requests[index].body;
            ledger.responder.as_ref().map(|respond| respond(body))
        });
        let reply = match (reply, limit) {
            (Some(Reply::Stream(mut stream)), Some(limit)) => {
                window::apply(&limit, &ledger.requests[index].body, &mut stream);
                Some(Reply::Stream(stream))
            }
            (reply, _) => reply,
        };
        match &reply {
            None => ledger.errors.push(format!(
                "request #{index} arrived when the script was empty (fake LLM script exhausted)"
            )),
            Some(reply) => {
                let issued = reply.answerable_tool_calls().iter().map(|call| IssuedCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    request_index: index,
                });
                ledger.issued.extend(issued);
            }
        }
        self.count.send_replace(index + 1);
        (index, reply)
    }
}

/// A tool call the fake sent, which a later request must answer.
#[derive(Debug)]
struct IssuedCall {
    id: String,
    name: String,
    request_index: usize,
}

/// Answers a request (its JSON body) when the script is empty: see [`FakeLlm::respond_with`].
pub type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Default)]
struct Ledger {
    script: VecDeque<Reply>,
    responder: Option<Responder>,
    requests: Vec<RecordedRequest>,
    issued: Vec<IssuedCall>,
    errors: Vec<String>,
    limit: Option<ContextLimit>,
    refused: Vec<(usize, u16, Value)>,
    /// The slots `GET /props` says, as a llama.cpp server with `--parallel N` does.
    slots: Option<u32>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("script", &self.script.len())
            .field("requests", &self.requests.len())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    fn problems(&self) -> Vec<String> {
        let mut problems = self.errors.clone();
        for call in &self.issued {
            let later = self
                .requests
                .get(call.request_index + 1..)
                .unwrap_or_default();
            if !later.iter().any(|r| answers(&r.body, &call.id)) {
                problems.push(format!(
                    "tool call {} ({}) sent in reply to request #{} never got a tool result \
                     in a later request",
                    call.id, call.name, call.request_index
                ));
            }
        }
        problems
    }
}

/// Whether a request body carries a tool result for `id`, in either protocol.
fn answers(body: &Value, id: &str) -> bool {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return false;
    };
    messages.iter().any(|message| {
        let openai = message.get("role").and_then(Value::as_str) == Some("tool")
            && message.get("tool_call_id").and_then(Value::as_str) == Some(id);
        let anthropic = message
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks.iter().any(|block| {
                    block.get("type").and_then(Value::as_str) == Some("tool_result")
                        && block.get("tool_use_id").and_then(Value::as_str) == Some(id)
                })
            });
        openai || anthropic
    })
}
