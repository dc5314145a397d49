//! Slack through slack-morphism: threads are workstreams (`slack:<team>:<channel>:<thread_ts>`),
//! answers stream into the thread, tool calls ask for approval with Block Kit buttons, and one
//! slash command (`/sandpiper …`) carries the command table.
//!
//! Events arrive over Socket Mode (default; no public URL) or the Events API
//! ([`SlackChannel::router`], signatures verified). Either way every event, click and command is
//! acknowledged at once and handled in the background.
//!
//! # Layout
//! - this file: [`SlackChannel`]: start, routes, shutdown; the state every handler shares.
//! - `client.rs`: the Web API client (https-or-http connector, 429 retries, small caches).
//! - `socket.rs`: the Socket Mode listener and its callbacks.
//! - `http.rs`: the Events API routes and their signature check.
//! - `delivery.rs`: each event, click and command handled once, on one node.
//! - `events.rs`: mentions and messages → turns (who may talk).
//! - `turn.rs`: queuing a turn in its thread's lane, the thread as a
//!   [`Surface`](crate::stream::Surface) and [`CardSurface`](crate::approver::CardSurface), and
//!   Slack's [`TurnStarter`](crate::thread::TurnStarter).
//! - `interactions.rs`: button clicks and the note modal.
//! - `commands.rs`: `/sandpiper <subcommand>`.
//! - `notify.rs`: notifications: DMs, posts without pings, replies that continue a workstream.
//! - `blocks.rs`: Block Kit for answers, tool lines and approval cards.
//! - `mrkdwn.rs`: escaping and Markdown → mrkdwn.

mod blocks;
mod client;
mod commands;
mod delivery;
mod events;
mod http;
mod interactions;
mod membership;
pub mod mrkdwn;
mod notify;
mod socket;
mod turn;

use std::sync::Arc;
use std::time::Duration;

use crate::config::{SlackConfig, SlackMode};
use sandpiper_agent::Agent;
use tokio_util::sync::CancellationToken;

use crate::intake::{Closed, Place};
use crate::permissions::Standing;
use crate::tasks::{Drained, Tasks};
use crate::turns::TurnQueue;
use client::Api;
use sandpiper_agent::people::User;

/// Why the Slack channel could not start. The operator fixes the configuration or the
/// network and starts again.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    /// A token or secret the chosen mode needs is missing.
    #[error("slack: {0}")]
    Config(String),
    /// Slack (or the configured API base) could not be reached, or refused the token.
    #[error("slack: cannot connect: {0}")]
    Connect(String),
}

/// What every handler shares.
pub(crate) struct Ctx {
    agent: Agent,
    api: Api,
    config: SlackConfig,
    /// The bot's own user id (its mentions look like `<@id>`).
    bot_user: String,
    queue: TurnQueue,
    /// Every job (turns, handlers, renderers, card updates), stopped at shutdown and drained
    /// by `join`.
    tasks: Tasks,
    /// `(workstream, user)` pairs told the thread is closed or not theirs.
    told: crate::permissions::TellOnce<(String, String)>,
    /// Channels whose name this process has recorded (once each, not per thread).
    named: crate::permissions::TellOnce<String>,
    /// Where a reply to a notification is continued (set once the node's platforms run).
    starters: std::sync::OnceLock<crate::thread::Starters>,
}

impl Ctx {
    /// The approval timeout in words, for cards.
    fn timeout_text(&self) -> String {
        crate::card::human_duration(self.agent.config().approval.timeout)
    }

    /// Whether the bot answers in `channel` (`[slack] channels`, empty: everywhere; DM
    /// channels, `D…`, only with `dms = true`). Threads it already owns are checked by the
    /// caller: they stay open.
    fn admits(&self, channel: &str) -> Result<(), Closed> {
        let place = if is_dm_channel(channel) {
            Place::Dm
        } else {
            Place::Channel {
                id: channel,
                parent: None,
            }
        };
        crate::intake::admit(&self.config.channels, self.config.dms, place)
    }

    /// How commands are typed, for help texts.
    fn prefix(&self) -> String {
        format!("{} ", self.config.command)
    }

    /// The sandpiper user behind a Slack user; `None` (logged) when the store does not answer.
    async fn person(&self, slack_user: &str) -> Option<User> {
        let names = self.api.names(slack_user).await;
        match self.agent.person(names.identity(slack_user)).await {
            Ok(user) => Some(user),
            Err(e) => {
                tracing::warn!(error = %e, "cannot look up the sandpiper user");
                None
            }
        }
    }

