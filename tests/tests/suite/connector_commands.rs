//! `/connectors` through the fake Discord and the fake Slack: the same command table, the
//! same rule (a thread: its starter or an admin; a channel: an admin), the same answers.

use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, response_text};
use sandpiper_tests::fake_discord::{CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::text;
use sandpiper_tests::fake_slack::{CHANNEL_ID as SLACK_CHANNEL, TEAM_ID};
use serde_json::{Value, json};

use super::setup;
use super::slack::socket_run;

const ADMIN: u64 = 700_000_000_000_000_009;

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

fn dana() -> FakeUser {
    FakeUser::new(900_000_000_000_000_004, "dana").with_roles(&[ADMIN])
}

fn opt(name: &str, value: &str) -> Value {
    json!({"name": name, "type": 3, "value": value})
}

both_backends! {
    async fn discord_connectors_show_and_change_the_thread_and_its_channel(db) {
        let mut s = setup(&db, vec![text("hi")]).await;
        s.config.discord.admin_roles = vec![ADMIN.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let names: Vec<String> = rig.fake.registered_commands().iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_owned()).collect();
        assert!(names.contains(&"connectors".to_owned()), "{names:?}");
        let thread = rig.mention(&alice(), "hello").await;
        rig.wait_text(thread, "hi").await;
        let key = format!("discord:{thread}");
        let parent = format!("discord:{CHANNEL_ID}");
        // The thread knows the channel it was opened from.
        assert_eq!(rig.agent.workstream_connectors(&key).await.unwrap().channel.as_deref(), Some(parent.as_str()));

        let say = |user: FakeUser, channel: u64, options: Value| {
            let rig = &rig;
            async move {
                let id = rig.fake.slash(channel, &user, "connectors", options).await;
                let reply = rig.fake.wait_until(WAIT, "the connectors answer", |f| f.interaction_responses(id).pop()).await;
                assert_eq!(reply["data"]["flags"], json!(64), "{reply}");
                response_text(&[reply])
            }
        };
        let shown = say(bob(), thread, json!([])).await;
        assert!(shown.contains("Connectors allowed in this thread: all (no tier restricts them)"), "{shown}");
        let refused = say(bob(), thread, json!([opt("action", "set"), opt("servers", "github")])).await;
        assert!(refused.contains("Only the person who started this thread, or an admin"), "{refused}");
        let set = say(alice(), thread, json!([opt("action", "set"), opt("servers", "jira, github")])).await;
        assert!(set.contains("Connectors allowed in this thread: github, jira (from the workstream tier)"), "{set}");
        let refused = say(alice(), thread, json!([opt("action", "none"), opt("scope", "channel")])).await;
        assert!(refused.contains("Only an admin can change a channel"), "{refused}");
        let narrowed = say(dana(), thread, json!([opt("action", "set"), opt("servers", "github"), opt("scope", "channel")])).await;
        assert!(narrowed.contains(&format!("• channel {parent}: github")), "{narrowed}");
        let shown = say(bob(), thread, json!([opt("action", "show")])).await;
        assert!(shown.contains("Connectors allowed in this thread: github (from the workstream tier, narrowed by channel)"), "{shown}");
        assert!(shown.contains("• thread: github, jira"), "{shown}");
        let cleared = say(alice(), thread, json!([opt("action", "clear")])).await;
        assert!(cleared.contains("github (from the channel tier)") && cleared.contains("• thread: not set"), "{cleared}");
        // An admin in the channel itself changes that channel.
        let none = say(dana(), CHANNEL_ID, json!([opt("action", "none")])).await;
        assert!(none.contains("Connectors allowed in this channel: none (from the channel tier)"), "{none}");
        let view = rig.agent.workstream_connectors(&key).await.unwrap();
        assert_eq!(view.tiers.workstream, None);
        assert_eq!(view.tiers.channel, Some(Vec::new()));
        assert_eq!(view.effective.describe(), "none");
    }

    async fn slack_connectors_act_on_the_latest_thread_and_the_channel(db) {
        let mut s = setup(&db, vec![text("hi")]).await;
        s.config.slack.admin_usergroups = vec!["S0ADMINS".into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup("S0ADMINS", &["U0ERIN"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let erin = run.slack.user("U0ERIN", "erin");
        let root = run.slack.app_mention(SLACK_CHANNEL, &alice, "hello").await;
        run.wait_message(SLACK_CHANNEL, &root, "the answer", |m| m.text == "hi").await;
        let key = format!("slack:{TEAM_ID}:{SLACK_CHANNEL}:{root}");

        run.slack.slash_command(SLACK_CHANNEL, &bob, "/sandpiper", "connectors set github").await;
        run.ephemeral(SLACK_CHANNEL, "U0BOB", "Only the person who started this thread").await;
        run.slack.slash_command(SLACK_CHANNEL, &alice, "/sandpiper", "connectors set github, jira").await;
        run.ephemeral(SLACK_CHANNEL, "U0ALICE", "github, jira (from the workstream tier)").await;
        run.slack.slash_command(SLACK_CHANNEL, &alice, "/sandpiper", "connectors none channel").await;
        run.ephemeral(SLACK_CHANNEL, "U0ALICE", "Only an admin").await;
        run.slack.slash_command(SLACK_CHANNEL, &erin, "/sandpiper", "connectors set jira channel").await;
        run.ephemeral(SLACK_CHANNEL, "U0ERIN", "jira (from the channel tier)").await;
        run.slack.slash_command(SLACK_CHANNEL, &bob, "/sandpiper", "connectors").await;
        run.ephemeral(SLACK_CHANNEL, "U0BOB", "jira (from the workstream tier, narrowed by channel)").await;
        let view = run.agent.workstream_connectors(&key).await.unwrap();
        assert_eq!(view.channel, Some(format!("slack:{TEAM_ID}:{SLACK_CHANNEL}")));
        assert_eq!(view.tiers.workstream, Some(vec!["github".to_owned(), "jira".to_owned()]));
        assert_eq!(view.tiers.channel, Some(vec!["jira".to_owned()]));
        assert_eq!(view.effective.describe(), "jira");
        run.slack.slash_command(SLACK_CHANNEL, &alice, "/sandpiper", "connectors clear").await;
        run.ephemeral(SLACK_CHANNEL, "U0ALICE", "selection is cleared").await;
        assert_eq!(run.agent.workstream_connectors(&key).await.unwrap().tiers.workstream, None);
    }
}
