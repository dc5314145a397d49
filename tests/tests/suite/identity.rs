//! User identity on both databases: linking platforms with a one-time code, and first contacts
//! that race each other.

use std::collections::HashSet;
use std::sync::Arc;

use sandpiper_agent::model::Message;
use sandpiper_agent::store::Store;
use sandpiper_agent::store::memories::{NewMemory, Scope, Visibility};
use sandpiper_agent::store::users::{IdentityError, User};
use sandpiper_tests::both_backends;
use sandpiper_tests::db::TestDb;
use tokio::sync::Barrier;

async fn open(db: &TestDb) -> Store {
    Store::connect(&db.url, 4).await.expect("open the store")
}

/// Runs `n` calls of `user_for_identity` at once, the `i`th for `identity(i)`.
async fn first_contacts(
    store: &Store,
    n: usize,
    identity: fn(usize) -> (String, String),
) -> Vec<User> {
    let start = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (store, start) = (store.clone(), start.clone());
            tokio::spawn(async move {
                let (platform, id) = identity(i);
                start.wait().await;
                store.user_for_identity(&platform, &id, "Sam Smith").await
            })
        })
        .collect();
    let mut users = Vec::new();
    for task in tasks {
        users.push(task.await.expect("task").expect("first contact"));
    }
    users
}

