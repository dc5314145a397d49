//! sandpiper's OpenAI provider against a real llama.cpp server (issue 23).
//!
//! The server is PyPI's xllamacpp with Gemma 3 270M (see `tests/llama/`); CI installs it and
//! sets `SANDPIPER_TEST_LLAMA`, elsewhere these tests skip with a notice. The model's words are
//! nonsense: the tests check what sandpiper parses from llama.cpp's real stream and what the
//! real server answers at the edges (a prompt larger than the window, a tool call whose
//! arguments are not JSON), and that those answers still match the recorded fixtures in
//! `tests/llama/fixtures/` that the fake LLM replays.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use pretty_assertions::assert_eq;
use sandpiper_agent::config::ModelConfig;
use sandpiper_agent::model::{
    ChatModel, ChatRequest, Message, ModelError, ModelEvent, OpenAiModel, ResponseAssembler,
    RetryPolicy, ToolCall, ToolSchema,
};
use sandpiper_tests::llama_server::{LlamaOptions, LlamaServer};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("llama/fixtures")
        .join(name)
}

fn fixture_json(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).expect("read the fixture");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The request body `record_fixtures.py` used for fixture `name`.
fn recorded_request(name: &str) -> Value {
    fixture_json("requests.json")[name].clone()
}

/// sandpiper's real OpenAI provider pointed at the server: greedy, short, no retries (a
/// retried 500 would only hide what the server said).
fn provider(server: &LlamaServer, max_tokens: u32) -> OpenAiModel {
    let config = ModelConfig {
        base_url: Some(server.base_url()),
        model: "gemma-3-270m".into(),
        timeout: Duration::from_secs(120),
        max_retries: 0,
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        ..ModelConfig::default()
    };
    OpenAiModel::new(&config)
        .expect("provider")
        .with_retry_policy(RetryPolicy {
            max_retries: 0,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(10),
        })
}

async fn run(
    model: &OpenAiModel,
    messages: &[Message],
    tools: &[ToolSchema],
) -> Result<Vec<ModelEvent>, ModelError> {
    let request = ChatRequest {
        system: "You are terse.",
        messages,
        tools,
        max_tokens: None,
        cache_key: None,
    };
    let mut stream = model.stream(request).await?;
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event?);
    }
    Ok(events)
}

fn assemble(events: &[ModelEvent]) -> sandpiper_agent::model::AssembledResponse {
    let mut assembler = ResponseAssembler::default();
    for event in events {
        assembler.push(event);
    }
    assembler.finish()
}

/// `POST /v1/chat/completions` with a raw body: status and text.
async fn post(server: &LlamaServer, body: &Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("llama.cpp answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

async fn get(server: &LlamaServer, path: &str) -> Value {
    reqwest::get(format!("{}{path}", server.root_url()))
        .await
        .expect("llama.cpp answers")
        .json()
        .await
        .expect("JSON")
}

/// The `data:` payloads of an event stream, `[DONE]` left out.
fn sse_chunks(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("chunk is JSON"))
        .collect()
}

/// (finish reasons in order, completion tokens of the usage chunk) of an event stream.
fn stream_summary(text: &str) -> (Vec<String>, Option<u64>) {
    let chunks = sse_chunks(text);
    let reasons = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(String::from))
        .collect();
    let usage = chunks
        .iter()
        .find_map(|c| c["usage"]["completion_tokens"].as_u64());
    (reasons, usage)
}

fn ping_tool() -> ToolSchema {
    ToolSchema {
        name: "ping".into(),
        description: "Ping the server".into(),
        parameters: json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        })
        .into(),
        defer_loading: false,
    }
}

/// Three rounds of "Ping i." answered by a ping call: the base model copies the pattern.
fn few_shot_ping() -> Vec<Message> {
    let mut messages = Vec::new();
    for i in 1..=3 {
        let id = format!("call_{i}");
        messages.push(Message::user(format!("Ping {i}.")));
        messages.push(Message {
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: "ping".into(),
                arguments: json!({ "n": i }).to_string(),
            }],
            ..Message::assistant("")
        });
        messages.push(Message::tool_result(id, "ping", "pong"));
        messages.push(Message::assistant("Pinged."));
    }
    messages.push(Message::user("Ping 4."));
    messages
}

