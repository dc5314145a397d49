//! The Slack channel end to end: the real slack-morphism client in `SlackChannel` against the
//! fake Slack and the scripted model. Conversations, streaming, splitting, commands,
//! redelivery, reconnects and the Events API here; approvals in `slack_approvals`.

use std::time::Duration;

use sandpiper_channels::config::SlackMode;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{Reply, text};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack, TEAM_ID, event_callback_json, sign};
use sandpiper_tests::slack_harness::{SIGNING_SECRET, SlackRun, WAIT, configure};
use serde_json::json;

use super::{Setup, contents_with_role, setup};

/// Starts a Socket Mode channel for `s` against a new fake Slack.
pub(super) async fn socket_run(s: &Setup) -> SlackRun {
    let slack = FakeSlack::start().await;
    let mut config = s.config.clone();
    configure(&mut config, &slack, SlackMode::Socket);
    SlackRun::start(config, slack).await
}

both_backends! {
    async fn a_mention_gets_a_streamed_answer_in_its_thread_and_replies_continue_it(db) {
        let mut s = setup(&db, vec![
            // Long enough to wear the working reaction (SHOW_PROGRESS_AFTER); the second
            // answer comes at once and wears none.
            Reply::text("Hello **there**, see [docs](https://example.com/a?b=1&c=2) & more.")
                .with_chunk_delay(Duration::from_millis(200)),
            text("Still here."),
            Reply::slow_text("A DM answer, after a while.", Duration::from_millis(300)),
        ]).await;
        s.config.slack.dms = true;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "hello <b> & you").await;
        let answer = run
            .wait_message(CHANNEL_ID, &root, "the finished answer", |m| {
                m.text.ends_with("more.") && !m.blocks.to_string().contains("\"stop:slack:")
            })
            .await;
        assert_eq!(
            answer.text,
            "Hello *there*, see <https://example.com/a?b=1&amp;c=2|docs> &amp; more."
        );
        assert!(answer.edits >= 1, "streamed by chat.update: {answer:?}");
        let first_post = &run.slack.calls("chat.postMessage")[0];
        assert_eq!(first_post["thread_ts"], root.as_str());
        assert!(first_post["blocks"].to_string().contains("\"stop:slack:"), "live answers offer Stop");
        // The model saw the text unescaped and without the bot's mention.
        assert_eq!(contents_with_role(&s.llm.requests()[0], "user"), ["hello <b> & you"]);
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let info = run.agent.workstream(&key).await.unwrap().expect("workstream");
        let alice_id = run.agent.store().user_for_identity("slack", "U0ALICE", "alice").await.unwrap().id;
        assert_eq!(info.owner, Some(alice_id));

        // A reply in the thread continues the workstream without a mention.
        let reply = run.slack.thread_message(CHANNEL_ID, &root, &alice, "still there?").await;
        run.wait_message(CHANNEL_ID, &root, "the second answer", |m| m.text == "Still here.").await;
        assert_eq!(run.agent.history(&key).await.unwrap().len(), 4);
        // The slow turn wore the working reaction while it ran, and no longer does; the
        // quick one was answered before a reaction was worth two calls.
        let reacted = |method: &str| -> Vec<String> {
            run.slack.calls(method).iter().map(|c| c["timestamp"].as_str().unwrap_or_default().to_owned()).collect()
        };
        run.slack.wait_until(WAIT, "the reaction taken off", |_| (reacted("reactions.remove").len() == 1).then_some(())).await;
        assert_eq!(reacted("reactions.add"), std::slice::from_ref(&root), "none on {reply}");
        assert!(run.slack.messages(CHANNEL_ID).iter().all(|m| m.reactions.is_empty()));

        // A DM is its own workstream, answered in the DM's thread; a workspace that did not
        // grant `reactions:write` gets its answers all the same.
        run.slack.withhold_scope("reactions.add");
        let (dm, dm_ts) = run.slack.dm_message(&alice, "psst", None).await;
        run.wait_message(&dm, &dm_ts, "the DM answer", |m| m.text == "A DM answer, after a while.").await;
        assert_eq!(reacted("reactions.add"), [root.clone(), dm_ts.clone()], "tried, refused");
        assert_eq!(reacted("reactions.remove").len(), 1, "nothing to take off");
        assert!(run.agent.workstream(&format!("slack:{TEAM_ID}:{dm}:{dm_ts}")).await.unwrap().is_some());
        s.llm.verify();
    }

    async fn a_long_answer_is_split_without_breaking_its_code_block(db) {
        let mut long = String::from("Here is the log:\n\n```text\n");
        for i in 0..120 {
            long.push_str(&format!("line {i:03}: all systems nominal\n"));
        }
        long.push_str("```\n\nThat is **all**.");
        let s = setup(&db, vec![Reply::text_chunks([long])]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "show me the log").await;
        run.wait_message(CHANNEL_ID, &root, "the last piece", |m| m.text.ends_with("That is *all*.")).await;
        let texts: Vec<String> = run.thread(CHANNEL_ID, &root).into_iter().map(|m| m.text).collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        for t in &texts {
            assert_eq!(t.matches("```").count() % 2, 0, "fences balanced in {t}");
            assert!(t.chars().count() <= 3000);
        }
        insta::assert_snapshot!("slack_split_answer", texts.join("\n===== next message =====\n"));
    }

    async fn a_message_during_a_turn_waits_and_is_answered_after(db) {
        let s = setup(&db, vec![
            // Still running a second after the second message: its sender is told it waits.
            Reply::slow_text("one two three four five", Duration::from_millis(400)),
            text("Second answer."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "first").await;
        run.wait_message(CHANNEL_ID, &root, "the first answer starting", |m| m.text.starts_with("one")).await;
        run.slack.thread_message(CHANNEL_ID, &root, &alice, "second").await;
        run.ephemeral(CHANNEL_ID, "U0ALICE", "answer yours next").await;
        run.wait_message(CHANNEL_ID, &root, "the second answer", |m| m.text == "Second answer.").await;
        let texts: Vec<String> = run.thread(CHANNEL_ID, &root).into_iter().map(|m| m.text).collect();
        assert_eq!(texts, ["one two three four five", "Second answer."]);
        let second = &s.llm.requests()[1];
        assert_eq!(contents_with_role(second, "assistant"), ["one two three four five"]);
        s.llm.verify();
    }

    async fn slash_stop_cancels_the_running_turn(db) {
        let mut s = setup(&db, vec![
            Reply::slow_text("word ".repeat(200), Duration::from_millis(50)),
        ]).await;
        // In an owner-only thread only its owner (or an approver) may stop it.
        s.config.slack.thread_access = sandpiper_channels::config::ThreadAccess::Owner;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "talk a lot").await;
        run.wait_message(CHANNEL_ID, &root, "the answer starting", |m| m.text.starts_with("word")).await;
        let bob = run.slack.user("U0BOB", "bob");
        run.slack.slash_command(CHANNEL_ID, &bob, "/sandpiper", "stop").await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "Nothing of yours").await;
        run.slack.slash_command(CHANNEL_ID, &alice, "/sandpiper", "stop").await;
        run.ephemeral(CHANNEL_ID, "U0ALICE", "Stopped.").await;
        let stopped = run
            .wait_message(CHANNEL_ID, &root, "the stopped answer", |m| m.text.ends_with("_(stopped)_"))
            .await;
        assert!(stopped.text.matches("word").count() < 200, "{}", stopped.text);
        assert!(!stopped.blocks.to_string().contains("\"stop:slack:"), "no Stop button once stopped");
    }

    async fn slash_commands_answer_from_the_shared_table(db) {
        let s = setup(&db, vec![text("Asked and answered.")]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        run.slack.slash_command(CHANNEL_ID, &alice, "/sandpiper", "launch rockets").await;
        run.slack.slash_command(CHANNEL_ID, &alice, "/sandpiper", "ask what is <up>?").await;
        let asked = run
            .slack
            .wait_until(WAIT, "the question in the channel", |s| {
                s.messages(CHANNEL_ID).into_iter().find(|m| m.text.contains("asked:"))
            })
            .await;
        assert_eq!(asked.text, "<@U0ALICE> asked: what is &lt;up&gt;?");
        run.wait_message(CHANNEL_ID, &asked.ts, "the answer", |m| m.text == "Asked and answered.").await;
        assert_eq!(contents_with_role(&s.llm.requests()[0], "user"), ["what is <up>?"]);
        run.slack.slash_command(CHANNEL_ID, &alice, "/sandpiper", "status").await;
        let status = run.ephemeral(CHANNEL_ID, "U0ALICE", "Workstream").await;
        assert!(status.text.contains(&asked.ts) && status.text.contains("fake-model"), "{}", status.text);
        let bob = run.slack.user("U0BOB", "bob");
        run.slack.slash_command(CHANNEL_ID, &bob, "/sandpiper", "close").await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "Only the person").await;
        run.slack.slash_command(CHANNEL_ID, &alice, "/sandpiper", "close").await;
        run.ephemeral(CHANNEL_ID, "U0ALICE", "Closed").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{}", asked.ts);
        assert!(run.agent.workstream(&key).await.unwrap().unwrap().closed);
        let acks = run.slack.wait_until(WAIT, "5 acks", |s| Some(s.acks()).filter(|a| a.len() == 5)).await;
        let unknown = run.slack.ack_payload(&acks[0]).expect("an immediate reply");
        assert!(unknown["text"].as_str().unwrap().contains("unknown command"), "{unknown}");
        s.llm.verify();
    }

    async fn a_redelivered_event_is_handled_once(db) {
        let s = setup(&db, vec![text("Once.")]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "hi").await;
        run.slack.redeliver_last_event().await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "Once.").await;
        run.slack.wait_until(WAIT, "both deliveries acked", |s| Some(()).filter(|()| s.acks().len() == 2)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(s.llm.requests().len(), 1);
        assert_eq!(run.thread(CHANNEL_ID, &root).len(), 1);
    }

    async fn a_reconnect_loses_nothing(db) {
        let s = setup(&db, vec![text("Back again.")]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let opened = run.slack.calls("apps.connections.open").len();
        run.slack.disconnect().await;
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "are you there?").await;
        run.wait_message(CHANNEL_ID, &root, "the answer after the reconnect", |m| m.text == "Back again.").await;
        assert!(run.slack.calls("apps.connections.open").len() > opened);
    }

    async fn events_api_mode_checks_signatures(db) {
        let s = setup(&db, vec![text("Signed and delivered.")]).await;
        let slack = FakeSlack::start().await;
        let mut config = s.config.clone();
        configure(&mut config, &slack, SlackMode::Events);
        let run = SlackRun::start(config, slack).await;
        run.slack.user("U0ALICE", "alice");
        let router = run.router.clone().expect("events mode serves routes");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let url = format!("http://{addr}/slack/events");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let root = "1700000100.000100";
        let event = json!({
            "type": "app_mention", "user": "U0ALICE", "text": "<@U0BOT> signed?", "ts": root,
            "team": TEAM_ID, "channel": CHANNEL_ID, "event_ts": root,
        });
        let body = event_callback_json(event, "Ev0SIGNED").to_string();
        let post = |body: String, ts: i64, sig: String| {
            http.post(&url)
                .header("x-slack-request-timestamp", ts.to_string())
                .header("x-slack-signature", sig)
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        let forged = post(body.clone(), now, sign("wrong-secret", now, &body)).await.unwrap();
        assert_eq!(forged.status(), 401);
        let stale = post(body.clone(), now - 600, sign(SIGNING_SECRET, now - 600, &body)).await.unwrap();
        assert_eq!(stale.status(), 401);
        let unsigned = http.post(&url).body(body.clone()).send().await.unwrap();
        assert_eq!(unsigned.status(), 401);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(s.llm.requests().is_empty(), "nothing processed");
        assert!(run.slack.calls("chat.postMessage").is_empty());

        let challenge = json!({"type": "url_verification", "challenge": "abc", "token": "t"}).to_string();
        let answer = post(challenge.clone(), now, sign(SIGNING_SECRET, now, &challenge)).await.unwrap();
        assert_eq!(answer.json::<serde_json::Value>().await.unwrap(), json!({"challenge": "abc"}));

        let ok = post(body.clone(), now, sign(SIGNING_SECRET, now, &body)).await.unwrap();
        assert_eq!(ok.status(), 200);
        // Slack retries with the same event id: handled once.
        let retry = http.post(&url)
            .header("x-slack-request-timestamp", now.to_string())
            .header("x-slack-signature", sign(SIGNING_SECRET, now, &body))
            .header("x-slack-retry-num", "1")
            .body(body.clone())
            .send().await.unwrap();
        assert_eq!(retry.status(), 200);
        run.wait_message(CHANNEL_ID, root, "the answer", |m| m.text == "Signed and delivered.").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(s.llm.requests().len(), 1);
        s.llm.verify();
    }

    async fn the_stop_button_stops_its_thread_and_rate_limits_are_retried(db) {
        let mut s = setup(&db, vec![
            Reply::slow_text("word ".repeat(200), Duration::from_millis(50)),
        ]).await;
        s.config.slack.thread_access = sandpiper_channels::config::ThreadAccess::Owner;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        run.slack.fail_next("chat.postMessage", 1, 1);
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "talk a lot").await;
        let live = run
            .wait_message(CHANNEL_ID, &root, "the live answer", |m| m.blocks.to_string().contains("\"stop:slack:"))
            .await;
        assert_eq!(run.slack.calls("chat.postMessage").len(), 2, "one 429, one retry");
        let bob = run.slack.user("U0BOB", "bob");
        run.slack.click(CHANNEL_ID, &live.ts, &bob, &format!("stop:slack:{TEAM_ID}:{CHANNEL_ID}:{root}"), "").await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "Only the person").await;
        run.slack.click(CHANNEL_ID, &live.ts, &alice, &format!("stop:slack:{TEAM_ID}:{CHANNEL_ID}:{root}"), "").await;
        run.wait_message(CHANNEL_ID, &root, "the stopped answer", |m| m.text.ends_with("_(stopped)_")).await;
    }
}
