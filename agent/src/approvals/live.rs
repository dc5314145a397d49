//! Approval requests a running turn is waiting on, by request id. The decision engine
//! ([`Agent::decide`](crate::Agent::decide)) delivers a click's decision here; after a restart
//! nothing is waiting and the engine resumes the turn from the store instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::protocol::Decision;
use tokio::sync::oneshot;

/// The waiting requests. Cheap to clone.
#[derive(Clone, Default)]
pub struct LiveApprovals {
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Decision>>>>,
}

impl std::fmt::Debug for LiveApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveApprovals").finish_non_exhaustive()
    }
}

impl LiveApprovals {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Decision>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts waiting for decisions on `ids`. Dropping the [`Waiters`] (timeout, `/stop`)
    /// stops waiting.
    pub fn register(&self, ids: &[String]) -> Waiters {
        let mut map = self.map();
        let receivers = ids
            .iter()
            .map(|id| {
                let (tx, rx) = oneshot::channel();
                map.insert(id.clone(), tx);
                rx
            })
            .collect();
        Waiters {
            live: self.clone(),
            ids: ids.to_vec(),
            receivers,
        }
    }

    /// Hands a decision to the turn waiting for it; false when no turn waits. Only the
    /// decision engine delivers, after it stored the decision.
    pub(crate) fn deliver(&self, request_id: &str, decision: Decision) -> bool {
        match self.map().remove(request_id) {
            Some(tx) => tx.send(decision).is_ok(),
            None => false,
        }
    }

    /// Whether a running turn waits for this request.
    pub fn is_waiting(&self, request_id: &str) -> bool {
        self.map().get(request_id).is_some_and(|tx| !tx.is_closed())
    }
}

/// Decisions a turn waits for.
pub struct Waiters {
    live: LiveApprovals,
    ids: Vec<String>,
    receivers: Vec<oneshot::Receiver<Decision>>,
}

impl Waiters {
    /// Every decision, in order (a request abandoned by its sender counts as denied).
    pub async fn all(mut self) -> Vec<Decision> {
        let receivers = std::mem::take(&mut self.receivers);
        let mut out = Vec::with_capacity(receivers.len());
        for rx in receivers {
            out.push(rx.await.unwrap_or_else(|_| Decision::deny(None)));
        }
        out
    }
}

impl Drop for Waiters {
    fn drop(&mut self) {
        let mut map = self.live.map();
        for id in &self.ids {
            map.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn decisions_reach_the_waiting_turn_and_dropped_waiters_stop_listening() {
        let live = LiveApprovals::default();
        let waiters = live.register(&["r1".into(), "r2".into()]);
        assert!(live.is_waiting("r1"));
        assert!(live.deliver("r2", Decision::deny(Some("no".into()))));
        assert!(live.deliver("r1", Decision::approve().by("alice")));
        assert!(!live.deliver("r1", Decision::approve()), "only once");
        assert_eq!(
            waiters.all().await,
            vec![
                Decision::approve().by("alice"),
                Decision::deny(Some("no".into()))
            ]
        );
        let gone = live.register(&["r3".into()]);
        drop(gone);
        assert!(!live.is_waiting("r3"));
        assert!(!live.deliver("r3", Decision::approve()));
    }
}
