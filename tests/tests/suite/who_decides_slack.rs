//! Who decides an approval card on Slack (issue #10, attack 1), the twin of `who_decides`:
//! alice owns the thread, carol is in the approver user group, bob talks in alice's thread
//! (his message causes the call), dave is a stranger. Also: deleting a global memory needs an
//! admin user group.

use std::time::Duration;

use sandpiper_agent::store::memories::{NewMemory, Scope, Visibility};
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{ToolCallSpec, text, tool_call, tool_calls};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlackMessage, SlackUser, TEAM_ID};
use sandpiper_tests::slack_harness::{SlackRun, WAIT, button, is_card};
use serde_json::json;

use super::setup;
use super::slack::socket_run;

const APPROVERS: &str = "S0ONCALL";
const NOT_YOURS: &str = "only the person who started this thread, or an approver, can decide this";
const OWNERS_ONLY: &str = "only the person who started this thread can choose Always allow";

/// The ephemeral messages to `user` so far.
fn ephemerals(run: &SlackRun, user: &str) -> Vec<FakeSlackMessage> {
    run.slack
        .messages(CHANNEL_ID)
        .into_iter()
        .filter(|m| m.ephemeral_for.as_deref() == Some(user))
        .collect()
}

/// `who` clicks `label` on `card`: refused privately with `why`, and the card is unchanged.
async fn refused(run: &SlackRun, card: &FakeSlackMessage, who: &SlackUser, label: &str, why: &str) {
    let before = ephemerals(run, &who.id).len();
    let (action, value) = button(card, label);
    run.slack
        .click(CHANNEL_ID, &card.ts, who, &action, &value)
        .await;
    let told = run
        .slack
        .wait_until(WAIT, "the refusal", |_| {
            ephemerals(run, &who.id).get(before).cloned()
        })
        .await;
    assert!(
        told.text.contains(why),
        "{} clicking {label}: {}",
        who.name,
        told.text
    );
    let now = run
        .slack
        .messages(CHANNEL_ID)
        .into_iter()
        .find(|m| m.ts == card.ts)
        .expect("the card");
    assert_eq!(now.edits, card.edits, "nothing changed");
}

/// The four people, in a thread alice started and bob asked in (each answered): alice, bob,
/// carol (in the approver group) and dave.
async fn four_in_a_thread(s: &super::Setup) -> (SlackRun, [SlackUser; 4], String) {
    let run = socket_run(s).await;
    run.slack.set_usergroup(APPROVERS, &["U0CAROL"]);
    let alice = run.slack.user("U0ALICE", "alice");
    let bob = run.slack.user("U0BOB", "bob");
    let carol = run.slack.user("U0CAROL", "carol");
    let dave = run.slack.user("U0DAVE", "dave");
    let root = run
        .slack
        .app_mention(CHANNEL_ID, &alice, "first question")
        .await;
    run.wait_message(CHANNEL_ID, &root, "the first answer", |m| {
        m.text == "first answer"
    })
    .await;
    run.slack
        .thread_message(CHANNEL_ID, &root, &bob, "a question from bob")
        .await;
    run.wait_message(CHANNEL_ID, &root, "bob's answer", |m| {
        m.text == "answer to bob"
    })
    .await;
    (run, [alice, bob, carol, dave], root)
}

/// What `who` is told privately after typing `/sandpiper <words>`.
async fn slash_answer(run: &SlackRun, who: &SlackUser, words: &str) -> String {
    let before = ephemerals(run, &who.id).len();
    run.slack
        .slash_command(CHANNEL_ID, who, "/sandpiper", words)
        .await;
    run.slack
        .wait_until(WAIT, "the command's answer", |_| {
            ephemerals(run, &who.id).get(before).cloned()
        })
        .await
        .text
}

/// The newest card in the thread with buttons on it.
async fn open_card(run: &SlackRun, root: &str, n: usize) -> FakeSlackMessage {
    run.card(CHANNEL_ID, root, n).await
}

