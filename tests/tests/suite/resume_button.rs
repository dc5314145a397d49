//! Resume on Discord (issue 17, durable approvals): a card whose turn stopped running (here, a
//! restart) keeps the decisions clicked on it, says the turn was interrupted, and offers
//! **Resume** once every request is decided. Four people: alice owns the thread, carol holds
//! the approver role, bob talks in alice's thread (his message causes the call), dave is a
//! stranger. The owner or an approver may resume; the participant and the stranger are told
//! privately why not; a repeated or forged Resume changes nothing. Slack's twin is
//! `resume_button_slack`.

use std::time::Duration;

use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button, buttons, card_text};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeMessage, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use serde_json::{Value, json};

use super::setup;

const ONCALL: u64 = 700_000_000_000_000_001;

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}

fn dave() -> FakeUser {
    FakeUser::new(900_000_000_000_000_004, "dave")
}

const NOT_YOURS: &str =
    "only the person who started this thread, or an approver, can resume its turn";

/// `who` clicks the button `custom_id` on `card` and gets a private answer containing `said`;
/// the card stays as it was.
async fn told_privately(
    rig: &DiscordRig,
    thread: u64,
    card: &FakeMessage,
    who: &FakeUser,
    custom_id: &str,
    said: &str,
) {
    let current = |rig: &DiscordRig| {
        rig.fake
            .messages(thread)
            .into_iter()
            .find(|m| m.id == card.id)
            .expect("the card")
    };
    let before = current(rig);
    let click = rig.fake.click(thread, card.id, who, custom_id).await;
    let reply: Value = rig
        .fake
        .wait_until(WAIT, "the private answer", |f| {
            f.interaction_responses(click).pop()
        })
        .await;
    assert_eq!(reply["data"]["flags"], json!(64), "private: {reply}");
    let text = reply["data"]["content"].as_str().unwrap_or_default();
    assert!(
        text.contains(said),
        "{} clicking {custom_id}: {text}",
        who.name
    );
    assert_eq!(buttons(&current(rig)), buttons(&before), "nothing changed");
}

/// bob's message in alice's thread causes a call; sandpiper restarts while it waits; `decider`
/// approves it. Returns the restarted rig and the card as it then stands (with Resume).
async fn interrupted(
    rig: DiscordRig,
    thread: u64,
    decider: &FakeUser,
    ask: &str,
) -> (DiscordRig, FakeMessage) {
    rig.fake.user_message(thread, &bob(), ask).await;
    let card = rig.card(thread).await;
    let rig = rig.restart().await;
    rig.fake
        .click(thread, card.id, decider, &button(&card, "Approve", 0))
        .await;
    let kept = rig
        .wait_message(thread, card.id, "Your decision is kept")
        .await;
    assert!(
        card_text(&kept).contains(&format!("Approved by @{}", decider.name)),
        "{}",
        card_text(&kept)
    );
    (rig, kept)
}

both_backends! {
    async fn resume_is_pressed_by_the_owner_or_an_approver_and_refused_to_the_others(db) {
        let mut s = setup(&db, vec![
            text("hello alice"),
            tool_call("c1", "bash", json!({"command": "echo first-resumed"})),
            text("ran the first after the restart"),
            tool_call("c2", "bash", json!({"command": "echo second-resumed"})),
            text("ran the second after the restart"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        rig.wait_text(thread, "hello alice").await;

        // The participant and the stranger may not resume; the approver may.
        let (rig, card) = interrupted(rig, thread, &alice(), "print the environment").await;
        let resume = button(&card, "Resume", 0);
        told_privately(&rig, thread, &card, &bob(), &resume, NOT_YOURS).await;
        told_privately(&rig, thread, &card, &dave(), &resume, NOT_YOURS).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(s.llm.requests().len(), 2, "nothing resumed");
        rig.fake.click(thread, card.id, &carol(), &resume).await;
        rig.wait_text(thread, "ran the first after the restart").await;
        rig.wait_message(thread, card.id, "Resumed by @carol").await;
        assert!(s.llm.requests()[2].to_string().contains("first-resumed"));

        // Pressed again (a double click, a stale card): nothing left to resume.
        told_privately(&rig, thread, &card, &alice(), &resume, "nothing left to resume").await;
        // A forged Resume naming no stored request.
        let forged = rig.fake.click(thread, card.id, &alice(), "rs:ap_0000feedface").await;
        let reply = rig.fake.wait_until(WAIT, "the forged click's answer", |f| f.interaction_responses(forged).pop()).await;
        assert!(reply["data"]["content"].as_str().unwrap_or_default().contains("no record"), "{reply}");

        // The owner resumes the next interrupted turn, which an approver decided.
        let (rig, card) = interrupted(rig, thread, &carol(), "and once more").await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Resume", 0)).await;
        rig.wait_text(thread, "ran the second after the restart").await;
        rig.wait_message(thread, card.id, "Resumed by @alice").await;
        assert!(s.llm.requests()[4].to_string().contains("second-resumed"));
        s.llm.verify();
    }

    async fn resume_waits_until_every_request_of_the_turn_is_decided(db) {
        let s = setup(&db, vec![
            sandpiper_tests::fake_llm::Reply::tool_calls(vec![
                sandpiper_tests::fake_llm::ToolCallSpec::new("c1", "bash", json!({"command": "echo one"})),
                sandpiper_tests::fake_llm::ToolCallSpec::new("c2", "bash", json!({"command": "echo two"})),
            ]),
            text("one ran, two did not"),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "two things").await;
        let card = rig.card(thread).await;
        let rig = rig.restart().await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        let half = rig.wait_message(thread, card.id, "Resume is offered once every request of that turn is decided").await;
        assert!(!buttons(&half).iter().any(|(_, label, _)| label == "Resume"), "{:?}", buttons(&half));
        rig.fake.click(thread, card.id, &alice(), &button(&half, "Deny", 1)).await;
        let ready = rig.wait_message(thread, card.id, "Press Resume to continue it").await;
        rig.fake.click(thread, card.id, &alice(), &button(&ready, "Resume", 0)).await;
        rig.wait_text(thread, "one ran, two did not").await;
        let sent = s.llm.requests()[1].to_string();
        assert!(sent.contains("one\\n") && !sent.contains("two\\n"), "{sent}");
        s.llm.verify();
    }
}
