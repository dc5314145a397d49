//! Every way in (issue #10, attack 4): `channels` limits mentions, slash commands and DMs on
//! Discord and Slack; DMs are off unless `dms = true` (a DM then gets no answer at all, the
//! quieter choice); a command from an unlisted channel gets a private refusal.

use std::time::Duration;

use sandpiper_channels::config::SlackMode;
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT};
use sandpiper_tests::fake_discord::{BOT_ID, CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::text;
use sandpiper_tests::fake_slack::{self, BOT_USER_ID, FakeSlack};
use sandpiper_tests::slack_harness::{SlackRun, configure};
use serde_json::json;

use super::setup;

/// Long enough for an event the bot would answer to have been answered.
const SETTLE: Duration = Duration::from_millis(1500);

fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol")
}

/// The content of the first answer to interaction `id`.
async fn answer(rig: &DiscordRig, id: u64) -> serde_json::Value {
    rig.fake
        .wait_until(WAIT, "the command's answer", |f| {
            f.interaction_responses(id).pop()
        })
        .await
}

both_backends! {
    async fn discord_outside_the_listed_channels_and_with_dms_off_nothing_runs(db) {
        let mut s = setup(&db, vec![]).await;
        s.config.discord.channels = vec![CHANNEL_ID + 1];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        // A mention in an unlisted channel is ignored.
        rig.fake.user_message(CHANNEL_ID, &carol(), &format!("{} run id", rig.fake.mention())).await;
        // A DM gets no answer.
        let (dm, _) = rig.fake.dm(&carol(), "run id for me").await;
        // Commands there are refused privately, saying why.
        let ask = rig.fake.slash(CHANNEL_ID, &carol(), "ask", json!([{"name": "prompt", "type": 3, "value": "run id"}])).await;
        let reply = answer(&rig, ask).await;
        assert_eq!(reply["data"]["flags"], json!(64), "{reply}");
        assert!(reply["data"]["content"].as_str().unwrap_or_default().contains("I don't work in this channel"), "{reply}");
        let ask_dm = rig.fake.slash(dm, &carol(), "ask", json!([{"name": "prompt", "type": 3, "value": "run id"}])).await;
        let reply = answer(&rig, ask_dm).await;
        assert_eq!(reply["data"]["flags"], json!(64), "{reply}");
        assert!(reply["data"]["content"].as_str().unwrap_or_default().contains("direct messages"), "{reply}");
        tokio::time::sleep(SETTLE).await;
        assert!(rig.fake.threads().is_empty(), "no thread opened");
        assert!(rig.bot_messages(CHANNEL_ID).is_empty() && rig.bot_messages(dm).is_empty());
        assert!(s.llm.requests().is_empty(), "no turn ran");
        assert!(rig.agent.store().list_workstreams().await.unwrap().is_empty());
    }

    async fn discord_with_dms_on_a_dm_is_answered(db) {
        let mut s = setup(&db, vec![text("answered in private"), text("answered in the channel")]).await;
        s.config.discord.channels = vec![CHANNEL_ID];
        s.config.discord.dms = true;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let (dm, _) = rig.fake.dm(&carol(), "hello").await;
        rig.wait_text(dm, "answered in private").await;
        let thread = rig.mention(&carol(), "and here").await;
        rig.wait_text(thread, "answered in the channel").await;
        assert!(rig.fake.messages(dm).iter().any(|m| m.author_id == BOT_ID));
        s.llm.verify();
    }

    async fn slack_outside_the_listed_channels_and_with_dms_off_nothing_runs(db) {
        let mut s = setup(&db, vec![]).await;
        let slack = FakeSlack::start().await;
        configure(&mut s.config, &slack, SlackMode::Socket);
        s.config.slack.channels = vec!["C0LISTED".into()];
        let run = SlackRun::start(s.config.clone(), slack).await;
        let carol = run.slack.user("U0CAROL", "carol");
        run.slack.app_mention(fake_slack::CHANNEL_ID, &carol, "run id").await;
        let (dm, _) = run.slack.dm_message(&carol, "run id for me", None).await;
        run.slack.slash_command(fake_slack::CHANNEL_ID, &carol, "/sandpiper", "ask run id").await;
        run.slack.slash_command(&dm, &carol, "/sandpiper", "ask run id").await;
        let refusals = run.slack.wait_until(WAIT, "two refused commands", |s| {
            let texts: Vec<String> = s.acks().iter()
                .filter_map(|id| s.ack_payload(id))
                .filter_map(|p| p["text"].as_str().map(str::to_owned))
                .collect();
            (texts.len() == 2).then_some(texts)
        }).await;
        assert!(refusals[0].contains("I don't work in this channel"), "{refusals:?}");
        assert!(refusals[1].contains("direct messages"), "{refusals:?}");
        tokio::time::sleep(SETTLE).await;
        for channel in [fake_slack::CHANNEL_ID, dm.as_str()] {
            assert!(run.slack.messages(channel).iter().all(|m| m.user != BOT_USER_ID), "{channel}");
        }
        assert!(s.llm.requests().is_empty(), "no turn ran");
        assert!(run.agent.store().list_workstreams().await.unwrap().is_empty());
    }

    async fn slack_with_dms_on_a_dm_is_answered(db) {
        let mut s = setup(&db, vec![text("answered in private")]).await;
        let slack = FakeSlack::start().await;
        configure(&mut s.config, &slack, SlackMode::Socket);
        s.config.slack.channels = vec!["C0LISTED".into()];
        s.config.slack.dms = true;
        let run = SlackRun::start(s.config.clone(), slack).await;
        let carol = run.slack.user("U0CAROL", "carol");
        let (dm, ts) = run.slack.dm_message(&carol, "hello", None).await;
        run.slack.wait_until(WAIT, "the DM answer", |s| {
            s.messages(&dm).into_iter().find(|m| m.user == BOT_USER_ID && m.text == "answered in private" && m.thread_ts.as_deref() == Some(ts.as_str()))
        }).await;
        s.llm.verify();
    }
}
