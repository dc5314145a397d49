//! The Anthropic Messages provider end to end (the other suites use the OpenAI one).

use sandpiper_agent::config::{Provider, Secret};
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::setup;

both_backends! {
    async fn anthropic_tool_use_round_trip(db) {
        let mut s = setup(&db, vec![
            tool_call("toolu_1", "bash", json!({"command": "echo from-claude"})),
            text("Claude ran it."),
        ]).await;
        s.config.model.provider = Provider::Anthropic;
        s.config.model.base_url = Some(s.llm.anthropic_base_url());
        s.config.model.api_key = Some(Secret::new("test-key"));
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "claude", "alice", true);
        console.send("run it").await;
        let out = console.finish().await;
        assert!(out.contains("  │ from-claude"), "{out}");
        assert!(out.contains("Claude ran it."), "{out}");
        s.llm.verify();
        let requests = s.llm.requests();
        assert_eq!(requests.len(), 2);
        let last = requests[1]["messages"].as_array().unwrap();
        assert_eq!(last[1]["content"][0]["type"], "tool_use");
        assert_eq!(last[2]["content"][0]["type"], "tool_result");
        assert_eq!(last[2]["content"][0]["tool_use_id"], "toolu_1");
        let headers = s.llm.request_headers();
        assert_eq!(headers[0].get("x-api-key").map(String::as_str), Some("test-key"));
    }

    async fn openai_sends_the_key_only_when_set(db) {
        let mut s = setup(&db, vec![text("no key"), text("with key")]).await;
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "k1", "alice", true);
        console.send("hi").await;
        console.finish().await;
        s.config.model.api_key = Some(Secret::new("sk-test"));
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "k2", "alice", true);
        console.send("hi").await;
        console.finish().await;
        let headers = s.llm.request_headers();
        assert_eq!(headers[0].get("authorization"), None);
        assert_eq!(headers[1].get("authorization").map(String::as_str), Some("Bearer sk-test"));
    }
}