    /// Who `slack_user` is and where they stand in `workstream` (owner as stored; approver
    /// and admin by this node's user groups); `None` when the store does not answer.
    async fn standing(&self, slack_user: &str, workstream: &str) -> Option<(User, Standing)> {
        let user = self.person(slack_user).await?;
        let owner = match self.agent.workstream(workstream).await {
            Ok(info) => info.and_then(|w| w.owner),
            Err(e) => {
                tracing::warn!(error = %e, workstream, "cannot read the workstream");
                return None;
            }
        };
        let approver = self
            .api
            .groups_of(slack_user, &self.config.approver_usergroups)
            .await;
        let admin = self
            .api
            .groups_of(slack_user, &self.config.admin_usergroups)
            .await;
        let standing = Standing {
            owner: owner.as_deref() == Some(user.id.as_str()),
            approver: !approver.is_empty(),
            admin: !admin.is_empty(),
        };
        Some((user, standing))
    }
}

/// Slack's direct-message channels have ids starting with `D`.
fn is_dm_channel(channel: &str) -> bool {
    channel.starts_with('D')
}

/// Runs `fut` in the background, tracked, and dropped at shutdown.
pub(crate) fn spawn(ctx: &Arc<Ctx>, fut: impl std::future::Future<Output = ()> + Send + 'static) {
    ctx.tasks.spawn(fut);
}

/// Takes on the work of a delivery Slack is about to be told was received (an event, a
/// click, a command): once acknowledged, Slack never sends it again, so the work runs to its
/// end, shutdown or not (until the drain halts what is left). A stopping node takes on
/// nothing: the delivery is left unacknowledged, and Slack sends it to another connection.
pub(crate) fn take_on(
    ctx: &Arc<Ctx>,
    fut: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Stopping> {
    if ctx.tasks.shutdown().is_cancelled() {
        return Err(Stopping);
    }
    ctx.tasks.spawn_turn(fut);
    Ok(())
}

/// Why a stopping node leaves a delivery unacknowledged ([`take_on`]).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("this node is stopping: the delivery is left for another node")]
pub(crate) struct Stopping;

/// Forgets delivered event ids after a day, hourly: Slack redelivers within minutes, and the
/// table must not grow without bound.
fn prune_delivered_events(ctx: &Arc<Ctx>) {
    const DAY_MS: i64 = 24 * 60 * 60 * 1000;
    let agent = ctx.agent.clone();
    spawn(ctx, async move {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every.tick().await;
            match agent.prune_delivered(DAY_MS).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(pruned = n, "forgot old Slack event ids"),
                Err(e) => tracing::warn!(error = %e, "pruning Slack event ids failed"),
            }
        }
    });
}

/// Records what the approver user groups are called (`usergroups.list`), so the page says
/// who may decide a card by the group's handle: at start, then hourly (a group renamed or
/// made later). A failure costs only the names.
fn name_approver_groups(ctx: &Arc<Ctx>) {
    if ctx.config.approver_usergroups.is_empty() {
        return;
    }
    let ctx2 = ctx.clone();
    spawn(ctx, async move {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every.tick().await;
            let groups = match ctx2.api.group_handles().await {
                Ok(groups) => groups,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the user groups' names");
                    continue;
                }
            };
            let approvers: Vec<(String, String)> = groups
                .into_iter()
                .filter(|(id, _)| ctx2.config.approver_usergroups.contains(id))
                .collect();
            if let Err(e) = ctx2.agent.name_roles(&approvers).await {
                tracing::warn!(error = %e, "cannot record the user groups' names");
            }
        }
    });
}

/// The running Slack channel.
pub struct SlackChannel {
    ctx: Arc<Ctx>,
    listener: Option<socket::Listener>,
    router: Option<axum::Router>,
}

impl std::fmt::Debug for SlackChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackChannel")
            .field("mode", &self.ctx.config.mode)
            .finish_non_exhaustive()
    }
}

