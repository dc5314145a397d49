//! One running `sandpiper serve` node: its chat platforms, its HTTP endpoints (`/health`,
//! `/ready`, `/metrics`, the admin API, `/v1/api/notify`), its watch runner, its place in the
//! `services` registry, and how it stops. `main.rs` runs one; the end-to-end tests run several on one
//! database, through the same code.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use sandpiper_agent::Agent;
use sandpiper_agent::cluster::{Bus, Cluster};
use sandpiper_agent::service_jwt::ServiceKey;
use sandpiper_agent::store::Backend;
use sandpiper_agent::store::services::ServiceRole;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_channels::discord::DiscordChannel;
use sandpiper_channels::notify::{Notifier, NotifyPlatform};
use sandpiper_channels::slack::SlackChannel;
use sandpiper_channels::thread::Starters;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::serve::{HealthSource, PlatformProbe, ReadySource};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Discord refused to start (bad token format, …).
    #[error("cannot start Discord: {0}")]
    Discord(#[from] sandpiper_channels::discord::DiscordError),
    /// Slack could not connect or is misconfigured.
    #[error("cannot start Slack: {0}")]
    Slack(#[from] sandpiper_channels::slack::SlackError),
    /// The HTTP endpoints could not listen.
    #[error("cannot serve on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

/// A running node.
pub struct Node {
    /// The agent of this node.
    pub agent: Agent,
    /// Where the HTTP endpoints listen.
    pub addr: SocketAddr,
    /// Where `/ready` and `/metrics` listen when `[server] ops_listen` puts them apart.
    pub ops_addr: Option<SocketAddr>,
    /// The registry id of this node, when it serves notifications.
    pub service_id: Option<String>,
    discord: Option<DiscordChannel>,
    slack: Option<SlackChannel>,
    shutdown: CancellationToken,
    /// Stops the HTTP server alone (see [`Node::stop_http`]).
    http_stop: CancellationToken,
    server: JoinHandle<std::io::Result<()>>,
    /// The server of `/ready` and `/metrics` on `[server] ops_listen`.
    ops_server: Option<JoinHandle<std::io::Result<()>>>,
    registry: Option<JoinHandle<()>>,
    /// The watch runner; it stops on `shutdown`, releasing its claims.
    watches: JoinHandle<()>,
    /// The node's cluster duties; from `shutdown` they only keep this node's leases alive,
    /// and they release them on `release`, once the channels drained.
    cluster: JoinHandle<()>,
    release: CancellationToken,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("addr", &self.addr)
            .field("service_id", &self.service_id)
            .finish_non_exhaustive()
    }
}

/// How a node ended.
#[derive(Debug)]
pub struct NodeExit {
    /// Channel tasks still running at the deadline.
    pub left: usize,
    /// What the HTTP server returned.
    pub served: std::io::Result<()>,
}

impl Node {
    /// Starts the configured platforms and serves the endpoints on `[server] listen`. With a
    /// service `key`, the node serves `/v1/api/notify` and registers in the `services`
    /// registry as a gateway; without one it says so and does neither. Stops when `shutdown`
    /// is cancelled.
    pub async fn start(
        agent: Agent,
        channels: ChannelsConfig,
        key: Option<ServiceKey>,
        shutdown: CancellationToken,
    ) -> Result<Self, NodeError> {
        Self::start_as(crate::registry::node_id(), agent, channels, key, shutdown).await
    }

    /// [`Node::start`] as node `node_id`: the one id of this process, in the registry, the
    /// cluster's leases, the watch runner's claims and the log's `node` span.
    pub async fn start_as(
        node_id: String,
        agent: Agent,
        channels: ChannelsConfig,
        key: Option<ServiceKey>,
        shutdown: CancellationToken,
    ) -> Result<Self, NodeError> {
        let config = agent.config().clone();
        let listen_url = join_cluster(&agent, &node_id);
        let model = crate::model_check::ModelHealth::start(config.model.clone(), shutdown.clone());
        let guild = channels.discord.guild.map(std::num::NonZeroU64::get);
        let discord =
            DiscordChannel::start(agent.clone(), channels.discord, shutdown.clone()).await?;
        match &discord {
            Some(_) => crate::startup!("Discord: connecting"),
            None => crate::startup!(
                "Discord is off (set DISCORD_TOKEN, or the variable named by [discord] token_env)"
            ),
        }
        let slack = start_slack(&agent, channels.slack, &shutdown).await?;
        let http_requests = crate::metrics::HttpRequests::default();
        let mcp = agent.mcp().clone();
        let health: HealthSource = Arc::new(move || crate::serve::health_of(&mcp));
        let ops = crate::ops_api::router(
            ReadySource {
                agent: agent.clone(),
                platforms: probes(discord.as_ref(), slack.as_ref()),
                model: Some(model),
            },
            agent.clone(),
            http_requests.clone(),
            config.server.ops_token.clone(),
        );
        let mut router: Router = crate::serve::router(health);
        let ops = match config.server.ops_listen {
            Some(ops_listen) => Some((ops_listen, ops)),
            None => {
                router = router.merge(ops);
                None
            }
        };
        match &key {
            Some(key) => {
                router = router.merge(crate::admin_api::router(agent.clone(), key.clone()));
            }
            None => crate::startup!(
                "admin API (/v1/api) is off on this node: set SANDPIPER_JWT_SECRET (or the variable named by [auth] jwt_secret_env)"
            ),
        }
        let web = crate::web::WebSource {
            agent: agent.clone(),
            node_id: node_id.clone(),
            platforms: probes(discord.as_ref(), slack.as_ref()),
            service_key: key.clone(),
            discord_guild: guild,
        };
        match crate::web::router(web, shutdown.clone()).await {
            Ok(web) => router = router.merge(web),
            Err(e) => crate::startup!("the status page (/) is off: {e}"),
        }
        match &slack {
            Some(s) => match s.router() {
                Some(events) => {
                    router = router.merge(events);
                    crate::startup!(
                        "Slack: Events API on /slack/events, /slack/interactions, /slack/commands"
                    );
                }
                None => crate::startup!("Slack: connected (Socket Mode)"),
            },
            None => crate::startup!(
                "Slack is off (set SLACK_BOT_TOKEN, and SLACK_APP_TOKEN for Socket Mode)"
            ),
        }
        // Turns started from outside a chat message (a watch firing, a reply to a
        // notification) go to the platform that shows the workstream.
        let mut starters = Starters::default();
        let mut platforms: Vec<Arc<dyn NotifyPlatform>> = Vec::new();
        if let Some(d) = &discord {
            starters.add(d.starter());
            platforms.push(d.notify_platform());
        }
        if let Some(s) = &slack {
            starters.add(s.starter());
            platforms.push(s.notify_platform());
        }
        if let Some(d) = &discord {
            d.continue_replies(starters.clone());
        }
        if let Some(s) = &slack {
            s.continue_replies(starters.clone());
        }
        let release = CancellationToken::new();
        let cluster = tokio::spawn(crate::cluster::run(
            agent.clone(),
            starters.clone(),
            listen_url,
            crate::cluster::Stopping {
                shutdown: shutdown.clone(),
                release: release.clone(),
            },
        ));
        let watches = crate::wiring::start_watches(&agent, starters, shutdown.clone());
        let notifier = Notifier::new(agent.people(), agent.notifications(), platforms);
        let serves_notify = key.is_some();
        match key {
            Some(key) => {
                router = router.merge(crate::notify_api::router(
                    notifier.clone(),
                    key,
                    agent.metrics().clone(),
                ));
            }
            None => crate::startup!(
                "notifications (/v1/api/notify) are off on this node: set SANDPIPER_JWT_SECRET (or the variable named by [auth] jwt_secret_env)"
            ),
        }
        let http_stop = shutdown.child_token();
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let listen = config.server.listen;
        let limits = config.server.clone();
        let server_stop = http_stop.clone();
        let router = http_requests.layer(router);
        let server = tokio::spawn(async move {
            crate::http_server::run(listen, router, &limits, server_stop, bound_tx).await
        });
        let addr = match bound_rx.await {
            Ok(addr) => addr,
            Err(_) => {
                shutdown.cancel();
                let e = match server.await {
                    Ok(Err(e)) => e,
                    _ => std::io::Error::other("the HTTP server ended before listening"),
                };
                return Err(NodeError::Listen(listen, e));
            }
        };
        crate::startup!(node = %node_id, "serving http://{addr}/health");
        let ops_server = match ops {
            Some((ops_listen, ops)) => {
                let ops = http_requests.layer(ops);
                let (tx, rx) = tokio::sync::oneshot::channel();
                let limits = config.server.clone();
                let stop = http_stop.clone();
                let task = tokio::spawn(async move {
                    crate::http_server::run(ops_listen, ops, &limits, stop, tx).await
                });
                match rx.await {
                    Ok(ops_addr) => Some((ops_addr, task)),
                    Err(_) => {
                        shutdown.cancel();
                        let e = match task.await {
                            Ok(Err(e)) => e,
                            _ => std::io::Error::other("the HTTP server ended before listening"),
                        };
                        return Err(NodeError::Listen(ops_listen, e));
                    }
                }
            }
            None => None,
        };
        let ops_addr = ops_server.as_ref().map(|(a, _)| *a);
        let token = match config.server.ops_token.is_some() {
            true => format!(
                ", with the bearer token from {}",
                config.server.effective_ops_token_env()
            ),
            false => String::new(),
        };
        match ops_addr {
            Some(ops) => {
                crate::startup!("serving http://{ops}/ready and /metrics (not on {addr}){token}")
            }
            None if !token.is_empty() => {
                crate::startup!("/ready and /metrics answer only{token}")
            }
            None if slack.as_ref().is_some_and(|s| s.router().is_some()) => crate::startup!(
                "/ready and /metrics answer anyone who reaches {addr}: on a public port set [server] ops_listen or {}",
                config.server.effective_ops_token_env()
            ),
            None => {}
        }
        // Every node registers; only one with a service secret as a gateway (offered to
        // the notify tool).
        let url = crate::registry::node_url(config.server.advertise_url.as_deref(), addr);
        let names = notifier
            .platforms()
            .iter()
            .map(|p| p.as_str().to_owned())
            .collect();
        let role = if serves_notify {
            ServiceRole::Gateway
        } else {
            ServiceRole::Node
        };
        let record = crate::registry::node(node_id.clone(), role, url, names);
        let registry = Some(tokio::spawn(crate::registry::run(
            agent.store().clone(),
            record,
            shutdown.clone(),
        )));
        let service_id = serves_notify.then(|| node_id.clone());
        Ok(Self {
            agent,
            addr,
            ops_addr,
            service_id,
            discord,
            slack,
            shutdown,
            http_stop,
            server,
            ops_server: ops_server.map(|(_, task)| task),
            registry,
            watches,
            cluster,
            release,
        })
    }

    /// The running Discord connection.
    pub fn discord(&self) -> Option<&DiscordChannel> {
        self.discord.as_ref()
    }

    /// The running Slack connection.
    pub fn slack(&self) -> Option<&SlackChannel> {
        self.slack.as_ref()
    }

    /// Stops serving HTTP at once while the rest runs on and the registry row stays, as a
    /// crashed or unreachable HTTP listener looks to other nodes (a failover drill).
    pub fn stop_http(&self) {
        self.http_stop.cancel();
    }

    /// Asks the node to stop (as SIGTERM does).
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Stops the node as a killed process would, as far as the other nodes can tell (tests):
    /// its turns are dropped and its leases are not released, so they run out and another
    /// node takes its workstreams over.
    pub fn kill(&self) {
        if let Some(cluster) = self.agent.cluster() {
            cluster.crash();
        }
        self.shutdown.cancel();
        // A dead node renews nothing.
        self.release.cancel();
    }

    /// Waits until the node is asked to stop, then drains: the HTTP server and the channels
    /// at the same time (channels for at most `grace`: running turns finish, see
    /// [`sandpiper_channels::thread::drain`]), the registry row is removed, and last the
    /// leases are released. A
    /// server that ends on its own (it could not bind) stops the channels too.
    pub async fn join(self, grace: Duration) -> NodeExit {
        let stop = self.shutdown.clone();
        let server = self.server;
        let ops_server = self.ops_server;
        let served = async move {
            let served = server.await;
            stop.cancel();
            if let Some(ops) = ops_server
                && let Ok(Err(e)) = ops.await
            {
                tracing::warn!(error = %e, "the operations HTTP server failed");
            }
            served
        };
        let discord = self.discord;
        let slack = self.slack;
        let (served, discord_left, slack_left) = tokio::join!(
            served,
            async move {
                match discord {
                    Some(d) => d.join(grace).await.left,
                    None => 0,
                }
            },
            async move {
                match &slack {
                    Some(s) => s.join(grace).await.left,
                    None => 0,
                }
            },
        );
        if tokio::time::timeout(grace, self.watches).await.is_err() {
            tracing::warn!(
                "the watch runner did not stop in time; its claims run out on their own"
            );
        }
        if let Some(registry) = self.registry {
            let _ = registry.await;
        }
        // The drained turns held their leases to the end: only now may another node run there.
        self.release.cancel();
        if tokio::time::timeout(grace, self.cluster).await.is_err() {
            tracing::warn!(
                "the cluster duties did not stop in time; the leases run out on their own"
            );
        }
        let served = served.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        NodeExit {
            left: discord_left + slack_left,
            served,
        }
    }
}

/// Makes `agent` node `node` of the cluster on its database; returns the PostgreSQL URL to
/// listen for the other nodes on (`None` on SQLite, where this node is the only one).
fn join_cluster(agent: &Agent, node: &str) -> Option<String> {
    let store = agent.store().clone();
    let shared = store.backend() == Backend::Postgres;
    let bus = shared.then(|| Bus::new(store.clone()));
    let lease = agent.config().cluster.lease;
    agent.join_cluster(Cluster::new(node, store, lease, bus));
    shared.then(|| agent.config().database.url.clone())
}

/// The first wait before Slack is asked again after an unreachable start; doubled each time.
const SLACK_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between attempts.
const SLACK_RETRY_MAX: Duration = Duration::from_secs(60);

/// Starts Slack, retrying with backoff while its Web API cannot be reached (as Discord's
/// gateway is retried), until it answers or the node is asked to stop. Configuration errors
/// (a missing app token) stop start-up at once: waiting would not fix them.
async fn start_slack(
    agent: &Agent,
    config: sandpiper_channels::config::SlackConfig,
    shutdown: &CancellationToken,
) -> Result<Option<SlackChannel>, NodeError> {
    let mut wait = SLACK_RETRY_FIRST;
    let mut attempt = 1u32;
    loop {
        match SlackChannel::start(agent.clone(), config.clone(), shutdown.clone()).await {
            Ok(slack) => return Ok(slack),
            Err(sandpiper_channels::slack::SlackError::Connect(error)) => {
                tracing::warn!(attempt, retry_in_s = wait.as_secs(), error = %error,
                    "Slack is unreachable; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(None),
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(SLACK_RETRY_MAX);
                attempt += 1;
            }
            Err(other) => return Err(other.into()),
        }
    }
}

/// `/ready`'s view of the configured platforms.
fn probes(discord: Option<&DiscordChannel>, slack: Option<&SlackChannel>) -> Vec<PlatformProbe> {
    let mut probes: Vec<PlatformProbe> = Vec::new();
    if let Some(d) = discord {
        probes.push(("discord", d.probe()));
    }
    if let Some(s) = slack {
        probes.push(("slack", s.probe()));
    }
    probes
}
