//! One running `sandpiper serve` node: its chat platforms, its HTTP endpoints (`/health`,
//! `/ready`, `/metrics`, the admin API, `/v1/api/notify`), its watch runner, its place in the
//! `services` registry, and how it stops. `main.rs` runs one; the end-to-end tests run several on one
//! database, through the same code.

use std::net::SocketAddr;
use std::time::Duration;

use sandpiper_agent::Agent;
use sandpiper_agent::service_jwt::ServiceKey;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_channels::discord::DiscordChannel;
use sandpiper_channels::notify::Notifier;
use sandpiper_channels::slack::SlackChannel;
use sandpiper_channels::web::WebChannel;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::HttpRequests;
use crate::model_check::ModelHealth;

mod start;

use start::{
    Platforms, bind, health_and_ops_routes, join_cluster, listen, register, say_who_reaches_ops,
    start_cluster, with_admin_api, with_notify_api, with_slack_events, with_status_page,
};

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
    /// The lanes of the status page's own conversations.
    web: WebChannel,
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
    ///
    /// The steps, in this order: bind the HTTP sockets (a taken port fails before anything
    /// connects), join the cluster, probe the model, start the platforms, let them start turns
    /// (the status page writes through them), gather the routes, start the cluster duties and
    /// the watch runner, serve
    /// notifications, serve HTTP on the sockets, register. Each step says on stderr what it
    /// left off.
    pub async fn start_as(
        node_id: String,
        agent: Agent,
        channels: ChannelsConfig,
        key: Option<ServiceKey>,
        shutdown: CancellationToken,
    ) -> Result<Self, NodeError> {
        let sockets = bind(&agent.config().server).await?;
        let listen_url = join_cluster(&agent, &node_id);
        let model = ModelHealth::start(agent.config().model.clone(), shutdown.clone());
        let platforms = Platforms::start(&agent, channels, &shutdown).await?;
        let http_requests = HttpRequests::default();
        let (router, ops) = health_and_ops_routes(&agent, &platforms, model, &http_requests);
        let router = with_admin_api(router, &agent, key.as_ref());
        let (starters, notify_platforms) = platforms.start_turns();
        let router = with_status_page(
            router,
            &agent,
            &node_id,
            (&platforms, &starters),
            key.as_ref(),
            &shutdown,
        )
        .await;
        let router = with_slack_events(router, platforms.slack.as_ref());
        let release = CancellationToken::new();
        let cluster = start_cluster(&agent, starters.clone(), listen_url, &shutdown, &release);
        let watches = crate::wiring::start_watches(&agent, starters, shutdown.clone());
        let notifier = Notifier::new(agent.people(), agent.notifications(), notify_platforms);
        let router = with_notify_api(router, &agent, &notifier, key.as_ref());
        let server = &agent.config().server;
        let http = listen(
            &node_id,
            server,
            sockets,
            (router, ops),
            &http_requests,
            &shutdown,
        );
        say_who_reaches_ops(server, &http, platforms.slack_events());
        let serves_notify = key.is_some();
        let registry = register(
            &agent,
            &node_id,
            http.addr,
            &notifier,
            serves_notify,
            &shutdown,
        );
        let Platforms {
            discord,
            slack,
            web,
            ..
        } = platforms;
        Ok(Self {
            agent,
            addr: http.addr,
            ops_addr: http.ops.as_ref().map(|(addr, _)| *addr),
            service_id: serves_notify.then_some(node_id),
            discord,
            slack,
            web,
            shutdown,
            http_stop: http.stop,
            server: http.server,
            ops_server: http.ops.map(|(_, task)| task),
            registry: Some(registry),
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
        let web = self.web;
        let (served, discord_left, slack_left, web_left) = tokio::join!(
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
            async move { web.join(grace).await.left },
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
            left: discord_left + slack_left + web_left,
            served,
        }
    }
}
