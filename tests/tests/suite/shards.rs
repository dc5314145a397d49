//! Discord shards split across nodes (`[discord] shards`): two nodes on one database, one
//! running shard 0 of 2 and the other shard 1 of 2, against one fake Discord that routes a
//! guild's events to shard `(guild_id >> 22) % 2` only, as Discord does. Each guild's mention
//! is answered exactly once, by the node that owns its shard.

use sandpiper_channels::config::ShardRange;
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT};
use sandpiper_tests::fake_discord::{CHANNEL_ID, FakeDiscord, FakeUser, GUILD_ID, shard_of};
use sandpiper_tests::fake_llm::text;

use super::setup;

/// A second guild, on shard 1 of 2 (the fake's own guild is on shard 0).
const OTHER_GUILD: u64 = 810_000_000_020_000_300;
/// Its text channel.
const OTHER_CHANNEL: u64 = 810_000_000_020_000_400;

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

both_backends! {
    async fn each_guild_is_answered_once_by_the_node_that_owns_its_shard(db) {
        assert_eq!((shard_of(GUILD_ID, 2), shard_of(OTHER_GUILD, 2)), (0, 1));
        let fake = FakeDiscord::start().await;
        fake.add_guild(OTHER_GUILD, OTHER_CHANNEL);
        // One model per node, each answering once: who answered shows in the text, and a
        // second request to either would find its script empty.
        let a = setup(&db, vec![text("Node A (shard 0) here.")]).await;
        let b = setup(&db, vec![text("Node B (shard 1) here.")]).await;
        let mut config_a = a.config.clone();
        config_a.discord.shards = Some(ShardRange::new(0, 0, 2).unwrap());
        let mut config_b = b.config.clone();
        config_b.discord.shards = Some(ShardRange::new(1, 1, 2).unwrap());
        let mut node_a = DiscordRig::start(fake.clone(), config_a).await;
        let mut node_b = DiscordRig::start(fake.clone(), config_b).await;
        let mut shards = fake.identified_shards();
        shards.sort_unstable();
        assert_eq!(shards, vec![(0, 2), (1, 2)]);

        let in_first = node_a.mention(&alice(), "who answers the first guild?").await;
        let msg = fake
            .user_message(OTHER_CHANNEL, &alice(), &format!("{} and the second?", fake.mention()))
            .await;
        let in_other = fake
            .wait_until(WAIT, "a thread in the second guild", |f| {
                f.threads().into_iter().find(|t| t.starter_message_id == Some(msg)).map(|t| t.id)
            })
            .await;
        node_a.wait_text(in_first, "Node A (shard 0) here.").await;
        node_a.wait_text(in_other, "Node B (shard 1) here.").await;
        // Let a duplicate (a second thread, a second answer) show if there were one.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(fake.threads().len(), 2, "one thread per mention");
        for thread in [in_first, in_other] {
            assert_eq!(node_a.bot_messages(thread).len(), 1, "one answer in {thread}");
        }
        assert_eq!((a.llm.requests().len(), b.llm.requests().len()), (1, 1));
        // Each thread belongs to the node whose shard saw the mention (both share one database).
        for thread in [in_first, in_other] {
            assert!(node_a.agent.workstream(&format!("discord:{thread}")).await.unwrap().is_some());
        }
        let parents: Vec<u64> = fake.threads().iter().map(|t| t.parent_id).collect();
        assert_eq!(parents, vec![CHANNEL_ID, OTHER_CHANNEL]);
        a.llm.verify();
        b.llm.verify();
        node_b.stop().await;
        node_a.stop().await;
    }

    async fn one_node_may_run_every_shard_of_a_range(db) {
        let fake = FakeDiscord::start().await;
        fake.add_guild(OTHER_GUILD, OTHER_CHANNEL);
        let s = setup(&db, vec![text("Both shards are mine.")]).await;
        let mut config = s.config.clone();
        config.discord.shards = Some("0-1/2".parse().unwrap());
        let mut rig = DiscordRig::start(fake.clone(), config).await;
        // serenity waits 5 s between two IDENTIFYs; the second shard comes after that.
        fake.wait_until(WAIT, "both shards identified", |f| {
            (f.identified_shards().len() == 2).then_some(())
        })
        .await;
        let mut shards = fake.identified_shards();
        shards.sort_unstable();
        assert_eq!(shards, vec![(0, 2), (1, 2)]);
        let msg = fake
            .user_message(OTHER_CHANNEL, &alice(), &format!("{} are you there?", fake.mention()))
            .await;
        let thread = fake
            .wait_until(WAIT, "a thread in the second guild", |f| {
                f.threads().into_iter().find(|t| t.starter_message_id == Some(msg)).map(|t| t.id)
            })
            .await;
        rig.wait_text(thread, "Both shards are mine.").await;
        s.llm.verify();
        rig.stop().await;
    }
}