#[tokio::test]
async fn streamed_text_arrives_in_pieces_and_ends_with_a_finish_reason() {
    let Some(server) = LlamaServer::shared() else {
        return;
    };
    let model = provider(server, 16);
    let events = run(&model, &[Message::user("Hello")], &[])
        .await
        .expect("a streamed answer");
    let pieces = events
        .iter()
        .filter(|e| matches!(e, ModelEvent::TextDelta(t) if !t.is_empty()))
        .count();
    assert!(pieces > 1, "text arrives in several deltas: {events:?}");
    let answer = assemble(&events);
    assert!(!answer.text.is_empty(), "{events:?}");
    assert!(answer.tool_calls.is_empty(), "{events:?}");
    // The server caps an answer at n_predict (32) when the request sets no max_tokens; the
    // base model does not stop by itself, so the answer is cut: "length".
    assert_eq!(
        answer.finish_reason.as_deref(),
        Some("length"),
        "{events:?}"
    );
    assert!(
        (1..=32).contains(&answer.usage.output_tokens),
        "{:?}",
        answer.usage
    );
    assert!(answer.usage.input_tokens > 0, "{:?}", answer.usage);
    assert!(
        matches!(events.last(), Some(ModelEvent::Done { .. })),
        "{events:?}"
    );
}

#[tokio::test]
async fn max_tokens_cuts_the_stream_with_finish_reason_length() {
    let Some(server) = LlamaServer::shared() else {
        return;
    };
    let body = recorded_request("stream_text_length");
    let (status, text) = post(server, &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        stream_summary(&text),
        (vec!["length".to_owned()], Some(5)),
        "{text}"
    );
    let recorded = std::fs::read_to_string(fixture("stream_text_length.sse")).expect("fixture");
    assert_eq!(stream_summary(&recorded), stream_summary(&text));
    // Same chunk shape as the fixture the fake LLM replays: the finish chunk, then the usage
    // chunk with no choices.
    let keys = |chunks: Vec<Value>| -> Vec<Vec<String>> {
        chunks
            .iter()
            .map(|c| c.as_object().expect("object").keys().cloned().collect())
            .collect()
    };
    assert_eq!(keys(sse_chunks(&recorded)), keys(sse_chunks(&text)));
}

#[tokio::test]
async fn a_prompt_larger_than_the_window_is_http_400_exceed_context_size() {
    let Some(server) = LlamaServer::shared() else {
        return;
    };
    let recorded = fixture_json("exceed_context_size.json");
    let (status, text) = post(server, &recorded_request("exceed_context_size")).await;
    let body: Value = serde_json::from_str(&text).expect("JSON error body");
    assert_eq!(
        json!({"status": status, "body": body}),
        json!({"status": recorded["status"], "body": recorded["body"]})
    );

    // What sandpiper's provider makes of it: a final HTTP error that carries the numbers.
    let model = provider(server, 16);
    let long = Message::user("word ".repeat(3000));
    match run(&model, &[long], &[]).await {
        Err(ModelError::Http { status: 400, body }) => {
            let body: Value = serde_json::from_str(&body).expect("JSON error body");
            assert_eq!(body["error"]["type"], "exceed_context_size_error");
            assert_eq!(body["error"]["n_ctx"], 2048);
            assert!(
                body["error"]["n_prompt_tokens"].as_u64() > Some(2048),
                "{body}"
            );
        }
        other => panic!("expected HTTP 400, got {other:?}"),
    }
}

#[tokio::test]
async fn arguments_that_are_not_json_are_http_500_raw_and_accepted_once_sanitized() {
    let Some(server) = LlamaServer::shared() else {
        return;
    };
    let recorded = fixture_json("tool_call_arguments_not_json.json");
    let (status, text) = post(server, &recorded_request("tool_call_arguments_not_json")).await;
    let body: Value = serde_json::from_str(&text).expect("JSON error body");
    assert_eq!(
        json!({"status": status, "body": body}),
        json!({"status": recorded["status"], "body": recorded["body"]})
    );

    // A call the model cut short (max_tokens inside the arguments) sent back as history:
    // the provider sends `{}` in its place (the call's result says what was wrong), so the
    // same real server accepts the conversation.
    let model = provider(server, 16);
    let mut history = vec![
        Message::user("Ping 1."),
        Message {
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "ping".into(),
                arguments: r#"{"n": "#.into(),
            }],
            ..Message::assistant("")
        },
        Message::tool_result("call_1", "ping", "pong"),
    ];
    let events = run(&model, &history, &[ping_tool()])
        .await
        .expect("the sanitized history streams");
    assert!(
        matches!(events.last(), Some(ModelEvent::Done { .. })),
        "{events:?}"
    );

    // The server is not broken by it: the same history with valid arguments streams.
    history[1].tool_calls[0].arguments = r#"{"n": 1}"#.into();
    let events = run(&model, &history, &[ping_tool()])
        .await
        .expect("a later request streams");
    assert!(
        matches!(events.last(), Some(ModelEvent::Done { .. })),
        "{events:?}"
    );
}

