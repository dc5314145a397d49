use super::*;
use crate::protocol::ApprovalStatus;
use crate::protocol::{ApprovalItem, NullSink};
use std::sync::Mutex;

/// Denies everything and remembers what it was asked.
#[derive(Default)]
struct DenyAll(Mutex<Vec<ApprovalItem>>);

#[async_trait::async_trait]
impl Approver for DenyAll {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        self.0.lock().unwrap().extend_from_slice(items);
        items
            .iter()
            .map(|_| Decision::deny(None).by("alice"))
            .collect()
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[tokio::test]
async fn a_sub_agents_batch_asks_in_the_parent_thread_and_calls_only_its_own_tools() {
    let store = Store::memory().await.unwrap();
    store.ensure_workstream("p", Some("alice")).await.unwrap();
    store
        .ensure_workstream("p/task:t1", Some("alice"))
        .await
        .unwrap();
    let registry = ToolRegistry::builtin().unwrap();
    let approver = DenyAll::default();
    let tools: BTreeSet<String> = ["bash".to_owned()].into();
    let batch = Batch {
        registry: &registry,
        store: &store,
        tool_ctx: ToolContext::for_test(std::path::Path::new("/tmp")),
        workstream: "p/task:t1",
        first_seq: 0,
        requested_by: Some("alice"),
        auto_approve: false,
        approval_timeout: Duration::from_secs(10),
        max_parallel: 2,
        max_output_bytes: 4096,
        sink: &NullSink,
        approver: &approver,
        tool_search: None,
        turn: None,
        nested: Some(Nested {
            thread: "p",
            label: "task: check",
            parent_call: "t1",
            tools: &tools,
        }),
    };
    let calls = [
        call("s1", "bash", r#"{"command": "echo hi"}"#),
        call("s2", "plan", r#"{"prompt": "recurse"}"#),
    ];
    let done = batch.run(&calls).await.unwrap();
    let asked = approver.0.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].header, "task: check › bash: echo hi");
    assert_eq!(asked[0].call_id, "t1/s1");
    let stored = store
        .approval_for_call("p", "t1/s1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, ApprovalStatus::Denied);
    assert_eq!(
        done.results[0].content,
        "denied by alice; the call did not run"
    );
    assert_eq!(
        done.results[1].content,
        "error: unknown tool `plan`; available tools: bash"
    );
    // The results are the sub-agent's history, not the thread's.
    assert_eq!(store.load_messages("p/task:t1").await.unwrap().len(), 2);
    assert!(store.load_messages("p").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_tool_that_acts_in_the_turn_does_not_run_without_one() {
    let store = Store::memory().await.unwrap();
    store.ensure_workstream("w", None).await.unwrap();
    let registry = ToolRegistry::builtin().unwrap();
    let batch = Batch {
        registry: &registry,
        store: &store,
        tool_ctx: ToolContext::for_test(std::path::Path::new("/tmp")),
        workstream: "w",
        first_seq: 0,
        requested_by: None,
        auto_approve: true,
        approval_timeout: Duration::from_secs(10),
        max_parallel: 1,
        max_output_bytes: 4096,
        sink: &NullSink,
        approver: &DenyAll::default(),
        tool_search: None,
        turn: None,
        nested: None,
    };
    let done = batch
        .run(&[call("t1", "task", r#"{"prompt": "go"}"#)])
        .await
        .unwrap();
    assert_eq!(
        done.results[0].content,
        "error: task is only available to the top-level conversation, not to sub-agents"
    );
}

#[tokio::test]
async fn a_store_gone_during_a_tool_ends_the_turn_instead_of_telling_the_model() {
    let store = Store::memory().await.unwrap();
    store.ensure_workstream("w", Some("alice")).await.unwrap();
    // The memory tool's store is gone (a closed pool fails every query at once).
    let gone = Store::memory().await.unwrap();
    gone.close().await;
    let mut tool_ctx = ToolContext::for_test(std::path::Path::new("/tmp"));
    tool_ctx.store = Some(gone);
    let registry = ToolRegistry::builtin().unwrap();
    let batch = Batch {
        registry: &registry,
        store: &store,
        tool_ctx,
        workstream: "w",
        first_seq: 0,
        requested_by: None,
        auto_approve: true,
        approval_timeout: Duration::from_secs(10),
        max_parallel: 1,
        max_output_bytes: 4096,
        sink: &NullSink,
        approver: &DenyAll::default(),
        tool_search: None,
        turn: None,
        nested: None,
    };
    let ended = batch
        .run(&[call("m1", "memory", r#"{"action": "list"}"#)])
        .await;
    match ended {
        Err(StoreError::DuringTool(why)) => assert!(why.starts_with("memory: "), "{why}"),
        Err(other) => panic!("another error: {other}"),
        Ok(done) => panic!("the model was told: {:?}", done.results),
    }
    assert!(
        store.load_messages("w").await.unwrap().is_empty(),
        "no tool result was stored for the model"
    );
}

#[test]
fn denial_texts() {
    assert_eq!(
        denial_text(&Decision::deny(Some("use the staging db".into())).by("alice")),
        "denied by alice: use the staging db"
    );
    assert_eq!(
        denial_text(&Decision::deny(Some("  ".into()))),
        "denied by the user; the call did not run"
    );
    assert_eq!(human(Duration::from_secs(1800)), "30 min");
}
