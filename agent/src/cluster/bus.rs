//! The wire between nodes: PostgreSQL `LISTEN/NOTIFY`. Each node listens on a channel named
//! after its id; a signal only says what to look at in the database (a handoff row, an
//! approval request), so a payload never carries a message and never exceeds NOTIFY's limit.
//! A wake-up lost while a listener reconnects is caught by the node's next heartbeat, which
//! looks for handoffs of its workstreams (see `Store::handoffs_held_by`).

use sqlx::postgres::PgListener;

use crate::store::{Store, StoreError};

/// What a node is woken for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Handoff row `id` waits for a workstream this node owns.
    Handoff(i64),
    /// Approval request `id` was decided on another node; a turn here may wait for it.
    Decided(String),
    /// Someone asked on another node to stop the turn running here in this workstream.
    Stop(String),
}

impl Signal {
    /// The NOTIFY payload: `handoff:<id>`, `decided:<request id>` or `stop:<workstream>`.
    pub fn encode(&self) -> String {
        match self {
            Signal::Handoff(id) => format!("handoff:{id}"),
            Signal::Decided(id) => format!("decided:{id}"),
            Signal::Stop(key) => format!("stop:{key}"),
        }
    }

    /// A payload back into a signal; `None` for anything else (logged by the caller).
    pub fn decode(payload: &str) -> Option<Self> {
        let (kind, rest) = payload.split_once(':')?;
        match kind {
            "handoff" => rest.parse().ok().map(Signal::Handoff),
            "decided" if !rest.is_empty() => Some(Signal::Decided(rest.to_owned())),
            "stop" if !rest.is_empty() => Some(Signal::Stop(rest.to_owned())),
            _ => None,
        }
    }
}

/// Sends signals to other nodes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Bus {
    store: Store,
}

impl Bus {
    /// Signals go through `store`'s pool.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Wakes `node` (nobody hears it when that node is gone: what it was woken for stays in
    /// the database for whoever takes over).
    pub async fn signal(&self, node: &str, signal: &Signal) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(node)
            .bind(signal.encode())
            .execute(self.store.pool())
            .await?;
        Ok(())
    }
}

/// This node's ear: a connection of its own to PostgreSQL, listening on the node's channel.
pub struct Listener {
    inner: PgListener,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

/// What the listener heard.
#[derive(Debug)]
pub enum Heard {
    /// A signal for this node.
    Signal(Signal),
    /// The connection dropped and is back: wake-ups may have been lost meanwhile.
    Reconnected,
    /// A payload that is no signal (logged, ignored).
    Garbage(String),
    /// Listening failed; try again after a pause.
    Failed(StoreError),
}

impl Listener {
    /// Listens for node `node`'s signals on a new connection to `url`.
    pub async fn connect(url: &str, node: &str) -> Result<Self, StoreError> {
        let url = crate::store::postgres_driver_url(url);
        let mut inner = PgListener::connect(&url).await?;
        inner.listen(node).await?;
        Ok(Self { inner })
    }

    /// The next thing heard.
    pub async fn next(&mut self) -> Heard {
        match self.inner.try_recv().await {
            Ok(Some(n)) => match Signal::decode(n.payload()) {
                Some(signal) => Heard::Signal(signal),
                None => Heard::Garbage(n.payload().to_owned()),
            },
            Ok(None) => Heard::Reconnected,
            Err(e) => Heard::Failed(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_round_trip_and_garbage_is_refused() {
        for s in [
            Signal::Handoff(42),
            Signal::Decided("req-1".into()),
            Signal::Stop("slack:T1:C1:17.5".into()),
        ] {
            assert_eq!(Signal::decode(&s.encode()), Some(s));
        }
        for bad in [
            "",
            "handoff:",
            "handoff:x",
            "decided:",
            "other:1",
            "nocolon",
        ] {
            assert_eq!(Signal::decode(bad), None, "{bad}");
        }
    }
}
