//! Discord through serenity. A mention of the bot (or `/ask`) in a listened channel opens a
//! public thread whose workstream is `discord:<thread id>`; the answer streams into the
//! thread; risky tool calls post an approval card whose buttons are checked against the
//! stored request on every click.
//!
//! # Layout
//! - [`handler`]: gateway events: messages (mentions, thread messages) and routing.
//! - [`interactions`]: buttons and note dialogs; routes slash commands to [`commands`].
//! - [`commands`]: slash commands: their registration and what each does.
//! - [`surface`]: a thread as the stream renderer's surface, and the card approver.
//! - [`render`]: message bodies: answers, tool lines, approval cards.
//! - `notify`: notifications: DMs, posts without pings, replies that continue a workstream.
//! - [`pace`]: the global request budget, with 429/5xx retries.
//! - [`workstreams`]: naming a new thread, recording its workstream, stopping its turn
//!   (used by the three above).

pub mod commands;
pub mod handler;
pub mod interactions;
mod membership;
mod notify;
pub mod pace;
pub mod render;
pub mod respond;
pub mod surface;
pub mod workstreams;

use std::sync::{Arc, Mutex, OnceLock};

use crate::config::{DiscordConfig, ShardRange};
use sandpiper_agent::Agent;
use sandpiper_agent::people::User;
use sandpiper_agent::workstream::KeyPattern;
use sandpiper_agent::workstream::KeyPlatform;
use sandpiper_agent::workstream::WorkstreamKey;
use serenity::all::{ChannelId, GatewayIntents, Http, HttpBuilder, UserId};
use tokio_util::sync::CancellationToken;

use crate::card::human_duration;
use crate::intake::{Closed, Place};
use crate::tasks::{Drained, Tasks};
use crate::thread::{self, OutsideTurn, StartError, TurnPlace, TurnStarter, Work};
use crate::turns::{QueueFull, Queued, TurnQueue};
use surface::ThreadSurface;

/// The platform name in identities and workstream keys.
pub const PLATFORM: &str = "discord";

/// The workstream of a thread.
pub fn workstream_key(channel: ChannelId) -> String {
    WorkstreamKey::Discord {
        channel: channel.get(),
    }
    .to_string()
}

/// Why Discord could not start.
#[derive(Debug, thiserror::Error)]
pub enum DiscordError {
    /// serenity refused to build the client (bad token format, ...).
    #[error("cannot start the Discord client: {0}")]
    Client(#[from] serenity::Error),
}

/// Everything the event handlers share.
pub struct Bot {
    agent: Agent,
    config: DiscordConfig,
    http: OnceLock<Arc<Http>>,
    me: OnceLock<UserId>,
    pace: pace::Pacer,
    turns: TurnQueue,
    /// Every task of the connection (lanes, renderers, notices, card updates, the gateway,
    /// serenity's event tasks), drained by [`DiscordChannel::join`].
    tasks: Tasks,
    /// (thread, user) pairs already told the thread is closed or not theirs.
    told: crate::permissions::TellOnce<(u64, u64)>,
    /// Channels whose name this process has recorded (once each, not per thread).
    named: crate::permissions::TellOnce<ChannelId>,
    /// Where a reply to a notification is continued (set once the node's platforms run).
    starters: OnceLock<thread::Starters>,
    /// The gateway connection's stage (`/ready`), as serenity last reported it.
    stage: Mutex<serenity::gateway::ConnectionStage>,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot").finish_non_exhaustive()
    }
}

impl Bot {
    /// The client's REST handle. It is set before the gateway starts, so every handler sees
    /// it; the fallback (same token, same base) only keeps this total.
    fn http(&self) -> Arc<Http> {
        self.http
            .get_or_init(|| Arc::new(build_http(&self.config)))
            .clone()
    }

    fn timeout_words(&self) -> String {
        human_duration(self.agent.config().approval.timeout)
    }

    /// Whether the bot answers at `place` (`[discord] channels`, empty: everywhere; `dms`).
    fn admits(&self, place: Place<u64>) -> Result<(), Closed> {
        crate::intake::admit(&self.config.channels, self.config.dms, place)
    }

    /// Whether the bot listens in `channel` (`[discord] channels`, empty: everywhere).
    fn listens_in(&self, channel: ChannelId) -> bool {
        self.admits(Place::Channel {
            id: channel.get(),
            parent: None,
        })
        .is_ok()
    }

    /// The sandpiper user behind a Discord user.
    async fn person(
        &self,
        user: &serenity::all::User,
    ) -> Result<User, sandpiper_agent::StoreError> {
        let handle = discord_handle(user);
        let who = sandpiper_agent::people::Identity {
            platform: PLATFORM,
            platform_user_id: &user.id.to_string(),
            display_name: user.global_name.as_deref().unwrap_or(&user.name),
            handle: Some(&handle),
        };
        self.agent.person(who).await
    }

