use pretty_assertions::assert_eq;

use super::*;

fn vis(ws: &str, user: Option<&str>) -> Visibility {
    Visibility {
        workstream: ws.into(),
        user_id: user.map(str::to_owned),
    }
}

fn new<'a>(name: &'a str, scope: Scope, content: &'a str) -> NewMemory<'a> {
    NewMemory {
        name,
        scope,
        kind: None,
        description: None,
        content,
        created_by: None,
    }
}

fn names(ms: &[Memory]) -> Vec<&str> {
    ms.iter().map(|m| m.name.as_str()).collect()
}

fn sorted_names(ms: Vec<Memory>) -> Vec<String> {
    let mut n: Vec<String> = ms.into_iter().map(|m| m.name).collect();
    n.sort();
    n
}

#[tokio::test]
async fn saving_again_updates_and_keeps_type_and_description() {
    let store = Store::memory().await.unwrap();
    let v = vis("w1", Some("alice"));
    let mut m = new("deploy_cmd", Scope::Global, "make deploy");
    m.kind = Some("reference");
    m.description = Some("how to deploy");
    assert!(store.save_memory(&v, &m).await.unwrap());
    assert!(
        !store
            .save_memory(&v, &new("deploy_cmd", Scope::Global, "make ship"))
            .await
            .unwrap()
    );
    let all = store.visible_memories(&v, 20).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].content, "make ship");
    assert_eq!(all[0].kind, "reference");
    assert_eq!(all[0].description.as_deref(), Some("how to deploy"));
    let plain = new("other", Scope::Global, "x");
    store.save_memory(&v, &plain).await.unwrap();
    let other = store.search_memories(&v, "x", 5).await.unwrap();
    assert_eq!(other[0].kind, "project");
}

#[tokio::test]
async fn scopes_never_leak_between_users_or_workstreams() {
    let store = Store::memory().await.unwrap();
    let alice_w1 = vis("w1", Some("alice"));
    let bob_w1 = vis("w1", Some("bob"));
    let alice_w2 = vis("w2", Some("alice"));
    store
        .save_memory(&alice_w1, &new("g", Scope::Global, "shared"))
        .await
        .unwrap();
    store
        .save_memory(&alice_w1, &new("w", Scope::Workstream, "thread one"))
        .await
        .unwrap();
    store
        .save_memory(&alice_w1, &new("a", Scope::User, "alice likes tabs"))
        .await
        .unwrap();
    store
        .save_memory(&bob_w1, &new("b", Scope::User, "bob likes spaces"))
        .await
        .unwrap();

    assert_eq!(
        sorted_names(store.visible_memories(&alice_w1, 20).await.unwrap()),
        ["a", "g", "w"]
    );
    assert_eq!(
        sorted_names(store.visible_memories(&bob_w1, 20).await.unwrap()),
        ["b", "g", "w"]
    );
    assert_eq!(
        sorted_names(store.visible_memories(&alice_w2, 20).await.unwrap()),
        ["a", "g"]
    );
    let anonymous = vis("w1", None);
    assert_eq!(
        sorted_names(store.visible_memories(&anonymous, 20).await.unwrap()),
        ["g", "w"]
    );

    assert!(
        store
            .search_memories(&bob_w1, "tabs", 20)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .delete_memory(&bob_w1, "a", None)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        names(&store.search_memories(&alice_w2, "tabs", 20).await.unwrap()),
        ["a"]
    );
}

#[tokio::test]
async fn like_wildcards_in_queries_match_themselves() {
    let store = Store::memory().await.unwrap();
    let v = vis("w", None);
    store
        .save_memory(&v, &new("pct", Scope::Global, "100% sure"))
        .await
        .unwrap();
    store
        .save_memory(&v, &new("plain", Scope::Global, "1000 sure"))
        .await
        .unwrap();
    store
        .save_memory(&v, &new("path", Scope::Global, r"C:\temp_dir"))
        .await
        .unwrap();
    assert_eq!(
        names(&store.search_memories(&v, "0%", 20).await.unwrap()),
        ["pct"]
    );
    assert_eq!(
        names(&store.search_memories(&v, "%", 20).await.unwrap()),
        ["pct"]
    );
    assert_eq!(
        names(&store.search_memories(&v, r"\temp_", 20).await.unwrap()),
        ["path"]
    );
    assert_eq!(store.search_memories(&v, "_", 20).await.unwrap().len(), 1);
    assert_eq!(
        names(&store.search_memories(&v, "SURE", 1).await.unwrap()).len(),
        1
    );
}

#[tokio::test]
async fn delete_needs_a_scope_when_a_name_is_in_several() {
    let store = Store::memory().await.unwrap();
    let v = vis("w", Some("alice"));
    store
        .save_memory(&v, &new("n", Scope::Global, "g"))
        .await
        .unwrap();
    store
        .save_memory(&v, &new("n", Scope::User, "u"))
        .await
        .unwrap();
    assert_eq!(store.delete_memory(&v, "n", None).await.unwrap().len(), 2);
    assert_eq!(store.visible_memories(&v, 20).await.unwrap().len(), 2);
    let deleted = store
        .delete_memory(&v, "n", Some(Scope::User))
        .await
        .unwrap();
    assert_eq!(deleted.len(), 1);
    assert_eq!(names(&store.visible_memories(&v, 20).await.unwrap()), ["n"]);
    assert_eq!(
        store.visible_memories(&v, 20).await.unwrap()[0].scope,
        Scope::Global
    );
}

#[tokio::test]
async fn touching_counts_accesses() {
    let store = Store::memory().await.unwrap();
    let v = vis("w", None);
    store
        .save_memory(&v, &new("n", Scope::Global, "c"))
        .await
        .unwrap();
    let m = store.visible_memories(&v, 1).await.unwrap().remove(0);
    store.touch_memories(&[&m.id, &m.id]).await.unwrap();
    assert_eq!(
        store.visible_memories(&v, 1).await.unwrap()[0].access_count,
        2
    );
}
