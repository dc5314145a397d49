//! The status page (issue 28): `GET /` on `sandpiper serve`'s HTTP server. Server-rendered
//! HTML (maud), one small script, live through server-sent events; every node shows the
//! whole cluster from the shared database and what each node writes about itself.
//!
//! # Layout
//! - `auth`: sign-in links, the operator token, the session cookie, sign-out, rate limits
//!   per client.
//! - `read_model`: what the page shows, cut to what the viewer may see.
//! - `snapshot`: this node's own status (channels, MCP, model, running turns), written for
//!   the other nodes.
//! - `pages`: the HTML; `style.css` and `app.js` beside it, compiled in.
//! - `events`: the event streams that keep the page current, and their budget.
//! - `decide`: deciding from the page, by the thread's rules for that person.
//! - `markdown`: the transcript's Markdown, rendered safely on the server.
//! - `search`: finding workstreams by text (the recall index) and filtering them.
//! - `usage_panel`: tokens per day, and an admin's budget changes.
//! - `chat`: writing into a workstream from the page, and starting a conversation there.
//!
//! Routes: `/` (the cluster), `/w/{key}` (one workstream), `/events` and `/w/{key}/events`
//! (their live parts), `/api/status` (the cluster as JSON), `/sign-in/{token}` (a page whose
//! button, `POST /sign-in/{token}`, spends the link), `POST /sign-in` (operator token, to
//! view), `POST /sign-out`, `POST /approvals/{id}` and
//! `POST /approvals/{id}/decide` (deciding from the page: `decide`), `POST /budget` (an
//! admin's budget change: `usage_panel`), `POST /w/{key}/say` and `POST /conversations`
//! (talking from the page: `chat`), and `/assets/*` (the
//! stylesheet and script, the only things served without a session: they hold no data).

mod auth;
mod chat;
mod decide;
mod events;
mod markdown;
mod pages;
mod read_model;
mod search;
mod snapshot;
#[cfg(test)]
mod tests;
mod usage_panel;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;

use axum::{Extension, Json, Router};
use axum_extra::extract::cookie::Key;
use ipnet::IpNet;
use sandpiper_agent::Agent;
use sandpiper_agent::service_jwt::ServiceKey;
use sandpiper_agent::store::StoreError;
use sandpiper_channels::membership::Membership;
use sandpiper_channels::thread::Starters;
use sandpiper_channels::web::PageDesk;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::serve::PlatformProbe;
use read_model::{Asked, ClusterView, Sources, Viewer};
use snapshot::LocalStatus;

/// What the page is built from.
pub struct WebSource {
    /// This node's agent.
    pub agent: Agent,
    /// This node's registry id.
    pub node_id: String,
    /// This node's chat connections.
    pub platforms: Vec<PlatformProbe>,
    /// The service secret: a JWT for `sandpiper-admin` signs in (once) to view as an admin.
    pub service_key: Option<ServiceKey>,
    /// The Discord server, for links to threads.
    pub discord_guild: Option<u64>,
    /// This node's chat platforms, asked about a person's roles when they decide from the
    /// page.
    pub memberships: Vec<Arc<dyn Membership>>,
    /// Every platform's lanes on this node, the page's own among them: where messages
    /// written on the page go.
    pub starters: Starters,
}

/// What the handlers share.
#[derive(Clone)]
struct WebState {
    sources: Sources,
    key: Key,
    /// Whether the page's public URL is `https://` (cookies are then Secure).
    https: bool,
    operator_token: Option<String>,
    service_key: Option<ServiceKey>,
    failures: auth::FailureLimit,
    /// `[server] trusted_proxies`.
    proxies: Vec<IpNet>,
    streams: events::StreamSlots,
    marker: events::MarkerWatch,
    /// Where messages written on the page go.
    desk: PageDesk,
}

/// The status page's routes, and the task that writes this node's status until `shutdown`.
/// Fails only when the database does not answer for the cookie key.
pub async fn router(source: WebSource, shutdown: CancellationToken) -> Result<Router, StoreError> {
    let secret = source.agent.store().web_cookie_secret().await?;
    let config = source.agent.config();
    let local = LocalStatus::new(source.agent.clone(), source.platforms);
    tokio::spawn(
        local
            .clone()
            .write_until(source.node_id.clone(), shutdown.clone()),
    );
    let state = WebState {
        https: config.server.page_url().starts_with("https://"),
        operator_token: config
            .server
            .ops_token
            .as_ref()
            .map(|t| t.expose().to_owned()),
        service_key: source.service_key,
        key: auth::key_from(&secret),
        failures: auth::FailureLimit::default(),
        proxies: config.server.trusted_proxy_nets(),
        desk: PageDesk {
            agent: source.agent.clone(),
            starters: source.starters,
            platforms: source.memberships.clone(),
        },
        streams: events::StreamSlots::for_connections(config.server.max_connections),
        marker: events::MarkerWatch::start(source.agent.clone(), shutdown),
        sources: Sources {
            local,
            node_id: source.node_id,
            discord_guild: source.discord_guild,
            memberships: source.memberships,
        },
    };
    Ok(routes(state))
}

