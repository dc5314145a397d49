//! OpenAI provider against fake servers on 127.0.0.1.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::OpenAiModel;
use crate::config::Provider;
use crate::model::sse::testing::{collect, config, fast_retry, serve_raw, serve_stalling, sse};
use crate::model::{
    ChatModel, ChatRequest, Message, ModelError, ModelEvent, ResponseAssembler, ToolCall,
    ToolSchema, Usage,
};

fn ok_sse(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

async fn mock_server(template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

fn model(base: &str, key: Option<&str>) -> OpenAiModel {
    OpenAiModel::new(&config(Provider::Openai, base, key))
        .expect("client")
        .with_retry_policy(fast_retry(2))
}

async fn run(model: &OpenAiModel, messages: &[Message]) -> (Vec<ModelEvent>, Option<ModelError>) {
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

const TEXT_STREAM: &[&str] = &[
    r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}"#,
    r#"{"id":"x","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"usage":null}"#,
    r#"{"id":"x","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}],"usage":null}"#,
    r#"{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
    r#"{"id":"x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}"#,
    "[DONE]",
];

#[tokio::test]
async fn streams_text_usage_and_done() {
    let server = mock_server(ok_sse(sse(TEXT_STREAM))).await;
    let (events, err) = run(
        &model(&format!("{}/v1", server.uri()), None),
        &[Message::user("hi")],
    )
    .await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        events,
        vec![
            ModelEvent::TextDelta("Hel".into()),
            ModelEvent::TextDelta("lo".into()),
            ModelEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 2,
                cached_tokens: 0,
                cache_write_tokens: 0,
            }),
            ModelEvent::Done {
                finish_reason: Some("stop".into())
            },
        ]
    );
}

#[tokio::test]
async fn interleaved_tool_calls_assemble_exactly() {
    let body = sse(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"bash","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"read_file","arguments":"{\"pa"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"th\":\"x\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]);
    let server = mock_server(ok_sse(body)).await;
    let (events, err) = run(
        &model(&format!("{}/v1", server.uri()), None),
        &[Message::user("go")],
    )
    .await;
    assert!(err.is_none(), "{err:?}");
    let mut assembler = ResponseAssembler::default();
    events.iter().for_each(|e| assembler.push(e));
    let response = assembler.finish();
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "bash".into(),
                arguments: r#"{"command":"ls"}"#.into()
            },
            ToolCall {
                id: "call_b".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"x"}"#.into()
            },
        ]
    );
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.text, "");
}

#[tokio::test]
async fn tool_call_chunks_without_index_and_without_done() {
    // llama.cpp style: no `index`, the id on the first delta of each call, no [DONE].
    let body = sse(&[
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":""}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"command\":\"ls\"}"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"c2","type":"function","function":{"name":"read_file","arguments":"{\"path\":"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"\"a\"}"}}]}}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
    ]);
    let server = mock_server(ok_sse(body)).await;
    let (events, err) = run(
        &model(&format!("{}/v1", server.uri()), None),
        &[Message::user("go")],
    )
    .await;
    assert!(err.is_none(), "{err:?}");
    let mut assembler = ResponseAssembler::default();
    events.iter().for_each(|e| assembler.push(e));
    let response = assembler.finish();
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: r#"{"command":"ls"}"#.into()
            },
            ToolCall {
                id: "c2".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a"}"#.into()
            },
        ]
    );
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn request_body_and_auth_header() {
    let server = mock_server(ok_sse(sse(TEXT_STREAM))).await;
    let base = format!("{}/v1/", server.uri());
    let mut assistant = Message::assistant("");
    assistant.tool_calls = vec![ToolCall {
        id: "call_1".into(),
        name: "bash".into(),
        arguments: r#"{"command":"ls"}"#.into(),
    }];
    let history = vec![
        Message::user("list files"),
        assistant,
        Message::tool_result("call_1", "bash", "a.txt\nb.txt"),
        Message::assistant("Two files."),
        Message::user("thanks"),
    ];
    let tools = vec![ToolSchema {
        name: "bash".into(),
        description: "Runs a command.".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}).into(),
        defer_loading: false,
    }];
    let mut cfg = config(Provider::Openai, &base, Some("sk-test"));
    cfg.temperature = Some(0.2);
    let with_key = OpenAiModel::new(&cfg).expect("client");
    let request = ChatRequest {
        system: "You are sandpiper.",
        messages: &history,
        tools: &tools,
        max_tokens: None,
        cache_key: None,
    };
    let (_, err) = collect(with_key.stream(request).await.expect("stream")).await;
    assert!(err.is_none(), "{err:?}");
    let (_, err) = run(&model(&base, None), &[Message::user("hi")]).await;
    assert!(err.is_none(), "{err:?}");

    // The chat requests, without the `/props` each client asks first (404 here: no slots).
    let requests: Vec<_> = server
        .received_requests()
        .await
        .expect("recording")
        .into_iter()
        .filter(|r| r.method.as_str() == "POST")
        .collect();
    assert_eq!(requests.len(), 2);
    let auth = |i: usize| {
        requests[i]
            .headers
            .get("authorization")
            .map(|v| v.to_str().expect("ascii").to_owned())
    };
    assert_eq!(auth(0).as_deref(), Some("Bearer sk-test"));
    assert_eq!(auth(1), None);
    let body: serde_json::Value = requests[0].body_json().expect("json body");
    assert_eq!(
        body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "You are sandpiper."},
                {"role": "user", "content": "list files"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
                {"role": "assistant", "content": "Two files."},
                {"role": "user", "content": "thanks"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "bash",
                "description": "Runs a command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
            }}],
            "temperature": 0.2,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
    let plain: serde_json::Value = requests[1].body_json().expect("json body");
    assert_eq!(plain.get("tools"), None);
    assert_eq!(plain.get("temperature"), None);
}

