//! How a [`Node`](super::Node) starts, one step each: join the cluster, start the platforms,
//! gather the routes, start the background duties, listen, register. `Node::start_as` calls
//! them in order; each says on stderr what it left off.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use sandpiper_agent::Agent;
use sandpiper_agent::cluster::{Bus, Cluster};
use sandpiper_agent::config::ServerConfig;
use sandpiper_agent::service_jwt::ServiceKey;
use sandpiper_agent::store::Backend;
use sandpiper_agent::store::services::ServiceRole;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_channels::discord::DiscordChannel;
use sandpiper_channels::notify::{Notifier, NotifyPlatform};
use sandpiper_channels::slack::SlackChannel;
use sandpiper_channels::thread::Starters;
use sandpiper_channels::web::WebChannel;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::NodeError;
use crate::metrics::HttpRequests;
use crate::model_check::ModelHealth;
use crate::serve::{HealthSource, PlatformProbe, ReadySource};

/// Makes `agent` node `node` of the cluster on its database; returns the PostgreSQL URL to
/// listen for the other nodes on (`None` on SQLite, where this node is the only one).
pub(super) fn join_cluster(agent: &Agent, node: &str) -> Option<String> {
    let store = agent.store().clone();
    let shared = store.backend() == Backend::Postgres;
    let bus = shared.then(|| Bus::new(store.clone()));
    let lease = agent.config().cluster.lease;
    agent.join_cluster(Cluster::new(node, store, lease, bus));
    shared.then(|| agent.config().database.url.clone())
}

/// The chat platforms this node started (each `None` when it is not configured).
pub(super) struct Platforms {
    pub(super) discord: Option<DiscordChannel>,
    pub(super) slack: Option<SlackChannel>,
    /// The lanes of the status page's own conversations (`web:<id>`).
    pub(super) web: WebChannel,
    /// `[discord] guild`, for the status page's links into threads.
    discord_guild: Option<u64>,
}

impl Platforms {
    /// Starts Discord, then Slack (retried while unreachable, see [`start_slack`]).
    pub(super) async fn start(
        agent: &Agent,
        channels: ChannelsConfig,
        shutdown: &CancellationToken,
    ) -> Result<Self, NodeError> {
        let discord_guild = channels.discord.guild.map(std::num::NonZeroU64::get);
        let discord =
            DiscordChannel::start(agent.clone(), channels.discord, shutdown.clone()).await?;
        match &discord {
            Some(_) => crate::startup!("Discord: connecting"),
            None => crate::startup!(
                "Discord is off (set DISCORD_TOKEN, or the variable named by [discord] token_env)"
            ),
        }
        let slack = start_slack(agent, channels.slack, shutdown).await?;
        Ok(Self {
            discord,
            slack,
            web: WebChannel::start(agent.clone(), shutdown.clone()),
            discord_guild,
        })
    }

    /// Whether Slack's Events API is served here (the endpoints' port is then public).
    pub(super) fn slack_events(&self) -> bool {
        self.slack.as_ref().is_some_and(|s| s.router().is_some())
    }

    /// `/ready`'s view of the platforms.
    fn probes(&self) -> Vec<PlatformProbe> {
        let mut probes: Vec<PlatformProbe> = Vec::new();
        if let Some(d) = &self.discord {
            probes.push(("discord", d.probe()));
        }
        if let Some(s) = &self.slack {
            probes.push(("slack", s.probe()));
        }
        probes
    }

    /// The platforms asked about a person's roles when they decide from the status page.
    fn memberships(&self) -> Vec<Arc<dyn sandpiper_channels::membership::Membership>> {
        let mut memberships: Vec<Arc<dyn sandpiper_channels::membership::Membership>> = Vec::new();
        if let Some(d) = &self.discord {
            memberships.push(d.membership());
        }
        if let Some(s) = &self.slack {
            memberships.push(s.membership());
        }
        memberships
    }

    /// Lets turns start from outside a chat message (a watch firing, a reply to a
    /// notification, a message written on the status page): they go to the platform that
    /// shows the workstream. Returns the starters, and the platforms notifications are
    /// delivered on.
    pub(super) fn start_turns(&self) -> (Starters, Vec<Arc<dyn NotifyPlatform>>) {
        let mut starters = Starters::default();
        starters.add(self.web.starter());
        let mut platforms: Vec<Arc<dyn NotifyPlatform>> = Vec::new();
        if let Some(d) = &self.discord {
            starters.add(d.starter());
            platforms.push(d.notify_platform());
        }
        if let Some(s) = &self.slack {
            starters.add(s.starter());
            platforms.push(s.notify_platform());
        }
        if let Some(d) = &self.discord {
            d.continue_replies(starters.clone());
        }
        if let Some(s) = &self.slack {
            s.continue_replies(starters.clone());
        }
        (starters, platforms)
    }
}

