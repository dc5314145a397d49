//! One tool round-trip through the whole turn loop: a user message, an in-process scripted
//! model that calls `read_file` on a tiny file, prepare → approve → execute, and the final
//! answer, with all four messages committed to a SQLite file (WAL). Measured with 10 and with
//! 500 messages of prior history: the cost must not grow with history, since a turn neither
//! re-reads nor re-serializes it.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sandpiper_agent::agent::TurnRequest;
use sandpiper_agent::model::{Message, ScriptedModel};
use sandpiper_agent::protocol::{ApproveAll, NullSink};
use sandpiper_agent::store::Store;
use sandpiper_agent::{Agent, Config};
use tokio_util::sync::CancellationToken;

const TEMPLATE: &str = "bench:template";

async fn agent_with_history(dir: &std::path::Path, prior: usize) -> Agent {
    std::fs::write(dir.join("tiny.txt"), "hello\n").expect("write tiny file");
    let store = Store::connect(&format!("sqlite://{}", dir.join("bench.db").display()), 4)
        .await
        .expect("store");
    store
        .ensure_workstream(TEMPLATE, Some("bench"))
        .await
        .expect("workstream");
    for i in 0..prior {
        let m = if i % 2 == 0 {
            Message::user(format!("question {i}: {}", "lorem ipsum ".repeat(20)))
        } else {
            Message::assistant(format!("answer {i}: {}", "dolor sit amet ".repeat(40)))
        };
        store
            .append_message(TEMPLATE, i as i64, &m, None)
            .await
            .expect("append");
    }
    let model = ScriptedModel::new(vec![
        ScriptedModel::tool_call("call_1", "read_file", r#"{"path":"tiny.txt"}"#),
        ScriptedModel::text("It says hello."),
    ])
    .cycling();
    let mut config = Config::for_test();
    config.tools.workdir = Some(dir.to_owned());
    config.agent.workstream_cache = 100_000;
    Agent::new(config, Arc::new(model), store).expect("agent")
}

fn round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("tool_round_trip");
    for prior in [10usize, 500] {
        let dir = tempfile::tempdir().expect("tempdir");
        let agent = rt.block_on(agent_with_history(dir.path(), prior));
        let counter = AtomicU64::new(0);
        group.bench_function(BenchmarkId::from_parameter(prior), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut measured = Duration::ZERO;
                    for _ in 0..iters {
                        // Untimed: a fresh workstream with exactly `prior` messages, loaded in
                        // memory, and the WAL that the copy produced checkpointed, so the
                        // measured turn pays for nothing but itself. Each one is deleted
                        // afterwards so the database stays the same size throughout.
                        let key = format!("bench:{}", counter.fetch_add(1, Ordering::Relaxed));
                        agent
                            .store()
                            .fork_workstream(TEMPLATE, &key)
                            .await
                            .expect("fork");
                        agent.history(&key).await.expect("load");
                        agent.store().checkpoint().await.expect("checkpoint");

                        let start = Instant::now();
                        let outcome = agent
                            .run_turn(TurnRequest {
                                workstream: &key,
                                author: Some("bench"),
                                text: "what does tiny.txt say?".into(),
                                sink: &NullSink,
                                approver: &ApproveAll,
                                cancel: CancellationToken::new(),
                            })
                            .await
                            .expect("turn");
                        measured += start.elapsed();

                        assert_eq!(outcome.tool_calls, 1);
                        black_box(outcome);
                        agent.forget(&key);
                        agent.store().delete_workstream(&key).await.expect("delete");
                    }
                    measured
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
