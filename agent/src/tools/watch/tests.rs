//! Tests of the `watch` tool's checks: what asks, and what is refused before anyone is asked.

use serde_json::json;

use super::*;
use crate::tools::{asks, prepare_json};

fn prepare(args: serde_json::Value) -> Result<Prepared, ToolError> {
    let dir = std::env::temp_dir();
    let ctx = ToolContext::for_test(&dir);
    prepare_json(WatchTool, args, &ctx).map(|ready| ready.prepared)
}

fn refusal(args: serde_json::Value) -> String {
    match prepare(args) {
        Err(ToolError::Model(text)) => text,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn create_asks_and_list_does_not() {
    let create = prepare(json!({
        "action": "create", "name": "pr-review", "command": "gh pr view 7 --json state",
        "poll_every": "1m", "stop_on": "data[\"state\"] == \"MERGED\""
    }))
    .expect("valid");
    assert!(asks("watch", &create));
    assert_eq!(
        create.header,
        "watch: pr-review every 1m until data[\"state\"] == \"MERGED\", at most 100 polls: gh pr view 7 --json state"
    );
    assert!(create.preview.contains("gh pr view 7 --json state"));
    let list = prepare(json!({"action": "list"})).expect("valid");
    assert!(!asks("watch", &list));
    // Nobody known behind the call (a watch's turn, a notification): cancel asks.
    let cancel = prepare(json!({"action": "cancel", "name": "pr-review"})).expect("valid");
    assert!(asks("watch", &cancel));
}

/// The rule of `/watch cancel` (the owner, or someone allowed to decide): the owner's own
/// request cancels at once; an approver's, a participant's or a stranger's asks, so the card
/// goes to the owner or an approver.
#[test]
fn cancel_asks_unless_the_thread_owner_asked() {
    let dir = std::env::temp_dir();
    let args = json!({"action": "cancel", "name": "pr-review"});
    for (who, asked) in [
        ("alice", false),
        ("oncall-approver", true),
        ("participant-bob", true),
        ("stranger-mallory", true),
    ] {
        let mut ctx = ToolContext::for_test(&dir);
        ctx.thread_owner = Some("alice".into());
        ctx.user_id = Some(who.into());
        let prepared = prepare_json(WatchTool, args.clone(), &ctx)
            .expect("valid")
            .prepared;
        assert_eq!(asks("watch", &prepared), asked, "{who}");
    }
    // A thread with no known owner: nobody matches it.
    let mut ctx = ToolContext::for_test(&dir);
    ctx.user_id = Some("alice".into());
    let prepared = prepare_json(WatchTool, args, &ctx).expect("valid").prepared;
    assert!(asks("watch", &prepared));
}

#[test]
fn bad_watches_are_refused_at_create_time() {
    let base = |extra: serde_json::Value| {
        let mut args = json!({"action": "create", "name": "ci", "command": "true"});
        if let (Some(a), Some(e)) = (args.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        args
    };
    assert!(refusal(json!({"action": "create", "name": "ci"})).contains("needs `command`"));
    assert!(refusal(json!({"action": "create", "command": "true"})).contains("needs `name`"));
    assert!(refusal(base(json!({"poll_every": "5s"}))).contains("between 10s and 24h"));
    assert!(refusal(base(json!({"poll_every": "2d"}))).contains("such as 30s"));
    assert!(refusal(base(json!({"max_polls": -1}))).contains("`max_polls`"));
    let escape = refusal(base(json!({"stop_on": "output.__class__"})));
    assert!(escape.starts_with("stop_on, line 1 column"), "{escape}");
    assert!(refusal(base(json!({"command": "rm -rf /"}))).contains("refused"));
    assert!(refusal(json!({"action": "cancel"})).contains("needs `name`"));
    assert!(refusal(json!({"action": "pause"})).contains("create, list or cancel"));
}
