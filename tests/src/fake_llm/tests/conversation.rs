//! Bookkeeping across a conversation: verify(), recording, the script, shutdown.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

#[tokio::test]
async fn verify_fails_when_a_tool_call_is_never_answered() {
    let llm = FakeLlm::start(vec![tool_call("call_1", "bash", json!({})), text("ok")]).await;
    // A result for call_1 *before* the call was made does not count.
    let mut early = openai_request();
    early["messages"] = json!([{ "role": "tool", "tool_call_id": "call_1", "content": "x" }]);
    drain(post_openai(&llm, &early).await).await;
    drain(post_openai(&llm, &openai_request()).await).await;
    let message = verify_failure(&llm);
    let expected = "tool call call_1 (bash) sent in reply to request #0 never got a tool result";
    assert!(message.contains(expected), "{message}");
}

#[tokio::test]
async fn verify_passes_when_tool_calls_are_answered_in_either_protocol() {
    let script = vec![tool_call("call_1", "bash", json!({})), text("ok")];
    let llm = FakeLlm::start(script.clone()).await;
    drain(post_openai(&llm, &openai_request()).await).await;
    let mut answer = openai_request();
    answer["messages"] = json!([
        { "role": "user", "content": "hi" },
        { "role": "assistant", "content": null, "tool_calls": [{ "id": "call_1", "type": "function",
          "function": { "name": "bash", "arguments": "{}" } }] },
        { "role": "tool", "tool_call_id": "call_1", "content": "output" },
    ]);
    drain(post_openai(&llm, &answer).await).await;
    llm.verify();

    let llm = FakeLlm::start(script).await;
    drain(post_anthropic(&llm, &anthropic_request()).await).await;
    let mut answer = anthropic_request();
    answer["messages"] = json!([
        { "role": "user", "content": "hi" },
        { "role": "assistant", "content": [{ "type": "tool_use", "id": "call_1", "name": "bash",
          "input": {} }] },
        { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "call_1",
          "content": "output" }] },
    ]);
    drain(post_anthropic(&llm, &answer).await).await;
    llm.verify();
}

#[tokio::test]
async fn an_empty_script_answers_500_and_fails_verify() {
    let llm = FakeLlm::start(vec![]).await;
    let response = post_openai(&llm, &openai_request()).await;
    assert_eq!(response.status(), 500);
    let body: Value = response.json().await.expect("JSON error body");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.contains("fake LLM script exhausted"), "{body}");
    assert!(verify_failure(&llm).contains("script was empty"));
}

#[tokio::test]
async fn records_bodies_and_headers_and_accepts_replies_at_run_time() {
    let llm = FakeLlm::start(vec![]).await;
    llm.push(text("late"));
    assert_eq!(llm.remaining(), 1);
    let base = llm.anthropic_base_url();
    let request = tokio::spawn(async move {
        let url = format!("{base}/v1/messages");
        let request = client().post(url).header("x-api-key", "sk-ant");
        let response = request
            .json(&anthropic_request())
            .send()
            .await
            .expect("POST");
        response.text().await.expect("body")
    });
    assert_eq!(
        llm.wait_for_requests(1, WAIT).await,
        vec![anthropic_request()]
    );
    request.await.expect("request task");
    let headers = llm.request_headers();
    assert_eq!(headers[0]["x-api-key"], "sk-ant");
    assert_eq!(headers[0]["content-type"], "application/json");
    post_openai(&llm, &openai_request()).await;
    assert_eq!(llm.request_headers()[1]["authorization"], "Bearer sk-test");
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
#[should_panic(expected = "expected 1 requests within")]
async fn wait_for_requests_panics_on_timeout() {
    let llm = FakeLlm::start(vec![]).await;
    llm.wait_for_requests(1, Duration::from_millis(50)).await;
}

#[tokio::test]
async fn requests_not_asking_for_a_stream_or_to_unknown_paths_fail_verify() {
    let llm = FakeLlm::start(vec![text("ok")]).await;
    let mut request = openai_request();
    request["stream"] = json!(false);
    drain(post_openai(&llm, &request).await).await;
    let url = format!("{}/v1/completions", llm.anthropic_base_url());
    let response = client().post(url).send().await.expect("POST");
    assert_eq!(response.status(), 404);
    let message = verify_failure(&llm);
    assert!(message.contains("\"stream\": true"), "{message}");
    assert!(
        message.contains("no endpoint at /v1/completions"),
        "{message}"
    );
}

#[tokio::test]
async fn dropping_the_fake_stops_the_server() {
    let llm = FakeLlm::start(vec![]).await;
    let addr = llm.addr();
    drop(llm);
    let deadline = Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting after drop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
