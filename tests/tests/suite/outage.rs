//! The database goes away for a moment (a PostgreSQL restart or failover, through a relay the
//! test cuts): messages that arrive meanwhile wait and are answered once it is back; an outage
//! longer than `[database] acquire_timeout` is said to the person, and nothing is half-stored.
//! PostgreSQL only: a SQLite file does not go away.

use std::time::Duration;

use sqlx::{Connection, Executor};

use sandpiper_channels::config::SlackMode;
use sandpiper_tests::db::TestDb;
use sandpiper_tests::db_proxy::DbProxy;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack, TEAM_ID};
use sandpiper_tests::slack_harness::{SlackRun, button as slack_button, configure};

use super::{Setup, setup};

/// The buttons on a bot message, Stop included.
fn open_buttons_or_stop(m: &sandpiper_tests::fake_discord::FakeMessage) -> Vec<String> {
    sandpiper_tests::discord_harness::buttons(m)
        .into_iter()
        .filter(|(_, _, disabled)| !disabled)
        .map(|(id, ..)| id)
        .collect()
}

/// A setup whose database is reached through a relay the test can cut.
async fn through_relay(db: &TestDb, replies: &[&str]) -> (Setup, std::sync::Arc<DbProxy>) {
    let proxy = DbProxy::start(&db.url).await;
    let mut s = setup(db, replies.iter().copied().map(text).collect()).await;
    s.config.database.url = proxy.url(&db.url);
    s.config.database.acquire_timeout = Duration::from_secs(3);
    (s, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_messages_wait_out_a_database_restart_and_a_longer_outage_is_said() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let (s, proxy) = through_relay(&db, &["first", "second"]).await;
    s.llm.push(tool_call(
        "c1",
        "bash",
        serde_json::json!({"command": "echo after-outage"}),
    ));
    s.llm.push(text("third"));
    let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
    let alice = FakeUser::new(900_000_000_000_000_001, "alice");
    let thread = rig.mention(&alice, "hello").await;
    rig.wait_text(thread, "first").await;

    // A restart shorter than acquire_timeout: the message waits and is answered.
    proxy.cut();
    rig.fake.user_message(thread, &alice, "still there?").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.restore().await;
    // The turn is over (and everything of it stored) when its answer loses the Stop button.
    rig.fake
        .wait_until(WAIT, "the second turn over", |_| {
            rig.bot_messages(thread)
                .into_iter()
                .find(|m| m.content == "second" && open_buttons_or_stop(m).is_empty())
        })
        .await;

    // Longer: the person is told their message was not taken, in words.
    proxy.cut();
    let asked = format!("{} are you there?", rig.fake.mention());
    rig.fake.user_message(thread, &alice, &asked).await;
    let notice = rig.wait_text(thread, "could not take that message").await;
    assert!(notice.content.contains("database"), "{}", notice.content);
    proxy.restore().await;

    // A click while the database is away is answered with why, and works once it is back.
    rig.fake.user_message(thread, &alice, "and now?").await;
    let card = rig.card(thread).await;
    proxy.cut();
    let click = rig
        .fake
        .click(thread, card.id, &alice, &button(&card, "Approve", 0))
        .await;
    // The store waits acquire_timeout (3 s) for the database: past Discord's 3 s, so the
    // response is deferred and the answer comes as a private follow-up.
    let reply = rig
        .fake
        .wait_until(WAIT, "the click answered", |f| {
            f.interaction_responses(click)
                .into_iter()
                .find(|r| r["content"].is_string())
        })
        .await;
    let said = reply["content"].as_str().unwrap_or_default();
    assert!(
        said.contains("did not go through") && reply["flags"] == 64,
        "{reply}"
    );
    let first = &rig.fake.interaction_responses(click)[0];
    assert_eq!(first["type"], 6, "deferred first: {first}");
    proxy.restore().await;

    // A store slower than Discord's 3 s (a table held by someone else): the click is deferred,
    // still decides, and the card is redrawn through the interaction's webhook.
    let mut admin = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    admin.execute("BEGIN").await.unwrap();
    admin
        .execute("LOCK TABLE tool_approvals IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let click = rig
        .fake
        .click(thread, card.id, &alice, &button(&card, "Approve", 0))
        .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    admin.execute("COMMIT").await.unwrap();
    rig.wait_message(thread, card.id, "Approved by @alice")
        .await;
    assert_eq!(rig.fake.interaction_responses(click)[0]["type"], 6);
    rig.wait_text(thread, "third").await;
    assert_eq!(rig.fake.interaction_responses(click)[0]["type"], 6);

    let history = rig
        .agent
        .history(&format!("discord:{thread}"))
        .await
        .unwrap();
    let said: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        said[..5],
        ["hello", "first", "still there?", "second", "and now?"]
    );
    assert!(said[6].contains("after-outage"), "{said:?}");
    assert_eq!(said[7..], ["third"]);
    s.llm.verify();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_messages_wait_out_a_database_restart_and_a_longer_outage_is_said() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let (s, proxy) = through_relay(&db, &["first", "second", "third"]).await;
    let slack = FakeSlack::start().await;
    let mut config = s.config.clone();
    configure(&mut config, &slack, SlackMode::Socket);
    let run = SlackRun::start(config, slack).await;
    let alice = run.slack.user("U0ALICE", "alice");
    let root = run.slack.app_mention(CHANNEL_ID, &alice, "hello").await;
    run.wait_message(CHANNEL_ID, &root, "the first answer", |m| m.text == "first")
        .await;

    proxy.cut();
    run.slack
        .thread_message(CHANNEL_ID, &root, &alice, "still there?")
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.restore().await;
    // The turn is over (and everything of it stored) when its answer loses the Stop button.
    run.wait_message(CHANNEL_ID, &root, "the second turn over", |m| {
        m.text == "second" && !m.blocks.to_string().contains("\"stop:slack:")
    })
    .await;

    proxy.cut();
    run.slack
        .app_mention_in_thread(CHANNEL_ID, &root, &alice, "are you there?")
        .await;
    let notice = run
        .ephemeral(CHANNEL_ID, "U0ALICE", "could not take that message")
        .await;
    assert!(notice.text.contains("database"), "{}", notice.text);
    proxy.restore().await;
    run.slack
        .thread_message(CHANNEL_ID, &root, &alice, "and now?")
        .await;
    run.wait_message(CHANNEL_ID, &root, "the third answer", |m| m.text == "third")
        .await;

    let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
    let history = run.agent.history(&key).await.unwrap();
    let said: Vec<String> = history.iter().map(|m| m.content.clone()).collect();
    assert_eq!(
        said,
        [
            "hello",
            "first",
            "still there?",
            "second",
            "and now?",
            "third"
        ]
    );

    // A store slower than Slack's 3-second trigger: the note dialog cannot open, and the
    // clicker is told so instead of nothing happening; the card still works after.
    s.llm.push(tool_call(
        "c1",
        "bash",
        serde_json::json!({"command": "echo slow-store"}),
    ));
    s.llm.push(text("fourth"));
    run.slack
        .thread_message(CHANNEL_ID, &root, &alice, "one more")
        .await;
    let card = run.card(CHANNEL_ID, &root, 0).await;
    let mut admin = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    admin.execute("BEGIN").await.unwrap();
    admin
        .execute("LOCK TABLE tool_approvals IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let (deny_note, value) = slack_button(&card, "Deny with note");
    run.slack
        .click(CHANNEL_ID, &card.ts, &alice, &deny_note, &value)
        .await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    admin.execute("COMMIT").await.unwrap();
    run.ephemeral(CHANNEL_ID, "U0ALICE", "Could not open the note dialog")
        .await;
    let (approve, value) = slack_button(&card, "Approve");
    run.slack
        .click(CHANNEL_ID, &card.ts, &alice, &approve, &value)
        .await;
    run.wait_message(CHANNEL_ID, &root, "the fourth answer", |m| {
        m.text == "fourth"
    })
    .await;
    s.llm.verify();
}

/// The hard case underneath: the connection goes while an append is in flight, after the
/// database has taken the statement. The store tries again on a new connection and finds its
/// own message already there: stored once, and the turn is not failed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_cut_off_mid_statement_is_stored_exactly_once() {
    use sandpiper_agent::model::Message;
    use sandpiper_agent::store::Store;

    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let proxy = DbProxy::start(&db.url).await;
    let store = Store::connect_with(&proxy.url(&db.url), 2, Duration::from_secs(5))
        .await
        .unwrap();
    store.ensure_workstream("cli:outage", None).await.unwrap();
    store
        .append_message("cli:outage", 0, &Message::user("before"), Some("u1"))
        .await
        .unwrap();

    // Hold the table so the next append waits inside the server, then cut its connection.
    let mut admin = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    admin.execute("BEGIN").await.unwrap();
    admin
        .execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let answer = Message::assistant("the answer");
    let append = {
        let (store, answer) = (store.clone(), answer.clone());
        tokio::spawn(async move { store.append_message("cli:outage", 1, &answer, None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The server now runs the waiting insert and commits it; its client is gone.
    admin.execute("COMMIT").await.unwrap();
    proxy.restore().await;

    append
        .await
        .unwrap()
        .expect("the append succeeds after the reconnect");
    let history = store.load_messages("cli:outage").await.unwrap();
    assert_eq!(history, [Message::user("before"), answer]);
}
