//! The event streams that keep a page current: `update` events whose data is
//! `{"html": …}`, the page's live part rendered (and escaped) by the same templates as the
//! first answer. A stream sends the whole current state when it opens, so a browser that
//! reconnects (EventSource does by itself) has caught up at once; after that it renders
//! again when a turn on this node moves (debounced) or every second (the database: other
//! nodes, approvals, watches) and sends only what changed. It ends when the session does.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use sandpiper_agent::store::web_access::WebSession;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::read_model::{self, Viewer};
use super::{WebState, pages};

/// How often the database is read again without a local change.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// How long a burst of turn events is collected before rendering once.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// Which page's live part a stream renders.
#[derive(Debug, Clone)]
enum Target {
    Cluster,
    Workstream(String),
}

/// `GET /events`: the cluster page's live part.
pub(super) async fn cluster(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Extension(session): Extension<WebSession>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    follow(state, viewer, session, Target::Cluster)
}

/// `GET /w/{key}/events`: one workstream's conversation.
pub(super) async fn workstream(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Extension(session): Extension<WebSession>,
    Path(key): Path<String>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    follow(state, viewer, session, Target::Workstream(key))
}

struct Follow {
    state: WebState,
    viewer: Viewer,
    session: WebSession,
    target: Target,
    changes: tokio::sync::broadcast::Receiver<String>,
    last: Option<String>,
    first: bool,
}

impl Follow {
    /// Waits for something that may have changed the page.
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
            () = tokio::time::sleep(POLL_EVERY) => {}
        }
        true
    }

    /// The live part now; `None` when it cannot be read this time.
    async fn render(&self) -> Option<String> {
        let sources = &self.state.sources;
        let rendered = match &self.target {
            Target::Cluster => read_model::cluster(sources, &self.viewer)
                .await
                .map(|v| Some(pages::cluster_live(&self.viewer, &v).into_string())),
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

fn follow(
    state: WebState,
    viewer: Viewer,
    session: WebSession,
    target: Target,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let changes = state.sources.local.agent().activity().subscribe();
    let start = Follow {
        state,
        viewer,
        session,
        target,
        changes,
        last: None,
        first: true,
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
                Ok(event) => return Some((Ok(event), f)),
                Err(e) => tracing::warn!(error = %e, "status page stream: cannot encode an update"),
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
