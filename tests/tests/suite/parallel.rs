//! Several tool calls in one response run in parallel, at most four at once, and their
//! results reach the model in call order.

use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{ToolCallSpec, text, tool_calls};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::setup;

both_backends! {
    async fn parallel_calls_run_at_most_four_at_once_in_call_order(db) {
        // Each call marks itself running, records how many are running, then sleeps; the
        // last ones finish first so that completion order differs from call order.
        let calls: Vec<ToolCallSpec> = (0..6)
            .map(|i| {
                let pause = 0.9 - 0.1 * f64::from(i);
                ToolCallSpec::new(
                    format!("c{i}"),
                    "bash",
                    json!({"command": format!(
                        "mkdir -p running && touch running/{i} && ls running | wc -l >> counts && sleep {pause:.1}; rm running/{i}; echo done-{i}"
                    )}),
                )
            })
            .collect();
        let s = setup(&db, vec![tool_calls(calls), text("all done")]).await;
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "par", "alice", true);
        console.send("run six jobs").await;
        let out = console.finish().await;
        assert!(out.contains("all done"), "{out}");
        let counts: Vec<usize> = std::fs::read_to_string(s.dir("console:par").join("counts"))
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert_eq!(counts.len(), 6);
        let max = counts.iter().copied().max().unwrap();
        assert!(max <= 4, "at most 4 at once, saw {counts:?}");
        assert!(max >= 2, "calls should overlap, saw {counts:?}");
        let requests = s.llm.requests();
        let tool_ids: Vec<String> = requests[1]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["tool_call_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(tool_ids, ["c0", "c1", "c2", "c3", "c4", "c5"]);
        for (i, m) in requests[1]["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").enumerate() {
            assert!(m["content"].as_str().unwrap().contains(&format!("done-{i}")), "{m}");
        }
        s.llm.verify();
    }
}
