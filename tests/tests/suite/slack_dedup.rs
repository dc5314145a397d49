//! Slack events handled exactly once when the same event reaches several nodes or connections
//! (Socket Mode spreads envelopes over every connection, Slack redelivers late acks): the
//! `channel_events` table on both databases, two nodes on one database receiving every
//! envelope, and one node whose two connections both receive every click and form.

use std::time::Duration;

use sandpiper_agent::store::Store;
use sandpiper_channels::config::SlackMode;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack};
use sandpiper_tests::slack_harness::{SlackRun, WAIT, button, configure, is_card};
use serde_json::json;

use super::setup;

/// Waits until `n` Socket Mode connections are open on `slack`.
async fn wait_connections(slack: &FakeSlack, n: usize) {
    slack
        .wait_until(WAIT, &format!("{n} open Socket Mode connections"), |s| {
            (s.open_connections() >= n).then_some(())
        })
        .await;
}

both_backends! {
    async fn an_event_id_is_taken_once_across_nodes_and_old_ids_are_pruned(db) {
        let a = Store::connect(&db.url, 4).await.unwrap();
        let b = Store::connect(&db.url, 4).await.unwrap();
        // Eight deliveries of one event, racing on two nodes: exactly one wins.
        let claims = (0..8).map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { store.first_delivery("slack", "Ev0RACE").await.unwrap() })
        });
        let mut won = 0;
        for claim in claims {
            won += usize::from(claim.await.unwrap());
        }
        assert_eq!(won, 1);
        // Another platform's id, or another id, is another event.
        assert!(b.first_delivery("discord", "Ev0RACE").await.unwrap());
        assert!(a.first_delivery("slack", "trigger:1.2.abc").await.unwrap());
        assert!(!b.first_delivery("slack", "trigger:1.2.abc").await.unwrap());
        assert_eq!(a.prune_delivered(60_000).await.unwrap(), 0, "recent ids stay");
        assert_eq!(b.prune_delivered(-1).await.unwrap(), 3);
        assert!(a.first_delivery("slack", "Ev0RACE").await.unwrap(), "a forgotten id is new again");
        a.close().await;
        b.close().await;
    }

    async fn two_nodes_that_both_receive_every_envelope_answer_each_once(db) {
        let s = setup(&db, vec![
            text("One answer to the mention."),
            text("One answer to the command."),
        ]).await;
        let slack = FakeSlack::start().await;
        let mut config = s.config.clone();
        configure(&mut config, &slack, SlackMode::Socket);
        let node_a = SlackRun::start(config.clone(), slack.clone()).await;
        let node_b = SlackRun::start(config, slack.clone()).await;
        // Two connections per node; every envelope goes to all four.
        wait_connections(&slack, 4).await;
        slack.fan_out(true);
        let alice = slack.user("U0ALICE", "alice");

        let root = slack.app_mention(CHANNEL_ID, &alice, "answer me once").await;
        node_a.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "One answer to the mention.").await;
        slack.slash_command(CHANNEL_ID, &alice, "/sandpiper", "ask and this, once?").await;
        let asked = slack
            .wait_until(WAIT, "the question in the channel", |s| {
                s.messages(CHANNEL_ID).into_iter().find(|m| m.text.contains("asked:"))
            })
            .await;
        node_a.wait_message(CHANNEL_ID, &asked.ts, "the command's answer", |m| m.text == "One answer to the command.").await;
        slack.wait_until(WAIT, "every copy acknowledged", |s| (s.acks().len() >= 8).then_some(())).await;
        // Let a duplicate turn show if there were one.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(slack.envelopes().len(), 8, "each of the two envelopes reached all four connections");
        assert_eq!(s.llm.requests().len(), 2);
        assert_eq!(node_a.thread(CHANNEL_ID, &root).len(), 1);
        assert_eq!(node_b.thread(CHANNEL_ID, &asked.ts).len(), 1);
        let questions = slack.messages(CHANNEL_ID).into_iter().filter(|m| m.text.contains("asked:")).count();
        assert_eq!(questions, 1, "the command ran once");
        s.llm.verify();
        node_b.stop().await;
        node_a.stop().await;
    }

    async fn a_click_and_a_form_delivered_on_both_connections_count_once(db) {
        let s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "rm -rf build"})),
            text("OK, not deleting."),
        ]).await;
        let slack = FakeSlack::start().await;
        let mut config = s.config.clone();
        configure(&mut config, &slack, SlackMode::Socket);
        let run = SlackRun::start(config, slack.clone()).await;
        wait_connections(&slack, 2).await;
        slack.fan_out(true);
        let alice = slack.user("U0ALICE", "alice");
        let root = slack.app_mention(CHANNEL_ID, &alice, "clean up").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (deny_note, value) = button(&card, "Deny with note");
        slack.click(CHANNEL_ID, &card.ts, &alice, &deny_note, &value).await;
        let view = slack.wait_until(WAIT, "the note modal", |s| s.opened_views().into_iter().next()).await;
        slack.view_submission(&alice, view, &[("note", "note", "keep it")]).await;
        run.wait_message(CHANNEL_ID, &root, "the denied card", |m| is_card(m) && m.text.contains("Denied")).await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "OK, not deleting.").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(slack.calls("views.open").len(), 1, "the click opened one modal");
        assert_eq!(s.llm.requests().len(), 2, "one turn, one decision");
        let cards = run.thread(CHANNEL_ID, &root).into_iter().filter(is_card).count();
        assert_eq!(cards, 1);
        // Nobody was told off for a second click they never made.
        let ephemerals = slack.messages(CHANNEL_ID).into_iter().filter(|m| m.ephemeral_for.is_some()).count();
        assert_eq!(ephemerals, 0);
        s.llm.verify();
        run.stop().await;
    }
}
