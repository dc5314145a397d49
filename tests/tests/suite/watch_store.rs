//! The `watches` table on both databases (groundwork for issue 13): the limits the tool
//! reports to the model, cancel by name or id prefix, and claiming due watches exactly once
//! across two runners sharing one database, with overdue watches polled once after a restart.

use std::collections::HashSet;

use sandpiper_agent::store::Store;
use sandpiper_agent::store::watches::{NewWatch, WatchError, WatchState};
use sandpiper_agent::workstream::KeyPattern;
use sandpiper_agent::workstream::{KeyPlatform, WorkstreamKey};
use sandpiper_tests::both_backends;

fn watch(workstream: &str, name: &str) -> NewWatch {
    NewWatch {
        workstream: workstream.into(),
        name: name.into(),
        command: "gh pr view 1 --json state".into(),
        poll_every_ms: 30_000,
        stop_on: Some(r#"data["state"] == "MERGED""#.into()),
        max_polls: 100,
        created_by: Some("alice".into()),
    }
}

fn slack() -> Vec<KeyPattern> {
    vec![KeyPattern::Platform(KeyPlatform::Slack)]
}

both_backends! {
    async fn names_limits_and_cancel_are_clear_errors(db) {
        let store = Store::connect(&db.url, 4).await.unwrap();
        store.ensure_workstream("discord:1", Some("alice")).await.unwrap();
        store.ensure_workstream("discord:2", Some("alice")).await.unwrap();
        let first = store.create_watch(&watch("discord:1", "ci")).await.unwrap();
        assert_eq!(first.state, WatchState::Active);
        assert!(matches!(store.create_watch(&watch("discord:1", "ci")).await, Err(WatchError::NameTaken(n)) if n == "ci"));
        // The same name in another thread is another watch.
        store.create_watch(&watch("discord:2", "ci")).await.unwrap();
        for i in 0..4 {
            store.create_watch(&watch("discord:1", &format!("w{i}"))).await.unwrap();
        }
        let err = store.create_watch(&watch("discord:1", "sixth")).await.unwrap_err();
        assert!(matches!(err, WatchError::TooMany), "{err}");
        assert!(err.to_string().contains("already has 5 active watches"), "{err}");

        let cancelled = store.cancel_watch("discord:1", "ci").await.unwrap();
        assert_eq!(cancelled.state, WatchState::Cancelled);
        assert_eq!(store.watch(&first.id).await.unwrap().unwrap().state, WatchState::Cancelled);
        // Its name is free again, and a sixth fits now.
        let again = store.create_watch(&watch("discord:1", "ci")).await.unwrap();
        let prefix = &again.id[..10];
        assert_eq!(store.cancel_watch("discord:1", prefix).await.unwrap().id, again.id);
        assert!(matches!(store.cancel_watch("discord:1", "nope").await, Err(WatchError::NotFound(_))));
        assert!(matches!(store.cancel_watch("discord:1", "w_").await, Err(WatchError::Ambiguous(_))));
        // Another thread's watch is not this thread's to cancel.
        assert!(matches!(store.cancel_watch("discord:2", "w0").await, Err(WatchError::NotFound(_))));
        assert_eq!(store.active_watches("discord:1").await.unwrap().len(), 4);
    }

    async fn two_runners_claim_each_due_watch_once_and_an_overdue_watch_polls_once(db) {
        let a = Store::connect(&db.url, 4).await.unwrap();
        let b = Store::connect(&db.url, 4).await.unwrap();
        let mut ids = HashSet::new();
        for t in 0..8 {
            let key = format!("slack:T1:C1:1.{t}");
            a.ensure_workstream(&key, Some("alice")).await.unwrap();
            for n in 0..5 {
                ids.insert(a.create_watch(&watch(&key, &format!("w{n}"))).await.unwrap().id);
            }
        }
        // Due now (created with next_poll_at = now); both runners claim in small bites at once.
        let now = sandpiper_agent::store::now_ms() + 1;
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        let slack = slack();
        loop {
            let (ca, cb) = tokio::join!(
                a.claim_due_watches("node-a", &slack, now, 60_000, 4),
                b.claim_due_watches("node-b", &slack, now, 60_000, 4),
            );
            let (ca, cb) = (ca.unwrap(), cb.unwrap());
            if ca.is_empty() && cb.is_empty() {
                break;
            }
            got_a.extend(ca.into_iter().map(|w| w.id));
            got_b.extend(cb.into_iter().map(|w| w.id));
        }
        let all: Vec<&String> = got_a.iter().chain(&got_b).collect();
        let distinct: HashSet<&String> = all.iter().copied().collect();
        assert_eq!(all.len(), 40, "every due watch claimed");
        assert_eq!(distinct.len(), 40, "and none twice: a={} b={}", got_a.len(), got_b.len());

        // Only the holder records a poll; the next poll is never in the past.
        let id = &got_a[0];
        assert!(!b.record_poll(id, "node-b", "{}", 0, 0).await.unwrap());
        assert!(a.record_poll(id, "node-a", r#"{"state": "OPEN"}"#, 0, 0).await.unwrap());
        let polled = a.watch(id).await.unwrap().unwrap();
        assert_eq!((polled.polls, polled.last_exit_code), (1, Some(0)));
        assert!(polled.next_poll_at >= now - 1, "an overdue watch is due again from now on, once");
        let later = a.claim_due_watches("node-a", &slack, now, 60_000, 100).await.unwrap();
        assert!(later.iter().all(|w| w.id != *id), "its claim was released but it is not due");

        // A runner that died keeps its claim only until the lease runs out.
        let held = &got_b[0];
        let after_lease = now + 61_000;
        let retaken = a.claim_due_watches("node-a", &slack, after_lease, 60_000, 100).await.unwrap();
        assert!(retaken.iter().any(|w| w.id == *held), "node-b's lease expired: node-a takes it");
        assert!(a.finish_watch(held, WatchState::Fired).await.unwrap());
        assert!(!a.finish_watch(held, WatchState::Cancelled).await.unwrap(), "finished once");
    }

    async fn a_runner_claims_only_its_platforms_watches(db) {
        let store = Store::connect(&db.url, 4).await.unwrap();
        for key in ["discord:1", "slack:T1:C1:1.0", "console:default", "console:default2"] {
            store.ensure_workstream(key, Some("alice")).await.unwrap();
            store.create_watch(&watch(key, "ci")).await.unwrap();
        }
        let now = sandpiper_agent::store::now_ms() + 1;
        let claim = |keys: Vec<KeyPattern>| {
            let store = store.clone();
            async move {
                let mut got: Vec<String> = store
                    .claim_due_watches("n", &keys, now, 60_000, 10)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|w| w.watch.workstream)
                    .collect();
                got.sort();
                got
            }
        };
        assert!(claim(vec![]).await.is_empty(), "no platform, no watches");
        assert_eq!(claim(vec![KeyPattern::Exact(WorkstreamKey::console("default"))]).await, ["console:default"]);
        assert_eq!(
            claim(vec![KeyPattern::Platform(KeyPlatform::Discord), KeyPattern::Platform(KeyPlatform::Slack)]).await,
            ["discord:1", "slack:T1:C1:1.0"]
        );
        // Claimed: not again until released (a clean shutdown) or the lease runs out.
        assert!(claim(vec![KeyPattern::Platform(KeyPlatform::Discord)]).await.is_empty());
        assert_eq!(store.release_watches("n").await.unwrap(), 3);
        assert_eq!(claim(vec![KeyPattern::Platform(KeyPlatform::Discord)]).await, ["discord:1"]);
    }

    async fn a_paused_watch_is_listed_and_resumes(db) {
        let store = Store::connect(&db.url, 4).await.unwrap();
        store.ensure_workstream("discord:1", Some("alice")).await.unwrap();
        let w = store.create_watch(&watch("discord:1", "ci")).await.unwrap();
        assert!(store.finish_watch(&w.id, WatchState::Paused).await.unwrap());
        let listed = store.watches_of("discord:1").await.unwrap();
        assert_eq!(listed.iter().map(|w| w.state).collect::<Vec<_>>(), [WatchState::Paused]);
        // While it is paused its name is free; resuming then says so.
        let other = store.create_watch(&watch("discord:1", "ci")).await.unwrap();
        assert!(matches!(store.resume_watch("discord:1", &w.id[..12]).await, Err(WatchError::NameTaken(_))));
        store.cancel_watch("discord:1", &other.id).await.unwrap();
        let resumed = store.resume_watch("discord:1", "ci").await.unwrap();
        assert_eq!(resumed.state, WatchState::Active);
        assert!(matches!(store.resume_watch("discord:1", "ci").await, Err(WatchError::NotFound(_))));
        assert!(matches!(store.cancel_watch("discord:2", "ci").await, Err(WatchError::NotFound(_))));
    }
}
