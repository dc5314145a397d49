//! The console channel end to end: streamed bash output, approvals typed on the next line,
//! feedback, always-allow, cancellation.

use std::time::Duration;

use sandpiper_agent::model::Role;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{Reply, text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::{WAIT, contents_with_role, setup};

both_backends! {
    async fn the_consoles_workstreams_are_listed_with_their_directory_and_last_message(db) {
        let s = setup(&db, vec![text("one"), text("two")]).await;
        let agent = harness::agent(s.config.clone()).await;
        for (name, message) in [("old", "first words"), ("app-1f3a9c2e", "second words")] {
            let console = ConsoleRun::start(agent.clone(), name, "alice", false);
            console.send(message).await;
            console.finish().await;
        }
        // Not the console's: a thread, and a sub-agent's child of a console workstream.
        agent.open_workstream("discord:1", None, None).await.unwrap();
        agent.open_workstream("console:old/task:c1", None, None).await.unwrap();
        let listed = agent.console_workstreams().await.unwrap();
        let summary: Vec<(&str, Option<&str>, bool)> = listed
            .iter()
            .map(|w| (w.name.as_str(), w.last_message.as_deref(), w.workdir.is_some()))
            .collect();
        assert_eq!(
            summary,
            [("app-1f3a9c2e", Some("second words"), true), ("old", Some("first words"), true)]
        );
        // Whoever runs the console owns its workstream.
        let view = agent.workstream("console:old").await.unwrap().unwrap();
        assert!(view.owner.is_some(), "{view:?}");
    }

    async fn bash_call_is_approved_and_its_output_streamed(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo one; echo two"})),
            text("Both lines printed."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "e2e", "alice", false);
        console.send("print two lines").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("y").await;
        let out = console.finish().await;
        assert!(out.contains("  │ one\n  │ two\n"), "{out}");
        assert!(out.contains("Both lines printed."), "{out}");
        s.llm.verify();
        let requests = s.llm.requests();
        assert_eq!(requests.len(), 2);
        let tool_results = contents_with_role(&requests[1], "tool");
        assert_eq!(tool_results.len(), 1);
        assert!(tool_results[0].contains("one\ntwo"), "{tool_results:?}");
        let history = agent.history("console:e2e").await.unwrap();
        let roles: Vec<Role> = history.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
        assert_eq!(history[3].content, "Both lines printed.");
    }

    async fn denial_feedback_reaches_the_model(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "psql prod -c 'drop table users'"})),
            text("Understood, I will use staging."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent, "deny", "alice", false);
        console.send("clean up the users table").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("n, use the staging db").await;
        let out = console.finish().await;
        assert!(out.contains("Understood, I will use staging."), "{out}");
        s.llm.verify();
        let requests = s.llm.requests();
        assert_eq!(contents_with_role(&requests[1], "tool"), ["denied by @alice: use the staging db"]);
        // The denial nudges the model, once, in the note of that call's newest message (the
        // denied call's result), never in the system message.
        let note = crate::suite::newest_content(&requests[1]);
        assert!(note.contains("A tool call was just denied"), "{note}");
        assert!(!requests[1]["messages"][0]["content"].as_str().unwrap().contains("<nudges>"));
        assert!(!requests[0].to_string().contains("<nudges>"));
    }

    async fn approval_feedback_reaches_the_model_with_the_output(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo ran"})),
            text("ok"),
        ]).await;
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "fb", "alice", false);
        console.send("go").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("y, next time use the full path").await;
        console.finish().await;
        let tool = contents_with_role(&s.llm.requests()[1], "tool");
        assert!(tool[0].starts_with("[approved by @alice with a note: next time use the full path]\n"), "{tool:?}");
        assert!(tool[0].contains("ran"), "{tool:?}");
    }

    async fn always_allow_is_remembered_for_the_workstream(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo first"})),
            text("one"),
            tool_call("c2", "bash", json!({"command": "echo second"})),
            text("two"),
            tool_call("c3", "bash", json!({"command": "echo third"})),
            text("three"),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "always", "alice", false);
        console.send("first").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("a").await;
        console.wait_for("one", WAIT).await;
        console.send("second").await;
        let out = console.finish().await;
        assert_eq!(out.matches("approve bash").count(), 1, "{out}");
        assert!(out.contains("  │ second"), "{out}");
        assert_eq!(agent.store().grants("console:always").await.unwrap(), ["bash"]);
        drop(agent);
        // The grant survives a restart.
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent, "always", "alice", false);
        console.send("third").await;
        let out = console.finish().await;
        assert!(!out.contains("approve bash"), "{out}");
        assert!(out.contains("three"), "{out}");
        s.llm.verify();
    }

    async fn ctrl_c_cancels_a_running_bash_call_and_the_console_goes_on(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo started; sleep 30; echo never"})),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "cancel", "alice", false);
        console.send("long job").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("y").await;
        console.wait_for("  │ started", WAIT).await;
        let started = std::time::Instant::now();
        assert!(console.interrupter.interrupt());
        console.wait_for("(turn cancelled)", Duration::from_secs(5)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
        s.llm.push(text("still here"));
        console.send("are you there?").await;
        let out = console.finish().await;
        assert!(out.contains("still here"), "{out}");
        assert!(!out.contains("  │ never\n"), "{out}");
        let history = agent.history("console:cancel").await.unwrap();
        assert_eq!(history[2].role, Role::Tool);
        assert!(history[2].content.starts_with("cancelled"), "{:?}", history[2]);
        // The cancelled call was answered in the next request, as every call must be.
        s.llm.verify();
    }

    async fn ctrl_c_stops_a_streaming_answer_and_keeps_what_was_shown(db) {
        let s = setup(&db, vec![
            Reply::slow_text("one two three four five six seven eight nine ten", Duration::from_millis(300)),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "stream", "alice", false);
        console.send("count slowly").await;
        console.wait_for("two", WAIT).await;
        assert!(console.interrupter.interrupt());
        let out = console.wait_for("(turn cancelled)", Duration::from_secs(5)).await;
        assert!(!out.contains("ten"), "{out}");
        console.finish().await;
        let history = agent.history("console:stream").await.unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[1].role, Role::Assistant);
        assert!(history[1].content.starts_with("one two"), "{:?}", history[1]);
        assert!(history[1].content.ends_with("[stopped]"), "{:?}", history[1]);
    }

    async fn yes_flag_approves_everything_and_primary_key_rescues_bare_strings(db) {
        let s = setup(&db, vec![
            sandpiper_tests::fake_llm::tool_call_raw("c1", "bash", "echo fallback-ok"),
            text("done"),
        ]).await;
        let console = ConsoleRun::start(harness::agent(s.config.clone()).await, "yes", "alice", true);
        console.send("run it").await;
        let out = console.finish().await;
        assert!(!out.contains("approve"), "{out}");
        assert!(out.contains("  │ fallback-ok"), "{out}");
        let tool = contents_with_role(&s.llm.requests()[1], "tool");
        assert!(tool[0].contains("fallback-ok"), "{tool:?}");
        s.llm.verify();
    }
}
