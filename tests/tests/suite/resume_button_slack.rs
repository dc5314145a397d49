//! Resume on Slack, the twin of `resume_button`: a card whose turn stopped running (a restart)
//! keeps its decisions, says the turn was interrupted and offers **Resume** once every request
//! is decided. alice owns the thread, carol is in the approver user group, bob talks in alice's
//! thread (his message causes the call), dave is a stranger. The owner or an approver may
//! resume; the participant and the stranger are told privately why not.

use std::time::Duration;

use sandpiper_channels::config::SlackMode;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlackMessage, SlackUser};
use sandpiper_tests::slack_harness::{SlackRun, WAIT, button, configure, is_card};
use serde_json::json;

use super::slack::socket_run;
use super::{Setup, setup};

const APPROVERS: &str = "S0ONCALL";
const NOT_YOURS: &str =
    "only the person who started this thread, or an approver, can resume its turn";

/// The ephemeral messages to `user` so far.
fn ephemerals(run: &SlackRun, user: &str) -> Vec<FakeSlackMessage> {
    run.slack
        .messages(CHANNEL_ID)
        .into_iter()
        .filter(|m| m.ephemeral_for.as_deref() == Some(user))
        .collect()
}

/// The card message `ts` as it stands now.
fn card_now(run: &SlackRun, ts: &str) -> FakeSlackMessage {
    run.slack
        .messages(CHANNEL_ID)
        .into_iter()
        .find(|m| m.ts == ts)
        .expect("the card")
}

/// `who` presses `label` on the card `ts`: told privately `said`, and the card is unchanged.
async fn told_privately(
    run: &SlackRun,
    ts: &str,
    who: &SlackUser,
    action: &(String, String),
    said: &str,
) {
    let before = ephemerals(run, &who.id).len();
    let edits = card_now(run, ts).edits;
    run.slack
        .click(CHANNEL_ID, ts, who, &action.0, &action.1)
        .await;
    let told = run
        .slack
        .wait_until(WAIT, "the private answer", |_| {
            ephemerals(run, &who.id).get(before).cloned()
        })
        .await;
    assert!(
        told.text.contains(said),
        "{} pressing {}: {}",
        who.name,
        action.0,
        told.text
    );
    assert_eq!(card_now(run, ts).edits, edits, "nothing changed");
}

/// Stops sandpiper and starts it again on the same database and fake Slack.
async fn restart(run: SlackRun, s: &Setup) -> SlackRun {
    let slack = run.stop().await;
    slack.disconnect().await;
    let mut config = s.config.clone();
    configure(&mut config, &slack, SlackMode::Socket);
    SlackRun::start(config, slack).await
}

/// bob's message in alice's thread causes a call (the `n`th card); sandpiper restarts while it
/// waits; `decider` approves it. Returns the restarted run and the card with Resume on it.
async fn interrupted(
    run: SlackRun,
    s: &Setup,
    root: &str,
    n: usize,
    decider: &SlackUser,
    ask: &str,
) -> (SlackRun, FakeSlackMessage) {
    let bob = run.slack.user("U0BOB", "bob");
    run.slack.thread_message(CHANNEL_ID, root, &bob, ask).await;
    let card = run.card(CHANNEL_ID, root, n).await;
    let run = restart(run, s).await;
    run.slack.set_usergroup(APPROVERS, &["U0CAROL"]);
    let (approve, value) = button(&card, "Approve");
    run.slack
        .click(CHANNEL_ID, &card.ts, decider, &approve, &value)
        .await;
    let kept = run
        .wait_message(CHANNEL_ID, root, "the card of the interrupted turn", |m| {
            m.ts == card.ts
                && m.text.contains("Your decision is kept")
                && m.text.contains("Press Resume")
        })
        .await;
    assert!(
        kept.text
            .contains(&format!("Approved by @{}", decider.name)),
        "{}",
        kept.text
    );
    (run, kept)
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
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup(APPROVERS, &["U0CAROL"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let carol = run.slack.user("U0CAROL", "carol");
        let dave = run.slack.user("U0DAVE", "dave");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "hi").await;
        run.wait_message(CHANNEL_ID, &root, "the greeting", |m| m.text == "hello alice").await;

        // The participant and the stranger may not resume; the approver may.
        let (run, card) = interrupted(run, &s, &root, 0, &alice, "print the environment").await;
        let resume = button(&card, "Resume");
        told_privately(&run, &card.ts, &bob, &resume, NOT_YOURS).await;
        told_privately(&run, &card.ts, &dave, &resume, NOT_YOURS).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(s.llm.requests().len(), 2, "nothing resumed");
        run.slack.click(CHANNEL_ID, &card.ts, &carol, &resume.0, &resume.1).await;
        run.wait_message(CHANNEL_ID, &root, "the first resumed answer", |m| m.text == "ran the first after the restart").await;
        run.wait_message(CHANNEL_ID, &root, "the card says who resumed", |m| m.ts == card.ts && m.text.contains("Resumed by @carol")).await;
        assert!(s.llm.requests()[2].to_string().contains("first-resumed"));

        // Pressed again: nothing left to resume.
        told_privately(&run, &card.ts, &alice, &resume, "nothing left to resume").await;

        // The owner resumes the next interrupted turn, which an approver decided.
        let (run, card) = interrupted(run, &s, &root, 1, &carol, "and once more").await;
        let (resume, value) = button(&card, "Resume");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &resume, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the second resumed answer", |m| m.text == "ran the second after the restart").await;
        run.wait_message(CHANNEL_ID, &root, "the card says who resumed", |m| is_card(m) && m.ts == card.ts && m.text.contains("Resumed by @alice")).await;
        assert!(s.llm.requests()[4].to_string().contains("second-resumed"));
        s.llm.verify();
        run.stop().await;
    }
}
