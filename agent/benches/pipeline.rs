//! One tool round-trip through the whole turn loop: a user message, an in-process scripted
//! model that calls `read_file` on a tiny file, prepare → approve → execute, and the final
//! answer, with all four messages committed to a SQLite file (WAL, full-text index kept by
//! triggers). Measured on a warm workstream with 10 and with 500 messages of prior history:
//! the cost must not grow with history, since a turn neither re-reads nor re-serializes it.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sandpiper_agent::turn::agent::TurnRequest;

use sandpiper_agent::model::{Message, ScriptedModel, ToolCall};
use sandpiper_agent::protocol::{ApproveAll, NullSink};
use sandpiper_agent::store::Store;
use sandpiper_agent::tools::{ToolContext, ToolRegistry};
use sandpiper_agent::turn::batch::Batch;
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
    let mut group = c.benchmark_group("turn_with_tool_call");
    for prior in [10usize, 500] {
        let dir = tempfile::tempdir().expect("tempdir");
        let agent = rt.block_on(agent_with_history(dir.path(), prior));
        group.bench_function(BenchmarkId::from_parameter(prior), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut measured = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let outcome = agent
                            .run_turn(TurnRequest {
                                workstream: TEMPLATE,
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

                        // Untimed: rewind the workstream to exactly `prior` messages (in the
                        // database and in memory) and checkpoint the WAL, so every measured
                        // turn starts from the same state and pays for nothing but itself.
                        agent
                            .store()
                            .rewind_workstream(TEMPLATE, prior as i64)
                            .await
                            .expect("rewind");
                        agent.forget(TEMPLATE);
                        agent.history(TEMPLATE).await.expect("reload");
                        agent.store().checkpoint().await.expect("checkpoint");
                    }
                    measured
                })
            });
        });
    }
    group.finish();
}

/// Exactly one tool round-trip through the pipeline: the assistant message carrying the call is
/// committed, then prepare → approve → execute → commit the result.
fn pipeline_only(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let registry = ToolRegistry::builtin().expect("registry");
    let mut group = c.benchmark_group("tool_round_trip");
    for prior in [10usize, 500] {
        let dir = tempfile::tempdir().expect("tempdir");
        let agent = rt.block_on(agent_with_history(dir.path(), prior));
        let store = agent.store().clone();
        let mut call = Message::assistant("");
        call.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"tiny.txt"}"#.into(),
        });
        let calls = call.tool_calls.clone();
        let mut tool_ctx = ToolContext::for_test(dir.path());
        tool_ctx.store = Some(store.clone());
        tool_ctx.workstream = TEMPLATE.into();
        group.bench_function(BenchmarkId::from_parameter(prior), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut measured = Duration::ZERO;
                    for _ in 0..iters {
                        let seq = prior as i64;
                        let start = Instant::now();
                        store
                            .append_message(TEMPLATE, seq, &call, None)
                            .await
                            .expect("append");
                        let batch = Batch {
                            registry: &registry,
                            store: &store,
                            tool_ctx: tool_ctx.clone(),
                            workstream: TEMPLATE,
                            first_seq: seq + 1,
                            requested_by: Some("bench"),
                            auto_approve: false,
                            approval_timeout: Duration::from_secs(60),
                            max_parallel: 4,
                            max_output_bytes: 64 * 1024,
                            sink: &NullSink,
                            approver: &ApproveAll,
                            tool_search: None,
                            turn: None,
                            nested: None,
                        };
                        let done = batch.run(&calls).await.expect("batch");
                        measured += start.elapsed();
                        assert_eq!(done.results.len(), 1);
                        black_box(done);
                        store
                            .rewind_workstream(TEMPLATE, seq)
                            .await
                            .expect("rewind");
                        store.checkpoint().await.expect("checkpoint");
                    }
                    measured
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, pipeline_only, round_trip);
criterion_main!(benches);