/// `/health`, with `/ready` and `/metrics` beside it, or apart (returned on their own) when
/// `[server] ops_listen` is set.
pub(super) fn health_and_ops_routes(
    agent: &Agent,
    platforms: &Platforms,
    model: ModelHealth,
    http_requests: &HttpRequests,
) -> (Router, Option<Router>) {
    let mcp = agent.mcp().clone();
    let health: HealthSource = Arc::new(move || crate::serve::health_of(&mcp));
    let server = &agent.config().server;
    let ops = crate::ops_api::router(
        ReadySource {
            agent: agent.clone(),
            platforms: platforms.probes(),
            model: Some(model),
        },
        agent.clone(),
        http_requests.clone(),
        server.ops_token.clone(),
    );
    let router: Router = crate::serve::router(health);
    match server.ops_listen {
        Some(_) => (router, Some(ops)),
        None => (router.merge(ops), None),
    }
}

/// The admin API (`/v1/api/…`), with a service key.
pub(super) fn with_admin_api(router: Router, agent: &Agent, key: Option<&ServiceKey>) -> Router {
    match key {
        Some(key) => router.merge(crate::admin_api::router(agent.clone(), key.clone())),
        None => {
            crate::startup!(
                "admin API (/v1/api) is off on this node: set SANDPIPER_JWT_SECRET (or the variable named by [auth] jwt_secret_env)"
            );
            router
        }
    }
}

/// The status page (`/`), unless its store cannot give it a cookie secret; messages written
/// there go through `starters`.
pub(super) async fn with_status_page(
    router: Router,
    agent: &Agent,
    node_id: &str,
    (platforms, starters): (&Platforms, &Starters),
    key: Option<&ServiceKey>,
    shutdown: &CancellationToken,
) -> Router {
    let web = crate::web::WebSource {
        agent: agent.clone(),
        node_id: node_id.to_owned(),
        platforms: platforms.probes(),
        service_key: key.cloned(),
        discord_guild: platforms.discord_guild,
        memberships: platforms.memberships(),
        starters: starters.clone(),
    };
    match crate::web::router(web, shutdown.clone()).await {
        Ok(web) => router.merge(web),
        Err(e) => {
            crate::startup!("the status page (/) is off: {e}");
            router
        }
    }
}

/// Slack's Events API endpoints, when Slack runs without Socket Mode.
pub(super) fn with_slack_events(router: Router, slack: Option<&SlackChannel>) -> Router {
    match slack {
        Some(s) => match s.router() {
            Some(events) => {
                crate::startup!(
                    "Slack: Events API on /slack/events, /slack/interactions, /slack/commands"
                );
                router.merge(events)
            }
            None => {
                crate::startup!("Slack: connected (Socket Mode)");
                router
            }
        },
        None => {
            crate::startup!(
                "Slack is off (set SLACK_BOT_TOKEN, and SLACK_APP_TOKEN for Socket Mode)"
            );
            router
        }
    }
}

/// The node's cluster duties (see [`crate::cluster::run`]): from `shutdown` they only keep
/// this node's leases alive, and they release them on `release`.
pub(super) fn start_cluster(
    agent: &Agent,
    starters: Starters,
    listen_url: Option<String>,
    shutdown: &CancellationToken,
    release: &CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(crate::cluster::run(
        agent.clone(),
        starters,
        listen_url,
        crate::cluster::Stopping {
            shutdown: shutdown.clone(),
            release: release.clone(),
        },
    ))
}

/// `/v1/api/notify`, with a service key: other nodes' `notify` calls reach `notifier`.
pub(super) fn with_notify_api(
    router: Router,
    agent: &Agent,
    notifier: &Notifier,
    key: Option<&ServiceKey>,
) -> Router {
    match key {
        Some(key) => router.merge(crate::notify_api::router(
            notifier.clone(),
            key.clone(),
            agent.metrics().clone(),
        )),
        None => {
            crate::startup!(
                "notifications (/v1/api/notify) are off on this node: set SANDPIPER_JWT_SECRET (or the variable named by [auth] jwt_secret_env)"
            );
            router
        }
    }
}