    /// Queues `work` in the thread's lane; tells the thread when it is still waiting after
    /// [`crate::turns::SHOW_PROGRESS_AFTER`]. A user's
    /// message, a resumption and an outside turn all come this way.
    fn submit(self: &Arc<Self>, channel: ChannelId, work: Work) -> Result<Queued, QueueFull> {
        let (place, surface) = self.thread(channel);
        let key = place.workstream.clone();
        let handover = thread::handover(&key, &work);
        let at = work.place();
        let job: crate::turns::Job = Box::new(move |start| {
            Box::pin(async move {
                thread::run(&place, surface, work, start).await;
            })
        });
        self.queue(channel, &key, job, at, handover)
    }

    /// Where a thread's turns run, and the thread as a surface.
    fn thread(self: &Arc<Self>, channel: ChannelId) -> (TurnPlace, Arc<ThreadSurface>) {
        let place = TurnPlace {
            agent: self.agent.clone(),
            workstream: workstream_key(channel),
            interval: self.config.stream_interval,
            tasks: self.tasks.clone(),
        };
        let surface = Arc::new(ThreadSurface {
            bot: self.clone(),
            channel,
        });
        (place, surface)
    }

    fn queue(
        self: &Arc<Self>,
        channel: ChannelId,
        key: &str,
        job: crate::turns::Job,
        at: Option<crate::turns::Place>,
        handover: Option<String>,
    ) -> Result<Queued, QueueFull> {
        let bot = self.clone();
        self.turns
            .submit_telling(key, job, at, handover, move |held| async move {
                let notice = match held {
                    Ok(n) => format!(
                        "⏳ Queued ({n} ahead): I'll answer this when the current turn is done."
                    ),
                    Err(full) => format!("⚠️ {full}"),
                };
                let surface = ThreadSurface { bot, channel };
                if let Err(e) = surface
                    .send(
                        &render::Body {
                            content: notice,
                            ..Default::default()
                        },
                        "queue notice",
                    )
                    .await
                {
                    tracing::warn!(error = %e, "could not post a queue notice");
                }
            })
    }
}

/// The REST client for `config`: Discord itself, or the configured override.
fn build_http(config: &DiscordConfig) -> Http {
    let token = config
        .token
        .as_ref()
        .map(|t| t.expose())
        .unwrap_or_default();
    let http = HttpBuilder::new(token);
    if config.overridden() {
        // serenity's rate limiter ignores the proxy and would call the real Discord; our own
        // pacer retries 429s instead.
        http.proxy(config.api_base_url.trim_end_matches('/'))
            .ratelimiter_disabled(true)
            .build()
    } else {
        http.build()
    }
}

/// Connects this node's shards (`[discord] shards`), or the bot's only shard when unset; runs
/// until every shard has stopped.
async fn start_shards(
    client: &mut serenity::Client,
    range: Option<ShardRange>,
) -> Result<(), serenity::Error> {
    match range {
        // serenity takes the range's end as the last shard to run (inclusive), despite `Range`.
        Some(r) => {
            client
                .start_shard_range(r.first()..r.last(), r.total())
                .await
        }
        None => client.start().await,
    }
}

/// A running Discord connection.
#[derive(Debug)]
pub struct DiscordChannel {
    bot: Arc<Bot>,
}

impl DiscordChannel {
    /// Connects when a token is configured (`DISCORD_TOKEN` or `[discord] token_env`);
    /// `Ok(None)` when Discord is off.
    pub async fn start(
        agent: Agent,
        config: DiscordConfig,
        shutdown: CancellationToken,
    ) -> Result<Option<Self>, DiscordError> {
        if config.token.is_none() {
            return Ok(None);
        }
        if config.overridden() {
            tracing::warn!(api_base_url = %config.api_base_url, "Discord requests go to an override (meant for testing)");
        }
        let http = build_http(&config);
        let intents = GatewayIntents::GUILDS
            | GatewayIntents::GUILD_MESSAGES
            | GatewayIntents::MESSAGE_CONTENT
            | GatewayIntents::DIRECT_MESSAGES;
        let tasks = Tasks::new(shutdown.clone());
        let bot = Arc::new(Bot {
            pace: pace::Pacer::new(config.requests_per_second).counting(agent.metrics().clone()),
            turns: crate::turns::settling(&agent, tasks.clone()),
            tasks: tasks.clone(),
            told: Default::default(),
            named: Default::default(),
            starters: OnceLock::new(),
            stage: Mutex::new(serenity::gateway::ConnectionStage::Connecting),
            http: OnceLock::new(),
            me: OnceLock::new(),
            config,
            agent,
        });
        let mut client = serenity::all::ClientBuilder::new_with_http(http, intents)
            .event_handler(handler::Handler { bot: bot.clone() })
            .await?;
        let _ = bot.http.set(client.http.clone());
        let shards = client.shard_manager.clone();
        let range = bot.config.shards;
        if let Some(range) = range {
            tracing::info!(shards = %range, "starting this node's Discord shards");
        }
        // Runs to its end: at shutdown it closes the shards cleanly, within the drain.
        tasks.spawn_to_end(async move {
            tokio::select! {
                r = start_shards(&mut client, range) => {
                    if let Err(e) = r {
                        tracing::error!(error = %e, "the Discord connection ended");
                    }
                }
                () = shutdown.cancelled() => shards.shutdown_all().await,
            }
        });
        Ok(Some(Self { bot }))
    }

