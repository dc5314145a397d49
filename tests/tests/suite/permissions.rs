//! The shared rules of `channels::permissions`, end to end on both platforms with the four
//! people: alice owns the thread, carol is an approver, bob talks in alice's thread (a
//! participant), dave is a stranger. Each rule gives the same answer to the same person on
//! Discord and on Slack.

use sandpiper_channels::button::CardButton;
use sandpiper_channels::config::ThreadAccess;
use sandpiper_channels::permissions::Refusal;
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{
    DiscordRig, WAIT, button, buttons, open_buttons, response_text,
};
use sandpiper_tests::fake_discord::{CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID as SLACK_CHANNEL, SlackUser, TEAM_ID};
use sandpiper_tests::slack_harness::{SlackRun, button as slack_button};
use serde_json::{Value, json};

use super::setup;
use super::slack::socket_run;

const ONCALL: u64 = 700_000_000_000_000_001;
const APPROVERS: &str = "S0ONCALL";
/// What someone who may stop hears when nothing runs.
const NOTHING_RUNS: &str = "Nothing is running here.";
/// What someone who may stop hears while the turn's lane is still winding down.
const STOPPING: &str = "⏹️ Stopping.";

/// Whether `said` is what someone who may stop hears.
fn may_stop(said: &str) -> bool {
    said == NOTHING_RUNS || said == STOPPING
}

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}
fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}
fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}
fn dave() -> FakeUser {
    FakeUser::new(900_000_000_000_000_004, "dave")
}

/// The four people on Slack, with carol in the approver group.
fn slack_four(run: &SlackRun) -> [SlackUser; 4] {
    run.slack.set_usergroup(APPROVERS, &["U0CAROL"]);
    [
        run.slack.user("U0ALICE", "alice"),
        run.slack.user("U0CAROL", "carol"),
        run.slack.user("U0BOB", "bob"),
        run.slack.user("U0DAVE", "dave"),
    ]
}

/// The private answer to the Discord interaction `id`.
async fn discord_answer(rig: &DiscordRig, id: u64) -> String {
    let reply: Value = rig
        .fake
        .wait_until(WAIT, "the answer", |f| f.interaction_responses(id).pop())
        .await;
    response_text(&[reply])
}

/// The ephemeral messages `user` got in the test channel, oldest first.
fn slack_told(run: &SlackRun, user: &str) -> Vec<String> {
    run.slack
        .messages(SLACK_CHANNEL)
        .into_iter()
        .filter(|m| m.ephemeral_for.as_deref() == Some(user))
        .map(|m| m.text)
        .collect()
}

/// Waits until `user` has had `n` ephemeral messages; returns the last.
async fn slack_nth(run: &SlackRun, user: &str, n: usize) -> String {
    run.slack
        .wait_until(WAIT, "an ephemeral answer", |_| {
            let told = slack_told(run, user);
            (told.len() >= n).then(|| told[n - 1].clone())
        })
        .await
}

