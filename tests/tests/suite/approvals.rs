//! The approval round-trip through `Agent::run_turn` directly: stored requests, timeouts,
//! streamed chunks keyed by call id, the round cap.

use std::time::Duration;

use sandpiper_agent::protocol::{ApprovalItem, Approver, Decision, TurnEvent};
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, RecordingSink, ScriptedApprover};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{contents_with_role, setup};

/// Never answers (a person who walked away).
struct Silent;

#[async_trait::async_trait]
impl Approver for Silent {
    async fn approve(&self, _items: &[ApprovalItem]) -> Vec<Decision> {
        std::future::pending().await
    }
}

both_backends! {
    async fn chunks_stream_before_the_result_keyed_by_call_id(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo a; sleep 0.2; echo b"})),
            text("ok"),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let approver = ScriptedApprover::new(vec![Decision::approve().by("alice")]);
        agent
            .run_turn(TurnRequest {
                workstream: "t:chunks",
                author: Some("alice"),
                text: "go".into(),
                sink: &sink,
                approver: &approver,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        let tool_events: Vec<TurnEvent> = sink
            .events()
            .into_iter()
            .filter(|e| !matches!(e, TurnEvent::TextDelta(_) | TurnEvent::TurnComplete { .. }))
            .collect();
        let TurnEvent::ToolPending(view) = &tool_events[0] else {
            panic!("{tool_events:?}");
        };
        assert!(view.needs_approval && view.call_id == "c1", "{view:?}");
        assert_eq!(
            tool_events[1..3],
            [
                TurnEvent::ToolOutputChunk { call_id: "c1".into(), chunk: "a\n".into() },
                TurnEvent::ToolOutputChunk { call_id: "c1".into(), chunk: "b\n".into() },
            ]
        );
        assert!(matches!(&tool_events[3], TurnEvent::ToolResult { call_id, is_error: false, .. } if call_id == "c1"));
        // The request was stored and decided by alice.
        let asked = approver.asked();
        let id = &asked[0][0].request_id;
        let record = agent.approval(id).await.unwrap().unwrap();
        assert_eq!((record.status.as_str(), record.decided_by.as_deref()), ("approved", Some("alice")));
        assert_eq!(record.requested_by.as_deref(), Some("alice"));
    }

    async fn an_undecided_approval_times_out_as_denied(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "write_file", json!({"path": "x.txt", "content": "hi"})),
            text("ok, not written"),
        ]).await;
        s.config.approval.timeout = Duration::from_millis(300);
        let agent = harness::agent(s.config.clone()).await;
        let outcome = agent
            .run_turn(TurnRequest {
                workstream: "t:timeout",
                author: Some("alice"),
                text: "write it".into(),
                sink: &RecordingSink::default(),
                approver: &Silent,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        assert_eq!(outcome.text, "ok, not written");
        assert!(!s.dir("t:timeout").join("x.txt").exists());
        let tool = contents_with_role(&s.llm.requests()[1], "tool");
        assert_eq!(tool, ["denied: no decision within 300 ms; the call did not run"]);
        s.llm.verify();
    }

    async fn the_round_cap_stops_a_looping_model(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "read_file", json!({"path": "a.txt"})),
            tool_call("c2", "read_file", json!({"path": "a.txt"})),
            tool_call("c3", "read_file", json!({"path": "a.txt"})),
        ]).await;
        std::fs::write(s.dir("t:cap").join("a.txt"), "x\n").unwrap();
        s.config.agent.max_rounds = 2;
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let outcome = agent
            .run_turn(TurnRequest {
                workstream: "t:cap",
                author: Some("alice"),
                text: "loop".into(),
                sink: &sink,
                approver: &Silent,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        assert!(outcome.hit_round_limit);
        assert_eq!(outcome.rounds, 2);
        assert_eq!(s.llm.requests().len(), 2);
        assert!(sink.events().iter().any(|e| matches!(e, TurnEvent::Notice(n) if n.contains("stopped after 2 model calls"))));
    }
}
