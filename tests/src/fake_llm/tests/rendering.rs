//! How replies are rendered on each protocol's wire.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn openai_text_streams_one_delta_per_word_then_usage_and_done() {
    let llm = FakeLlm::start(vec![text("hello brave new world")]).await;
    let chunks = openai_chunks(post_openai(&llm, &openai_request()).await).await;
    assert_eq!(
        deltas(&chunks),
        vec![
            json!({ "role": "assistant", "content": "" }),
            json!({ "content": "hello " }),
            json!({ "content": "brave " }),
            json!({ "content": "new " }),
            json!({ "content": "world" }),
            json!({}),
        ]
    );
    let mut finishes = vec![Value::Null; 5];
    finishes.push(json!("stop"));
    assert_eq!(finish_reasons(&chunks), finishes);
    let usage = chunks.last().expect("usage chunk");
    assert_eq!(usage["choices"], json!([]));
    let expected = json!({
        "prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19,
        "prompt_tokens_details": { "cached_tokens": 0 }
    });
    assert_eq!(usage["usage"], expected);
    assert_eq!(llm.remaining(), 0);
    llm.verify();
}

#[tokio::test]
async fn openai_tool_call_streams_header_then_argument_fragments() {
    let args = json!({ "command": "ls -la" });
    let llm = FakeLlm::start(vec![tool_call("call_1", "bash", args.clone())]).await;
    let chunks = openai_chunks(post_openai(&llm, &openai_request()).await).await;
    let deltas = deltas(&chunks);
    let first = json!({ "tool_calls": [{ "index": 0, "id": "call_1", "type": "function",
                                          "function": { "name": "bash", "arguments": "" } }] });
    assert_eq!(deltas[1], first);
    let fragments: Vec<&Value> = deltas[2..deltas.len() - 1].iter().collect();
    assert_eq!(fragments.len(), 3, "arguments arrive in three fragments");
    let calls = openai_tool_calls(&chunks);
    let expected = vec![("call_1".to_owned(), "bash".to_owned(), args.to_string())];
    assert_eq!(calls, expected);
    assert_eq!(finish_reasons(&chunks).last(), Some(&json!("tool_calls")));
}

#[tokio::test]
async fn openai_parallel_and_raw_tool_calls_keep_their_indexes() {
    let llm = FakeLlm::start(vec![tool_calls(vec![
        ToolCallSpec::new("call_a", "read_file", json!({ "path": "a.txt" })),
        ToolCallSpec::raw("call_b", "bash", "ls -la"),
    ])])
    .await;
    let chunks = openai_chunks(post_openai(&llm, &openai_request()).await).await;
    let expected = vec![
        (
            "call_a".into(),
            "read_file".into(),
            r#"{"path":"a.txt"}"#.into(),
        ),
        ("call_b".into(), "bash".into(), "ls -la".into()),
    ];
    assert_eq!(openai_tool_calls(&chunks), expected);
}

#[tokio::test]
async fn anthropic_renders_text_block_then_tool_use_block() {
    let args = json!({ "command": "ls" });
    let reply = text_then_tool_call("let me look", "toolu_1", "bash", args.clone());
    let llm = FakeLlm::start(vec![reply]).await;
    let events = anthropic_events(post_anthropic(&llm, &anthropic_request()).await).await;
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(["content_block_delta"; 3]);
    expected.extend(["content_block_stop", "content_block_start"]);
    expected.extend(["content_block_delta"; 4]);
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);

    assert_eq!(events[0].1["message"]["model"], "claude-test");
    let text: String = events[3..6]
        .iter()
        .map(|(_, d)| d["delta"]["text"].as_str().expect("text_delta"))
        .collect();
    assert_eq!(text, "let me look");
    let block = json!({ "type": "content_block_start", "index": 1, "content_block":
                        { "type": "tool_use", "id": "toolu_1", "name": "bash", "input": {} } });
    assert_eq!(events[7].1, block);
    let json: String = events[8..12]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["index"], 1);
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().expect("partial_json")
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).expect("arguments JSON"),
        args
    );
    let message_delta = json!({ "type": "message_delta",
        "delta": { "stop_reason": "tool_use", "stop_sequence": null },
        "usage": { "output_tokens": 7 } });
    assert_eq!(events[13].1, message_delta);
}

