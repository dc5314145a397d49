//! Slack approvals end to end: Block Kit cards, who may click, notes through the modal,
//! always allow, batches, timeouts, and clicks after a restart.

use std::time::Duration;

use sandpiper_channels::config::SlackMode;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{ToolCallSpec, text, tool_call, tool_calls};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack};
use sandpiper_tests::slack_harness::{SlackRun, WAIT, button, configure, is_card, redacted};
use serde_json::json;

use super::slack::socket_run;
use super::{contents_with_role, setup};

fn bash(id: &str, command: &str) -> ToolCallSpec {
    ToolCallSpec::new(id, "bash", json!({"command": command}))
}

both_backends! {
    async fn the_owner_approves_a_card_a_stranger_cannot(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo approved-output"})),
            text("It ran."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "run it").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        insta::assert_snapshot!("slack_card_pending", redacted(&json!({"text": card.text, "blocks": card.blocks})));
        let (approve, value) = button(&card, "Approve");
        let reactions = |slack: &FakeSlack| {
            slack.messages(CHANNEL_ID).into_iter().find(|m| m.ts == root).map(|m| m.reactions).unwrap_or_default()
        };
        // Waiting for a decision is work that outlasts the grace: the mention shows it.
        run.slack.wait_until(WAIT, "the working reaction", |slack| (!reactions(slack).is_empty()).then_some(())).await;
        assert_eq!(reactions(&run.slack), ["hourglass_flowing_sand"], "the mention shows the agent at work");

        run.slack.click(CHANNEL_ID, &card.ts, &bob, &approve, &value).await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "🚫 only the person").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let unchanged = run.card(CHANNEL_ID, &root, 0).await;
        assert_eq!(unchanged.edits, 0, "a refused click changes nothing");
        assert_eq!(s.llm.requests().len(), 1);

        run.slack.click(CHANNEL_ID, &card.ts, &alice, &approve, &value).await;
        let decided = run
            .wait_message(CHANNEL_ID, &root, "the decided card", |m| is_card(m) && m.edits > 0)
            .await;
        insta::assert_snapshot!("slack_card_approved", redacted(&json!({"text": decided.text, "blocks": decided.blocks})));
        run.wait_message(CHANNEL_ID, &root, "the tool output", |m| m.text.contains("approved-output") && m.text.contains(":white_check_mark:")).await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "It ran.").await;
        run.slack.wait_until(WAIT, "the working reaction taken off", |slack| reactions(slack).is_empty().then_some(())).await;
        s.llm.verify();
    }

    async fn deny_with_a_note_goes_through_the_modal_to_the_model(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "rm -rf build"})),
            text("OK, I will use staging."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "clean up").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (deny_note, value) = button(&card, "Deny with note");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &deny_note, &value).await;
        let view = run.slack.wait_until(sandpiper_tests::slack_harness::WAIT, "the note modal", |s| s.opened_views().into_iter().next()).await;
        assert_eq!(view["callback_id"], "ap_note");
        run.slack.view_submission(&alice, view, &[("note", "note", "use the staging box")]).await;
        let decided = run
            .wait_message(CHANNEL_ID, &root, "the denied card", |m| is_card(m) && m.text.contains("Denied"))
            .await;
        assert!(decided.text.contains("note: \"use the staging box\""), "{}", decided.text);
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "OK, I will use staging.").await;
        let tool = contents_with_role(&s.llm.requests()[1], "tool");
        assert!(tool[0].contains("use the staging box"), "{tool:?}");
        s.llm.verify();
    }

    async fn always_allow_skips_the_next_card(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo first"})),
            text("First done."),
            tool_call("c2", "bash", json!({"command": "echo second"})),
            text("Second done."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "go").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (always, value) = button(&card, "Always allow");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &always, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the first answer", |m| m.text == "First done.").await;
        run.slack.thread_message(CHANNEL_ID, &root, &alice, "again").await;
        run.wait_message(CHANNEL_ID, &root, "the second answer", |m| m.text == "Second done.").await;
        let cards = run.thread(CHANNEL_ID, &root).into_iter().filter(is_card).count();
        assert_eq!(cards, 1, "no second card");
        assert!(run.thread(CHANNEL_ID, &root).iter().any(|m| m.text.contains("second") && m.text.contains(":white_check_mark:")));
        s.llm.verify();
    }

    async fn approve_all_decides_a_batch_of_three(db) {
        let s = setup(&db, vec![
            tool_calls(vec![bash("c1", "echo one"), bash("c2", "echo two"), bash("c3", "echo three")]),
            text("All three ran."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "three things").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        assert_eq!(card.blocks.to_string().matches("ap_row:").count(), 3);
        let (all, value) = button(&card, "Approve all");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &all, &value).await;
        let decided = run
            .wait_message(CHANNEL_ID, &root, "the decided card", |m| is_card(m) && m.text.matches("Approved by @alice").count() == 3)
            .await;
        assert!(!decided.blocks.to_string().contains("\"button\""), "no buttons left");
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "All three ran.").await;
        let tools = contents_with_role(&s.llm.requests()[1], "tool");
        assert_eq!(tools.len(), 3);
        assert!(tools[2].contains("three"), "{tools:?}");
        s.llm.verify();
    }

    async fn an_undecided_card_times_out_as_denied(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo never"})),
            text("Not run, then."),
        ]).await;
        s.config.approval.timeout = Duration::from_secs(1);
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "try it").await;
        run.card(CHANNEL_ID, &root, 0).await;
        let timed_out = run
            .wait_message(CHANNEL_ID, &root, "the timed-out card", |m| is_card(m) && m.text.contains("no decision within 1 s"))
            .await;
        assert!(!timed_out.blocks.to_string().contains("\"button\""));
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "Not run, then.").await;
        s.llm.verify();
    }

    async fn a_click_after_a_restart_resumes_the_turn(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo after-restart"})),
            text("Resumed and done."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "run it later").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let slack = run.stop().await;
        slack.disconnect().await;

        let mut config = s.config.clone();
        configure(&mut config, &slack, SlackMode::Socket);
        let run = SlackRun::start(config, slack).await;
        let (approve, value) = button(&card, "Approve");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &approve, &value).await;
        // The decision is kept and the card says the turn stopped; nothing runs by itself.
        let kept = run.wait_message(CHANNEL_ID, &root, "the card of the interrupted turn", |m| {
            is_card(m) && m.text.contains("Approved by @alice") && m.text.contains("Your decision is kept")
        }).await;
        assert!(kept.text.contains("The turn that asked was interrupted (sandpiper restarted or the node running it stopped)."), "{}", kept.text);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(s.llm.requests().len(), 1, "not resumed silently");
        let (resume, value) = button(&kept, "Resume");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &resume, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the card says who resumed", |m| is_card(m) && m.text.contains("Resumed by @alice")).await;
        run.wait_message(CHANNEL_ID, &root, "the tool output", |m| m.text.contains("after-restart") && m.text.contains(":white_check_mark:")).await;
        run.wait_message(CHANNEL_ID, &root, "the resumed answer", |m| m.text == "Resumed and done.").await;
        s.llm.verify();
    }

    async fn an_approver_group_member_decides_and_long_output_is_uploaded(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "seq 1 40"})),
            text("Counted."),
        ]).await;
        s.config.slack.approver_usergroups = vec!["S0ADMINS".into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup("S0ADMINS", &["U0BOB"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "count").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (always, value) = button(&card, "Always allow");
        run.slack.click(CHANNEL_ID, &card.ts, &bob, &always, &value).await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "🚫 only the person").await;
        let (approve, value) = button(&card, "Approve");
        run.slack.click(CHANNEL_ID, &card.ts, &bob, &approve, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the card decided by bob", |m| is_card(m) && m.text.contains("Approved by @bob")).await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "Counted.").await;
        let line = run.wait_message(CHANNEL_ID, &root, "the tool line", |m| m.text.contains("full output attached")).await;
        assert!(line.text.contains("40") && !line.text.contains("\n1\n"), "only the tail is shown: {}", line.text);
        let files = run.slack.uploaded_files();
        assert_eq!(files.len(), 1);
        let (name, bytes, channel, thread) = &files[0];
        assert_eq!(name, "bash-output.txt");
        assert_eq!(String::from_utf8_lossy(bytes).lines().count(), 40);
        assert_eq!((channel.as_deref(), thread.as_deref()), (Some(CHANNEL_ID), Some(root.as_str())));
        s.llm.verify();
    }
}

