//! The event streams that keep a page current: `update` events whose data is
//! `{"html": …}`, the page's live part rendered (and escaped) by the same templates as the
//! first answer. A stream sends the whole current state when it opens, so a browser that
//! reconnects (EventSource does by itself) has caught up at once; after that it renders
//! again when a turn on this node moves (debounced), when the database's change marker moves
//! (other nodes, approvals, watches; one reader per node asks the store once a second while a
//! stream is open, [`MarkerWatch`]), and at least every [`REREAD_EVERY`] (ages, a node going
//! stale); it sends only what changed. Which pending approvals its viewer may decide it asks
//! the rules and the platform once per request and keeps for 30 seconds ([`Asked`]), so a
//! role given or taken away in chat shows within that, and at once on a reload.
//!
//! A stream holds one of the server's connections, so streams are budgeted
//! ([`StreamSlots`]): at most [`STREAMS_PER_HOLDER`] per session and per person (the operator
//! token's sessions are one person), at most a quarter of `[server] max_connections` on a
//! node (the rest stay for `/health`, Slack's Events API, notify and the pages themselves),
//! and each lasts at most [`STREAM_LIFETIME`] (the page reconnects). A stream over a person's
//! budget is refused with 429, over the node's with 503; both say when to try again. A
//! stream ends when the session does.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use sandpiper_agent::Agent;
use sandpiper_agent::store::status_view::PageMarker;
use sandpiper_agent::store::web_access::WebSession;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::read_model::{self, Asked, Viewer};
use super::search::Filter;
use super::{WebState, pages};

/// How often the node's marker reader asks the store, while a stream is open.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// How long a burst of turn events is collected before rendering once.
const DEBOUNCE: Duration = Duration::from_millis(150);
/// How often a stream renders again even when nothing it can see moved.
pub(super) const REREAD_EVERY: Duration = Duration::from_secs(15);
/// How long one stream lasts before the server ends it (the page reconnects).
pub(super) const STREAM_LIFETIME: Duration = Duration::from_secs(5 * 60);
/// Most streams one session, and one person, may hold open.
pub(super) const STREAMS_PER_HOLDER: usize = 4;

/// Which page's live part a stream renders.
#[derive(Debug, Clone)]
enum Target {
    /// The cluster page, its workstreams cut to a search.
    Cluster(Filter),
    Workstream(String),
}

/// Who a stream counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Holder {
    /// One browser session (by its id).
    Session(String),
    /// One person over all their sessions; `None`: the operator token and service tokens.
    Person(Option<String>),
}

/// The streams open on this node, by holder.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    by: HashMap<Holder, usize>,
}

/// Why a stream was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    /// The session or the person holds [`STREAMS_PER_HOLDER`] already.
    Holder,
    /// The node's stream budget is spent.
    Node,
}

/// The node's stream budget. Cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct StreamSlots {
    node_cap: usize,
    open: Arc<Mutex<Open>>,
}

/// An open stream's place in the budget, given back when the stream is dropped.
#[derive(Debug)]
pub(super) struct StreamSlot {
    holders: [Holder; 2],
    open: Arc<Mutex<Open>>,
}

impl StreamSlots {
    /// A budget of a quarter of `max_connections` (at least one) streams on this node.
    pub(super) fn for_connections(max_connections: usize) -> Self {
        Self {
            node_cap: (max_connections / 4).max(1),
            open: Arc::default(),
        }
    }

    /// A slot for one more stream of `session`, or which budget is spent.
    pub(super) fn admit(&self, session: &WebSession) -> Result<StreamSlot, Full> {
        let holders = [
            Holder::Session(session.id.clone()),
            Holder::Person(session.who.user_id.clone()),
        ];
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let held = |h: &Holder| open.by.get(h).copied().unwrap_or(0);
        if holders.iter().any(|h| held(h) >= STREAMS_PER_HOLDER) {
            return Err(Full::Holder);
        }
        if open.total >= self.node_cap {
            return Err(Full::Node);
        }
        open.total += 1;
        for h in &holders {
            *open.by.entry(h.clone()).or_insert(0) += 1;
        }
        Ok(StreamSlot {
            holders,
            open: self.open.clone(),
        })
    }