/// The Stop rule in an owner-only thread: the owner and the approver may, the participant and
/// the stranger are refused. (In an open thread anyone may: the last check.)
fn stop_table() -> [(&'static str, bool); 4] {
    [
        ("alice", true),
        ("carol", true),
        ("bob", false),
        ("dave", false),
    ]
}

/// `said` is the answer the Stop table gives `who`.
fn check_stop(name: &str, allowed: bool, said: &str) {
    if allowed {
        assert!(may_stop(said), "{name} may stop: {said}");
    } else {
        assert_eq!(said, Refusal::Stop.to_string(), "{name} may not stop");
    }
}

both_backends! {
    async fn discord_stop_is_the_owners_and_the_approvers_and_in_an_open_thread_anyones(db) {
        let mut s = setup(&db, vec![text("hello alice"), text("hello again")]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        s.config.discord.thread_access = ThreadAccess::Owner;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        let msg = rig.wait_text(thread, "hello alice").await;
        rig.fake.user_message(thread, &bob(), "may I?").await;
        let stop = CardButton::stop(&format!("discord:{thread}")).to_string();
        for ((name, allowed), who) in stop_table().into_iter().zip([alice(), carol(), bob(), dave()]) {
            let clicked = rig.fake.click(thread, msg.id, &who, &stop).await;
            check_stop(name, allowed, &discord_answer(&rig, clicked).await);
            let typed = rig.fake.slash(thread, &who, "stop", json!([])).await;
            check_stop(name, allowed, &discord_answer(&rig, typed).await);
        }
        // Refused Stop presses stopped nothing and asked the model nothing.
        assert_eq!(s.llm.requests().len(), 1);
        drop(rig);

        // In a thread open to everyone, the stranger may stop too.
        s.config.discord.thread_access = ThreadAccess::Anyone;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        let msg = rig.wait_text(thread, "hello again").await;
        let stop = CardButton::stop(&format!("discord:{thread}")).to_string();
        let clicked = rig.fake.click(thread, msg.id, &dave(), &stop).await;
        check_stop("dave", true, &discord_answer(&rig, clicked).await);
    }

    async fn slack_stop_is_the_owners_and_the_approvers_and_in_an_open_thread_anyones(db) {
        let mut s = setup(&db, vec![text("hello alice")]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        s.config.slack.thread_access = ThreadAccess::Owner;
        let run = socket_run(&s).await;
        let four = slack_four(&run);
        let root = run.slack.app_mention(SLACK_CHANNEL, &four[0], "hi").await;
        let answer = run.wait_message(SLACK_CHANNEL, &root, "the answer", |m| m.text == "hello alice").await;
        run.slack.thread_message(SLACK_CHANNEL, &root, &four[2], "may I?").await;
        slack_nth(&run, "U0BOB", 1).await;
        let key = format!("slack:{TEAM_ID}:{SLACK_CHANNEL}:{root}");
        let stop = CardButton::stop(&key).to_string();
        for ((name, allowed), who) in stop_table().into_iter().zip(four.iter()) {
            let before = slack_told(&run, &who.id).len();
            run.slack.click(SLACK_CHANNEL, &answer.ts, who, &stop, &key).await;
            check_stop(name, allowed, &slack_nth(&run, &who.id, before + 1).await);
        }
        assert_eq!(s.llm.requests().len(), 1);
    }

    async fn slack_in_a_thread_open_to_everyone_the_stranger_may_stop(db) {
        let mut s = setup(&db, vec![text("hello again")]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        let run = socket_run(&s).await;
        let four = slack_four(&run);
        let root = run.slack.app_mention(SLACK_CHANNEL, &four[0], "hi").await;
        let answer = run.wait_message(SLACK_CHANNEL, &root, "the answer", |m| m.text == "hello again").await;
        let key = format!("slack:{TEAM_ID}:{SLACK_CHANNEL}:{root}");
        let stop = CardButton::stop(&key).to_string();
        run.slack.click(SLACK_CHANNEL, &answer.ts, &four[3], &stop, &key).await;
        check_stop("dave", true, &slack_nth(&run, "U0DAVE", 1).await);
    }

    async fn discord_close_is_the_owners_or_an_admins_and_a_closed_thread_tells_each_person_once(db) {
        let mut s = setup(&db, vec![text("hello alice")]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        rig.wait_text(thread, "hello alice").await;
        let key = format!("discord:{thread}");
        for who in [carol(), bob(), dave()] {
            let typed = rig.fake.slash(thread, &who, "close", json!([])).await;
            assert_eq!(discord_answer(&rig, typed).await, Refusal::Close.to_string(), "{}", who.name);
        }
        let ws = rig.agent.workstream(&key).await.unwrap().unwrap();
        assert!(!ws.closed, "refused closes changed nothing");
        let admin = FakeUser::new(900_000_000_000_000_005, "erin").as_admin();
        let typed = rig.fake.slash(thread, &admin, "close", json!([])).await;
        let said = discord_answer(&rig, typed).await;
        assert!(said.starts_with("🔒 Closed by "), "the admin closed it: {said}");
        assert!(rig.agent.workstream(&key).await.unwrap().unwrap().closed);
        // Moderators reopen the archived thread (once the close has archived and locked it:
        // the answer comes first); the workstream stays closed, and each of the four is told
        // so once however often they write.
        rig.fake
            .wait_until(WAIT, "the thread archived and locked", |f| {
                f.threads()
                    .into_iter()
                    .find(|t| t.id == thread && t.archived && t.locked)
            })
            .await;
        rig.fake.unlock_thread(thread);
        for who in [alice(), carol(), bob(), dave()] {
            rig.fake.user_message(thread, &who, "anyone?").await;
            rig.fake.user_message(thread, &who, "hello?").await;
        }
        let closed = Refusal::ThreadClosed.to_string();
        let notices = rig.fake.wait_until(WAIT, "four notices", |_| {
            let n = rig.bot_messages(thread).into_iter().filter(|m| m.content == closed).count();
            (n >= 4).then_some(n)
        }).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let now = rig.bot_messages(thread).into_iter().filter(|m| m.content == closed).count();
        assert_eq!((notices, now), (4, 4), "once per person");
        assert_eq!(s.llm.requests().len(), 1, "nothing ran in the closed thread");
    }

    async fn slack_close_is_the_owners_or_an_admins_and_a_closed_thread_tells_each_person_once(db) {
        let mut s = setup(&db, vec![text("hello alice")]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        s.config.slack.admin_usergroups = vec!["S0ADMINS".into()];
        let run = socket_run(&s).await;
        let four = slack_four(&run);
        run.slack.set_usergroup("S0ADMINS", &["U0ERIN"]);
        let root = run.slack.app_mention(SLACK_CHANNEL, &four[0], "hi").await;
        run.wait_message(SLACK_CHANNEL, &root, "the answer", |m| m.text == "hello alice").await;
        let key = format!("slack:{TEAM_ID}:{SLACK_CHANNEL}:{root}");
        for who in &four[1..] {
            run.slack.slash_command(SLACK_CHANNEL, who, "/sandpiper", "close").await;
            assert_eq!(slack_nth(&run, &who.id, 1).await, Refusal::Close.to_string(), "{}", who.name);
        }
        assert!(!run.agent.workstream(&key).await.unwrap().unwrap().closed);
        let erin = run.slack.user("U0ERIN", "erin");
        run.slack.slash_command(SLACK_CHANNEL, &erin, "/sandpiper", "close").await;
        assert!(slack_nth(&run, "U0ERIN", 1).await.contains("Closed"));
        assert!(run.agent.workstream(&key).await.unwrap().unwrap().closed);
        for who in &four {
            let before = slack_told(&run, &who.id).len();
            run.slack.thread_message(SLACK_CHANNEL, &root, who, "anyone?").await;
            run.slack.thread_message(SLACK_CHANNEL, &root, who, "hello?").await;
            assert_eq!(slack_nth(&run, &who.id, before + 1).await, Refusal::ThreadClosed.to_string());
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let told: Vec<usize> = four.iter().map(|who| {
            slack_told(&run, &who.id).iter().filter(|t| **t == Refusal::ThreadClosed.to_string()).count()
        }).collect();
        assert_eq!(told, vec![1, 1, 1, 1], "once per person");
        assert_eq!(s.llm.requests().len(), 1, "nothing ran in the closed thread");
    }

    async fn discord_an_empty_mention_gets_the_hint_from_anyone(db) {
        let mut s = setup(&db, vec![text("hello alice")]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        rig.wait_text(thread, "hello alice").await;
        let hint = Refusal::EmptyMention.to_string();
        for who in [alice(), carol(), bob(), dave()] {
            rig.fake.user_message(thread, &who, &rig.fake.mention()).await;
        }
        // A mention alone in the channel opens no thread; it gets the hint there.
        rig.fake.user_message(CHANNEL_ID, &dave(), &format!("{}   ", rig.fake.mention())).await;
        rig.fake.wait_until(WAIT, "four hints in the thread", |_| {
            let n = rig.bot_messages(thread).into_iter().filter(|m| m.content == hint).count();
            (n == 4).then_some(())
        }).await;
        rig.fake.wait_until(WAIT, "a hint in the channel", |_| {
            rig.bot_messages(CHANNEL_ID).into_iter().find(|m| m.content == hint)
        }).await;
        assert_eq!(rig.fake.threads().len(), 1, "no thread for an empty mention");
        assert_eq!(s.llm.requests().len(), 1, "nothing asked of the model");
    }

    async fn slack_an_empty_mention_gets_the_hint_from_anyone(db) {
        let mut s = setup(&db, vec![text("hello alice")]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        let run = socket_run(&s).await;
        let four = slack_four(&run);
        let root = run.slack.app_mention(SLACK_CHANNEL, &four[0], "hi").await;
        run.wait_message(SLACK_CHANNEL, &root, "the answer", |m| m.text == "hello alice").await;
        let hint = Refusal::EmptyMention.to_string();
        for who in &four {
            run.slack.app_mention_in_thread(SLACK_CHANNEL, &root, who, "").await;
            assert_eq!(slack_nth(&run, &who.id, 1).await, hint, "{}", who.name);
        }
        assert_eq!(s.llm.requests().len(), 1, "nothing asked of the model");
    }

    async fn discord_forged_junk_suffixed_and_unknown_card_buttons_change_nothing(db) {
        let s = setup(&db, vec![tool_call("c1", "bash", json!({"command": "echo never"}))]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "run it").await;
        let card = rig.card(thread).await;
        let approve = button(&card, "Approve", 0);
        let request = approve.trim_start_matches("ap:").trim_end_matches(":a").to_owned();
        let forged = [
            format!("apall:{request}:a:zz"),
            format!("ap:{request}:zz"),
            format!("ap_all:a:{request}"),
            "apall:ap_000000000000:a".to_owned(),
            "ap:ap_000000000000:a".to_owned(),
            format!("stop:discord:{}", thread + 1),
            "totally-not-ours".to_owned(),
        ];
        for id in forged {
            let click = rig.fake.click(thread, card.id, &alice(), &id).await;
            let reply = rig.fake.wait_until(WAIT, "a refusal", |f| f.interaction_responses(click).pop()).await;
            assert_eq!(reply["data"]["flags"], json!(64), "{id}: {reply}");
            let said = response_text(&[reply]);
            assert!(said.starts_with("🚫") && said.contains("nothing changed"), "{id}: {said}");
        }
        let now = rig.fake.messages(thread).into_iter().find(|m| m.id == card.id).expect("the card");
        assert_eq!(open_buttons(&now), open_buttons(&card), "nothing changed");
        assert_eq!(s.llm.requests().len(), 1, "nothing ran");
    }

    async fn slack_forged_junk_suffixed_and_unknown_card_buttons_change_nothing(db) {
        let s = setup(&db, vec![tool_call("c1", "bash", json!({"command": "echo never"}))]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(SLACK_CHANNEL, &alice, "run it").await;
        let card = run.card(SLACK_CHANNEL, &root, 0).await;
        let (_, request) = slack_button(&card, "Approve");
        let forged = [
            format!("apall:{request}:a:zz"),
            format!("ap:{request}:zz"),
            format!("ap_all:a:{request}"),
            "apall:ap_000000000000:a".to_owned(),
            "ap:ap_000000000000:a".to_owned(),
            format!("stop:slack:{TEAM_ID}:{SLACK_CHANNEL}:1.1"),
            "totally-not-ours".to_owned(),
        ];
        for (n, id) in forged.iter().enumerate() {
            run.slack.click(SLACK_CHANNEL, &card.ts, &alice, id, &request).await;
            let said = slack_nth(&run, "U0ALICE", n + 1).await;
            assert!(said.starts_with("🚫") && said.contains("nothing changed"), "{id}: {said}");
        }
        let now = run.slack.messages(SLACK_CHANNEL).into_iter().find(|m| m.ts == card.ts).expect("the card");
        assert_eq!(now.edits, card.edits, "nothing changed");
        assert_eq!(s.llm.requests().len(), 1, "nothing ran");
    }

    async fn discord_stop_is_on_the_tool_line_while_it_waits_and_stops_the_turn(db) {
        let s = setup(&db, vec![tool_call("c1", "bash", json!({"command": "echo never"}))]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "run it").await;
        rig.card(thread).await;
        let has_stop = |m: &sandpiper_tests::fake_discord::FakeMessage| buttons(m).iter().any(|(_, label, _)| label == "Stop");
        let line = rig.fake.wait_until(WAIT, "the waiting tool line with Stop", |_| {
            rig.bot_messages(thread).into_iter().find(|m| m.content.contains("waiting for approval") && has_stop(m))
        }).await;
        let click = rig.fake.click(thread, line.id, &alice(), &button(&line, "Stop", 0)).await;
        assert_eq!(discord_answer(&rig, click).await, "⏹️ Stopping.");
        rig.fake.wait_until(WAIT, "the tool line without Stop", |f| {
            f.messages(thread).into_iter().find(|m| m.id == line.id && !has_stop(m))
        }).await;
        assert_eq!(s.llm.requests().len(), 1, "nothing ran");
    }

    async fn slack_stop_is_on_the_tool_line_while_it_waits_and_stops_the_turn(db) {
        let s = setup(&db, vec![tool_call("c1", "bash", json!({"command": "echo never"}))]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(SLACK_CHANNEL, &alice, "run it").await;
        run.card(SLACK_CHANNEL, &root, 0).await;
        let has_stop = |m: &sandpiper_tests::fake_slack::FakeSlackMessage| m.blocks.to_string().contains("\"stop:slack:");
        let line = run.wait_message(SLACK_CHANNEL, &root, "the waiting tool line with Stop", |m| {
            !sandpiper_tests::slack_harness::is_card(m) && has_stop(m)
        }).await;
        let (stop, value) = slack_button(&line, "Stop");
        run.slack.click(SLACK_CHANNEL, &line.ts, &alice, &stop, &value).await;
        assert_eq!(slack_nth(&run, "U0ALICE", 1).await, "⏹️ Stopping.");
        run.wait_message(SLACK_CHANNEL, &root, "the tool line without Stop", |m| m.ts == line.ts && !has_stop(m)).await;
        assert_eq!(s.llm.requests().len(), 1, "nothing ran");
    }
}