impl SlackChannel {
    /// Connects when a bot token is configured; Ok(None) when Slack is off.
    pub async fn start(
        agent: Agent,
        config: SlackConfig,
        shutdown: CancellationToken,
    ) -> Result<Option<SlackChannel>, SlackError> {
        let Some(bot_token) = config.bot_token.clone() else {
            return Ok(None);
        };
        let client = client::client(&config.api_base_url)?;
        let api = Api::new(client.clone(), bot_token.expose()).counting(agent.metrics().clone());
        let (bot_user, team) = api
            .whoami()
            .await
            .map_err(|e| SlackError::Connect(e.to_string()))?;
        tracing::info!(target: "sandpiper", bot_user, team = team.as_deref().unwrap_or("?"), mode = ?config.mode, "Slack: connected");
        let tasks = Tasks::new(shutdown);
        let ctx = Arc::new(Ctx {
            queue: crate::turns::settling(&agent, tasks.clone()),
            tasks,
            told: Default::default(),
            named: Default::default(),
            starters: Default::default(),
            agent,
            api,
            bot_user,
            config,
        });
        let mut channel = SlackChannel {
            ctx: ctx.clone(),
            listener: None,
            router: None,
        };
        match ctx.config.mode {
            SlackMode::Socket => {
                let app_token = ctx.config.app_token.clone().ok_or_else(|| {
                    SlackError::Config(format!(
                        "Socket Mode needs an app-level token (xapp-…) in {}",
                        ctx.config.app_token_env
                    ))
                })?;
                channel.listener =
                    Some(socket::listen(ctx.clone(), client, app_token.expose()).await?);
            }
            SlackMode::Events => {
                let secret = ctx.config.signing_secret.clone().ok_or_else(|| {
                    SlackError::Config(format!(
                        "events mode needs the signing secret in {}",
                        ctx.config.signing_secret_env
                    ))
                })?;
                channel.router = Some(http::router(ctx.clone(), secret.expose()));
            }
        }
        prune_delivered_events(&ctx);
        name_approver_groups(&ctx);
        Ok(Some(channel))
    }

    /// Starts turns in Slack threads from outside a chat message (watches, notify replies).
    pub fn starter(&self) -> Arc<dyn crate::thread::TurnStarter> {
        Arc::new(turn::Starter(self.ctx.clone()))
    }

    /// The connection as `/ready` reports it: the Web API answered at start (`auth.test`),
    /// and Socket Mode's listener runs until shutdown (slack-morphism reconnects it itself
    /// and does not report its state), or the Events API routes are served.
    pub fn connection(&self) -> crate::status::Connection {
        connection(&self.ctx)
    }

    /// [`SlackChannel::connection`] for later.
    pub fn probe(&self) -> crate::status::Probe {
        let ctx = self.ctx.clone();
        Arc::new(move || connection(&ctx))
    }

    /// Slack asked about a person's user groups now, for decisions away from the thread.
    pub fn membership(&self) -> Arc<dyn crate::membership::Membership> {
        Arc::new(membership::SlackMembership(self.ctx.clone()))
    }

    /// Slack as a notification target (DMs and listened channels).
    pub fn notify_platform(&self) -> Arc<dyn crate::notify::NotifyPlatform> {
        Arc::new(notify::SlackNotify(self.ctx.clone()))
    }

    /// Lets a reply in a notification's DM thread continue the workstream that sent it,
    /// through `starters` (every platform of this node). Without it such replies follow the
    /// DM rules.
    pub fn continue_replies(&self, starters: crate::thread::Starters) {
        let _ = self.ctx.starters.set(starters);
    }

    /// Opens the thread of `workstream` for work shown outside a turn's lane (a review asked
    /// by a background job); `None` when the key is not a Slack thread.
    pub fn open_thread(&self, workstream: &str) -> Option<crate::thread::OpenThread> {
        let thread = turn::Thread::parse(workstream)?;
        let (place, surface) = turn::ThreadSurface::open(&self.ctx, thread);
        Some(crate::thread::open(&place, surface))
    }

    /// Events API routes to merge into the HTTP server (Some only in events mode).
    pub fn router(&self) -> Option<axum::Router> {
        self.router.clone()
    }

    /// Waits until shut down, then stops listening and drains within `grace`
    /// ([`crate::thread::drain`]): running turns finish; one waiting for approval keeps its
    /// stored requests, and a click after the restart resumes it.
    pub async fn join(&self, grace: Duration) -> Drained {
        self.ctx.tasks.shutdown().cancelled().await;
        let stopping = tokio::time::Instant::now();
        if let Some(listener) = &self.listener {
            let _ = tokio::time::timeout(grace, listener.shutdown()).await;
        }
        let left = grace.saturating_sub(stopping.elapsed());
        let drained =
            crate::thread::drain(&self.ctx.agent, &self.ctx.queue, &self.ctx.tasks, left).await;
        tracing::info!(left = drained.left, "slack channel stopped");
        drained
    }
}

fn connection(ctx: &Ctx) -> crate::status::Connection {
    let stopped = ctx.tasks.shutdown().is_cancelled();
    let state = match (stopped, &ctx.config.mode) {
        (true, _) => "stopped",
        (false, SlackMode::Socket) => "socket mode",
        (false, SlackMode::Events) => "events api",
    };
    crate::status::Connection {
        connected: !stopped,
        state: state.to_owned(),
    }
}