    /// Streams open on this node.
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        for h in &self.holders {
            if let Some(n) = open.by.get_mut(h) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.by.remove(h);
                }
            }
        }
    }
}

/// The database's change marker as one reader on this node sees it: it asks the store every
/// [`POLL_EVERY`] while at least one stream listens, and wakes the streams only when the
/// marker moved. Cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct MarkerWatch {
    marker: Arc<watch::Sender<PageMarker>>,
}

impl MarkerWatch {
    /// Starts the reader for `agent`'s store until `shutdown`.
    pub(super) fn start(agent: Agent, shutdown: CancellationToken) -> Self {
        let marker = Arc::new(watch::Sender::new(PageMarker::default()));
        let reader = marker.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(POLL_EVERY) => {}
                }
                if reader.receiver_count() == 0 {
                    continue;
                }
                match agent.store().page_marker().await {
                    Ok(now) => {
                        reader.send_if_modified(|seen| std::mem::replace(seen, now) != now);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "status page: cannot read the change marker now");
                    }
                }
            }
        });
        Self { marker }
    }

    fn subscribe(&self) -> watch::Receiver<PageMarker> {
        self.marker.subscribe()
    }
}

/// `GET /events`: the cluster page's live part, cut to the page's search (its query string).
pub(super) async fn cluster(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Extension(session): Extension<WebSession>,
    Query(filter): Query<Filter>,
) -> Response {
    follow(state, viewer, session, Target::Cluster(filter))
}

/// `GET /w/{key}/events`: one workstream's conversation.
pub(super) async fn workstream(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Extension(session): Extension<WebSession>,
    Path(key): Path<String>,
) -> Response {
    follow(state, viewer, session, Target::Workstream(key))
}

struct Follow {
    state: WebState,
    viewer: Viewer,
    session: WebSession,
    target: Target,
    changes: tokio::sync::broadcast::Receiver<String>,
    marker: watch::Receiver<PageMarker>,
    last: Option<String>,
    /// Which approvals the viewer may decide, as last asked.
    asked: Asked,
    first: bool,
    ends_at: Instant,
    _slot: StreamSlot,
}

impl Follow {
    /// Waits for something that may have changed the page; `false` when the stream should
    /// end (its lifetime is over, or the node shuts down).
    async fn changed(&mut self) -> bool {
        if std::mem::take(&mut self.first) {
            return true;
        }
        tokio::select! {
            got = self.changes.recv() => match got {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while !matches!(self.changes.try_recv(), Err(TryRecvError::Empty | TryRecvError::Closed)) {}
                }
                Err(RecvError::Closed) => return false,
            },
            moved = self.marker.changed() => return moved.is_ok(),
            () = tokio::time::sleep(REREAD_EVERY) => {}
            () = tokio::time::sleep_until(self.ends_at) => return false,
        }
        true
    }

    /// The live part now; `None` when it cannot be read this time.
    async fn render(&self) -> Option<String> {
        let sources = &self.state.sources;
        let rendered = match &self.target {
            Target::Cluster(filter) => {
                read_model::cluster(sources, &self.viewer, filter, &self.asked)
                    .await
                    .map(|v| Some(pages::cluster_live(&self.viewer, &v).into_string()))
            }
            Target::Workstream(key) => read_model::workstream(sources, &self.viewer, key)
                .await
                .map(|d| d.map(|d| pages::detail_live(&d).into_string())),
        };
        match rendered {
            Ok(html) => html,
            Err(e) => {
                tracing::debug!(error = %e, "status page stream: cannot read now; trying again");
                None
            }
        }
    }

    /// Whether the session still holds (not signed out, not expired).
    async fn signed_in(&self) -> bool {
        let store = self.state.sources.local.agent().store();
        !matches!(store.web_session(&self.session.id).await, Ok(None))
    }
}

