//! Rendering a reply as Anthropic Messages events (`POST /v1/messages`).
//!
//! The shape follows the real API: `message_start`, a `ping`, one content block per text answer
//! and per tool call (`content_block_start` / `content_block_delta` / `content_block_stop`, tool
//! arguments as `input_json_delta` fragments after an empty one), `message_delta` with the stop
//! reason and usage, then `message_stop`.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::script::{Ending, StreamedReply};
use super::server::Step;

/// The events of a streamed reply.
pub(super) fn render(reply: &StreamedReply, model: &str) -> Vec<Step> {
    let usage = reply.usage;
    let mut steps = vec![
        Step::event(
            "message_start",
            json!({
                "type": "message_start",
                "message": {
                    "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    // Anthropic's input_tokens are the uncached part only.
                    "usage": {
                        "input_tokens": usage
                            .input_tokens
                            .saturating_sub(usage.cached_tokens + usage.cache_write_tokens),
                        "cache_read_input_tokens": usage.cached_tokens,
                        "cache_creation_input_tokens": usage.cache_write_tokens,
                        "output_tokens": 1
                    },
                },
            }),
        ),
        Step::event("ping", json!({ "type": "ping" })),
    ];

    let mut index = 0;
    if !reply.web_citations.is_empty() {
        let id = "srvtoolu_fake_search";
        let block =
            json!({ "type": "server_tool_use", "id": id, "name": "web_search", "input": {} });
        let query = json!({ "type": "input_json_delta", "partial_json": "{\"query\": \"fake\"}" });
        push_block(&mut steps, index, block, std::iter::once(query));
        index += 1;
        let found: Vec<Value> = reply
            .web_citations
            .iter()
            .map(|(title, url)| json!({ "type": "web_search_result", "url": url, "title": title, "encrypted_content": "enc" }))
            .collect();
        let block =
            json!({ "type": "web_search_tool_result", "tool_use_id": id, "content": found });
        push_block(&mut steps, index, block, std::iter::empty());
        index += 1;
    }
    if !reply.text_chunks.is_empty() {
        let block = json!({ "type": "text", "text": "" });
        let citations = reply.web_citations.iter().map(|(title, url)| {
            json!({ "type": "citations_delta", "citation": {
                "type": "web_search_result_location", "url": url, "title": title,
                "cited_text": "…", "encrypted_index": "enc"
            } })
        });
        let deltas = citations.chain(
            reply
                .text_chunks
                .iter()
                .map(|text| json!({ "type": "text_delta", "text": text })),
        );
        push_block(&mut steps, index, block, deltas);
        index += 1;
    }
    for call in &reply.tool_calls {
        let block = json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": {} });
        let fragments = std::iter::once(String::new()).chain(call.argument_fragments());
        let deltas =
            fragments.map(|partial| json!({ "type": "input_json_delta", "partial_json": partial }));
        push_block(&mut steps, index, block, deltas);
        index += 1;
    }

    match &reply.ending {
        Ending::Complete => {
            let stop_reason = if reply.cut_off {
                "max_tokens"
            } else if reply.calls_tools() {
                "tool_use"
            } else {
                "end_turn"
            };
            steps.push(Step::event(
                "message_delta",
                json!({
                    "type": "message_delta",
                    "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                    "usage": { "output_tokens": usage.output_tokens },
                }),
            ));
            steps.push(Step::event(
                "message_stop",
                json!({ "type": "message_stop" }),
            ));
        }
        Ending::Error(message) => steps.push(Step::event(
            "error",
            json!({ "type": "error", "error": { "type": "api_error", "message": message } }),
        )),
        Ending::Disconnect => steps.push(Step::Disconnect),
    }
    steps
}

fn push_block(
    steps: &mut Vec<Step>,
    index: usize,
    block: Value,
    deltas: impl Iterator<Item = Value>,
) {
    steps.push(Step::event(
        "content_block_start",
        json!({ "type": "content_block_start", "index": index, "content_block": block }),
    ));
    for delta in deltas {
        steps.push(Step::event(
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": index, "delta": delta }),
        ));
    }
    steps.push(Step::event(
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": index }),
    ));
}

/// A stream whose `message_start` data line is truncated JSON.
pub(super) fn garbage() -> Vec<Step> {
    vec![Step::event(
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_garbage","#,
    )]
}

/// The JSON body of an HTTP error.
pub(super) fn error_body(status: StatusCode, message: &str) -> Value {
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}
