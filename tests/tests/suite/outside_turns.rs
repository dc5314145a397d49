//! The seams the background features build on (issue #11), through both fakes and the
//! console: a turn started from outside a chat message ("run this synthetic message in
//! workstream K and show it in its thread"), and a review gate (Accept / Reject / Annotate)
//! asked through the same cards, rules and store as tool approvals.

use sandpiper_agent::approvals::{ReviewAnswer, ReviewRequest, review};
use sandpiper_agent::protocol::ApprovalStatus;
use sandpiper_agent::protocol::{TurnEvent, TurnSink as _};
use sandpiper_channels::thread::{OutsideTurn, StartError, Starters, Work};
use sandpiper_channels::turns::Queued;
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button, buttons, card_text};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID, TEAM_ID};
use sandpiper_tests::harness::{self, ConsoleRun};
use sandpiper_tests::slack_harness::{self, is_card};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::slack::socket_run;
use super::{contents_with_role, setup};

const ONCALL: u64 = 700_000_000_000_000_001;
const SYNTHETIC: &str = "The watch `ci` fired: the pipeline is green.";
const SHOWN: &str = "🔔 Watch `ci` fired";

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}

fn fired(workstream: &str) -> OutsideTurn {
    OutsideTurn {
        workstream: workstream.to_owned(),
        work: Work::Message {
            author: None,
            text: SYNTHETIC.into(),
            shown: Some(SHOWN.into()),
            place: None,
            charged_to: None,
        },
    }
}

/// Asks for a review of a plan in `workstream` through `thread`'s card approver, in the
/// background; the handle yields the answer.
fn ask_review(
    agent: sandpiper_agent::Agent,
    thread: sandpiper_channels::thread::OpenThread,
    workstream: String,
) -> tokio::task::JoinHandle<ReviewAnswer> {
    tokio::spawn(async move {
        let cancel = CancellationToken::new();
        let answer = review(
            &agent,
            &thread.approver,
            ReviewRequest {
                workstream: &workstream,
                call_id: "plan-1",
                tool: "plan",
                header: "plan: move the database",
                preview: "1. dump\n2. restore\n3. switch over",
                requested_by: None,
                cancel: &cancel,
            },
        )
        .await
        .expect("the review is stored");
        thread.sink.event(TurnEvent::TurnComplete {
            text: String::new(),
            cancelled: false,
        });
        answer
    })
}

