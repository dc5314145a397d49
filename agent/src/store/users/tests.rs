use pretty_assertions::assert_eq;

use super::linking::{ATTEMPT_WINDOW_MS, LINK_CODE_TTL_MS};
use super::*;
use crate::model::Message;

const T0: i64 = 1_700_000_000_000;

async fn store() -> Store {
    Store::memory().await.unwrap()
}

fn pairs(items: &[(&str, &str)]) -> Vec<LinkedIdentity> {
    items
        .iter()
        .map(|(a, b)| LinkedIdentity {
            platform: (*a).to_owned(),
            platform_user_id: (*b).to_owned(),
            handle: None,
        })
        .collect()
}

#[test]
fn an_account_is_named_by_its_platform_id_never_its_display_name() {
    let cases = [
        (
            "discord",
            "900000000000000011",
            Some("discord-900000000000000011"),
        ),
        ("slack", "U0ALICE", Some("slack-u0alice")),
        ("console", "alice", Some("console-alice")),
        ("console", "al.ice_9-x", Some("console-al.ice_9-x")),
        // Lower-casing only where it cannot merge two ids: `Alice` and `alice` differ.
        ("console", "Alice", None),
        ("console", "é", None),
        ("console", "", None),
        ("console", &"x".repeat(25), None),
    ];
    for (platform, id, handle) in cases {
        assert_eq!(
            account_handle(platform, id).as_deref(),
            handle,
            "{platform}:{id}"
        );
    }
    let random = new_account_user("console", "Alice", Some("Alice"), 0);
    assert!(random.username.starts_with("console-"), "{random:?}");
    assert_eq!(random.username.len(), "console-".len() + 12);
    assert!(is_valid_username(&random.username));
    let second = new_account_user("slack", "U1", None, 1);
    assert!(second.username.starts_with("slack-") && second.username != "slack-u1");
    assert!(is_valid_username("a.b-c_9"));
    for bad in ["", "Alice", "a b", "ü", &"x".repeat(33)] {
        assert!(!is_valid_username(bad), "{bad:?}");
    }
    for reserved in ["discord-1", "slack-u0alice", "console-root", "Discord-9"] {
        assert!(is_reserved_username(reserved), "{reserved}");
    }
    for free in ["alice", "discord", "slackbot", "my-discord-1"] {
        assert!(!is_reserved_username(free), "{free}");
    }
}

#[tokio::test]
async fn first_contact_creates_and_the_same_identity_returns_the_same_user() {
    let store = store().await;
    let alice = store
        .user_for_identity("console", "alice", "Alice")
        .await
        .unwrap();
    assert_eq!(alice.username, "console-alice");
    assert_eq!(alice.display_name.as_deref(), Some("Alice"));
    let again = store
        .user_for_identity("console", "alice", "Someone Else")
        .await
        .unwrap();
    assert_eq!(again, alice);
    assert_eq!(store.user(&alice.id).await.unwrap(), Some(alice.clone()));
    assert_eq!(
        store.user_by_username(" @Console-Alice ").await.unwrap(),
        Some(alice.clone())
    );
    assert_eq!(store.user("nobody").await.unwrap(), None);
    assert_eq!(
        store.identities_of(&alice.id).await.unwrap(),
        pairs(&[("console", "alice")])
    );
}

#[tokio::test]
async fn a_display_name_never_becomes_a_username() {
    let store = store().await;
    // Whoever arrives first as "alice" does not become `alice`: each account is its own.
    let mut names = Vec::new();
    for (i, display) in ["alice", "Alice", "alice", ""].iter().enumerate() {
        let user = store
            .user_for_identity("discord", &(100 + i).to_string(), display)
            .await
            .unwrap();
        names.push(user.username);
    }
    assert_eq!(
        names,
        ["discord-100", "discord-101", "discord-102", "discord-103"]
    );
    assert_eq!(store.user_by_username("alice").await.unwrap(), None);
    // They are the people showing that name, for an error that names them all.
    let showing: Vec<String> = store
        .users_showing_name("@Alice")
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.username)
        .collect();
    assert_eq!(showing, ["discord-100", "discord-101", "discord-102"]);
    // An account whose handle is held (a row from before handles) gets a random one.
    let squatter = store.user_for_identity("console", "x", "x").await.unwrap();
    sqlx::query("UPDATE users SET username = 'slack-u9' WHERE id = $1")
        .bind(&squatter.id)
        .execute(store.pool())
        .await
        .unwrap();
    let late = store.user_for_identity("slack", "U9", "u9").await.unwrap();
    assert!(
        late.username.starts_with("slack-") && late.username != "slack-u9",
        "{late:?}"
    );
}

