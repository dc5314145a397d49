//! A request's beginning does not change from one call to the next, so a provider's prompt
//! cache serves it: the system message is the same byte for byte, and every message a call
//! sent is sent again unchanged by the next call, minutes later, with memories and nudges due.

use std::time::Duration;

use pretty_assertions::assert_eq;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::{Value, json};

use super::setup;

fn messages(request: &Value) -> &Vec<Value> {
    request["messages"].as_array().expect("messages")
}

/// Every request repeats the one before it, then adds to it.
fn assert_each_extends_the_last(requests: &[Value]) {
    for (i, pair) in requests.windows(2).enumerate() {
        let (before, after) = (messages(&pair[0]), messages(&pair[1]));
        assert!(
            after.len() > before.len(),
            "request {} does not grow",
            i + 1
        );
        assert_eq!(
            after[..before.len()],
            before[..],
            "request {} rewrote its prefix",
            i + 1
        );
        assert_eq!(
            pair[1]["tools"],
            pair[0]["tools"],
            "request {} changed its tools",
            i + 1
        );
    }
}

both_backends! {
    async fn consecutive_calls_share_their_prefix_byte_for_byte(db) {
        let s = setup(&db, vec![
            tool_call("m1", "memory", json!({"action": "save", "name": "deploy_command",
                "description": "how to deploy the payments service", "content": "make deploy-payments"})),
            text("Saved."),
            text("Use make deploy-payments."),
            text("Staging, then."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        for (minutes, line) in [
            (0, "remember how we deploy the payments service"),
            (7, "how do we deploy the payments service?"),
            (12, "no, that's wrong: deploy the payments service to staging"),
        ] {
            agent.clock().advance(Duration::from_secs(minutes * 60));
            let console = ConsoleRun::start(agent.clone(), "cache", "alice", true);
            console.send(line).await;
            console.finish().await;
        }
        s.llm.verify();
        let requests = s.llm.requests();
        assert_eq!(requests.len(), 4);
        assert_each_extends_the_last(&requests);
        // What changes per call is in the newest message, after the history.
        let system = messages(&requests[0])[0]["content"].as_str().unwrap_or_default();
        assert!(!system.contains("<context>\n") && !system.contains("It is "), "{system}");
        assert!(crate::suite::newest_content(&requests[0]).contains("<context>\nIt is "), "{}", crate::suite::newest_content(&requests[0]));
        // The memory saved in the first turn is shown once, in the note after it was saved.
        assert!(crate::suite::newest_content(&requests[2]).contains("make deploy-payments")
            || crate::suite::newest_content(&requests[1]).contains("make deploy-payments"));
        // The correction's nudge goes with the third turn's message.
        assert!(crate::suite::newest_content(&requests[3]).contains("<nudges>"), "{}", crate::suite::newest_content(&requests[3]));
        // Nothing of a note is stored.
        let history = agent.history("console:cache").await.expect("history");
        assert!(history.iter().all(|m| !m.content.contains("<context>")));
    }
}
