//! Memory end to end: saved through the tool by a scripted model, shown by relevance in the
//! context note of later requests (never in the system message, whose bytes stay the same),
//! and never visible to another user — in the same thread or another.

use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::{contents_with_role, setup};

fn system_of(request: &serde_json::Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Everything a request's messages say.
fn all_of(request: &serde_json::Value) -> String {
    let messages = request["messages"].as_array().expect("messages");
    messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

both_backends! {
    async fn user_memories_follow_their_user_and_nobody_else(db) {
        let s = setup(&db, vec![
            // alice, in the shared thread, saves a personal preference and a global fact.
            tool_call("m1", "memory", json!({"action": "save", "name": "alice_editor", "scope": "user",
                "type": "user", "description": "alice's editor preference for indentation",
                "content": "alice wants tabs for indentation, never spaces"})),
            tool_call("m2", "memory", json!({"action": "save", "name": "deploy_command",
                "description": "how to deploy indentation-checked code", "content": "make deploy"})),
            text("Noted."),
            // bob, in the same thread, asks about indentation: the model lists memories.
            tool_call("m3", "memory", json!({"action": "list"})),
            text("bob answer"),
            // alice, in another thread, asks about indentation.
            text("alice answer"),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;

        let alice = ConsoleRun::start(agent.clone(), "shared", "alice", true);
        alice.send("remember my indentation preference").await;
        alice.finish().await;

        let bob = ConsoleRun::start(agent.clone(), "shared", "bob", true);
        bob.send("what indentation should I use?").await;
        bob.finish().await;

        let alice = ConsoleRun::start(agent.clone(), "elsewhere", "alice", true);
        alice.send("which indentation do I like?").await;
        alice.finish().await;
        s.llm.verify();

        let requests = s.llm.requests();
        assert_eq!(requests.len(), 6);
        // bob's first call: the global memory is shown, alice's personal one is not — not in
        // bob's note, nor in what alice's notes left in the shared thread.
        let bob_sees = all_of(&requests[3]);
        assert!(bob_sees.contains("deploy_command"), "{bob_sees}");
        assert!(!bob_sees.contains("tabs"), "{bob_sees}");
        assert!(!system_of(&requests[3]).contains("deploy_command"));
        // bob's list shows only the global memory.
        let listed = contents_with_role(&requests[4], "tool");
        assert_eq!(listed.last().unwrap(), "- deploy_command [project, global]: how to deploy indentation-checked code\n");
        // alice, in another thread, gets her preference injected.
        let alice_note = crate::suite::newest_content(&requests[5]);
        assert!(alice_note.contains("alice wants tabs"), "{alice_note}");
        // Nothing injected is stored in history.
        let history = agent.history("console:elsewhere").await.unwrap();
        assert!(history.iter().all(|m| !m.content.contains("<memories>")));
    }

    async fn a_correction_nudges_once_and_is_never_stored(db) {
        let s = setup(&db, vec![text("Port 80."), text("Sorry, 8080."), text("ok")]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "nudge", "alice", true);
        console.send("which port?").await;
        console.send("no, that's wrong").await;
        console.send("no, that's wrong again").await;
        console.finish().await;
        let requests = s.llm.requests();
        assert!(!all_of(&requests[0]).contains("<nudges>"));
        let second = crate::suite::newest_content(&requests[1]);
        assert!(second.contains("<nudges>") && second.contains("The user just corrected you"), "{second}");
        // The cooldown holds within 300 s.
        assert!(!crate::suite::newest_content(&requests[2]).contains("corrected you"));
        let history = agent.history("console:nudge").await.unwrap();
        assert!(history.iter().all(|m| !m.content.contains("nudges")));
    }

    async fn a_resumed_workstream_is_nudged_after_restart(db) {
        let s = setup(&db, vec![text("first"), text("second")]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "resume", "alice", true);
        console.send("hello").await;
        console.finish().await;
        drop(agent);
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent, "resume", "alice", true);
        console.send("where were we?").await;
        console.finish().await;
        let requests = s.llm.requests();
        assert!(!all_of(&requests[0]).contains("resuming"));
        assert!(crate::suite::newest_content(&requests[1]).contains("This workstream is resuming"));
    }
}

mod store_level {
    use sandpiper_agent::store::Store;
    use sandpiper_agent::store::memories::{NewMemory, Scope, Visibility};
    use sandpiper_tests::both_backends;

    both_backends! {
        async fn like_wildcards_match_themselves_on_every_backend(db) {
            let store = Store::connect(&db.url, 2).await.unwrap();
            let v = Visibility { workstream: "w".into(), user_id: Some("u".into()) };
            for (name, content) in [("pct", "100% sure"), ("plain", "1000 sure"), ("path", r"C:\temp_dir"), ("under", "a_b")] {
                let m = NewMemory { name, scope: Scope::Global, kind: None, description: None, content, created_by: None };
                store.save_memory(&v, &m).await.unwrap();
            }
            let names = |found: Vec<sandpiper_agent::store::memories::Memory>| {
                let mut n: Vec<String> = found.into_iter().map(|m| m.name).collect();
                n.sort();
                n
            };
            assert_eq!(names(store.search_memories(&v, "0%", 20).await.unwrap()), ["pct"]);
            assert_eq!(names(store.search_memories(&v, r"\temp_", 20).await.unwrap()), ["path"]);
            assert_eq!(names(store.search_memories(&v, "a_b", 20).await.unwrap()), ["under"]);
            assert_eq!(names(store.search_memories(&v, "_", 20).await.unwrap()), ["path", "under"]);
            // Saving again keeps type and description unless given, on both backends.
            let m = NewMemory { name: "pct", scope: Scope::Global, kind: Some("reference"), description: Some("d"), content: "x", created_by: None };
            store.save_memory(&v, &m).await.unwrap();
            let m = NewMemory { name: "pct", scope: Scope::Global, kind: None, description: None, content: "y", created_by: None };
            assert!(!store.save_memory(&v, &m).await.unwrap());
            let found = store.search_memories(&v, "y", 20).await.unwrap();
            let pct = found.iter().find(|m| m.name == "pct").unwrap();
            assert_eq!((pct.kind.as_str(), pct.description.as_deref(), pct.content.as_str()), ("reference", Some("d"), "y"));
        }
    }
}