both_backends! {
    // A decision from the status page (the engine's web path) redraws the Slack card, which
    // says who decided and that it was from the web, and the turn goes on.
    async fn a_decision_from_the_status_page_redraws_the_slack_card(db) {
        use sandpiper_agent::approvals::ClickAction;
        use sandpiper_agent::approvals::{Click, ClickOutcome, Clicker};
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo from-the-web"})),
            text("It ran."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "run it").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        assert_eq!(card.edits, 0);
        let pending = run.agent.store().pending_approvals().await.unwrap();
        assert_eq!(pending.len(), 1);
        let owner = pending[0].approvers.as_ref().and_then(|a| a.owner.clone()).expect("an owner");
        let outcome = run.agent.decide_from_web(Click {
            request_id: &pending[0].id,
            action: ClickAction::Approve,
            clicker: Clicker { user_id: &owner, roles: &[], approver_roles: &[] },
            note: None,
            path: sandpiper_agent::protocol::DecisionPath::Web,
            grant: None,
        }).await.unwrap();
        assert!(matches!(outcome, ClickOutcome::Decided { .. }), "{outcome:?}");
        let decided = run
            .wait_message(CHANNEL_ID, &root, "the card redrawn", |m| is_card(m) && m.edits > 0)
            .await;
        assert!(decided.text.contains("Approved by @alice from the status page"), "{}", decided.text);
        assert!(!decided.blocks.to_string().contains("\"button\""), "no buttons left");
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "It ran.").await;
        s.llm.verify();
    }
}