#[tokio::test]
async fn rename_checks_the_name() {
    let store = store().await;
    let alice = store
        .user_for_identity("console", "a", "alice")
        .await
        .unwrap();
    let bob = store
        .user_for_identity("console", "b", "bob")
        .await
        .unwrap();
    let renamed = store.rename_user(&alice.id, " ally ").await.unwrap();
    assert_eq!(
        renamed,
        User {
            username: "ally".into(),
            ..alice.clone()
        }
    );
    assert_eq!(store.user_by_username("alice").await.unwrap(), None);
    let bob = store.rename_user(&bob.id, "bob").await.unwrap();
    let err = store.rename_user(&alice.id, "bob").await.unwrap_err();
    assert!(
        matches!(&err, IdentityError::UsernameTaken(n) if n == "bob"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the username `bob` is already taken: choose another one"
    );
    let err = store.rename_user(&alice.id, "Ally!").await.unwrap_err();
    assert!(
        matches!(&err, IdentityError::BadUsername(n) if n == "Ally!"),
        "{err:?}"
    );
    // Nobody takes an account's own handle, not even a free one (that account may come later).
    for reserved in ["discord-42", "slack-u0alice", "console-root"] {
        let err = store.rename_user(&alice.id, reserved).await.unwrap_err();
        assert!(
            matches!(&err, IdentityError::ReservedUsername(n) if n == reserved),
            "{err:?}"
        );
    }
    let err = store.rename_user("nobody", "carol").await.unwrap_err();
    assert!(matches!(err, IdentityError::UnknownUser(_)), "{err:?}");
    let bob = store.rename_user(&bob.id, "bob").await.unwrap();
    assert_eq!(store.rename_user(&bob.id, "bob").await.unwrap(), bob);
}

#[test]
fn records_name_a_person_by_a_handle_no_one_else_holds() {
    let user = |display: Option<&str>| User {
        id: "u1".into(),
        username: "discord-2001".into(),
        display_name: display.map(str::to_owned),
    };
    let cases = [
        (Some("Alice"), Some("alice"), "@alice"),
        (
            Some("Alice Liddell"),
            Some("alice"),
            "Alice Liddell (@alice)",
        ),
        (None, Some("alice"), "@alice"),
        (Some("Alice"), None, "Alice (@discord-2001)"),
        (Some("  "), None, "@discord-2001"),
        // A display name cannot dress up as a handle, nor carry control characters.
        (
            Some("alice (@alice)"),
            Some("mallory"),
            "alice alice (@mallory)",
        ),
        (
            Some("@alice\u{1b}[2J"),
            Some("mallory"),
            "alice2J (@mallory)",
        ),
    ];
    for (display, handle, want) in cases {
        assert_eq!(
            user(display).public_name(handle),
            want,
            "{display:?} {handle:?}"
        );
    }
}

#[tokio::test]
async fn a_record_names_the_chosen_username_else_a_platform_handle() {
    let store = store().await;
    let alice = store
        .user_for_identity_at("discord", "2001", "Alice", Some("alice"), T0)
        .await
        .unwrap();
    assert_eq!(
        store.public_name(&alice.id).await.unwrap().as_deref(),
        Some("@alice")
    );
    let bob = store.user_for_identity("slack", "U2", "Bob").await.unwrap();
    assert_eq!(
        store.public_name(&bob.id).await.unwrap().as_deref(),
        Some("Bob (@slack-u2)")
    );
    store.rename_user(&bob.id, "bobby").await.unwrap();
    assert_eq!(
        store.public_name(&bob.id).await.unwrap().as_deref(),
        Some("Bob (@bobby)")
    );
    // Nobody takes another person's platform handle as a username: `@alice` would be two.
    let err = store.rename_user(&bob.id, "Alice").await.unwrap_err();
    assert!(matches!(err, IdentityError::BadUsername(_)), "{err:?}");
    let err = store.rename_user(&bob.id, "alice").await.unwrap_err();
    assert!(
        matches!(&err, IdentityError::UsernameTaken(n) if n == "alice"),
        "{err:?}"
    );
    assert!(store.rename_user(&alice.id, "alice").await.is_ok());
    assert_eq!(store.public_name("nobody").await.unwrap(), None);
}

#[tokio::test]
async fn a_code_links_identities_and_history_follows() {
    let store = store().await;
    let alice = store
        .user_for_identity("console", "alice", "alice")
        .await
        .unwrap();
    let old = store
        .user_for_identity("discord", "42", "Alice W")
        .await
        .unwrap();
    store.ensure_workstream("discord:1", None).await.unwrap();
    store
        .append_message("discord:1", 0, &Message::user("hi"), Some(&old.id))
        .await
        .unwrap();
    store
        .append_message("discord:1", 1, &Message::user("from bob"), Some("bob"))
        .await
        .unwrap();

    let code = store.create_link_code_at(&alice.id, T0).await.unwrap();
    assert_eq!(code.len(), 8);
    assert!(
        code.bytes()
            .all(|b| b"ABCDEFGHJKMNPQRSTUVWXYZ23456789".contains(&b))
    );
    let linked = store
        .redeem_link_code_at(
            "discord",
            "42",
            "Alice W",
            &format!(" {} ", code.to_lowercase()),
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(linked, alice);
    assert_eq!(
        store
            .user_for_identity("discord", "42", "Alice W")
            .await
            .unwrap(),
        alice
    );
    assert_eq!(
        store.identities_of(&alice.id).await.unwrap(),
        pairs(&[("console", "alice"), ("discord", "42")])
    );
    assert_eq!(store.user(&old.id).await.unwrap(), None);
    let authors: Vec<(Option<String>,)> =
        sqlx::query_as("SELECT author FROM messages ORDER BY seq")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        authors,
        vec![(Some(alice.id.clone()),), (Some("bob".to_owned()),)]
    );

    // Spent: nobody can use it again.
    let err = store
        .redeem_link_code_at("slack", "U1", "x", &code, T0 + 2)
        .await
        .unwrap_err();
    assert!(matches!(err, IdentityError::CodeInvalid), "{err:?}");
}

#[tokio::test]
async fn a_user_who_keeps_other_identities_is_not_merged() {
    let store = store().await;
    let alice = store
        .user_for_identity("console", "alice", "alice")
        .await
        .unwrap();
    let bob = store
        .user_for_identity("discord", "1", "bob")
        .await
        .unwrap();
    let code = store.create_link_code_at(&bob.id, T0).await.unwrap();
    store
        .redeem_link_code_at("slack", "U1", "bob", &code, T0)
        .await
        .unwrap();
    // Bob's Slack identity now moves to Alice: Bob keeps his Discord identity and his user.
    let code = store.create_link_code_at(&alice.id, T0).await.unwrap();
    store
        .redeem_link_code_at("slack", "U1", "bob", &code, T0)
        .await
        .unwrap();
    assert_eq!(store.user(&bob.id).await.unwrap(), Some(bob.clone()));
    assert_eq!(
        store.identities_of(&bob.id).await.unwrap(),
        pairs(&[("discord", "1")])
    );
    assert_eq!(
        store.identities_of(&alice.id).await.unwrap(),
        pairs(&[("console", "alice"), ("slack", "U1")])
    );
}

#[tokio::test]
async fn expired_used_and_own_codes_are_refused() {
    let store = store().await;
    let alice = store
        .user_for_identity("console", "alice", "alice")
        .await
        .unwrap();
    let code = store.create_link_code_at(&alice.id, T0).await.unwrap();
    let err = store
        .redeem_link_code_at("discord", "1", "a", &code, T0 + LINK_CODE_TTL_MS)
        .await
        .unwrap_err();
    assert!(matches!(err, IdentityError::CodeInvalid), "{err:?}");
    assert_eq!(
        err.to_string(),
        "that code is not valid: it may have expired (codes last 10 minutes) or been used already"
    );

    let code = store.create_link_code_at(&alice.id, T0).await.unwrap();
    let err = store
        .redeem_link_code_at("console", "alice", "alice", &code, T0 + 1)
        .await
        .unwrap_err();
    assert!(matches!(err, IdentityError::SameUser), "{err:?}");
    // Refusing your own code does not spend it.
    store
        .redeem_link_code_at("discord", "1", "a", &code, T0 + 2)
        .await
        .unwrap();
    let err = store
        .redeem_link_code_at("slack", "U1", "a", &code, T0 + 3)
        .await
        .unwrap_err();
    assert!(matches!(err, IdentityError::CodeInvalid), "{err:?}");
}

#[tokio::test]
async fn the_sixth_attempt_in_an_hour_is_refused_even_with_a_valid_code() {
    let store = store().await;
    let alice = store
        .user_for_identity("console", "alice", "alice")
        .await
        .unwrap();
    for i in 0..5 {
        let err = store
            .redeem_link_code_at("discord", "1", "m", "WRONG", T0 + i)
            .await
            .unwrap_err();
        assert!(matches!(err, IdentityError::CodeInvalid), "{err:?}");
    }
    let code = store.create_link_code_at(&alice.id, T0).await.unwrap();
    let err = store
        .redeem_link_code_at("discord", "1", "m", &code, T0 + 10)
        .await
        .unwrap_err();
    assert!(matches!(err, IdentityError::TooManyAttempts), "{err:?}");
    // Another identity is not limited.
    let err = store
        .redeem_link_code_at("discord", "2", "n", "WRONG", T0 + 10)
        .await
        .unwrap_err();
    assert!(matches!(err, IdentityError::CodeInvalid), "{err:?}");
    // The refused attempt did not look at the code: it is still good for another identity.
    let user = store
        .redeem_link_code_at("slack", "U5", "m", &code, T0 + 11)
        .await
        .unwrap();
    assert_eq!(user, alice);
    // An hour after the first attempts, the identity may try again.
    let code = store
        .create_link_code_at(&alice.id, T0 + ATTEMPT_WINDOW_MS + 5)
        .await
        .unwrap();
    let user = store
        .redeem_link_code_at("discord", "1", "m", &code, T0 + ATTEMPT_WINDOW_MS + 5)
        .await
        .unwrap();
    assert_eq!(user, alice);
}

#[tokio::test]
async fn unlink_gives_a_fresh_user_but_not_to_an_only_identity() {
    let store = store().await;
    let alice = store
        .user_for_identity("console", "alice", "alice")
        .await
        .unwrap();
    let err = store.unlink("console", "alice").await.unwrap_err();
    assert!(matches!(err, IdentityError::NothingToUnlink), "{err:?}");
    let err = store.unlink("discord", "unknown").await.unwrap_err();
    assert!(matches!(err, IdentityError::NothingToUnlink), "{err:?}");

    store
        .user_for_identity("discord", "7", "Alice")
        .await
        .unwrap();
    let code = store.create_link_code_at(&alice.id, T0).await.unwrap();
    store
        .redeem_link_code_at("discord", "7", "Alice", &code, T0)
        .await
        .unwrap();
    let fresh = store.unlink_at("discord", "7", T0 + 1).await.unwrap();
    assert_ne!(fresh.id, alice.id);
    assert_eq!(fresh.username, "discord-7");
    assert_eq!(fresh.display_name.as_deref(), Some("Alice"));
    assert_eq!(
        store
            .user_for_identity("discord", "7", "Alice")
            .await
            .unwrap(),
        fresh
    );
    assert_eq!(
        store.identities_of(&alice.id).await.unwrap(),
        pairs(&[("console", "alice")])
    );
    assert_eq!(
        store.identities_of(&fresh.id).await.unwrap(),
        pairs(&[("discord", "7")])
    );
    let err = store.unlink("discord", "7").await.unwrap_err();
    assert!(matches!(err, IdentityError::NothingToUnlink), "{err:?}");
}