    /// Waits until shut down (the shards close), then drains within `grace`
    /// ([`thread::drain`]): running turns finish; one waiting for approval keeps its stored
    /// requests, and a click after the restart resumes it.
    pub async fn join(self, grace: std::time::Duration) -> Drained {
        self.bot.tasks.shutdown().cancelled().await;
        let drained = thread::drain(&self.bot.agent, &self.bot.turns, &self.bot.tasks, grace).await;
        tracing::info!(left = drained.left, "discord channel stopped");
        drained
    }

    /// Starts turns in Discord threads from outside a chat message (watches, notify replies).
    pub fn starter(&self) -> Arc<dyn TurnStarter> {
        Arc::new(Starter(self.bot.clone()))
    }

    /// The gateway connection as `/ready` reports it.
    pub fn connection(&self) -> crate::status::Connection {
        connection(&self.bot)
    }

    /// [`DiscordChannel::connection`] for later.
    pub fn probe(&self) -> crate::status::Probe {
        let bot = self.bot.clone();
        Arc::new(move || connection(&bot))
    }

    /// Discord asked about a person's roles now, for decisions away from the thread.
    pub fn membership(&self) -> Arc<dyn crate::membership::Membership> {
        Arc::new(membership::DiscordMembership(self.bot.clone()))
    }

    /// Discord as a notification target (DMs and listened channels).
    pub fn notify_platform(&self) -> Arc<dyn crate::notify::NotifyPlatform> {
        Arc::new(notify::DiscordNotify(self.bot.clone()))
    }

    /// Lets a DM reply to a notification continue the workstream that sent it, through
    /// `starters` (every platform of this node). Without it such replies follow the DM rules.
    pub fn continue_replies(&self, starters: thread::Starters) {
        let _ = self.bot.starters.set(starters);
    }

    /// Opens the thread of `workstream` for work shown outside a turn's lane (a review asked
    /// by a background job); `None` when the key is not a Discord thread.
    pub fn open_thread(&self, workstream: &str) -> Option<thread::OpenThread> {
        let (place, surface) = self.bot.thread(thread_of(workstream)?);
        Some(thread::open(&place, surface))
    }

    /// Whether a turn runs in the thread (for tests and `/health`). Channel 0 names no
    /// channel, so nothing runs there.
    pub fn is_busy(&self, channel: u64) -> bool {
        std::num::NonZeroU64::new(channel)
            .is_some_and(|c| self.bot.turns.is_busy(&workstream_key(ChannelId::from(c))))
    }
}

fn connection(bot: &Bot) -> crate::status::Connection {
    let stage = *bot.stage.lock().unwrap_or_else(|e| e.into_inner());
    crate::status::Connection {
        connected: stage == serenity::gateway::ConnectionStage::Connected,
        state: format!("{stage:?}").to_lowercase(),
    }
}

/// The thread a `discord:<thread id>` key names; `None` for anything else, channel 0 included.
fn thread_of(workstream: &str) -> Option<ChannelId> {
    workstream
        .strip_prefix("discord:")
        .and_then(|id| id.parse::<u64>().ok())
        .and_then(std::num::NonZeroU64::new)
        .map(ChannelId::from)
}

/// [`TurnStarter`] for `discord:<thread id>` workstreams.
struct Starter(Arc<Bot>);

impl TurnStarter for Starter {
    fn keys(&self) -> KeyPattern {
        KeyPattern::Platform(KeyPlatform::Discord)
    }

    fn start(&self, turn: OutsideTurn) -> Result<Queued, StartError> {
        let channel = thread_of(&turn.workstream)
            .ok_or_else(|| StartError::NoChannel(turn.workstream.clone()))?;
        Ok(self.0.submit(channel, turn.work)?)
    }

    fn stop(&self, workstream: &str) -> bool {
        self.0.turns.stop(workstream)
    }
}

/// A Discord account's handle: its username, unique on Discord since the 2023 migration;
/// a legacy account keeps its discriminator (`name#1234`).
pub(crate) fn discord_handle(user: &serenity::all::User) -> String {
    match user.discriminator {
        Some(tag) => format!("{}#{:04}", user.name, tag.get()),
        None => user.name.clone(),
    }
}
