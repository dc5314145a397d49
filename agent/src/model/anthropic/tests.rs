//! Anthropic provider against fake servers on 127.0.0.1.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::AnthropicModel;
use crate::config::Provider;
use crate::model::sse::testing::{collect, config, fast_retry, serve_stalling};
use crate::model::{
    ChatModel, ChatRequest, Message, ModelError, ModelEvent, ResponseAssembler, ToolCall,
    ToolSchema, Usage,
};

/// An SSE body with named events.
fn events(list: &[(&str, serde_json::Value)]) -> String {
    list.iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

async fn mock_server(body: String) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    server
}

fn model(base: &str) -> AnthropicModel {
    AnthropicModel::new(&config(Provider::Anthropic, base, Some("ak-test")))
        .expect("client")
        .with_retry_policy(fast_retry(2))
}

async fn run(
    model: &AnthropicModel,
    messages: &[Message],
) -> (Vec<ModelEvent>, Option<ModelError>) {
    let request = ChatRequest {
        system: "be brief",
        messages,
        tools: &[],
        max_tokens: None,
        cache_key: None,
    };
    match model.stream(request).await {
        Ok(stream) => collect(stream).await,
        Err(e) => (Vec::new(), Some(e)),
    }
}

fn text_and_tool_use() -> String {
    events(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m", "stop_reason": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"ls\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 40}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

#[tokio::test]
async fn streams_text_and_tool_use() {
    let server = mock_server(text_and_tool_use()).await;
    let (events, err) = run(&model(&server.uri()), &[Message::user("list files")]).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        events.first(),
        Some(&ModelEvent::Usage(Usage {
            input_tokens: 25,
            output_tokens: 1,
            cached_tokens: 0,
            cache_write_tokens: 0,
        }))
    );
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Done {
            finish_reason: Some("tool_use".into())
        })
    );
    let mut assembler = ResponseAssembler::default();
    events.iter().for_each(|e| assembler.push(e));
    let response = assembler.finish();
    assert_eq!(response.text, "Let me look.");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "toolu_1".into(),
                name: "bash".into(),
                arguments: r#"{"command": "ls"}"#.into()
            },
            ToolCall {
                id: "toolu_2".into(),
                name: "now".into(),
                arguments: "{}".into()
            },
        ]
    );
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 25,
            output_tokens: 40,
            cached_tokens: 0,
            cache_write_tokens: 0,
        }
    );
}

#[tokio::test]
async fn request_body_and_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "ak-test"))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(text_and_tool_use(), "text/event-stream"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let mut assistant = Message::assistant("Checking.");
    assistant.tool_calls = vec![
        ToolCall {
            id: "toolu_1".into(),
            name: "bash".into(),
            arguments: r#"{"command":"ls"}"#.into(),
        },
        ToolCall {
            id: "toolu_2".into(),
            name: "bash".into(),
            arguments: "not json".into(),
        },
    ];
    let history = vec![
        Message::user("list files"),
        assistant,
        Message::tool_result("toolu_1", "bash", "a.txt"),
        Message::tool_result("toolu_2", "bash", "error: bad arguments"),
    ];
    let tools = vec![ToolSchema {
        name: "bash".into(),
        description: "Runs a command.".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}).into(),
        defer_loading: false,
    }];
    let request = ChatRequest {
        system: "You are sandpiper.",
        messages: &history,
        tools: &tools,
        max_tokens: None,
        cache_key: None,
    };
    let (_, err) = collect(model(&server.uri()).stream(request).await.expect("stream")).await;
    assert!(err.is_none(), "{err:?}");
    let requests = server.received_requests().await.expect("recording");
    let body: serde_json::Value = requests[0].body_json().expect("json body");
    assert_eq!(
        body,
        json!({
            "model": "test-model",
            "max_tokens": 8192,
            "system": [
                {"type": "text", "text": "You are sandpiper.", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.txt"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "error: bad arguments"}],
                     "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": [{
                "name": "bash",
                "description": "Runs a command.",
                "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
                "cache_control": {"type": "ephemeral"}
            }],
            "stream": true
        })
    );
    assert_eq!(requests[0].headers.get("authorization"), None);
}

#[tokio::test]
async fn cache_reads_and_writes_are_read_from_usage() {
    let body = events(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 30,
                "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1800, "output_tokens": 1}}}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    let server = mock_server(body).await;
    let (events, err) = run(&model(&server.uri()), &[Message::user("hi")]).await;
    assert!(err.is_none(), "{err:?}");
    let mut assembler = ResponseAssembler::default();
    events.iter().for_each(|e| assembler.push(e));
    assert_eq!(
        assembler.finish().usage,
        Usage {
            input_tokens: 2030,
            output_tokens: 9,
            cached_tokens: 1800,
            cache_write_tokens: 200,
        }
    );
}

#[tokio::test]
async fn error_event_is_a_provider_error() {
    let body = events(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 0}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let server = mock_server(body).await;
    let (events, err) = run(&model(&server.uri()), &[Message::user("hi")]).await;
    assert_eq!(events.last(), Some(&ModelEvent::TextDelta("Hi".into())));
    assert!(
        matches!(&err, Some(ModelError::Provider(m)) if m == "Overloaded (overloaded_error)"),
        "{err:?}"
    );
}

#[tokio::test]
async fn overloaded_is_retried_and_bad_requests_are_not() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(529).set_body_string(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(text_and_tool_use(), "text/event-stream"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let (_, err) = run(&model(&server.uri()), &[Message::user("hi")]).await;
    assert!(err.is_none(), "{err:?}");

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_string("messages: roles must alternate"))
        .expect(1)
        .mount(&server)
        .await;
    let (_, err) = run(&model(&server.uri()), &[Message::user("hi")]).await;
    assert!(
        matches!(&err, Some(ModelError::Http { status: 400, body }) if body.contains("alternate")),
        "{err:?}"
    );
}

#[tokio::test]
async fn stalled_stream_times_out() {
    let base = serve_stalling("event: ping\ndata: {\"type\":\"ping\"}\n\n").await;
    let mut cfg = config(Provider::Anthropic, &base, None);
    cfg.timeout = Duration::from_millis(300);
    let m = AnthropicModel::new(&cfg).expect("client");
    let (_, err) = run(&m, &[Message::user("hi")]).await;
    assert!(matches!(err, Some(ModelError::Timeout(_))), "{err:?}");
}