#[tokio::test]
async fn rate_limit_with_retry_after_zero_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "0"))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok_sse(sse(TEXT_STREAM)))
        .expect(1)
        .mount(&server)
        .await;
    let (events, err) = run(&model(&server.uri(), None), &[Message::user("hi")]).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Done {
            finish_reason: Some("stop".into())
        })
    );
}

#[tokio::test]
async fn server_errors_exhaust_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_string("upstream exploded"))
        .expect(3) // max_retries = 2, plus the first attempt
        .mount(&server)
        .await;
    let (_, err) = run(&model(&server.uri(), None), &[Message::user("hi")]).await;
    match err {
        Some(ModelError::Http { status: 500, body }) => assert_eq!(body, "upstream exploded"),
        other => panic!("expected HTTP 500, got {other:?}"),
    }
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(400).set_body_string(r#"{"error":{"message":"bad model"}}"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let (_, err) = run(&model(&server.uri(), None), &[Message::user("hi")]).await;
    assert!(
        matches!(&err, Some(ModelError::Http { status: 400, body }) if body.contains("bad model")),
        "{err:?}"
    );
}

#[tokio::test]
async fn garbage_data_is_a_protocol_error() {
    let body =
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: <html>oops</html>\n\n";
    let base = serve_raw("text/event-stream", body).await;
    let (events, err) = run(&model(&base, None), &[Message::user("hi")]).await;
    assert_eq!(events, vec![ModelEvent::TextDelta("a".into())]);
    assert!(
        matches!(&err, Some(ModelError::Protocol(m)) if m.contains("<html>oops")),
        "{err:?}"
    );
}

#[tokio::test]
async fn stream_without_done_or_finish_reason_is_a_protocol_error() {
    let server = mock_server(ok_sse(sse(&[
        r#"{"choices":[{"delta":{"content":"partial"}}]}"#,
    ])))
    .await;
    let (events, err) = run(
        &model(&format!("{}/v1", server.uri()), None),
        &[Message::user("hi")],
    )
    .await;
    assert_eq!(events, vec![ModelEvent::TextDelta("partial".into())]);
    assert!(
        matches!(&err, Some(ModelError::Protocol(m)) if m == "stream ended early"),
        "{err:?}"
    );
}

#[tokio::test]
async fn error_chunk_is_a_provider_error() {
    let server = mock_server(ok_sse(sse(&[
        r#"{"error":{"message":"out of memory","code":500}}"#,
    ])))
    .await;
    let (_, err) = run(
        &model(&format!("{}/v1", server.uri()), None),
        &[Message::user("hi")],
    )
    .await;
    assert!(
        matches!(&err, Some(ModelError::Provider(m)) if m == "out of memory"),
        "{err:?}"
    );
}

#[tokio::test]
async fn stalled_headers_time_out() {
    let server = mock_server(ok_sse(sse(TEXT_STREAM)).set_delay(Duration::from_secs(10))).await;
    let mut cfg = config(Provider::Openai, &format!("{}/v1", server.uri()), None);
    cfg.timeout = Duration::from_millis(300);
    let m = OpenAiModel::new(&cfg).expect("client");
    let started = std::time::Instant::now();
    let (_, err) = run(&m, &[Message::user("hi")]).await;
    assert!(
        matches!(err, Some(ModelError::Timeout(t)) if t == Duration::from_millis(300)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn stalled_stream_times_out() {
    let base = serve_stalling("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n").await;
    let mut cfg = config(Provider::Openai, &base, None);
    cfg.timeout = Duration::from_millis(300);
    let m = OpenAiModel::new(&cfg).expect("client");
    let (events, err) = run(&m, &[Message::user("hi")]).await;
    assert_eq!(events, vec![ModelEvent::TextDelta("a".into())]);
    assert!(matches!(err, Some(ModelError::Timeout(_))), "{err:?}");
}

#[test]
fn debug_output_hides_the_api_key() {
    let cfg = config(
        Provider::Openai,
        "http://127.0.0.1:9/v1",
        Some("sk-very-secret"),
    );
    let openai = OpenAiModel::new(&cfg).expect("client");
    assert!(!format!("{openai:?}").contains("sk-very-secret"));
    let anthropic = crate::model::AnthropicModel::new(&cfg).expect("client");
    assert!(!format!("{anthropic:?}").contains("sk-very-secret"));
    assert_eq!(openai.model_name(), "test-model");
}
