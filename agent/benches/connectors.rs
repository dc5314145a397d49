//! What connector policy costs per MCP call: the dispatcher resolves it fresh from the store
//! before every call (issue 14), so this is the price of "a change applies to the next call".
//!
//! * `connector_policy/unset`: a thread whose tiers say nothing (the common case).
//! * `connector_policy/thread_and_channel`: a thread and its channel both declared, intersected
//!   with a config project listing the channel.
//!
//! On a SQLite file (WAL), as `sandpiper serve` runs by default.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use sandpiper_agent::config::ProjectConfig;
use sandpiper_agent::connectors::ConnectorScope;
use sandpiper_agent::store::Store;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let store = rt.block_on(async {
        let store = Store::connect(&url, 4).await.expect("store");
        for i in 0..1_000 {
            let key = format!("slack:T1:C{}:1.{i}", i % 20);
            store
                .ensure_workstream(&key, Some("alice"))
                .await
                .expect("workstream");
        }
        let key = "slack:T1:C7:1.7";
        store
            .set_workstream_connectors(key, Some(&["github".into(), "jira".into()]))
            .await
            .expect("thread tier");
        store
            .set_channel_connectors("slack:T1:C7", Some(&["github".into()]), Some("admin"))
            .await
            .expect("channel tier");
        store
    });
    let scope = ConnectorScope {
        task: None,
        projects: Arc::new(vec![ProjectConfig {
            name: "infra".into(),
            channels: vec!["slack:T1:C7".into()],
            connectors: Some(vec!["github".into(), "pagerduty".into()]),
        }]),
    };
    let mut group = c.benchmark_group("connector_policy");
    group.bench_function("unset", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(scope.effective(&store, "slack:T1:C3:1.3").await) });
    });
    group.bench_function("thread_and_channel", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(scope.effective(&store, "slack:T1:C7:1.7").await) });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
