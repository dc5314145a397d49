//! The card approver every chat platform uses: it posts a turn's approval requests as cards
//! (at most [`MAX_ROWS`] per card) and waits for the decisions that clicks deliver through the
//! agent ([`Agent::decide`](sandpiper_agent::Agent::decide)). A platform only knows how to post
//! and replace a card ([`CardSurface`]).
//!
//! - A click redraws its own card when it answers; the approver redraws a card only when the
//!   agent closes requests itself (a timeout, a stop) and says so through
//!   [`Approver::closed`]. Nothing polls.
//! - One rule when a card cannot be posted: the requests are denied at once, and the thread is
//!   told why.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use sandpiper_agent::Agent;
use sandpiper_agent::protocol::{ApprovalItem, Approver, Decision, TurnEvent, TurnSink as _};

use crate::card::{ApprovalCard, MAX_ROWS};
use crate::stream::{StreamSink, SurfaceError};

/// What a platform does with approval cards.
#[async_trait::async_trait]
pub trait CardSurface: Send + Sync + 'static {
    /// Posts a card in the thread; returns the message's id.
    async fn post_card(&self, card: &ApprovalCard) -> Result<String, SurfaceError>;
    /// Replaces the card message `id` with `card`.
    async fn replace_card(&self, id: &str, card: &ApprovalCard) -> Result<(), SurfaceError>;
    /// The platform roles or user groups whose members may decide in this thread
    /// (`approver_roles`, `approver_usergroups`); stored with every request. None by default.
    fn approver_roles(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The feedback a request gets when its card could not be posted.
pub const NOT_POSTED: &str = "the approval card could not be posted, so nobody could decide";

/// A card on the platform: its message and the requests it shows.
#[derive(Debug, Clone)]
struct Posted {
    message: String,
    requests: Vec<String>,
}

/// Posts approval cards into one thread and waits for clicks.
pub struct CardApprover {
    agent: Agent,
    cards: Arc<dyn CardSurface>,
    sink: StreamSink,
    workstream: String,
    posted: Mutex<Vec<Posted>>,
}

impl std::fmt::Debug for CardApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardApprover")
            .field("workstream", &self.workstream)
            .finish_non_exhaustive()
    }
}

impl CardApprover {
    /// Redraws the cards with a request decided on the status page: a click in the thread
    /// redraws its own card, a decision from the web has no card to answer, so the turn that
    /// waited for it (on whichever node runs it) redraws it from the store.
    async fn redraw_web_decided(&self, asked: &[String]) {
        let posted: Vec<Posted> = self
            .posted()
            .iter()
            .filter(|p| p.requests.iter().any(|id| asked.contains(id)))
            .cloned()
            .collect();
        for card in posted {
            let Some(shown) = ApprovalCard::load(&self.agent, &card.requests).await else {
                continue;
            };
            let from_web = shown.rows.iter().any(|r| r.decided_from_web());
            if !from_web {
                continue;
            }
            if let Err(e) = self.cards.replace_card(&card.message, &shown).await {
                tracing::warn!(error = %e, workstream = %self.workstream, "could not update an approval card");
            }
        }
    }

    /// An approver for `workstream`'s thread; cards go below what `sink` already showed.
    pub fn new(
        agent: Agent,
        cards: Arc<dyn CardSurface>,
        sink: StreamSink,
        workstream: impl Into<String>,
    ) -> Self {
        Self {
            agent,
            cards,
            sink,
            workstream: workstream.into(),
            posted: Mutex::default(),
        }
    }

    fn posted(&self) -> std::sync::MutexGuard<'_, Vec<Posted>> {
        self.posted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait::async_trait]
impl Approver for CardApprover {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        // The card goes below the tool lines it is about.
        self.sink.settle().await;
        let ids: Vec<String> = items.iter().map(|i| i.request_id.clone()).collect();
        // Registered before posting, so the quickest click finds the waiting turn.
        let waiters = self.agent.live().register(&self.workstream, &ids);
        for chunk in items.chunks(MAX_ROWS) {
            let card = ApprovalCard::pending(chunk, &self.workstream);
            match self.cards.post_card(&card).await {
                Ok(message) => self.posted().push(Posted {
                    message,
                    requests: chunk.iter().map(|i| i.request_id.clone()).collect(),
                }),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        workstream = %self.workstream,
                        requests = items.len(),
                        "could not post an approval card; denying its requests"
                    );
                    self.sink.event(TurnEvent::Notice(format!(
                        "⚠️ I could not post the approval card ({e}), so the {} asked about \
                         {} denied.",
                        if items.len() == 1 { "call" } else { "calls" },
                        if items.len() == 1 { "was" } else { "were" },
                    )));
                    return items
                        .iter()
                        .map(|_| Decision::deny(Some(NOT_POSTED.into())))
                        .collect();
                }
            }
        }
        let decisions = waiters.all().await;
        self.redraw_web_decided(&ids).await;
        decisions
    }

    fn approver_roles(&self) -> Vec<String> {
        self.cards.approver_roles()
    }

    async fn closed(&self, request_ids: &[String]) {
        let closed: HashSet<&str> = request_ids.iter().map(String::as_str).collect();
        let affected: Vec<Posted> = self
            .posted()
            .iter()
            .filter(|p| p.requests.iter().any(|id| closed.contains(id.as_str())))
            .cloned()
            .collect();
        for card in affected {
            // The agent stored the closed rows before saying so; the card is read back whole.
            let Some(shown) = ApprovalCard::load(&self.agent, &card.requests).await else {
                continue;
            };
            if let Err(e) = self.cards.replace_card(&card.message, &shown).await {
                tracing::warn!(error = %e, workstream = %self.workstream, "could not update an approval card");
            }
        }
    }
}
