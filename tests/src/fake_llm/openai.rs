//! Rendering a reply as OpenAI chat completion chunks (`POST /v1/chat/completions`).
//!
//! The shape follows the real API: a first chunk with `role`, content deltas, tool call deltas
//! keyed by `index` (the first carries id, type and name with empty arguments, later ones carry
//! argument fragments), a chunk with `finish_reason`, a usage chunk with empty `choices`, then
//! `data: [DONE]`.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::script::{Ending, StreamedReply};
use super::server::Step;

/// The events of a streamed reply.
pub(super) fn render(reply: &StreamedReply, model: &str) -> Vec<Step> {
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let chunk = |choices: Value, usage: Value| {
        Step::data(json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": usage,
        }))
    };
    let delta = |delta: Value, finish_reason: Value| {
        chunk(
            json!([{ "index": 0, "delta": delta, "finish_reason": finish_reason }]),
            Value::Null,
        )
    };

    let mut steps = vec![delta(
        json!({ "role": "assistant", "content": "" }),
        Value::Null,
    )];
    for text in &reply.text_chunks {
        steps.push(delta(json!({ "content": text }), Value::Null));
    }
    for (index, call) in reply.tool_calls.iter().enumerate() {
        steps.push(delta(
            json!({ "tool_calls": [{
                "index": index,
                "id": call.id,
                "type": "function",
                "function": { "name": call.name, "arguments": "" },
            }]}),
            Value::Null,
        ));
        for fragment in call.argument_fragments() {
            steps.push(delta(
                json!({ "tool_calls": [{ "index": index, "function": { "arguments": fragment } }]}),
                Value::Null,
            ));
        }
    }
    match &reply.ending {
        Ending::Complete => {
            let finish = if reply.cut_off {
                "length"
            } else if reply.calls_tools() {
                "tool_calls"
            } else {
                "stop"
            };
            steps.push(delta(json!({}), json!(finish)));
            let usage = reply.usage;
            steps.push(chunk(
                json!([]),
                json!({
                    "prompt_tokens": usage.input_tokens,
                    "completion_tokens": usage.output_tokens,
                    "total_tokens": usage.input_tokens + usage.output_tokens,
                    "prompt_tokens_details": { "cached_tokens": usage.cached_tokens },
                }),
            ));
            steps.push(Step::data("[DONE]"));
        }
        Ending::Error(message) => steps.push(Step::data(json!({
            "error": { "message": message, "type": "server_error", "param": null, "code": null }
        }))),
        Ending::Disconnect => steps.push(Step::Disconnect),
    }
    steps
}

/// A stream whose only data line is truncated JSON.
pub(super) fn garbage() -> Vec<Step> {
    vec![Step::data(
        r#"{"id":"chatcmpl-garbage","object":"chat.completion.chunk","choices":[{"#,
    )]
}

/// The JSON body of an HTTP error.
pub(super) fn error_body(status: StatusCode, message: &str) -> Value {
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    };
    json!({ "error": { "message": message, "type": kind, "param": null, "code": null } })
}
