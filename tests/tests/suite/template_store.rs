//! The `prompt_templates` table's MCP sync on both databases: a name is one server's, and
//! another server offering the same name never overwrites or removes it, also when both sync
//! at once.

use sandpiper_agent::store::Store;
use sandpiper_agent::store::prompt_templates::{McpPromptSpec, PromptTemplate, TemplateSync};
use sandpiper_tests::both_backends;

fn spec(name: &str, description: &str) -> McpPromptSpec {
    McpPromptSpec {
        name: name.into(),
        description: Some(description.into()),
        arguments: "[]".into(),
    }
}

fn skipped(name: &str) -> TemplateSync {
    TemplateSync {
        skipped: vec![name.into()],
        ..TemplateSync::default()
    }
}

async fn holder(store: &Store, name: &str) -> PromptTemplate {
    store
        .prompt_template(name)
        .await
        .expect("the store answers")
        .expect("the template")
}

both_backends! {
    async fn a_second_server_offering_a_name_never_overwrites_the_first(db) {
        let store = Store::connect(&db.url, 4).await.unwrap();
        let first = store.sync_mcp_templates("one", &[spec("mcp__one__greet", "one's")]).await.unwrap();
        assert_eq!(first.added, ["mcp__one__greet"]);
        let second = store.sync_mcp_templates("two", &[spec("mcp__one__greet", "two's")]).await.unwrap();
        assert_eq!(second, skipped("mcp__one__greet"));
        let kept = holder(&store, "mcp__one__greet").await;
        assert_eq!((kept.mcp_server.as_deref(), kept.description.as_deref()), (Some("one"), Some("one's")));
        // The second server no longer offering it does not remove the first's.
        assert_eq!(store.sync_mcp_templates("two", &[]).await.unwrap(), TemplateSync::default());
        assert_eq!(holder(&store, "mcp__one__greet").await, kept);
        store.close().await;
    }

    async fn two_servers_syncing_one_name_at_once_leave_it_to_one(db) {
        let store = Store::connect(&db.url, 4).await.unwrap();
        for round in 0..10 {
            let name = format!("mcp__x__p{round}");
            let (one, two) = (format!("a{round}"), format!("b{round}"));
            let (offer_a, offer_b) = ([spec(&name, &one)], [spec(&name, &two)]);
            let (a, b) = tokio::join!(
                store.sync_mcp_templates(&one, &offer_a),
                store.sync_mcp_templates(&two, &offer_b),
            );
            let (a, b) = (a.unwrap(), b.unwrap());
            let winner = holder(&store, &name).await;
            let server = winner.mcp_server.clone().expect("an MCP template");
            let (won, lost) = match server == one {
                true => (a, b),
                false => (b, a),
            };
            assert_eq!(won.added, std::slice::from_ref(&name), "round {round}");
            assert_eq!(lost, skipped(&name), "round {round}");
            assert_eq!(winner.description.as_deref(), Some(server.as_str()), "the winner's own");
        }
        store.close().await;
    }
}
