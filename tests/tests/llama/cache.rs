//! The prompt cache on a real llama.cpp server (one slot, 16k window): five messages in one
//! thread, a minute apart by the agent's clock, with a long operator prompt. After the first
//! turn the server reuses what it evaluated before, because each request repeats the one
//! before it byte for byte and only adds to it (the figures go in `docs/benchmarks.md`).
//! With two slots, two threads taking turns each keep their own slot (`id_slot`), so neither
//! evicts the other's prompt.

use std::time::Duration;

use sandpiper_agent::model::Usage;
use sandpiper_agent::protocol::ApproveAll;
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_tests::db::TestDb;
use sandpiper_tests::harness::{self, RecordingSink};
use sandpiper_tests::llama_server::{LlamaOptions, LlamaServer};
use tokio_util::sync::CancellationToken;

/// About 2,500 tokens of standing guidance, as an operator's `system_prompt_extra` might hold.
fn guidance() -> String {
    (0..60)
        .map(|i| {
            format!(
                "Rule {i}: before changing service {i}, read its runbook, run its checks, and \
                 say in the thread which environment you touched and what you verified.\n"
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_turns_are_served_from_the_servers_cache() {
    let options = LlamaOptions {
        n_ctx: 16384,
        parallel: 1,
        n_predict: 16,
        threads: 1,
    };
    let Some(server) = LlamaServer::start(options) else {
        return;
    };
    let db = TestDb::sqlite();
    let work = tempfile::tempdir().expect("work dir");
    let mut config = server.agent_config(&db, work.path(), 16);
    config.agent.system_prompt_extra = Some(guidance());
    let agent = harness::agent(config).await;
    let mut turns = Vec::new();
    for i in 0..5 {
        agent.clock().advance(Duration::from_secs(60));
        turns.push(turn(&agent, "console:llama-cache", i).await);
    }
    for (i, usage) in turns.iter().enumerate().skip(1) {
        assert!(
            usage.input_tokens > 2000,
            "turn {} sent its whole prompt: {usage:?}",
            i + 1
        );
        assert!(
            usage.cached_tokens * 10 >= usage.input_tokens * 9,
            "turn {}: at least 90% of the prompt from the cache: {usage:?}",
            i + 1
        );
    }
}

/// One turn of `workstream`: its usage, printed.
async fn turn(agent: &sandpiper_agent::Agent, workstream: &str, i: usize) -> Usage {
    let sink = RecordingSink::default();
    let outcome = agent
        .run_turn(TurnRequest {
            workstream,
            author: Some("alice"),
            text: format!("Message {i}: the payments build failed again. What next?"),
            sink: &sink,
            approver: &ApproveAll,
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("{workstream} message {i} failed: {e}"));
    let usage = outcome.usage;
    eprintln!(
        "{workstream} turn {}: prompt {} tokens, {} from the cache, {} evaluated",
        i + 1,
        usage.input_tokens,
        usage.cached_tokens,
        usage.input_tokens.saturating_sub(usage.cached_tokens)
    );
    usage
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_taking_turns_on_two_slots_do_not_evict_each_other() {
    let options = LlamaOptions {
        n_ctx: 16384,
        parallel: 2,
        n_predict: 16,
        threads: 1,
    };
    let Some(server) = LlamaServer::start(options) else {
        return;
    };
    let db = TestDb::sqlite();
    let work = tempfile::tempdir().expect("work dir");
    let mut config = server.agent_config(&db, work.path(), 16);
    config.agent.system_prompt_extra = Some(guidance());
    let agent = harness::agent(config).await;
    // These two keys have different home slots of two (0 and 1: FNV-1a of the key, mod 2); one
    // slot shared by both would be evicted on every turn.
    let threads = ["console:slot-a", "console:slot-b"];
    let mut turns = Vec::new();
    for i in 0..4 {
        for workstream in threads {
            agent.clock().advance(Duration::from_secs(60));
            turns.push((workstream, i, turn(&agent, workstream, i).await));
        }
    }
    for (workstream, i, usage) in turns.iter().filter(|(_, i, _)| *i > 0) {
        assert!(
            usage.input_tokens > 2000,
            "{workstream} turn {} sent its whole prompt: {usage:?}",
            i + 1
        );
        assert!(
            usage.cached_tokens * 10 >= usage.input_tokens * 9,
            "{workstream} turn {}: at least 90% of the prompt from the cache: {usage:?}",
            i + 1
        );
    }
}
