//! Grants you can see and take back (issue 30), on Discord and Slack with four people: alice
//! owns the thread, carol holds the approver role, bob talks in alice's thread, dave is a
//! stranger; erin is an admin. Always allow is confirmed in the thread; a later call says on
//! its tool line who allowed it; anyone may list `/grants`, only the owner or an admin may
//! revoke (everyone else is refused privately and nothing changes); after a revoke the call
//! asks again.

use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlackMessage, SlackUser, TEAM_ID};
use sandpiper_tests::slack_harness::{SlackRun, button as slack_button};
use serde_json::{Value, json};

use super::setup;
use super::slack::socket_run;

const ONCALL: u64 = 700_000_000_000_000_001;
const ADMINS: u64 = 700_000_000_000_000_002;
const REFUSED: &str =
    "🚫 Only the person who started this thread, or an admin, can revoke its grants.";

fn script() -> Vec<sandpiper_tests::fake_llm::Reply> {
    vec![
        tool_call("c1", "bash", json!({"command": "echo first"})),
        text("ran first"),
        text("hello bob"),
        tool_call("c2", "bash", json!({"command": "echo second"})),
        text("ran second"),
        tool_call("c3", "bash", json!({"command": "echo third"})),
        text("ran third"),
    ]
}

both_backends! {
    async fn discord_grants_are_confirmed_shown_and_revoked_by_the_owner_or_an_admin(db) {
        let mut s = setup(&db, script()).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        s.config.discord.admin_roles = vec![ADMINS.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let alice = FakeUser::new(900_000_000_000_000_001, "alice");
        let bob = FakeUser::new(900_000_000_000_000_002, "bob");
        let carol = FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL]);
        let dave = FakeUser::new(900_000_000_000_000_004, "dave");
        let erin = FakeUser::new(900_000_000_000_000_005, "erin").with_roles(&[ADMINS]);
        let thread = rig.mention(&alice, "run first").await;
        let key = format!("discord:{thread}");
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &alice, &button(&card, "Always allow", 0)).await;
        rig.wait_text(thread, "ran first").await;
        rig.wait_text(thread, "bash is always allowed in this thread, granted by @alice").await;
        rig.fake.user_message(thread, &bob, "hi").await;
        rig.wait_text(thread, "hello bob").await;
        rig.fake.user_message(thread, &alice, "run second").await;
        rig.wait_text(thread, "ran second").await;
        rig.wait_text(thread, "always allowed by @alice").await;

        let grants = |who: FakeUser, options: Value| {
            let rig = &rig;
            async move {
                let id = rig.fake.slash(thread, &who, "grants", options).await;
                let reply = rig.fake.wait_until(WAIT, "the grants answer", |f| f.interaction_responses(id).pop()).await;
                assert_eq!(reply["data"]["flags"], json!(64), "private: {reply}");
                reply["data"]["content"].as_str().unwrap_or_default().to_owned()
            }
        };
        let revoke = json!([{"name": "action", "type": 3, "value": "revoke"}, {"name": "what", "type": 3, "value": "bash"}]);
        let listed = grants(dave.clone(), json!([])).await;
        assert!(listed.starts_with("Always allowed in this thread:\n• bash — granted by @alice, "), "{listed}");
        for who in [bob, carol, dave] {
            assert_eq!(grants(who, revoke.clone()).await, REFUSED);
        }
        assert_eq!(rig.agent.store().grants(&key).await.unwrap(), ["bash"], "refusals change nothing");
        assert_eq!(grants(alice.clone(), revoke.clone()).await, "🔒 Revoked: bash. Those calls ask for approval again.");
        assert_eq!(rig.agent.store().grants(&key).await.unwrap(), Vec::<String>::new());
        let none = grants(erin.clone(), revoke).await;
        assert!(none.starts_with("Nothing always allowed here matches `bash`"), "an admin may: {none}");

        // The next call asks again.
        rig.fake.user_message(thread, &alice, "run third").await;
        let again = rig.fake.wait_until(WAIT, "a new card", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| m.id != card.id && !sandpiper_tests::discord_harness::open_buttons(m).is_empty())
        }).await;
        rig.fake.click(thread, again.id, &alice, &button(&again, "Approve", 0)).await;
        rig.wait_text(thread, "ran third").await;
        s.llm.verify();
    }

    async fn slack_grants_are_confirmed_shown_and_revoked_by_the_owner_or_an_admin(db) {
        let mut s = setup(&db, script()).await;
        s.config.slack.approver_usergroups = vec!["S0ONCALL".into()];
        s.config.slack.admin_usergroups = vec!["S0ADMINS".into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup("S0ONCALL", &["U0CAROL"]);
        run.slack.set_usergroup("S0ADMINS", &["U0ERIN"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let carol = run.slack.user("U0CAROL", "carol");
        let dave = run.slack.user("U0DAVE", "dave");
        let erin = run.slack.user("U0ERIN", "erin");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "run first").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (always, value) = slack_button(&card, "Always allow");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &always, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the first call", |m| m.text == "ran first").await;
        run.wait_message(CHANNEL_ID, &root, "the confirmation", |m| m.text.contains("bash is always allowed in this thread, granted by @alice")).await;
        run.slack.thread_message(CHANNEL_ID, &root, &bob, "hi").await;
        run.wait_message(CHANNEL_ID, &root, "bob's answer", |m| m.text == "hello bob").await;
        run.slack.thread_message(CHANNEL_ID, &root, &alice, "run second").await;
        run.wait_message(CHANNEL_ID, &root, "the second call", |m| m.text == "ran second").await;
        run.wait_message(CHANNEL_ID, &root, "its tool line", |m| m.text.contains("always allowed by @alice")).await;

        let grants = |who: SlackUser, text: &'static str| {
            let run = &run;
            async move {
                let before = ephemerals(run, &who.id).len();
                run.slack.slash_command(CHANNEL_ID, &who, "/sandpiper", text).await;
                run.slack
                    .wait_until(WAIT, "the grants answer", |_| ephemerals(run, &who.id).get(before).cloned())
                    .await
                    .text
            }
        };
        let listed = grants(dave.clone(), "grants").await;
        assert!(listed.contains("Always allowed in this thread:") && listed.contains("bash — granted by @alice"), "{listed}");
        for who in [bob, carol, dave] {
            let told = grants(who, "grants revoke bash").await;
            assert!(told.contains("Only the person who started this thread, or an admin, can revoke its grants."), "{told}");
        }
        assert_eq!(run.agent.store().grants(&key).await.unwrap(), ["bash"], "refusals change nothing");
        let told = grants(erin, "grants revoke bash").await;
        assert!(told.contains("Revoked: bash"), "an admin may: {told}");
        let told = grants(alice.clone(), "grants revoke all").await;
        assert!(told.contains("Nothing always allowed here matches `all`"), "{told}");
        assert_eq!(run.agent.store().grants(&key).await.unwrap(), Vec::<String>::new());

        run.slack.thread_message(CHANNEL_ID, &root, &alice, "run third").await;
        let again = run.card(CHANNEL_ID, &root, 1).await;
        let (approve, value) = slack_button(&again, "Approve");
        run.slack.click(CHANNEL_ID, &again.ts, &alice, &approve, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the third call", |m| m.text == "ran third").await;
        s.llm.verify();
    }
}

/// The ephemeral messages to `user` so far.
fn ephemerals(run: &SlackRun, user: &str) -> Vec<FakeSlackMessage> {
    run.slack
        .messages(CHANNEL_ID)
        .into_iter()
        .filter(|m| m.ephemeral_for.as_deref() == Some(user))
        .collect()
}

/// A pattern grant's thread: `git status` asks and is always allowed as a pattern, `git
/// status --short` runs under it, `git status && rm -rf x` asks again (one part does not
/// match) and is denied.
fn pattern_script() -> Vec<sandpiper_tests::fake_llm::Reply> {
    vec![
        tool_call("c1", "bash", json!({"command": "git status"})),
        text("ran status"),
        tool_call("c2", "bash", json!({"command": "git status --short"})),
        text("ran short"),
        tool_call("c3", "bash", json!({"command": "git status && rm -rf x"})),
        text("not that one"),
    ]
}

const PATTERN_BUTTON: &str = "Always allow `git status`";
const PATTERN_GRANTED: &str =
    "bash `git status` is always allowed in this thread, granted by @alice";

both_backends! {
    async fn discord_always_allow_for_a_command_pattern(db) {
        let s = setup(&db, pattern_script()).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let alice = FakeUser::new(900_000_000_000_000_001, "alice");
        let bob = FakeUser::new(900_000_000_000_000_002, "bob");
        let thread = rig.mention(&alice, "status please").await;
        let key = format!("discord:{thread}");
        let card = rig.card(thread).await;
        // Always allow, of a pattern too, is the owner's alone.
        let click = rig.fake.click(thread, card.id, &bob, &button(&card, PATTERN_BUTTON, 0)).await;
        let reply = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(click).pop()).await;
        assert_eq!(reply["data"]["flags"], json!(64), "{reply}");
        rig.fake.click(thread, card.id, &alice, &button(&card, PATTERN_BUTTON, 0)).await;
        rig.wait_text(thread, "ran status").await;
        rig.wait_text(thread, PATTERN_GRANTED).await;
        assert_eq!(rig.agent.store().grants(&key).await.unwrap(), ["bash:git status"]);
        rig.fake.user_message(thread, &alice, "short please").await;
        rig.wait_text(thread, "ran short").await;
        rig.wait_text(thread, "always allowed by @alice").await;
        rig.fake.user_message(thread, &alice, "and remove x").await;
        let again = rig.fake.wait_until(WAIT, "a card for the compound command", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| m.id != card.id && !sandpiper_tests::discord_harness::open_buttons(m).is_empty())
        }).await;
        rig.fake.click(thread, again.id, &alice, &button(&again, "Deny", 0)).await;
        rig.wait_text(thread, "not that one").await;
        s.llm.verify();
    }

    async fn slack_always_allow_for_a_command_pattern(db) {
        let s = setup(&db, pattern_script()).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "status please").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (pattern, value) = slack_button(&card, PATTERN_BUTTON);
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &pattern, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the first call", |m| m.text == "ran status").await;
        run.wait_message(CHANNEL_ID, &root, "the confirmation", |m| m.text.contains(PATTERN_GRANTED)).await;
        assert_eq!(run.agent.store().grants(&key).await.unwrap(), ["bash:git status"]);
        run.slack.thread_message(CHANNEL_ID, &root, &alice, "short please").await;
        run.wait_message(CHANNEL_ID, &root, "the second call", |m| m.text == "ran short").await;
        run.wait_message(CHANNEL_ID, &root, "its tool line", |m| m.text.contains("always allowed by @alice")).await;
        run.slack.thread_message(CHANNEL_ID, &root, &alice, "and remove x").await;
        let again = run.card(CHANNEL_ID, &root, 1).await;
        let (deny, value) = slack_button(&again, "Deny");
        run.slack.click(CHANNEL_ID, &again.ts, &alice, &deny, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the denial", |m| m.text == "not that one").await;
        s.llm.verify();
    }
}