fn routes(state: WebState) -> Router {
    let private = Router::new()
        .route("/", get(index))
        .route("/api/status", get(status_json))
        .route("/events", get(events::cluster))
        .route("/w/{key}", get(detail))
        .route("/w/{key}/events", get(events::workstream))
        .route("/approvals/{id}", post(decide::confirm))
        .route("/approvals/{id}/decide", post(decide::decide))
        .route("/budget", post(usage_panel::set))
        .route("/w/{key}/say", post(chat::say))
        .route(pages::NEW_PATH, post(chat::start))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require,
        ));
    Router::new()
        .merge(private)
        .route("/sign-in/{token}", get(auth::link_page).post(auth::link))
        .route("/sign-in", post(auth::token))
        .route("/sign-out", post(auth::sign_out))
        .route("/assets/style.css", get(style))
        .route("/assets/app.js", get(script))
        .layer(axum::middleware::map_response(harden))
        .with_state(state)
}

/// Every answer: no caching, no framing, no inline or foreign scripts (escaping is the first
/// guard against injected markup; this is the second), no referrer (sign-in links carry a
/// token).
async fn harden(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
             frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        pages::STYLE,
    )
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        pages::SCRIPT,
    )
}

/// The page could not be read: the database is away.
fn unavailable(e: StoreError) -> Response {
    tracing::warn!(error = %e, "status page: cannot read the cluster");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Html(pages::problem(
            "Not available",
            "The database did not answer; the page tries again by itself.",
        )),
    )
        .into_response()
}

/// `/`, with the search and filters of its query string ([`search::Filter`]).
async fn index(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Query(filter): Query<search::Filter>,
) -> Response {
    let view = read_model::cluster(&state.sources, &viewer, &filter, &Asked::default()).await;
    let usage = usage_panel::read(&state.sources, &viewer).await;
    match (view, usage) {
        (Ok(view), Ok(usage)) => {
            let panel = usage_panel::render(&viewer, &usage);
            Html(pages::index(&viewer, &view, panel)).into_response()
        }
        (Err(e), _) | (_, Err(e)) => unavailable(e),
    }
}

async fn detail(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Path(key): Path<String>,
) -> Response {
    match read_model::workstream(&state.sources, &viewer, &key).await {
        Ok(Some(d)) => Html(pages::detail(&viewer, &d)).into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            Html(pages::problem(
                "No such workstream",
                "There is no workstream here that you take part in.",
            )),
        )
            .into_response(),
        Err(e) => unavailable(e),
    }
}

/// `/api/status`: the cluster as the viewer may see it.
#[derive(Debug, Serialize)]
struct StatusJson {
    viewer: String,
    admin: bool,
    nodes: Vec<NodeJson>,
    live_workstreams: usize,
    stored_workstreams: usize,
    turns_last_hour: i64,
    mcp: McpJson,
    workstreams: Vec<WorkstreamJson>,
    approvals: Vec<ApprovalJson>,
    watches: Vec<String>,
    templates: Vec<TemplateJson>,
}

#[derive(Debug, Serialize)]
struct TemplateJson {
    name: String,
    origin: String,
    mcp_server: Option<String>,
}

#[derive(Debug, Serialize)]
struct NodeJson {
    id: String,
    role: String,
    version: String,
    healthy: bool,
    reachable: bool,
}

#[derive(Debug, Serialize)]
struct McpJson {
    servers: usize,
    resources: usize,
    prompts: usize,
}

#[derive(Debug, Serialize)]
struct WorkstreamJson {
    key: String,
    owner: String,
    state: String,
    tokens: u64,
}

#[derive(Debug, Serialize)]
struct ApprovalJson {
    workstream: String,
    tool: String,
    requester: String,
}

fn status_of(viewer: &Viewer, v: ClusterView) -> StatusJson {
    StatusJson {
        viewer: viewer.name.clone(),
        admin: viewer.admin,
        nodes: v
            .nodes
            .into_iter()
            .map(|n| NodeJson {
                reachable: n.status.is_some(),
                id: n.id,
                role: n.role,
                version: n.version,
                healthy: n.healthy,
            })
            .collect(),
        live_workstreams: v.live_workstreams,
        stored_workstreams: v.stored_workstreams,
        turns_last_hour: v.turns_last_hour,
        mcp: McpJson {
            servers: v.mcp.servers,
            resources: v.mcp.resources,
            prompts: v.mcp.prompts,
        },
        workstreams: v
            .workstreams
            .into_iter()
            .map(|w| WorkstreamJson {
                key: w.key,
                owner: w.owner,
                state: w.state,
                tokens: w.tokens,
            })
            .collect(),
        approvals: v
            .approvals
            .into_iter()
            .map(|a| ApprovalJson {
                workstream: a.workstream,
                tool: a.tool,
                requester: a.requester,
            })
            .collect(),
        watches: v.watches.into_iter().map(|w| w.name).collect(),
        templates: v
            .templates
            .into_iter()
            .map(|t| TemplateJson {
                name: t.name,
                origin: t.origin,
                mcp_server: t.mcp_server,
            })
            .collect(),
    }
}

async fn status_json(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
) -> Response {
    let filter = search::Filter::default();
    match read_model::cluster(&state.sources, &viewer, &filter, &Asked::default()).await {
        Ok(view) => Json(status_of(&viewer, view)).into_response(),
        Err(e) => unavailable(e),
    }
}
