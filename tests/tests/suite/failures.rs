//! Bad input loses nothing: malformed arguments, unknown tools, a model that sends garbage or
//! errors, edits of files that were not read.

use sandpiper_agent::model::Role;
use sandpiper_channels::console::SessionReport;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{Reply, ToolCallSpec, text, tool_call, tool_calls};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::{WAIT, contents_with_role, setup};

both_backends! {
    async fn malformed_arguments_and_unknown_tools_become_errors_and_the_turn_goes_on(db) {
        let s = setup(&db, vec![
            tool_calls(vec![
                ToolCallSpec::raw("c1", "read_file", "{\"path\": nope nope"),
                ToolCallSpec::new("c2", "frobnicate", json!({"x": 1})),
                ToolCallSpec::new("c3", "read_file", json!({"offset": 2})),
            ]),
            text("Sorry, let me fix that."),
        ]).await;
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "bad", "alice", false);
        console.send("read something").await;
        let out = console.finish().await;
        assert!(out.contains("Sorry, let me fix that."), "{out}");
        assert!(!out.contains("approve"), "errors are not offered for approval: {out}");
        let tool = contents_with_role(&s.llm.requests()[1], "tool");
        assert_eq!(tool.len(), 3);
        assert!(tool[0].starts_with("error: read_file: arguments are not valid JSON"), "{tool:?}");
        assert!(tool[1].starts_with("error: unknown tool `frobnicate`; available tools: bash, read_file"), "{tool:?}");
        assert_eq!(tool[2], "error: read_file: missing required parameter `path`");
        s.llm.verify();
    }

    async fn a_model_that_sends_garbage_gives_a_clear_error_and_loses_nothing(db) {
        let s = setup(&db, vec![Reply::garbage(), text("recovered")]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "garbage", "alice", false);
        console.send("first question").await;
        console.wait_for("error: the model sent a malformed response", WAIT).await;
        console.send("second question").await;
        let (out, report) = console.finish_with_report().await;
        assert!(out.contains("recovered"), "{out}");
        // `sandpiper chat` turns this into its exit code.
        assert_eq!(report, SessionReport { turns: 2, failed: 1 });
        let history = agent.history("console:garbage").await.unwrap();
        let texts: Vec<(Role, &str)> = history.iter().map(|m| (m.role, m.content.as_str())).collect();
        assert_eq!(
            texts,
            [
                (Role::User, "first question"),
                (Role::User, "second question"),
                (Role::Assistant, "recovered"),
            ]
        );
    }

    async fn a_failing_provider_is_retried_then_reported(db) {
        let s = setup(&db, vec![
            Reply::http_error_with_retry_after(429, 0),
            text("after retry"),
            Reply::http_error(500, "boom"),
            Reply::http_error(500, "boom again"),
        ]).await;
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "retry", "alice", false);
        console.send("one").await;
        console.wait_for("after retry", WAIT).await;
        console.send("two").await;
        let (out, report) = console.finish_with_report().await;
        assert!(out.contains("error: the model provider answered HTTP 500"), "{out}");
        assert_eq!(report, SessionReport { turns: 2, failed: 1 });
        assert_eq!(s.llm.requests().len(), 4);
    }

    async fn an_oversized_message_is_refused_clearly_and_nothing_is_stored(db) {
        let mut s = setup(&db, vec![text("short one answered")]).await;
        s.config.agent.max_message_bytes = 1024;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "big", "alice", false);
        console.send(&"x".repeat(5000)).await;
        console.wait_for("error: your message is 5000 bytes; the limit is 1024 bytes", WAIT).await;
        console.send("short one").await;
        let (out, report) = console.finish_with_report().await;
        assert!(out.contains("short one answered"), "{out}");
        assert_eq!(report, SessionReport { turns: 2, failed: 1 });
        let history = agent.history("console:big").await.unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[0].content, "short one");
        assert_eq!(s.llm.requests().len(), 1);
    }

    async fn edit_file_needs_a_prior_read_and_then_edits(db) {
        let s = setup(&db, vec![
            tool_call("c1", "edit_file", json!({"path": "notes.txt", "old_string": "beta", "new_string": "BETA"})),
            tool_call("c2", "read_file", json!({"path": "notes.txt"})),
            tool_call("c3", "edit_file", json!({"path": "notes.txt", "old_string": "beta", "new_string": "BETA"})),
            text("edited"),
        ]).await;
        std::fs::write(s.dir("console:edit").join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "edit", "alice", true);
        console.send("capitalise beta").await;
        let out = console.finish().await;
        assert!(out.contains("edited"), "{out}");
        let requests = s.llm.requests();
        let first = contents_with_role(&requests[1], "tool");
        assert!(first[0].contains("read_file"), "refused before a read: {first:?}");
        let read = contents_with_role(&requests[2], "tool");
        assert!(read[1].contains("     2\tbeta"), "{read:?}");
        assert_eq!(std::fs::read_to_string(s.dir("console:edit").join("notes.txt")).unwrap(), "alpha\nBETA\ngamma\n");
        s.llm.verify();
    }
}