both_backends! {
    async fn linking_joins_platforms(db) {
        let store = open(&db).await;
        let alice = store.user_for_identity("console", "alice", "alice").await.unwrap();
        let old = store.user_for_identity("discord", "1001", "Alice W").await.unwrap();
        assert_eq!(old.username, "discord-1001");
        store.ensure_workstream("discord:1", None).await.unwrap();
        store
            .append_message("discord:1", 0, &Message::user("hello"), Some(&old.id))
            .await
            .unwrap();
        let as_discord = Visibility { workstream: "discord:1".into(), user_id: Some(old.id.clone()) };
        let as_alice = Visibility { workstream: "console:x".into(), user_id: Some(alice.id.clone()) };
        let mem = |name: &'static str, content: &'static str| NewMemory {
            name, scope: Scope::User, kind: None, description: None, content, created_by: None,
        };
        store.save_memory(&as_discord, &mem("editor", "vim (discord)")).await.unwrap();
        store.save_memory(&as_discord, &mem("shell", "fish")).await.unwrap();
        store.save_memory(&as_alice, &mem("editor", "helix (console)")).await.unwrap();

        let code = store.create_link_code(&alice.id).await.unwrap();
        let err = store
            .redeem_link_code("console", "alice", "alice", &code)
            .await
            .unwrap_err();
        assert!(matches!(err, IdentityError::SameUser), "{err:?}");
        let linked = store
            .redeem_link_code("discord", "1001", "Alice W", &code.to_lowercase())
            .await
            .unwrap();
        assert_eq!(linked, alice);
        assert_eq!(
            store.identities_of(&alice.id).await.unwrap().into_iter().map(|i| (i.platform, i.platform_user_id)).collect::<Vec<_>>(),
            vec![
                ("console".to_owned(), "alice".to_owned()),
                ("discord".to_owned(), "1001".to_owned()),
            ]
        );
        assert_eq!(store.user(&old.id).await.unwrap(), None);
        // Her user memories followed her; on a name clash the surviving user's version wins.
        let mut mems: Vec<(String, String)> = store
            .visible_memories(&as_alice, 20)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.name, m.content))
            .collect();
        mems.sort();
        assert_eq!(
            mems,
            vec![
                ("editor".to_owned(), "helix (console)".to_owned()),
                ("shell".to_owned(), "fish".to_owned()),
            ]
        );
        let authors: Vec<(Option<String>,)> = {
            let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
            let rows = sqlx::query_as("SELECT author FROM messages")
                .fetch_all(&pool)
                .await
                .unwrap();
            pool.close().await;
            rows
        };
        assert_eq!(authors, vec![(Some(alice.id.clone()),)]);
        let err = store.redeem_link_code("slack", "U1", "x", &code).await.unwrap_err();
        assert!(matches!(err, IdentityError::CodeInvalid), "{err:?}");

        let renamed = store.rename_user(&alice.id, "ally").await.unwrap();
        assert_eq!(store.user_by_username("ally").await.unwrap(), Some(renamed));
        let fresh = store.unlink("discord", "1001").await.unwrap();
        assert_eq!(fresh.username, "discord-1001");
        assert_eq!(
            store.user_for_identity("discord", "1001", "Alice W").await.unwrap(),
            fresh
        );
        let err = store.unlink("discord", "1001").await.unwrap_err();
        assert!(matches!(err, IdentityError::NothingToUnlink), "{err:?}");
        store.close().await;
    }

    async fn concurrent_first_contacts_do_not_collide(db) {
        let store = open(&db).await;
        // Eight people with the same name at once: eight users, eight usernames.
        let people = first_contacts(&store, 8, |i| ("discord".into(), format!("p{i}"))).await;
        let names: HashSet<String> = people.iter().map(|u| u.username.clone()).collect();
        let expected: HashSet<String> = (0..8).map(|i| format!("discord-p{i}")).collect();
        assert_eq!(names, expected);
        let ids: HashSet<&str> = people.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids.len(), 8);

        // One person arriving eight times at once: one user, and no stray users left behind.
        let same = first_contacts(&store, 8, |_| ("slack".into(), "U42".into())).await;
        assert!(same.iter().all(|u| *u == same[0]), "{same:#?}");
        assert_eq!(same[0].username, "slack-u42");
        assert_eq!(store.user_by_username("sam_smith").await.unwrap(), None);
        assert_eq!(
            store.identities_of(&same[0].id).await.unwrap().into_iter().map(|i| (i.platform, i.platform_user_id)).collect::<Vec<_>>(),
            vec![("slack".to_owned(), "U42".to_owned())]
        );
        store.close().await;
    }

    async fn a_display_name_cannot_be_squatted_and_an_account_takes_its_handle_along(db) {
        let store = open(&db).await;
        // The impostor arrives first as "alice"; the real alice after, with the same name.
        let impostor = store.user_for_identity("discord", "666", "alice").await.unwrap();
        let alice = store.user_for_identity("slack", "U0ALICE", "alice").await.unwrap();
        assert_eq!((impostor.username.as_str(), alice.username.as_str()), ("discord-666", "slack-u0alice"));
        assert_eq!(store.user_by_username("alice").await.unwrap(), None);
        // No one renames into an account's handle, even one not taken yet.
        for reserved in ["slack-u0bob", "discord-1", "console-root"] {
            let err = store.rename_user(&impostor.id, reserved).await.unwrap_err();
            assert!(matches!(err, IdentityError::ReservedUsername(_)), "{err:?}");
        }
        let alice = store.rename_user(&alice.id, "alice").await.unwrap();
        let err = store.rename_user(&impostor.id, "alice").await.unwrap_err();
        assert!(matches!(err, IdentityError::UsernameTaken(_)), "{err:?}");
        // Alice links Discord into her Slack user and unlinks it again: the Discord account
        // leaves as its own handle; she keeps her chosen name.
        store.user_for_identity("discord", "1001", "alice").await.unwrap();
        let code = store.create_link_code(&alice.id).await.unwrap();
        store.redeem_link_code("discord", "1001", "alice", &code).await.unwrap();
        assert_eq!(store.unlink("discord", "1001").await.unwrap().username, "discord-1001");
        assert_eq!(store.user(&alice.id).await.unwrap().unwrap().username, "alice");
        // A user known by the handle of the account that leaves is renamed after the one it
        // keeps, so `discord-1001` never names a Slack account.
        let bob = store.user_for_identity("discord", "2002", "bob").await.unwrap();
        store.user_for_identity("slack", "U0BOB", "bob").await.unwrap();
        let code = store.create_link_code(&bob.id).await.unwrap();
        store.redeem_link_code("slack", "U0BOB", "bob", &code).await.unwrap();
        let gone = store.unlink("discord", "2002").await.unwrap();
        assert!(gone.username.starts_with("discord-"), "{gone:?}");
        assert_eq!(store.user(&bob.id).await.unwrap().unwrap().username, "slack-u0bob");
        store.close().await;
    }
}