#[tokio::test]
async fn one_script_serves_both_protocols_in_order() {
    let llm = FakeLlm::start(vec![text("first"), text("second")]).await;
    let chunks = openai_chunks(post_openai(&llm, &openai_request()).await).await;
    assert_eq!(deltas(&chunks)[1], json!({ "content": "first" }));
    let events = anthropic_events(post_anthropic(&llm, &anthropic_request()).await).await;
    assert_eq!(
        events[3].1["delta"],
        json!({ "type": "text_delta", "text": "second" })
    );
    assert_eq!(events[5].1["delta"]["stop_reason"], "end_turn");
    let protocols: Vec<Protocol> = llm.recorded().iter().map(|r| r.protocol).collect();
    assert_eq!(protocols, vec![Protocol::OpenAi, Protocol::Anthropic]);
    llm.verify();
}

#[tokio::test]
async fn http_errors_carry_retry_after_and_the_provider_error_shape() {
    let llm = FakeLlm::start(vec![
        Reply::http_error_with_retry_after(429, 7),
        Reply::http_error(529, "overloaded"),
        text("recovered"),
    ])
    .await;
    let response = post_openai(&llm, &openai_request()).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.expect("JSON error body");
    assert_eq!(body["error"]["type"], "rate_limit_exceeded");

    let response = post_anthropic(&llm, &anthropic_request()).await;
    assert_eq!(response.status(), 529);
    assert!(response.headers().get("retry-after").is_none());
    let body: Value = response.json().await.expect("JSON error body");
    let expected = json!({ "type": "error",
                           "error": { "type": "overloaded_error", "message": "overloaded" } });
    assert_eq!(body, expected);

    openai_chunks(post_openai(&llm, &openai_request()).await).await;
    llm.verify();
}

#[tokio::test]
async fn garbage_is_an_event_stream_with_invalid_json() {
    let llm = FakeLlm::start(vec![Reply::garbage(), Reply::garbage()]).await;
    for response in [
        post_openai(&llm, &openai_request()).await,
        post_anthropic(&llm, &anthropic_request()).await,
    ] {
        let events = sse_events(response).await;
        assert_eq!(events.len(), 1);
        assert!(serde_json::from_str::<Value>(&events[0].1).is_err());
    }
}

#[tokio::test]
async fn stall_sends_headers_then_nothing_until_dropped() {
    let llm = FakeLlm::start(vec![Reply::stall(Duration::from_secs(60))]).await;
    let started = Instant::now();
    let mut response = post_openai(&llm, &openai_request()).await;
    assert!(started.elapsed() < WAIT, "headers arrive at once");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let silent = tokio::time::timeout(Duration::from_millis(300), response.chunk()).await;
    assert!(silent.is_err(), "no body while stalled");
    drop(llm);
    let ended = tokio::time::timeout(WAIT, response.chunk()).await;
    assert!(ended.expect("dropping the fake ends the stream").is_err());
}

#[tokio::test]
async fn slow_text_pauses_between_events() {
    let delay = Duration::from_millis(50);
    let llm = FakeLlm::start(vec![Reply::slow_text("a b c", delay)]).await;
    let started = Instant::now();
    let chunks = openai_chunks(post_openai(&llm, &openai_request()).await).await;
    // role, three words, finish, usage, [DONE]: six pauses.
    assert!(started.elapsed() >= delay * 6, "{:?}", started.elapsed());
    assert_eq!(deltas(&chunks).len(), 5);
}

#[tokio::test]
async fn streams_can_end_in_an_error_event_or_a_dropped_connection() {
    let llm = FakeLlm::start(vec![
        text("partial").then_error("boom"),
        text("partial").then_error("boom"),
        tool_call("call_1", "bash", json!({})).then_disconnect(),
    ])
    .await;
    let mut events = sse_events(post_openai(&llm, &openai_request()).await).await;
    let (_, last) = events.pop().expect("error event");
    let last: Value = serde_json::from_str(&last).expect("JSON error");
    assert_eq!(last["error"]["message"], "boom");

    let mut events = sse_events(post_anthropic(&llm, &anthropic_request()).await).await;
    let (name, data) = events.pop().expect("error event");
    assert_eq!(name.as_deref(), Some("error"));
    let data: Value = serde_json::from_str(&data).expect("JSON error");
    assert_eq!(data["error"]["message"], "boom");

    let response = post_openai(&llm, &openai_request()).await;
    assert!(response.text().await.is_err(), "the body is cut off");
    llm.verify(); // calls of an interrupted reply need no answer
}