both_backends! {
    async fn an_outside_turn_runs_in_its_discord_thread_and_asks_like_any_other(db) {
        let s = setup(&db, vec![
            text("hello alice"),
            tool_call("c1", "bash", json!({"command": "echo checked"})),
            text("CI is green and the check passed."),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "watch CI for me").await;
        rig.wait_text(thread, "hello alice").await;
        let key = format!("discord:{thread}");

        let mut starters = Starters::default();
        starters.add(rig.channel().starter());
        // Queued in the thread's lane (behind the first turn if its lane job is still ending).
        assert!(matches!(starters.start(fired(&key)), Ok(Queued::Now | Queued::Behind(1))));
        rig.wait_text(thread, SHOWN).await;
        // Its tool call asks in the thread, decided by the thread's owner as always.
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        rig.wait_text(thread, "CI is green and the check passed.").await;
        let requests = s.llm.requests();
        assert_eq!(contents_with_role(&requests[1], "user").last().map(String::as_str), Some(SYNTHETIC));
        let history = rig.agent.history(&key).await.unwrap();
        assert!(history.iter().any(|m| m.content == SYNTHETIC), "the synthetic message is part of the workstream");

        // A key no running platform owns is refused, never guessed.
        assert_eq!(
            starters.start(fired("slack:T1:C1:1.2")),
            Err(StartError::NoChannel("slack:T1:C1:1.2".into()))
        );
        assert!(matches!(starters.start(fired("discord:0")), Err(StartError::NoChannel(_))));
        s.llm.verify();
    }

    async fn a_review_gate_on_discord_is_accepted_rejected_or_annotated_by_who_may_decide(db) {
        let mut s = setup(&db, vec![text("hello alice")]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "plan the move").await;
        rig.wait_text(thread, "hello alice").await;
        let key = format!("discord:{thread}");

        // Annotate, by an approver, through the note dialog.
        let asked = ask_review(rig.agent.clone(), rig.channel().open_thread(&key).unwrap(), key.clone());
        let card = rig.card(thread).await;
        let labels: Vec<String> = buttons(&card).into_iter().map(|(_, l, _)| l).collect();
        assert_eq!(labels, ["Accept", "Reject", "Annotate"]);
        assert!(card_text(&card).contains("Review needed"), "{}", card_text(&card));
        assert!(card_text(&card).contains("2. restore"), "the plan is on the card");
        // A participant may not decide it (the same rules as tool calls).
        let click = rig.fake.click(thread, card.id, &bob(), &button(&card, "Accept", 0)).await;
        let reply: Value = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(click).pop()).await;
        assert!(reply["data"]["content"].as_str().unwrap_or_default().contains("only the person who started this thread"), "{reply}");
        let annotate = button(&card, "Annotate", 0);
        let click = rig.fake.click(thread, card.id, &carol(), &annotate).await;
        let modal: Value = rig.fake.wait_until(WAIT, "the note dialog", |f| f.interaction_responses(click).pop()).await;
        assert_eq!(modal["type"], json!(9), "a modal: {modal}");
        rig.fake
            .modal_submit(thread, Some(card.id), &carol(), &format!("n{annotate}"), &[("note", "dump with --no-owner")])
            .await;
        assert_eq!(
            asked.await.unwrap(),
            ReviewAnswer::Annotated { by: Some("@carol".into()), note: "dump with --no-owner".into() }
        );
        rig.wait_message(thread, card.id, "📝 Annotated by @carol").await;

        // Reject by the owner, and Accept: each answer reaches the asker.
        let asked = ask_review(rig.agent.clone(), rig.channel().open_thread(&key).unwrap(), key.clone());
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Reject", 0)).await;
        assert_eq!(asked.await.unwrap(), ReviewAnswer::Rejected { by: Some("@alice".into()), note: None });
        rig.wait_message(thread, card.id, "Rejected by @alice").await;
        let asked = ask_review(rig.agent.clone(), rig.channel().open_thread(&key).unwrap(), key.clone());
        let card = rig.card(thread).await;
        // A tool-call answer forged onto a review is refused.
        let forged = button(&card, "Accept", 0).replace(":ok", ":aa");
        let click = rig.fake.click(thread, card.id, &alice(), &forged).await;
        let reply: Value = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(click).pop()).await;
        assert!(reply["data"]["content"].as_str().unwrap_or_default().contains("not an answer to this request"), "{reply}");
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Accept", 0)).await;
        assert_eq!(asked.await.unwrap(), ReviewAnswer::Accepted { by: Some("@alice".into()) });
        rig.wait_message(thread, card.id, "Accepted by @alice").await;
    }

    async fn an_outside_turn_and_a_review_gate_on_slack(db) {
        let mut s = setup(&db, vec![
            text("hello alice"),
            text("Noted: CI is green."),
        ]).await;
        s.config.slack.approver_usergroups = vec!["S0ONCALL".into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup("S0ONCALL", &["U0CAROL"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let carol = run.slack.user("U0CAROL", "carol");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "watch CI").await;
        run.wait_message(CHANNEL_ID, &root, "the greeting", |m| m.text == "hello alice").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");

        let mut starters = Starters::default();
        starters.add(run.channel.starter());
        // Queued in the thread's lane (behind the first turn if its lane job is still ending).
        assert!(matches!(starters.start(fired(&key)), Ok(Queued::Now | Queued::Behind(1))));
        run.wait_message(CHANNEL_ID, &root, "the synthetic message shown", |m| m.text.contains("Watch `ci` fired")).await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "Noted: CI is green.").await;
        assert_eq!(contents_with_role(&s.llm.requests()[1], "user").last().map(String::as_str), Some(SYNTHETIC));
        assert!(matches!(starters.start(fired("discord:1")), Err(StartError::NoChannel(_))));

        // The review gate: a participant is refused, an approver annotates through the modal.
        let asked = ask_review(run.agent.clone(), run.channel.open_thread(&key).unwrap(), key.clone());
        let card = run.card(CHANNEL_ID, &root, 0).await;
        assert!(card.text.contains("Review needed"), "{}", card.text);
        let labels: Vec<String> = slack_harness::action_ids(&card);
        assert!(labels.iter().any(|a| a.ends_with(":nt")) && labels.iter().any(|a| a.ends_with(":rj")), "{labels:?}");
        let (accept, value) = slack_harness::button(&card, "Accept");
        run.slack.click(CHANNEL_ID, &card.ts, &bob, &accept, &value).await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "🚫 only the person").await;
        let (annotate, value) = slack_harness::button(&card, "Annotate");
        run.slack.click(CHANNEL_ID, &card.ts, &carol, &annotate, &value).await;
        let view = run.slack.wait_until(WAIT, "the note modal", |s| s.opened_views().into_iter().next()).await;
        assert_eq!(view["title"]["text"], "Annotate");
        run.slack.view_submission(&carol, view, &[("note", "note", "dump first")]).await;
        assert_eq!(
            asked.await.unwrap(),
            ReviewAnswer::Annotated { by: Some("@carol".into()), note: "dump first".into() }
        );
        run.wait_message(CHANNEL_ID, &root, "the annotated card", |m| is_card(m) && m.text.contains("Annotated by @carol")).await;

        let asked = ask_review(run.agent.clone(), run.channel.open_thread(&key).unwrap(), key.clone());
        let card = run.card(CHANNEL_ID, &root, 1).await;
        let (reject, value) = slack_harness::button(&card, "Reject");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &reject, &value).await;
        assert_eq!(asked.await.unwrap(), ReviewAnswer::Rejected { by: Some("@alice".into()), note: None });
        s.llm.verify();
        run.stop().await;
    }

    async fn an_outside_turn_runs_in_the_console_between_typed_messages(db) {
        let s = setup(&db, vec![
            text("first answer"),
            tool_call("c1", "bash", json!({"command": "echo from-the-watch"})),
            text("The watch's check ran."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "bg", "alice", false);
        console.send("hello").await;
        console.wait_for("first answer", WAIT).await;
        assert!(matches!(
            console.starter.start(fired("console:other")),
            Err(StartError::NoChannel(_))
        ));
        console.starter.start(fired("console:bg")).expect("queued");
        console.wait_for("approve bash", WAIT).await;
        console.send("y").await;
        console.wait_for("The watch's check ran.", WAIT).await;
        let out = console.finish().await;
        assert!(out.contains(SHOWN), "{out}");
        let requests = s.llm.requests();
        assert_eq!(contents_with_role(&requests[1], "user").last().map(String::as_str), Some(SYNTHETIC));
        let stored = agent.store().approval_for_call("console:bg", "c1").await.unwrap().unwrap().view();
        assert_eq!(stored.status, ApprovalStatus::Approved);
        assert_eq!(stored.decided_by.as_deref(), Some("@alice"));
        s.llm.verify();
    }
}

both_backends! {
    async fn a_card_that_cannot_be_posted_denies_at_once_and_says_why_on_both_platforms(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo never"})),
            text("Discord: understood, it was denied."),
            tool_call("c2", "bash", json!({"command": "echo never"})),
            text("Slack: understood, it was denied."),
        ]).await;
        // Discord: the card's POST fails with a 400 (as for a card Discord will not take).
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        rig.fake.fail_next_with_body("POST", "Approval needed", sandpiper_tests::fake_discord::Failure::Status(400), 1);
        let thread = rig.mention(&alice(), "run it").await;
        rig.wait_text(thread, "could not post the approval card").await;
        rig.wait_text(thread, "Discord: understood, it was denied.").await;
        let key = format!("discord:{thread}");
        let stored = rig.agent.store().approval_for_call(&key, "c1").await.unwrap().unwrap().view();
        assert_eq!(stored.status, ApprovalStatus::Denied);
        let tool = contents_with_role(&s.llm.requests()[1], "tool");
        assert!(tool[0].contains("could not be posted"), "{tool:?}");
        drop(rig);

        // Slack: the same rule (it used to wait for the timeout).
        let run = socket_run(&s).await;
        run.slack.refuse_calls_containing("chat.postMessage", "ap_row:", "invalid_blocks");
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "run it").await;
        run.wait_message(CHANNEL_ID, &root, "the notice", |m| m.text.contains("could not post the approval card")).await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "Slack: understood, it was denied.").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let stored = run.agent.store().approval_for_call(&key, "c2").await.unwrap().unwrap().view();
        assert_eq!(stored.status, ApprovalStatus::Denied);
        s.llm.verify();
        run.stop().await;
    }
}
