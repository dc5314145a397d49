//! A workstream survives a restart with its full history.

use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::setup;

both_backends! {
    async fn restart_restores_history(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo 42"})),
            text("The answer is 42."),
            text("You asked me to compute it: 42."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "restart", "alice", true);
        console.send("compute the answer").await;
        console.finish().await;
        let before = agent.history("console:restart").await.unwrap();
        assert_eq!(before.len(), 4);
        agent.store().close().await;
        drop(agent);

        // A new process: new agent, same database.
        let agent = harness::agent(s.config.clone()).await;
        assert_eq!(agent.history("console:restart").await.unwrap(), before);
        let console = ConsoleRun::start(agent, "restart", "alice", true);
        console.send("what did I ask?").await;
        let out = console.finish().await;
        assert!(out.contains("You asked me to compute it"), "{out}");
        let requests = s.llm.requests();
        let last = requests[2]["messages"].as_array().unwrap();
        let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "user"]);
        // Every message the first process sent goes again with the note it was sent with.
        let before_restart = requests[1]["messages"].as_array().unwrap();
        assert_eq!(last[..before_restart.len()], before_restart[..]);
        let first = last[1]["content"].as_str().unwrap_or_default();
        assert!(first.starts_with("compute the answer\n\n<context>\nIt is "), "{first}");
        assert_eq!(last[2]["tool_calls"][0]["id"], "c1");
        // The newest message carries the turn's context note (the time, the resume nudge).
        let newest = last[5]["content"].as_str().unwrap_or_default();
        assert!(newest.starts_with("what did I ask?\n\n<context>\nIt is "), "{newest}");
        s.llm.verify();
    }
}