both_backends! {
    async fn the_participant_whose_message_caused_the_call_cannot_decide_it(db) {
        let mut s = setup(&db, vec![
            text("hello alice"),
            tool_call("c1", "bash", json!({"command": "echo from-bob"})),
            text("ran bob's"),
            tool_call("c2", "bash", json!({"command": "echo from-alice"})),
            text("ran alice's"),
            tool_call("c3", "bash", json!({"command": "echo granted"})),
            text("ran without a card"),
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
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");

        run.slack.thread_message(CHANNEL_ID, &root, &bob, "print the environment").await;
        let card = open_card(&run, &root, 0).await;
        refused(&run, &card, &bob, "Always allow", NOT_YOURS).await;
        refused(&run, &card, &bob, "Approve", NOT_YOURS).await;
        refused(&run, &card, &dave, "Approve", NOT_YOURS).await;
        refused(&run, &card, &dave, "Deny", NOT_YOURS).await;
        refused(&run, &card, &carol, "Always allow", OWNERS_ONLY).await;
        assert_eq!(run.agent.store().grants(&key).await.unwrap(), Vec::<String>::new());
        assert_eq!(s.llm.requests().len(), 2, "nothing ran");

        let (approve, value) = button(&card, "Approve");
        run.slack.click(CHANNEL_ID, &card.ts, &carol, &approve, &value).await;
        run.wait_message(CHANNEL_ID, &root, "bob's call ran", |m| m.text == "ran bob's").await;
        run.wait_message(CHANNEL_ID, &root, "the card", |m| is_card(m) && m.text.contains("Approved by @carol")).await;

        run.slack.thread_message(CHANNEL_ID, &root, &alice, "now mine").await;
        let card = open_card(&run, &root, 1).await;
        assert!(card.text.contains("from-alice"), "{}", card.text);
        let (always, value) = button(&card, "Always allow");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &always, &value).await;
        run.wait_message(CHANNEL_ID, &root, "alice's call ran", |m| m.text == "ran alice's").await;
        assert_eq!(run.agent.store().grants(&key).await.unwrap(), vec!["bash".to_owned()]);

        run.slack.thread_message(CHANNEL_ID, &root, &alice, "and again").await;
        run.wait_message(CHANNEL_ID, &root, "the granted call", |m| m.text == "ran without a card").await;
        assert_eq!(run.thread(CHANNEL_ID, &root).into_iter().filter(is_card).count(), 2);
        s.llm.verify();
    }

    async fn a_borrowed_display_name_never_names_who_decided(db) {
        let mut s = setup(&db, vec![
            text("hello alice"),
            tool_call("c1", "bash", json!({"command": "echo from-bob"})),
            text("ran bob's"),
            tool_call("c2", "bash", json!({"command": "echo from-alice"})),
            text("ran alice's"),
        ]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        let run = socket_run(&s).await;
        // mallory is in the approver group and shows "alice" as her display name.
        run.slack.set_usergroup(APPROVERS, &["U0MALLORY"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let dave = run.slack.user("U0DAVE", "dave");
        let mallory = run.slack.user_showing("U0MALLORY", "mallory", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "hi").await;
        run.wait_message(CHANNEL_ID, &root, "the greeting", |m| m.text == "hello alice").await;

        run.slack.thread_message(CHANNEL_ID, &root, &bob, "print the environment").await;
        let card = open_card(&run, &root, 0).await;
        refused(&run, &card, &bob, "Approve", NOT_YOURS).await;
        refused(&run, &card, &dave, "Approve", NOT_YOURS).await;
        let (approve, value) = button(&card, "Approve");
        run.slack.click(CHANNEL_ID, &card.ts, &mallory, &approve, &value).await;
        run.wait_message(CHANNEL_ID, &root, "bob's call ran", |m| m.text == "ran bob's").await;
        run.wait_message(CHANNEL_ID, &root, "the card names mallory", |m| {
            is_card(m) && m.text.contains("Approved by alice (@mallory)")
        }).await;

        run.slack.thread_message(CHANNEL_ID, &root, &alice, "now mine").await;
        let card = open_card(&run, &root, 1).await;
        let (always, value) = button(&card, "Always allow");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &always, &value).await;
        run.wait_message(CHANNEL_ID, &root, "alice's call ran", |m| m.text == "ran alice's").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let grants = run.agent.grants_of(&key).await.unwrap();
        assert_eq!(grants.iter().map(|g| g.granted_by.as_deref()).collect::<Vec<_>>(), vec![Some("@alice")]);
        s.llm.verify();
    }

    async fn require_approver_for_and_approve_all_judge_each_request(db) {
        let mut s = setup(&db, vec![
            tool_calls(vec![
                ToolCallSpec::new("c1", "bash", json!({"command": "echo guarded"})),
                ToolCallSpec::new("c2", "write_file", json!({"path": "notes.txt", "content": "hello"})),
            ]),
            text("both decided"),
        ]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        s.config.approval.require_approver_for = vec!["bash".into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup(APPROVERS, &["U0CAROL"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let carol = run.slack.user("U0CAROL", "carol");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "two things").await;
        let card = open_card(&run, &root, 0).await;
        refused(&run, &card, &alice, "Approve", "`bash` needs an approver here").await;

        let (all, value) = button(&card, "Approve all");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &all, &value).await;
        let told = run.ephemeral(CHANNEL_ID, "U0ALICE", "not decided").await;
        assert!(told.text.contains("bash: echo guarded") && told.text.contains("needs an approver"), "{}", told.text);
        assert!(!told.text.contains("write_file"), "{}", told.text);
        let partly = run.wait_message(CHANNEL_ID, &root, "the write approved", |m| is_card(m) && m.text.contains("Approved by @alice")).await;
        assert_eq!(partly.text.matches("Approved by").count(), 1, "{}", partly.text);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(s.llm.requests().len(), 1, "the turn still waits for bash");

        let now = open_card(&run, &root, 0).await;
        let (all, value) = button(&now, "Approve all");
        run.slack.click(CHANNEL_ID, &now.ts, &carol, &all, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "both decided").await;
        assert!(s.llm.requests()[1].to_string().contains("guarded"));
        s.llm.verify();
    }

    async fn deleting_a_global_memory_needs_an_admin_group(db) {
        let mut s = setup(&db, vec![]).await;
        s.config.slack.admin_usergroups = vec!["S0ADMINS".into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup("S0ADMINS", &["U0ERIN"]);
        let bob = run.slack.user("U0BOB", "bob");
        let erin = run.slack.user("U0ERIN", "erin");
        let store = run.agent.store();
        let bob_id = store.user_for_identity("slack", "U0BOB", "bob").await.unwrap().id;
        let vis = Visibility { workstream: "none".into(), user_id: Some(bob_id) };
        for (name, scope) in [("team_rule", Scope::Global), ("bob_pref", Scope::User)] {
            let memory = NewMemory { name, scope, kind: None, description: None, content: "x", created_by: None };
            store.save_memory(&vis, &memory).await.unwrap();
        }
        run.slack.slash_command(CHANNEL_ID, &bob, "/sandpiper", "memory delete team_rule").await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "needs an admin").await;
        run.slack.slash_command(CHANNEL_ID, &bob, "/sandpiper", "memory delete bob_pref").await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "deleted `bob_pref`").await;
        assert_eq!(store.named_memories(&vis, "team_rule", None).await.unwrap().len(), 1);
        run.slack.slash_command(CHANNEL_ID, &erin, "/sandpiper", "memory delete team_rule").await;
        run.ephemeral(CHANNEL_ID, "U0ERIN", "deleted `team_rule`").await;
        assert!(store.named_memories(&vis, "team_rule", None).await.unwrap().is_empty());
    }
}

both_backends! {
    async fn compact_is_for_the_owner_and_approvers_on_slack_too(db) {
        let mut s = setup(&db, vec![
            text("first answer"),
            text("answer to bob"),
            text("- alice and bob asked; both answered"),
        ]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        let (run, [alice, bob, carol, dave], root) = four_in_a_thread(&s).await;
        for who in [bob, dave] {
            let told = slash_answer(&run, &who, "compact").await;
            assert!(told.contains("Only the person who started this thread, or an approver, can compact it."), "{told}");
        }
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        assert_eq!(run.agent.store().latest_checkpoint(&key).await.unwrap(), None, "refusals change nothing");
        let told = slash_answer(&run, &carol, "compact").await;
        assert!(told.contains("Compacted this conversation to fit the model's context window: 2 older messages summarised"), "{told}");
        let told = slash_answer(&run, &alice, "compact").await;
        assert!(told.contains("Nothing to compact"), "{told}");
        let checkpoint = run.agent.store().latest_checkpoint(&key).await.unwrap().expect("stored");
        assert!(checkpoint.summary.contains("alice and bob asked"), "{checkpoint:?}");
    }
}

both_backends! {
    async fn the_model_is_switched_by_the_owner_and_approvers_on_slack_too(db) {
        let mut s = setup(&db, vec![
            text("first answer"),
            text("answer to bob"),
            text("third answer"),
        ]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        s.config.model.choices = vec!["large-model".into()];
        let (run, [alice, bob, carol, dave], root) = four_in_a_thread(&s).await;
        let shown = slash_answer(&run, &dave, "model").await;
        assert!(shown.contains("answers with `fake-model`") && shown.contains("`large-model`"), "{shown}");
        for who in [bob, dave] {
            let told = slash_answer(&run, &who, "model large-model").await;
            assert!(told.contains("Only the person who started this thread, or an approver, can switch its model."), "{told}");
        }
        let told = slash_answer(&run, &carol, "model large-model").await;
        assert!(told.contains("answers with `large-model` from its next message on"), "{told}");
        let told = slash_answer(&run, &alice, "model nonexistent").await;
        assert!(told.contains("is not one of the models this sandpiper offers"), "{told}");
        run.slack.thread_message(CHANNEL_ID, &root, &alice, "third question").await;
        run.wait_message(CHANNEL_ID, &root, "the third answer", |m| m.text == "third answer").await;
        let models: Vec<String> = s.llm.requests().iter().map(|r| r["model"].as_str().unwrap_or_default().to_owned()).collect();
        assert_eq!(models, ["fake-model", "fake-model", "large-model"]);
    }
}

both_backends! {
    async fn mcp_list_shows_a_failing_servers_stderr_to_admins_only_on_slack_too(db) {
        let mut s = setup(&db, vec![text("first answer"), text("second answer")]).await;
        s.config.slack.approver_usergroups = vec![APPROVERS.into()];
        s.config.slack.admin_usergroups = vec!["S0ADMINS".into()];
        s.config.mcp.servers.insert("leaky".into(), crate::suite::discord_commands::leaky_server());
        s.config.mcp.refresh_interval = Duration::ZERO;
        let run = socket_run(&s).await;
        run.slack.set_usergroup(APPROVERS, &["U0CAROL"]);
        run.slack.set_usergroup("S0ADMINS", &["U0ERIN"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let carol = run.slack.user("U0CAROL", "carol");
        let dave = run.slack.user("U0DAVE", "dave");
        let erin = run.slack.user("U0ERIN", "erin");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "first question").await;
        run.wait_message(CHANNEL_ID, &root, "the first answer", |m| m.text == "first answer").await;
        run.slack.thread_message(CHANNEL_ID, &root, &bob, "a question from bob").await;
        run.wait_message(CHANNEL_ID, &root, "bob's answer", |m| m.text == "second answer").await;
        let list = |who: SlackUser| {
            let run = &run;
            async move {
                let before = ephemerals(run, &who.id).len();
                run.slack.slash_command(CHANNEL_ID, &who, "/sandpiper", "mcp list").await;
                run.slack
                    .wait_until(WAIT, "the mcp list", |_| ephemerals(run, &who.id).get(before).cloned())
                    .await
                    .text
            }
        };
        let deadline = std::time::Instant::now() + WAIT;
        let told = loop {
            let told = list(erin.clone()).await;
            if told.contains("db-s3cret") || std::time::Instant::now() > deadline {
                break told;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(told.contains("leaky (") && told.contains("last stderr lines:") && told.contains("db-s3cret"), "{told}");
        for who in [alice, bob, carol, dave] {
            let name = who.name.clone();
            let told = list(who).await;
            assert!(told.contains("leaky (") && told.contains("0 tools"), "{name}: {told}");
            assert!(!told.contains("db-s3cret") && !told.contains("stderr"), "{name}: {told}");
        }
        // Nothing of it was posted where others could read it.
        let public: Vec<String> = run.slack.messages(CHANNEL_ID).into_iter()
            .filter(|m| m.ephemeral_for.is_none()).map(|m| m.text).collect();
        assert!(public.iter().all(|t| !t.contains("db-s3cret")), "{public:?}");
    }
}