/// The node's sockets, bound before anything else starts: a port that is taken stops
/// start-up at once, before the chat platforms connect (and before anyone could send the bot
/// a message it would then drop).
pub(super) struct Sockets {
    /// `[server] listen`, and the address it got (port 0 picks one).
    main: (SocketAddr, TcpListener),
    /// `[server] ops_listen`, when `/ready` and `/metrics` are served apart.
    ops: Option<(SocketAddr, TcpListener)>,
}

/// Binds `[server] listen`, and `[server] ops_listen` when set.
pub(super) async fn bind(server: &ServerConfig) -> Result<Sockets, NodeError> {
    let bind = |addr: SocketAddr| async move {
        let socket = TcpListener::bind(addr)
            .await
            .map_err(|e| NodeError::Listen(addr, e))?;
        let bound = socket
            .local_addr()
            .map_err(|e| NodeError::Listen(addr, e))?;
        Ok::<_, NodeError>((bound, socket))
    };
    let main = bind(server.listen).await?;
    let ops = match server.ops_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    Ok(Sockets { main, ops })
}

/// The node's HTTP servers, listening.
pub(super) struct Listening {
    /// Where the endpoints listen.
    pub(super) addr: SocketAddr,
    /// Where `/ready` and `/metrics` listen apart, with their server.
    pub(super) ops: Option<(SocketAddr, JoinHandle<std::io::Result<()>>)>,
    /// The endpoints' server.
    pub(super) server: JoinHandle<std::io::Result<()>>,
    /// Stops both servers (a child of the node's shutdown).
    pub(super) stop: CancellationToken,
}

/// Serves `router` on the bound `[server] listen`, then `/ready` and `/metrics` on `[server]
/// ops_listen` when they are apart (`ops`), each counted in `http_requests`.
pub(super) fn listen(
    node_id: &str,
    server: &ServerConfig,
    sockets: Sockets,
    (router, ops): (Router, Option<Router>),
    http_requests: &HttpRequests,
    shutdown: &CancellationToken,
) -> Listening {
    let stop = shutdown.child_token();
    let (addr, task) = serve_http(sockets.main, http_requests.layer(router), server, &stop);
    crate::startup!(node = %node_id, "serving http://{addr}/health");
    let ops = match (sockets.ops, ops) {
        (Some(socket), Some(ops)) => {
            Some(serve_http(socket, http_requests.layer(ops), server, &stop))
        }
        _ => None,
    };
    Listening {
        addr,
        ops,
        server: task,
        stop,
    }
}

/// Serves `router` on the bound `socket` until `stop`: returns its address and the server's
/// task.
fn serve_http(
    (addr, socket): (SocketAddr, TcpListener),
    router: Router,
    limits: &ServerConfig,
    stop: &CancellationToken,
) -> (SocketAddr, JoinHandle<std::io::Result<()>>) {
    let limits = limits.clone();
    let stop = stop.clone();
    let task =
        tokio::spawn(
            async move { crate::http_server::serve_on(socket, router, &limits, stop).await },
        );
    (addr, task)
}

/// Says who may read `/ready` and `/metrics`: where they are served apart, behind which
/// token, or (when Slack's Events API makes the endpoints' port public) that anyone may.
pub(super) fn say_who_reaches_ops(server: &ServerConfig, http: &Listening, slack_events: bool) {
    let addr = http.addr;
    let token = match server.ops_token.is_some() {
        true => format!(
            ", with the bearer token from {}",
            server.effective_ops_token_env()
        ),
        false => String::new(),
    };
    match http.ops.as_ref().map(|(ops, _)| ops) {
        Some(ops) => {
            crate::startup!("serving http://{ops}/ready and /metrics (not on {addr}){token}")
        }
        None if !token.is_empty() => {
            crate::startup!("/ready and /metrics answer only{token}")
        }
        None if slack_events => crate::startup!(
            "/ready and /metrics answer anyone who reaches {addr}: on a public port set [server] ops_listen or {}",
            server.effective_ops_token_env()
        ),
        None => {}
    }
}

/// Registers the node in the `services` registry and keeps its heartbeat until `shutdown`.
/// Every node registers; only one with a service secret as a gateway (offered to the notify
/// tool).
pub(super) fn register(
    agent: &Agent,
    node_id: &str,
    addr: SocketAddr,
    notifier: &Notifier,
    serves_notify: bool,
    shutdown: &CancellationToken,
) -> JoinHandle<()> {
    let url = crate::registry::node_url(agent.config().server.advertise_url.as_deref(), addr);
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
    let record = crate::registry::node(node_id.to_owned(), role, url, names);
    tokio::spawn(crate::registry::run(
        agent.store().clone(),
        record,
        shutdown.clone(),
    ))
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
