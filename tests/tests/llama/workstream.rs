//! A long workstream against a real llama.cpp server with a small window (issue 23): the
//! window is read from the server's `/props`, thirty messages each get an answer, the
//! conversation is compacted and says so, answers cut at the output limit say so, and a
//! history holding a call with cut-off arguments is still accepted. The model's words are
//! nonsense; what is checked is sandpiper's behaviour on the real server's stream and limits.

use sandpiper_agent::model::{Message, ToolCall};
use sandpiper_agent::protocol::{ApproveAll, TurnEvent};
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_agent::turn::context::WindowSource;
use sandpiper_tests::db::TestDb;
use sandpiper_tests::harness::{self, RecordingSink};
use sandpiper_tests::llama_server::LlamaServer;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_messages_on_a_real_small_window_each_get_an_answer() {
    let Some(server) = LlamaServer::shared() else {
        return;
    };
    let db = TestDb::sqlite();
    let work = tempfile::tempdir().expect("work dir");
    let config = server.agent_config(&db, work.path(), 12);
    let agent = harness::agent(config).await;
    let key = "console:llama-long";
    // As an older sandpiper left it: a call whose arguments were cut off, sent back verbatim
    // it makes llama.cpp refuse every later request (HTTP 500).
    let store = agent.store();
    store
        .ensure_workstream(key, Some("alice"))
        .await
        .expect("workstream");
    let mut call = Message::assistant("");
    call.tool_calls.push(ToolCall {
        id: "old".into(),
        name: "bash".into(),
        arguments: r#"{"command": "ls"#.into(),
    });
    for (seq, m) in [
        Message::user("list the files"),
        call,
        Message::tool_result("old", "bash", "a.txt"),
    ]
    .iter()
    .enumerate()
    {
        store
            .append_message(key, seq as i64, m, None)
            .await
            .expect("append");
    }
    let mut notices = Vec::new();
    for i in 0..30 {
        let sink = RecordingSink::default();
        let message = format!(
            "Message {i}. The payments service build fails in the integration stage again; the log says the database migration timed out after 30 seconds. What should we check next?"
        );
        let outcome = agent
            .run_turn(TurnRequest {
                workstream: key,
                author: Some("alice"),
                text: message,
                sink: &sink,
                approver: &ApproveAll,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("message {i} failed: {e}"));
        let events = sink.events();
        assert!(
            events.iter().any(|e| matches!(e, TurnEvent::TextDelta(_)))
                || !outcome.text.is_empty()
                || events
                    .iter()
                    .any(|e| matches!(e, TurnEvent::Notice(n) if n.contains("cut off"))),
            "message {i} got an answer: {events:?}"
        );
        notices.extend(events.into_iter().filter_map(|e| match e {
            TurnEvent::Notice(n) => Some(n),
            _ => None,
        }));
    }
    let window = agent.context_window().await;
    assert_eq!(
        (window.tokens, window.source),
        (2048, WindowSource::Server("/props n_ctx")),
        "read from the server, and never lowered by a refusal"
    );
    assert!(
        notices
            .iter()
            .any(|n| n.contains("Compacted this conversation")),
        "{notices:?}"
    );
    assert!(
        notices
            .iter()
            .any(|n| n.contains("cut off at the output limit of 12 tokens")),
        "{notices:?}"
    );
    let checkpoint = store.latest_checkpoint(key).await.expect("store");
    assert!(checkpoint.is_some(), "the compaction was stored");
}
