use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;
use crate::store::Store;
use crate::tools::{NoOutput, prepare_json};

async fn ctx(store: &Store, ws: &str, user: Option<&str>) -> ToolContext {
    let mut c = ToolContext::for_test(std::path::Path::new("/tmp"));
    c.store = Some(store.clone());
    c.workstream = ws.into();
    c.user_id = user.map(str::to_owned);
    c
}

async fn run(c: &ToolContext, args: Value) -> Result<String, String> {
    let prepared = prepare_json(MemoryTool, args, c).map_err(|e| e.to_string())?;
    prepared
        .execute(c, &NoOutput)
        .await
        .map(|o| o.text)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn save_search_list_delete() {
    let store = Store::memory().await.unwrap();
    let c = ctx(&store, "w", Some("alice")).await;
    let saved = run(&c, json!({"action": "save", "name": "deploy_cmd", "content": "make deploy", "type": "reference", "description": "how to ship"})).await;
    assert_eq!(saved.unwrap(), "saved memory `deploy_cmd` (global scope)");
    let again = run(
        &c,
        json!({"action": "save", "name": "deploy_cmd", "content": "make ship"}),
    )
    .await;
    assert_eq!(again.unwrap(), "updated memory `deploy_cmd` (global scope)");
    assert_eq!(
        run(&c, json!({"action": "search", "query": "SHIP"}))
            .await
            .unwrap(),
        "- deploy_cmd [reference, global]: how to ship\n    make ship\n"
    );
    assert_eq!(
        run(&c, json!({"action": "list"})).await.unwrap(),
        "- deploy_cmd [reference, global]: how to ship\n"
    );
    assert_eq!(
        run(&c, json!({"action": "delete", "name": "deploy_cmd"}))
            .await
            .unwrap(),
        "deleted memory `deploy_cmd` (global scope)"
    );
    assert_eq!(
        run(&c, json!({"action": "list"})).await.unwrap(),
        "no memories yet"
    );
}

#[tokio::test]
async fn bad_input_gets_clear_errors() {
    let store = Store::memory().await.unwrap();
    let c = ctx(&store, "w", None).await;
    let cases = [
        (
            json!({"action": "save", "name": "Deploy Cmd", "content": "x"}),
            "snake_case",
        ),
        (json!({"action": "save", "name": "ok"}), "needs `content`"),
        (
            json!({"action": "save", "name": "ok", "content": "x", "type": "secret"}),
            "`type` must be",
        ),
        (
            json!({"action": "save", "name": "ok", "content": "x", "scope": "team"}),
            "`scope` must be",
        ),
        (
            json!({"action": "save", "name": "ok", "content": "x", "scope": "user"}),
            "no user",
        ),
        (
            json!({"action": "save", "name": "big", "content": "x".repeat(32 * 1024 + 1)}),
            "at most 32768 bytes",
        ),
        (json!({"action": "forget"}), "unknown action"),
        (json!({"action": "search"}), "needs `query`"),
        (
            json!({"action": "delete", "name": "absent"}),
            "no memory named",
        ),
        (json!({"action": "list", "limit": 0}), "at least 1"),
    ];
    for (args, want) in cases {
        let err = run(&c, args.clone()).await.unwrap_err();
        assert!(err.contains(want), "{args}: {err}");
    }
    let exactly = run(
        &c,
        json!({"action": "save", "name": "max", "content": "x".repeat(32 * 1024)}),
    )
    .await;
    assert!(exactly.is_ok(), "{exactly:?}");
}

#[tokio::test]
async fn another_users_memories_are_invisible_through_every_action() {
    let store = Store::memory().await.unwrap();
    let alice = ctx(&store, "shared", Some("alice")).await;
    let bob = ctx(&store, "shared", Some("bob")).await;
    run(
        &alice,
        json!({"action": "save", "name": "alice_pref", "content": "tabs please", "scope": "user"}),
    )
    .await
    .unwrap();
    assert_eq!(
        run(&bob, json!({"action": "list"})).await.unwrap(),
        "no memories yet"
    );
    assert_eq!(
        run(&bob, json!({"action": "search", "query": "tabs"}))
            .await
            .unwrap(),
        "no memories match \"tabs\""
    );
    assert!(
        run(&bob, json!({"action": "delete", "name": "alice_pref"}))
            .await
            .is_err()
    );
    // Bob saving the same name makes his own memory, not an update of alice's.
    run(
        &bob,
        json!({"action": "save", "name": "alice_pref", "content": "spaces", "scope": "user"}),
    )
    .await
    .unwrap();
    assert_eq!(
        run(&alice, json!({"action": "search", "query": "alice_pref"}))
            .await
            .unwrap(),
        "- alice_pref [project, user]\n    tabs please\n"
    );
}

#[tokio::test]
async fn global_saves_and_deletes_ask_and_show_the_text() {
    let store = Store::memory().await.unwrap();
    let c = ctx(&store, "console:a", Some("u_alice")).await;
    let prepare = |args: Value| prepare_json(MemoryTool, args, &c).unwrap();
    let global = prepare(json!({
        "action": "save", "name": "deploy", "content": "run ./deploy.sh",
        "description": "how to deploy"
    }));
    assert_eq!(
        (global.header.as_str(), global.preview.as_str(), global.ask),
        (
            "memory: save deploy (global)",
            "how to deploy\n\nrun ./deploy.sh",
            true
        )
    );
    let explicit =
        prepare(json!({"action": "save", "name": "x", "content": "y", "scope": "global"}));
    assert!(explicit.ask);
    for scope in ["workstream", "user"] {
        let p = prepare(json!({"action": "save", "name": "x", "content": "y", "scope": scope}));
        assert!(!p.ask, "{scope}");
        assert_eq!(p.preview, "y");
        let p = prepare(json!({"action": "delete", "name": "x", "scope": scope}));
        assert!(!p.ask, "{scope}");
    }
    let p = prepare(json!({"action": "delete", "name": "x", "scope": "global"}));
    assert_eq!(
        (p.header.as_str(), p.ask),
        ("memory: delete x (global)", true)
    );
    let p = prepare(json!({"action": "delete", "name": "x"}));
    assert_eq!(
        (p.header.as_str(), p.ask),
        ("memory: delete x (any scope)", true)
    );
    for args in [
        json!({"action": "list"}),
        json!({"action": "search", "query": "x"}),
    ] {
        assert!(!prepare(args).ask);
    }
}
