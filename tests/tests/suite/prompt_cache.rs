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

both_backends! {
    async fn after_a_restart_the_history_goes_with_the_notes_it_was_first_sent_with(db) {
        let s = setup(&db, vec![
            tool_call("m1", "memory", json!({"action": "save", "name": "deploy_command",
                "description": "how to deploy the payments service", "content": "make deploy-payments"})),
            text("Saved."),
            text("Use make deploy-payments."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "reload", "alice", true);
        console.send("remember how we deploy the payments service").await;
        console.finish().await;
        agent.store().close().await;
        drop(agent);

        // Another process on the same database, minutes later.
        let agent = harness::agent(s.config.clone()).await;
        agent.clock().advance(Duration::from_secs(7 * 60));
        let console = ConsoleRun::start(agent.clone(), "reload", "alice", true);
        console.send("how do we deploy the payments service?").await;
        console.finish().await;
        s.llm.verify();
        let requests = s.llm.requests();
        assert_eq!(requests.len(), 3);
        assert_each_extends_the_last(&requests);
        let first = messages(&requests[2])[1]["content"].as_str().unwrap_or_default();
        assert!(first.contains("\n\n<context>\nIt is "), "{first}");
        // The memory is shown once: a note the first process sent keeps showing it.
        let shown = messages(&requests[2]).iter()
            .filter_map(|m| m["content"].as_str())
            .filter(|c| c.matches("<memories>").count() == 1 && c.contains("- deploy_command"))
            .count();
        assert_eq!(shown, 1, "{:#}", requests[2]);
    }
}

/// The `id_slot` of each request, and whether it asked llama.cpp to keep its prompt.
fn slots_sent(requests: &[Value]) -> Vec<(Option<u64>, Option<bool>)> {
    requests
        .iter()
        .map(|r| (r["id_slot"].as_u64(), r["cache_prompt"].as_bool()))
        .collect()
}

/// Two turns of a workstream (the first hands a job to a sub-agent), then `/compact`.
async fn turns_with_a_subagent_and_a_compaction(s: &crate::suite::Setup) -> Vec<Value> {
    let agent = harness::agent(s.config.clone()).await;
    for (minutes, line) in [(0, "check the build"), (3, "and now?")] {
        agent.clock().advance(Duration::from_secs(minutes * 60));
        let console = ConsoleRun::start(agent.clone(), "slots", "alice", true);
        console.send(line).await;
        console.finish().await;
    }
    let sink = harness::RecordingSink::default();
    let compacted = agent
        .compact_now("console:slots", &sink)
        .await
        .expect("compacts");
    assert!(compacted.is_some(), "compacted");
    s.llm.verify();
    s.llm.requests()
}

fn slots_script() -> Vec<sandpiper_tests::fake_llm::Reply> {
    vec![
        tool_call(
            "t1",
            "task",
            json!({"prompt": "Check the build and say if it passes."}),
        ),
        text("It passes."),
        text("The build passes."),
        text("Still passing."),
        text("Earlier: alice asked about the build; it passes."),
    ]
}

both_backends! {
    async fn on_a_two_slot_llama_server_a_workstream_keeps_its_slot_and_side_calls_use_another(db) {
        let s = setup(&db, slots_script()).await;
        s.llm.set_slots(2);
        let requests = turns_with_a_subagent_and_a_compaction(&s).await;
        assert_eq!(requests.len(), 5);
        // Which request is which: the sub-agent's carries its own key, the summary none.
        let keys: Vec<Option<&str>> = requests.iter().map(|r| r["prompt_cache_key"].as_str()).collect();
        assert_eq!(keys, [
            Some("console:slots"),
            Some("console:slots/task:t1"),
            Some("console:slots"),
            Some("console:slots"),
            None,
        ]);
        let sent = slots_sent(&requests);
        let home = sent[0].0.expect("the conversation names its slot");
        let other = 1 - home;
        assert_eq!(sent, [
            (Some(home), Some(true)),
            (Some(other), Some(true)),
            (Some(home), Some(true)),
            (Some(home), Some(true)),
            (Some(other), Some(true)),
        ]);
    }
}

both_backends! {
    async fn a_server_without_props_is_sent_no_slot(db) {
        let s = setup(&db, slots_script()).await;
        let requests = turns_with_a_subagent_and_a_compaction(&s).await;
        assert_eq!(slots_sent(&requests), vec![(None, None); 5]);
    }
}