#[tokio::test]
async fn props_and_models_report_the_context_window() {
    let Some(server) = LlamaServer::shared() else {
        return;
    };
    let props = get(server, "/props").await;
    assert_eq!(
        props["default_generation_settings"]["n_ctx"], 2048,
        "{props}"
    );
    assert_eq!(props["total_slots"], 2, "{props}");
    let models = get(server, "/v1/models").await;
    let meta = &models["data"][0]["meta"];
    assert_eq!(
        (
            &models["data"][0]["id"],
            &meta["n_ctx"],
            &meta["n_ctx_train"]
        ),
        (&json!("gemma-3-270m"), &json!(2048), &json!(32768)),
        "{models}"
    );
    // The fixtures have the same shape (recorded with one slot).
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&fixture_json("props.json")), keys(&props));
    assert_eq!(
        keys(&fixture_json("models.json")["data"][0]["meta"]),
        keys(meta)
    );
}

#[tokio::test]
async fn a_streamed_tool_call_parses_into_tool_call_deltas() {
    let Some(server) = LlamaServer::shared() else {
        return;
    };
    // 30 tokens end the answer right after the first call's `</tool_call>`; the base model
    // would go on with a second call.
    let model = provider(server, 30);
    let events = run(&model, &few_shot_ping(), &[ping_tool()])
        .await
        .expect("a streamed tool call");
    let deltas: Vec<&ModelEvent> = events
        .iter()
        .filter(|e| matches!(e, ModelEvent::ToolCallDelta { index: 0, .. }))
        .collect();
    assert!(
        deltas.len() > 2,
        "the arguments arrive in pieces: {events:?}"
    );
    match deltas[0] {
        ModelEvent::ToolCallDelta { id, name, .. } => {
            assert!(id.as_deref().is_some_and(|id| !id.is_empty()), "{events:?}");
            assert_eq!(name.as_deref(), Some("ping"), "{events:?}");
        }
        other => panic!("{other:?}"),
    }
    let answer = assemble(&events);
    let call = answer.tool_calls.first().expect("one call");
    assert_eq!(call.name, "ping");
    let args: Value = serde_json::from_str(&call.arguments).expect("arguments are JSON");
    assert!(args["n"].is_i64(), "{args}");
    assert!(answer.text.is_empty(), "{:?}", answer.text);
}

#[tokio::test]
async fn a_prompt_that_fits_generates_until_the_window_is_full_then_says_length() {
    // A 512-token window keeps the prompt short on 2 cores (about 3 s to read it).
    let Some(server) = LlamaServer::start(LlamaOptions {
        n_ctx: 512,
        parallel: 1,
        ..LlamaOptions::default()
    }) else {
        return;
    };
    // About 500 prompt tokens: fewer than the 32 the server would generate are left, and
    // llama.cpp does not reject the request for it; it stops when the window is full.
    let model = provider(&server, 32);
    let events = run(&model, &[Message::user("word ".repeat(490))], &[])
        .await
        .expect("a streamed answer");
    let answer = assemble(&events);
    assert_eq!(
        answer.finish_reason.as_deref(),
        Some("length"),
        "{events:?}"
    );
    assert_eq!(
        answer.usage.input_tokens + answer.usage.output_tokens,
        512,
        "prompt and answer fill the window exactly: {:?}",
        answer.usage
    );
    assert!(answer.usage.output_tokens < 32, "{:?}", answer.usage);
}

#[tokio::test]
async fn a_private_server_has_its_own_window_and_stops_when_dropped() {
    let Some(server) = LlamaServer::start(LlamaOptions {
        n_ctx: 4096,
        parallel: 1,
        ..LlamaOptions::default()
    }) else {
        return;
    };
    eprintln!("private llama.cpp server started in {:?}", server.startup());
    let props = get(&server, "/props").await;
    assert_eq!(
        props["default_generation_settings"]["n_ctx"], 4096,
        "{props}"
    );
    assert_eq!(props["total_slots"], 1, "{props}");
    let addr = server.root_url().trim_start_matches("http://").to_owned();
    drop(server);
    let refused = std::net::TcpStream::connect_timeout(
        &addr.parse().expect("socket address"),
        Duration::from_secs(1),
    );
    assert!(refused.is_err(), "nothing listens on {addr} any more");
}
