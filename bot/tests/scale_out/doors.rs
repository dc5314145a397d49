//! The front doors a cluster is reached through, and what a person does at each. The
//! scenarios in `main.rs` speak of threads, messages and cards; this file says what those are
//! on each platform and how a message or a click reaches a node:
//!
//! - [`Door::SlackEvents`]: Slack posts each event and click over HTTP; the test plays the
//!   load balancer and picks the node (so a click can be sent to a node that does not own
//!   the thread).
//! - [`Door::SlackSocket`]: every node holds Socket Mode connections (two each); the fake
//!   Slack hands each envelope to one of them, picked at random from the run's seed, and
//!   sends an event again to another when the connection it went to closed unacknowledged.
//! - [`Door::Discord`]: node `i` runs gateway shard `i` of 3 and each shard has a guild of its
//!   own, so a guild's messages and clicks reach one node: the one running its shard.

use std::time::Duration;

use sandpiper_tests::discord_harness::{button as discord_button, card_text};
use sandpiper_tests::fake_discord::{BOT_ID, CHANNEL_ID as DISCORD_CHANNEL, GUILD_ID};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeMessage, FakeUser, shard_of};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack, FakeSlackMessage, SlackUser, TEAM_ID};
use sandpiper_tests::slack_harness::{SIGNING_SECRET, button as slack_button, is_card};

/// How many `serve` processes a cluster has; on Discord, also how many shards.
pub(crate) const NODES: usize = 3;

/// How a cluster is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Door {
    SlackEvents,
    SlackSocket,
    Discord,
}

/// A thread as the test knows it: its workstream key and where it is on its platform.
#[derive(Debug, Clone)]
pub(crate) struct Thread {
    pub(crate) key: String,
    place: Place,
}

#[derive(Debug, Clone)]
enum Place {
    /// The root message's ts.
    Slack(String),
    /// The thread channel, and the node whose shard has its guild.
    Discord { channel: u64, node: usize },
}

/// A message of the bot's in a thread, as a person sees it.
#[derive(Debug, Clone)]
pub(crate) struct Shown {
    /// The message's text (Slack's `text`, Discord's `content`).
    pub(crate) text: String,
    /// Everything it says, its blocks or embeds included.
    pub(crate) detail: String,
    /// Whether it is an approval card.
    pub(crate) card: bool,
    raw: Raw,
}

#[derive(Debug, Clone)]
enum Raw {
    Slack(FakeSlackMessage),
    Discord(FakeMessage),
}

/// Where a message or click is sent, when the door lets the test choose (Events API only).
pub(crate) enum Via {
    /// Any live node.
    Any,
    /// A live node other than this one.
    NotNode(usize),
}

/// The fake platform behind a door, and the person who talks to the bot there.
#[derive(Clone)]
pub(crate) enum Front {
    Slack {
        slack: FakeSlack,
        alice: SlackUser,
        events: bool,
    },
    Discord {
        discord: FakeDiscord,
        alice: FakeUser,
        /// The text channel of the guild on each node's shard.
        channels: Vec<u64>,
    },
}

/// The guild and text channel on Discord shard `shard` of [`NODES`]: the fake's own guild
/// for its shard, guilds added beside it for the others.
fn discord_guild(shard: u32) -> (u64, u64) {
    (0..)
        .map(|k: u64| (GUILD_ID + (k << 22), DISCORD_CHANNEL + (k << 22)))
        .find(|(guild, _)| shard_of(*guild, NODES as u32) == shard)
        .expect("some guild is on every shard")
}

