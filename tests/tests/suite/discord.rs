//! The Discord channel end to end: the real serenity client inside `DiscordChannel`, a fake
//! Discord on 127.0.0.1, the scripted model, and both databases.

use std::time::Duration;

use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{
    DiscordRig, WAIT, button, buttons, card_text, open_buttons,
};
use sandpiper_tests::fake_discord::{CHANNEL_ID, Failure, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{Reply, text, tool_call};
use serde_json::json;

use super::setup;

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

/// Everything the model was sent, as one string per request.
fn sent(llm: &sandpiper_tests::fake_llm::FakeLlm) -> Vec<String> {
    llm.requests().iter().map(|r| r.to_string()).collect()
}

both_backends! {
    async fn a_mention_opens_a_thread_and_the_answer_streams_into_it(db) {
        let s = setup(&db, vec![
            // Long enough (over SHOW_PROGRESS_AFTER) to show the bot typing.
            Reply::slow_text("The build is red because of a flaky test.", Duration::from_millis(150)),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "why is   the build red?").await;
        let answer = rig.wait_text(thread, "flaky test.").await;
        let t = rig.fake.threads().into_iter().find(|t| t.id == thread).unwrap();
        assert_eq!((t.name.as_str(), t.parent_id), ("why is the build red?", CHANNEL_ID));
        assert!(answer.edits >= 1, "streamed by editing one message: {answer:?}");
        assert_eq!(rig.bot_messages(thread).len(), 1);
        assert!(rig.fake.typing_count(thread) >= 1);
        assert_eq!(answer.allowed_mentions["parse"], json!([]));
        // The final edit removed the Stop button.
        rig.fake.wait_until(WAIT, "stop button removed", |_| {
            rig.bot_messages(thread)[0].components.as_array().is_some_and(|c| c.is_empty()).then_some(())
        }).await;
        let ws = rig.agent.workstream(&format!("discord:{thread}")).await.unwrap().unwrap();
        let owner = rig.agent.store().user(ws.owner.as_deref().unwrap()).await.unwrap().unwrap();
        assert_eq!(owner.username, "discord-900000000000000001");
        let first = &s.llm.requests()[0];
        assert!(first.to_string().contains("why is   the build red?"), "{first}");
    }

    async fn a_long_answer_is_split_with_the_code_block_closed_and_reopened(db) {
        let mut answer = String::from("Here you go:\n```sh\n");
        for i in 0..120 {
            answer.push_str(&format!("echo 'step {i} of the long deployment script'\n"));
        }
        answer.push_str("```\nThat is all.");
        let s = setup(&db, vec![text(&answer)]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "write the script").await;
        rig.wait_text(thread, "That is all.").await;
        let parts: Vec<String> = rig.bot_messages(thread).into_iter().map(|m| m.content).collect();
        assert!(parts.len() >= 3, "{parts:?}");
        for p in &parts {
            assert!(p.chars().count() <= 2000);
            assert_eq!(p.matches("```").count() % 2, 0, "fences balanced: {p}");
        }
        assert!(parts[1].starts_with("```sh\n"), "reopened with its language: {}", parts[1]);
        let joined: String = parts.join("\n");
        assert!(joined.contains("step 0 of") && joined.contains("step 119 of"));
        insta::assert_snapshot!("discord_split_answer", parts.iter().map(|p| format!("{} chars, starts {:?}, ends {:?}", p.chars().count(), &p[..p.find('\n').unwrap_or(p.len())], p.lines().last().unwrap_or_default())).collect::<Vec<_>>().join("\n"));
    }

    async fn a_stranger_is_refused_and_the_owner_approves_and_the_output_streams(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "for i in 1 2 3; do echo line-$i; done"})),
            text("Ran it."),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "run the loop").await;
        let card = rig.card(thread).await;
        assert!(card_text(&card).contains("for i in 1 2 3"), "{}", card_text(&card));
        assert_eq!(open_buttons(&card).len(), 5);

        let refused = rig.fake.click(thread, card.id, &bob(), &button(&card, "Approve", 0)).await;
        let reply = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(refused).pop()).await;
        assert_eq!(reply["data"]["flags"], json!(64), "ephemeral: {reply}");
        assert!(reply["data"]["content"].as_str().unwrap().contains("only the person who started this thread"));
        assert_eq!(open_buttons(&rig.card(thread).await).len(), 5, "nothing changed");

        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        rig.wait_text(thread, "Ran it.").await;
        let decided = rig.wait_message(thread, card.id, "Approved by @alice at").await;
        assert!(open_buttons(&decided).is_empty(), "buttons disabled after the decision");
        assert!(card_text(&decided).contains("Approved by @alice at"), "{}", card_text(&decided));
        let line = rig.wait_text(thread, "✅ **bash**").await;
        assert!(line.content.contains("line-3"), "{}", line.content);
        assert!(sent(&s.llm)[1].contains("line-2"));
    }

    async fn deny_with_a_note_reaches_the_model(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "psql prod"})),
            text("Understood, staging it is."),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "check the db").await;
        let card = rig.card(thread).await;
        let click = rig.fake.click(thread, card.id, &alice(), &button(&card, "Deny with note", 0)).await;
        let modal = rig.fake.wait_until(WAIT, "the note dialog", |f| f.interaction_responses(click).pop()).await;
        assert_eq!(modal["type"], json!(9), "{modal}");
        let modal_id = modal["data"]["custom_id"].as_str().unwrap().to_owned();
        rig.fake.modal_submit(thread, Some(card.id), &alice(), &modal_id, &[("note", "use the staging db")]).await;
        rig.wait_text(thread, "staging it is").await;
        let result = &sent(&s.llm)[1];
        assert!(result.contains("use the staging db") && result.contains("denied"), "{result}");
        let decided = rig.wait_message(thread, card.id, "Denied by @alice").await;
        assert!(card_text(&decided).contains("Denied by @alice"), "{}", card_text(&decided));
    }

    async fn always_allow_skips_the_next_card(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo one"})),
            text("first done"),
            tool_call("c2", "bash", json!({"command": "echo two"})),
            text("second done"),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "echo one").await;
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Always allow", 0)).await;
        rig.wait_text(thread, "first done").await;
        rig.fake.user_message(thread, &alice(), "now echo two").await;
        rig.wait_text(thread, "second done").await;
        let cards = rig.bot_messages(thread).into_iter().filter(|m| card_text(m).contains("Approval")).count();
        assert_eq!(cards, 1, "no second card");
        assert!(sent(&s.llm)[3].contains("two"));
    }

    async fn approve_all_runs_a_batch_of_three(db) {
        let calls = (1..=3).map(|i| sandpiper_tests::fake_llm::ToolCallSpec::new(
            format!("c{i}"), "bash", json!({"command": format!("echo batch-{i}")}),
        )).collect();
        let s = setup(&db, vec![Reply::tool_calls(calls), text("all three ran")]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "run three").await;
        let card = rig.card(thread).await;
        assert!(card.content.contains("3 of 3 calls waiting"), "{}", card.content);
        insta::assert_snapshot!("discord_batch_card", card_text(&card));
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve all", 0)).await;
        rig.wait_text(thread, "all three ran").await;
        let result = &sent(&s.llm)[1];
        for i in 1..=3 {
            assert!(result.contains(&format!("batch-{i}")), "{result}");
        }
        let decided = rig.wait_message(thread, card.id, "3 calls decided").await;
        assert!(open_buttons(&decided).is_empty());
        assert_eq!(card_text(&decided).matches("Approved by @alice").count(), 3);
    }

    async fn an_undecided_approval_times_out_as_denied_on_the_card(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "make deploy"})),
            text("Nobody answered, so I did not deploy."),
        ]).await;
        s.config.approval.timeout = Duration::from_secs(1);
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "deploy").await;
        let card = rig.card(thread).await;
        rig.wait_text(thread, "did not deploy").await;
        let timed_out = rig.fake.wait_until(WAIT, "the card to show the timeout", |f| {
            f.messages(thread).into_iter().find(|m| m.id == card.id && card_text(m).contains("no decision within"))
        }).await;
        assert!(open_buttons(&timed_out).is_empty());
        assert!(sent(&s.llm)[1].contains("no decision within"));
    }

    async fn a_click_after_a_restart_resumes_the_turn(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo survived-restart"})),
            text("Done after the restart."),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "echo across a restart").await;
        let card = rig.card(thread).await;
        let rig = rig.restart().await;
        let click = rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        rig.fake.wait_until(WAIT, "the click answered", |f| f.interaction_responses(click).pop()).await;
        // The decision is kept and the card says the turn stopped; nothing runs by itself.
        let kept = rig.wait_message(thread, card.id, "Your decision is kept").await;
        assert!(card_text(&kept).contains("Approved by @alice"), "{}", card_text(&kept));
        assert!(card_text(&kept).contains("The turn that asked was interrupted (sandpiper restarted or the node running it stopped)."));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(s.llm.requests().len(), 1, "not resumed silently");
        rig.fake.click(thread, card.id, &alice(), &button(&kept, "Resume", 0)).await;
        rig.wait_text(thread, "Done after the restart.").await;
        assert!(sent(&s.llm)[1].contains("survived-restart"));
        let resumed = rig.wait_message(thread, card.id, "Resumed by @alice").await;
        assert!(!buttons(&resumed).iter().any(|(_, label, _)| label == "Resume"), "Resume is gone");
        s.llm.verify();
    }

    async fn a_click_after_a_restart_and_the_timeout_counts_as_no_decision(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo too-late"})),
            text("It timed out, so I did not run it."),
        ]).await;
        s.config.approval.timeout = Duration::from_secs(2);
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "echo later").await;
        let card = rig.card(thread).await;
        let rig = rig.restart().await;
        tokio::time::sleep(Duration::from_millis(2200)).await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        let decided = rig.wait_message(thread, card.id, "no decision within 2 s").await;
        assert!(card_text(&decided).contains("Your decision is kept"), "{}", card_text(&decided));
        rig.fake.click(thread, card.id, &alice(), &button(&decided, "Resume", 0)).await;
        rig.wait_text(thread, "did not run it").await;
        assert!(!sent(&s.llm)[1].contains("too-late\\n"), "it did not run");
    }

    async fn a_message_during_a_turn_is_queued_and_answered_after_it(db) {
        let s = setup(&db, vec![
            // Still running a while after the second message (SHOW_PROGRESS_AFTER).
            Reply::slow_text("first answer, slowly", Duration::from_millis(800)),
            text("second answer"),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "first question").await;
        rig.fake.wait_until(WAIT, "the first turn to start", |_| (!rig.bot_messages(thread).is_empty()).then_some(())).await;
        rig.fake.user_message(thread, &bob(), "second question").await;
        rig.wait_text(thread, "Queued").await;
        rig.wait_text(thread, "second answer").await;
        let requests = sent(&s.llm);
        assert_eq!(requests.len(), 2);
        assert!(!requests[0].contains("second question"), "never run in parallel");
        assert!(requests[1].contains("first answer, slowly") && requests[1].contains("second question"));
    }

    async fn stop_cancels_the_running_turn(db) {
        let s = setup(&db, vec![
            Reply::slow_text("word ".repeat(200), Duration::from_millis(50)),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "talk a lot").await;
        rig.wait_text(thread, "word").await;
        let stop = rig.fake.slash(thread, &alice(), "stop", json!([])).await;
        let reply = rig.fake.wait_until(WAIT, "the stop reply", |f| f.interaction_responses(stop).pop()).await;
        assert!(reply["data"]["content"].as_str().unwrap().contains("Stopping"), "{reply}");
        let stopped = rig.wait_text(thread, "(stopped)").await;
        assert!(stopped.content.matches("word").count() < 200);
    }

    async fn a_gateway_disconnect_resumes_without_losing_the_message(db) {
        let s = setup(&db, vec![text("first"), text("after the resume")]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hello").await;
        rig.wait_text(thread, "first").await;
        rig.fake.disconnect().await;
        rig.fake.user_message(thread, &alice(), "are you still there?").await;
        rig.wait_text(thread, "after the resume").await;
        assert_eq!((rig.fake.identify_count(), rig.fake.resume_count()), (1, 1));
        assert!(sent(&s.llm)[1].contains("are you still there?"));
    }

    async fn rate_limits_and_server_errors_are_retried_without_losing_output(db) {
        let s = setup(&db, vec![text("an answer that must arrive")]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        rig.fake.fail_next("POST", "/messages", Failure::RateLimited { retry_after: 0.05, global: false }, 2);
        rig.fake.fail_next("PATCH", "/messages", Failure::Status(502), 1);
        let thread = rig.mention(&alice(), "say it").await;
        rig.wait_text(thread, "must arrive").await;
        let failed = rig.fake.requests().iter().filter(|r| r.status == 429 || r.status == 502).count();
        assert!(failed >= 2, "the fake refused requests");
        assert_eq!(rig.bot_messages(thread).len(), 1);
    }
}