/// The answer to a stream over its budget.
fn refused(full: Full, viewer: &Viewer) -> Response {
    tracing::info!(viewer = %viewer.name, budget = ?full, "status page stream refused");
    let (status, text) = match full {
        Full::Holder => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many live pages open: close one and reload\n",
        ),
        Full::Node => (
            StatusCode::SERVICE_UNAVAILABLE,
            "this node follows as many live pages as it can: try again in a moment\n",
        ),
    };
    (
        status,
        [
            (header::RETRY_AFTER, "30"),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
        ],
        text,
    )
        .into_response()
}

fn follow(state: WebState, viewer: Viewer, session: WebSession, target: Target) -> Response {
    let slot = match state.streams.admit(&session) {
        Ok(slot) => slot,
        Err(full) => return refused(full, &viewer),
    };
    let changes = state.sources.local.agent().activity().subscribe();
    let marker = state.marker.subscribe();
    let start = Follow {
        state,
        viewer,
        session,
        target,
        changes,
        marker,
        last: None,
        asked: Asked::default(),
        first: true,
        ends_at: Instant::now() + STREAM_LIFETIME,
        _slot: slot,
    };
    let stream = futures::stream::unfold(start, |mut f| async move {
        loop {
            // Any turn's move renders again (another workstream's too): nothing is sent
            // when nothing differs.
            if !f.changed().await || !f.signed_in().await {
                return None;
            }
            let Some(html) = f.render().await else {
                continue;
            };
            if f.last.as_deref() == Some(html.as_str()) {
                continue;
            }
            let event = Event::default()
                .event("update")
                .json_data(serde_json::json!({ "html": html }));
            f.last = Some(html);
            match event {
                Ok(event) => return Some((Ok::<_, Infallible>(event), f)),
                Err(e) => tracing::warn!(error = %e, "status page stream: cannot encode an update"),
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandpiper_agent::store::web_access::WebIdentity;

    fn session(id: &str, user: Option<&str>) -> WebSession {
        WebSession {
            id: id.into(),
            who: WebIdentity {
                user_id: user.map(str::to_owned),
                admin: false,
            },
            expires_at: i64::MAX,
        }
    }

    #[test]
    fn streams_are_capped_per_session_per_person_and_per_node() {
        let slots = StreamSlots::for_connections(40);
        let a1 = session("a1", Some("alice"));
        let a2 = session("a2", Some("alice"));
        let held: Vec<StreamSlot> = (0..STREAMS_PER_HOLDER)
            .map(|_| slots.admit(&a1).unwrap())
            .collect();
        assert_eq!(slots.admit(&a1).unwrap_err(), Full::Holder, "the session");
        assert_eq!(
            slots.admit(&a2).unwrap_err(),
            Full::Holder,
            "the person, in another session"
        );
        let operator = session("o1", None);
        let operators: Vec<StreamSlot> = (0..STREAMS_PER_HOLDER)
            .map(|_| slots.admit(&operator).unwrap())
            .collect();
        assert_eq!(
            slots.admit(&session("o2", None)).unwrap_err(),
            Full::Holder,
            "every operator session is one person"
        );
        // The node's budget is a quarter of its connections: 10 here.
        let others: Vec<StreamSlot> = ["b", "c"]
            .iter()
            .map(|u| slots.admit(&session(u, Some(u))).unwrap())
            .collect();
        assert_eq!(slots.open(), 10);
        assert_eq!(
            slots.admit(&session("d", Some("d"))).unwrap_err(),
            Full::Node
        );
        drop((held, operators, others));
        assert_eq!(slots.open(), 0);
        assert!(slots.admit(&a2).is_ok(), "given back when streams end");
    }
}