impl Front {
    pub(crate) async fn start(door: Door, seed: u64) -> Self {
        match door {
            Door::SlackEvents | Door::SlackSocket => {
                let slack = FakeSlack::start().await;
                if door == Door::SlackSocket {
                    slack.spread(seed);
                }
                let alice = slack.user("U0ALICE", "alice");
                Self::Slack {
                    slack,
                    alice,
                    events: door == Door::SlackEvents,
                }
            }
            Door::Discord => {
                let discord = FakeDiscord::start().await;
                let mut channels = Vec::new();
                for shard in 0..NODES as u32 {
                    let (guild, channel) = discord_guild(shard);
                    if guild != GUILD_ID {
                        discord.add_guild(guild, channel);
                    }
                    channels.push(channel);
                }
                Self::Discord {
                    discord,
                    alice: FakeUser::new(900_000_000_000_000_001, "alice"),
                    channels,
                }
            }
        }
    }

    /// Events API: the test delivers each event and click to a node itself.
    pub(crate) fn delivered_by_the_test(&self) -> bool {
        matches!(self, Self::Slack { events: true, .. })
    }

    /// The config file's section for this door.
    pub(crate) fn config(&self) -> &'static str {
        match self {
            Self::Slack { events: true, .. } => {
                "[slack]\nmode = \"events\"\nstream_interval = \"50ms\"\n"
            }
            Self::Slack { events: false, .. } => {
                "[slack]\nmode = \"socket\"\nstream_interval = \"50ms\"\n"
            }
            Self::Discord { .. } => "",
        }
    }

    /// The environment of node `node`: its platform's secrets and the fake's address.
    pub(crate) fn env(&self, node: usize) -> Vec<(&'static str, String)> {
        match self {
            Self::Slack { slack, events, .. } => {
                let mut env = vec![
                    ("SLACK_BOT_TOKEN", "xoxb-fake".to_owned()),
                    (
                        "SANDPIPER_SLACK_API_BASE",
                        format!("{}/api", slack.base_url()),
                    ),
                ];
                if *events {
                    env.push(("SLACK_SIGNING_SECRET", SIGNING_SECRET.to_owned()));
                } else {
                    env.push(("SLACK_APP_TOKEN", "xapp-fake".to_owned()));
                }
                env
            }
            Self::Discord { discord, .. } => vec![
                ("DISCORD_TOKEN", "discord-fake-token".to_owned()),
                ("SANDPIPER_DISCORD_API_BASE", discord.base_url()),
                ("SANDPIPER_DISCORD_SHARDS", format!("{node}/{NODES}")),
            ],
        }
    }

    /// How far the platform's connections have got, before a node starts (see
    /// [`Front::wait_joined`]).
    pub(crate) fn mark(&self) -> usize {
        match self {
            Self::Slack { slack, .. } => slack.connection_count(),
            Self::Discord { discord, .. } => discord.identified_shards().len(),
        }
    }

    /// Waits until node `node`, started at `mark`, is reachable through the door: listening
    /// (Events API), its two Socket Mode connections open, or its shard identified.
    pub(crate) async fn wait_joined(&self, node: usize, mark: usize, timeout: Duration) {
        match self {
            Self::Slack { events: true, .. } => {}
            Self::Slack { slack, .. } => {
                slack
                    .wait_until(timeout, "the node's Socket Mode connections", |s| {
                        (s.connection_count() >= mark + 2).then_some(())
                    })
                    .await;
            }
            Self::Discord { discord, .. } => {
                let shard = node as u32;
                discord
                    .wait_until(timeout, "the node's shard to identify", |d| {
                        d.identified_shards()[mark..]
                            .contains(&(shard, NODES as u32))
                            .then_some(())
                    })
                    .await;
            }
        }
    }

    /// Whether `thread`'s messages can reach the cluster now: on Discord only while the node
    /// running its guild's shard is up (Discord does not keep a dead shard's events).
    pub(crate) fn reachable(&self, thread: &Thread, live: &[usize]) -> bool {
        match &thread.place {
            Place::Slack(_) => true,
            Place::Discord { node, .. } => live.contains(node),
        }
    }

    /// Alice opens thread number `t` with `token` (on Discord, in the guild of node
    /// `t % NODES`'s shard). For the Events API the test then delivers the event.
    pub(crate) async fn open_thread(&self, t: usize, token: &str) -> Thread {
        match self {
            Self::Slack { slack, alice, .. } => {
                let root = slack.app_mention(CHANNEL_ID, alice, token).await;
                Thread {
                    key: format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}"),
                    place: Place::Slack(root),
                }
            }
            Self::Discord {
                discord,
                alice,
                channels,
            } => {
                let node = t % NODES;
                let text = format!("{} {token}", discord.mention());
                let msg = discord.user_message(channels[node], alice, &text).await;
                let channel = discord
                    .wait_until(Duration::from_secs(30), "a thread for the mention", |d| {
                        d.threads()
                            .into_iter()
                            .find(|t| t.starter_message_id == Some(msg))
                            .map(|t| t.id)
                    })
                    .await;
                Thread {
                    key: format!("discord:{channel}"),
                    place: Place::Discord { channel, node },
                }
            }
        }
    }

    /// Alice writes `token` in `thread`.
    pub(crate) async fn say(&self, thread: &Thread, token: &str) {
        match (self, &thread.place) {
            (Self::Slack { slack, alice, .. }, Place::Slack(root)) => {
                slack.thread_message(CHANNEL_ID, root, alice, token).await;
            }
            (Self::Discord { discord, alice, .. }, Place::Discord { channel, .. }) => {
                discord.user_message(*channel, alice, token).await;
            }
            _ => unreachable!("a thread of another platform"),
        }
    }

    /// Alice clicks the button labelled `label` on `card`.
    pub(crate) async fn click(&self, thread: &Thread, card: &Shown, label: &str) {
        match (self, &card.raw, &thread.place) {
            (Self::Slack { slack, alice, .. }, Raw::Slack(m), _) => {
                let (action, value) = slack_button(m, label);
                slack.click(CHANNEL_ID, &m.ts, alice, &action, &value).await;
            }
            (
                Self::Discord { discord, alice, .. },
                Raw::Discord(m),
                Place::Discord { channel, .. },
            ) => {
                let custom_id = discord_button(m, label, 0);
                discord.click(*channel, m.id, alice, &custom_id).await;
            }
            _ => unreachable!("a card of another platform"),
        }
    }

    /// The bot's messages in `thread` (Slack: and the people's; they never match a check).
    pub(crate) fn shown(&self, thread: &Thread) -> Vec<Shown> {
        match (self, &thread.place) {
            (Self::Slack { slack, .. }, Place::Slack(root)) => slack
                .messages(CHANNEL_ID)
                .into_iter()
                .filter(|m| m.thread_ts.as_deref() == Some(root.as_str()) || m.ts == *root)
                .map(|m| Shown {
                    text: m.text.clone(),
                    detail: format!("{}\n{}", m.text, m.blocks),
                    card: is_card(&m),
                    raw: Raw::Slack(m),
                })
                .collect(),
            (Self::Discord { discord, .. }, Place::Discord { channel, .. }) => discord
                .messages(*channel)
                .into_iter()
                .filter(|m| m.author_id == BOT_ID && !m.is_ephemeral())
                .map(|m| Shown {
                    text: m.content.clone(),
                    detail: format!("{}\n{}", card_text(&m), m.components),
                    card: m.components.to_string().contains("\"custom_id\":\"ap"),
                    raw: Raw::Discord(m),
                })
                .collect(),
            _ => unreachable!("a thread of another platform"),
        }
    }

    /// The Events API: the body, path and content type of what the fake Slack last sent.
    pub(crate) fn last_delivery(&self) -> (&'static str, String, &'static str) {
        let Self::Slack { slack, .. } = self else {
            unreachable!("only the Events API is delivered by the test")
        };
        let envelope = slack.envelopes().pop().expect("an envelope");
        let payload = envelope["payload"].clone();
        if envelope["type"] == "events_api" {
            ("events", payload.to_string(), "application/json")
        } else {
            let form: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("payload", &payload.to_string())
                .finish();
            ("interactions", form, "application/x-www-form-urlencoded")
        }
    }
}
