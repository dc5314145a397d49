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
    waiting: Arc<Mutex<HashMap<String, Waiting>>>,
}

/// A request a turn waits on: where its decision goes, and the turn's workstream.
struct Waiting {
    tx: oneshot::Sender<Decision>,
    workstream: Arc<str>,
}

impl std::fmt::Debug for LiveApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveApprovals").finish_non_exhaustive()
    }
}

impl LiveApprovals {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts waiting for decisions on `ids`, asked by a turn in `workstream`. Dropping the
    /// [`Waiters`] (timeout, `/stop`) stops waiting.
    pub fn register(&self, workstream: &str, ids: &[String]) -> Waiters {
        let workstream: Arc<str> = Arc::from(workstream);
        let mut map = self.map();
        let receivers = ids
            .iter()
            .map(|id| {
                let (tx, rx) = oneshot::channel();
                let workstream = workstream.clone();
                map.insert(id.clone(), Waiting { tx, workstream });
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
            Some(w) => w.tx.send(decision).is_ok(),
            None => false,
        }
    }

    /// Whether a running turn waits for this request.
    pub fn is_waiting(&self, request_id: &str) -> bool {
        self.map()
            .get(request_id)
            .is_some_and(|w| !w.tx.is_closed())
    }

    /// Whether the turn running in `workstream` waits for a person's decision now (a stopping
    /// node leaves such a turn in the store rather than wait for the click).
    pub fn waits_in(&self, workstream: &str) -> bool {
        self.map()
            .values()
            .any(|w| &*w.workstream == workstream && !w.tx.is_closed())
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
        let waiters = live.register("w", &["r1".into(), "r2".into()]);
        assert!(live.is_waiting("r1"));
        assert!(live.waits_in("w"));
        assert!(!live.waits_in("other"));
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
        let gone = live.register("w", &["r3".into()]);
        drop(gone);
        assert!(!live.is_waiting("r3"));
        assert!(
            !live.waits_in("w"),
            "nothing waits once every waiter is gone"
        );
        assert!(!live.deliver("r3", Decision::approve()));
    }
}
