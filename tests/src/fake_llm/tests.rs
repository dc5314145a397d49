//! Tests of the fake itself, through a real HTTP client.

mod conversation;
mod rendering;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;

const WAIT: Duration = Duration::from_secs(5);

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

fn openai_request() -> Value {
    json!({ "model": "gpt-test", "stream": true, "messages": [{ "role": "user", "content": "hi" }] })
}

fn anthropic_request() -> Value {
    json!({ "model": "claude-test", "stream": true, "max_tokens": 64,
            "messages": [{ "role": "user", "content": "hi" }] })
}

async fn post_openai(llm: &FakeLlm, body: &Value) -> reqwest::Response {
    let url = format!("{}/chat/completions", llm.openai_base_url());
    let request = client().post(url).bearer_auth("sk-test").json(body);
    request.send().await.expect("POST chat/completions")
}

async fn post_anthropic(llm: &FakeLlm, body: &Value) -> reqwest::Response {
    let url = format!("{}/v1/messages", llm.anthropic_base_url());
    let request = client().post(url).header("x-api-key", "sk-ant").json(body);
    request.send().await.expect("POST v1/messages")
}

/// Reads the whole body of a successful exchange.
async fn drain(response: reqwest::Response) {
    response.text().await.expect("response body");
}

/// Splits an SSE body into (event name, data) pairs, rejecting any other kind of line.
async fn sse_events(response: reqwest::Response) -> Vec<(Option<String>, String)> {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = response.text().await.expect("SSE body");
    assert!(
        body.ends_with("\n\n"),
        "body must end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let (mut event, mut data) = (None, String::new());
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = Some(name.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push_str(value);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            (event, data)
        })
        .collect()
}

/// Chat completion chunks of an OpenAI stream, checking it ends with `[DONE]`.
async fn openai_chunks(response: reqwest::Response) -> Vec<Value> {
    let mut events = sse_events(response).await;
    assert_eq!(events.pop(), Some((None, "[DONE]".to_owned())));
    let chunks: Vec<Value> = events
        .into_iter()
        .map(|(event, data)| {
            assert_eq!(event, None);
            serde_json::from_str(&data).expect("each data line is a JSON chunk")
        })
        .collect();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "gpt-test");
        assert_eq!(chunk["id"], chunks[0]["id"]);
    }
    chunks
}

/// Anthropic events as (name, data), checking each data's `type` matches the event name.
async fn anthropic_events(response: reqwest::Response) -> Vec<(String, Value)> {
    let events = sse_events(response).await.into_iter().map(|(event, data)| {
        let name = event.expect("every Anthropic event is named");
        let data: Value = serde_json::from_str(&data).expect("each data line is JSON");
        assert_eq!(data["type"], name.as_str());
        (name, data)
    });
    events.collect()
}

fn deltas(chunks: &[Value]) -> Vec<Value> {
    chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|choice| choice["delta"].clone()))
        .collect()
}

fn finish_reasons(chunks: &[Value]) -> Vec<Value> {
    chunks
        .iter()
        .filter_map(|c| {
            c["choices"]
                .get(0)
                .map(|choice| choice["finish_reason"].clone())
        })
        .collect()
}

/// (id, name, concatenated arguments) per tool call index of an OpenAI stream.
fn openai_tool_calls(chunks: &[Value]) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for delta in deltas(chunks) {
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().expect("index") as usize;
            if index == calls.len() {
                calls.push(Default::default());
            }
            let entry = &mut calls[index];
            if let Some(id) = call["id"].as_str() {
                entry.0 = id.to_owned();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                entry.1 = name.to_owned();
            }
            entry.2 += call["function"]["arguments"].as_str().expect("arguments");
        }
    }
    calls
}

fn verify_failure(llm: &FakeLlm) -> String {
    let payload = catch_unwind(AssertUnwindSafe(|| llm.verify())).expect_err("verify must fail");
    payload
        .downcast_ref::<String>()
        .cloned()
        .expect("panic message")
}
