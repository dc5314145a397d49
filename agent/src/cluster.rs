//! Several nodes on one database: one owner per workstream.
//!
//! A node that joins a cluster ([`Agent::join_cluster`]) takes a workstream's lease
//! (`workstream_leases`, see [`crate::store::leases`]) before it runs a turn there, and keeps
//! every lease it holds alive with one statement per heartbeat ([`Cluster::renew`]). Work that
//! arrives on a node that does not own its workstream is left in `handoffs` and the owner is
//! woken over PostgreSQL `LISTEN/NOTIFY` ([`bus`]); a click decided on such a node wakes the
//! owner's waiting turn the same way. When the owner's lease has expired (the node died), the
//! node that needs the workstream takes it over and reloads it from the database; a turn the
//! dead node left running is found by its mark (`turn_started_at`) and said to be interrupted.
//!
//! On SQLite there is one node (a second is refused at start), so any lease another process
//! left is dead and taken at once; the leases then only mark running turns for the restart.
//! Without [`Agent::join_cluster`] (the console, tests of one agent) nothing of this runs.
//!
//! Whether a lease is alive is the database's clock's to say (see [`crate::store::leases`]):
//! no node's wall clock enters a lease, so skew between nodes cannot make two owners. What a
//! node trusts without asking (the leases it holds, for one lease after it last renewed them)
//! is measured on its monotonic clock from before it sent the renewal, which ends no later
//! than the expiry the database wrote.

pub mod bus;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::Decision;
use crate::store::approvals::ApprovalRecord;
use crate::store::leases::{Claim, Liveness};
use crate::store::{Backend, Store, StoreError, now_ms};
use crate::{Agent, AgentError};

pub use bus::{Bus, Signal};

/// The notice a thread gets when its turn died with the node that ran it.
pub const INTERRUPTED: &str = "⚠️ The last turn here was interrupted by a restart — reply to continue. \
     Everything it did before that is kept.";

/// What a dead node left in a workstream this node took over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// No turn ran there (work was waiting for an owner, or nothing at all).
    Idle,
    /// A turn ran: the thread is told it was interrupted ([`INTERRUPTED`]).
    Interrupted,
    /// A turn waited for approval, and every request of it was decided after its node could
    /// no longer read the decisions: it goes on from them ([`RESUMED_AFTER_TAKEOVER`]).
    Resumable,
}

/// What a thread is told when its turn goes on, on another node, with decisions its first
/// node never read.
pub const RESUMED_AFTER_TAKEOVER: &str = "⚠️ The sandpiper node running this turn stopped \
     while it waited for approval. Your decision was kept, and the turn goes on here.";

/// Where a workstream's turns run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// On this node.
    Here {
        /// The previous owner died while a turn ran: the thread should be told.
        interrupted: bool,
    },
    /// On another, live node: hand the work over.
    Elsewhere(String),
}

/// This node's membership: its id, the leases it holds, and the bus to the others.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    node: String,
    store: Store,
    lease: Duration,
    /// Whether other nodes may be alive (PostgreSQL). On SQLite every other lease is dead.
    shared: bool,
    /// Workstreams whose lease this node holds, trusted until `trusted_until`.
    owned: Mutex<HashSet<String>>,
    /// Workstreams this node is taking on: claimed, and waiting a window for what other nodes
    /// hand over before the first turn ([`Agent::taking_on`]).
    taking_on: Mutex<HashSet<String>>,
    /// Until when `owned` is known to be right: a lease after the last renewal was sent
    /// (monotonic, so a wall-clock jump cannot stretch it). `None`: never renewed.
    trusted_until: Mutex<Option<Instant>>,
    /// Set by a test's simulated crash: stop without releasing anything.
    crashed: AtomicBool,
    /// On SQLite: the leases earlier processes left were adopted (at start).
    adopted: AtomicBool,
    bus: Option<Bus>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.inner.node)
            .field("shared", &self.inner.shared)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Membership of node `node` over `store`, leases lasting `lease`. On PostgreSQL, `bus`
    /// reaches the other nodes (see [`Bus::connect`]).
    pub fn new(node: impl Into<String>, store: Store, lease: Duration, bus: Option<Bus>) -> Self {
        let shared = store.backend() == Backend::Postgres;
        Self {
            inner: Arc::new(Inner {
                node: node.into(),
                store,
                lease,
                shared,
                owned: Mutex::default(),
                taking_on: Mutex::default(),
                trusted_until: Mutex::new(None),
                crashed: AtomicBool::new(false),
                adopted: AtomicBool::new(false),
                bus,
            }),
        }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// How long a lease lasts; renew every third of it.
    pub fn lease(&self) -> Duration {
        self.inner.lease
    }

    /// The bus to the other nodes (PostgreSQL only).
    pub fn bus(&self) -> Option<&Bus> {
        self.inner.bus.as_ref()
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.inner.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// When another node's lease is dead: by the database's clock when nodes share the
    /// database, always where this node is the only one.
    fn liveness(&self) -> Liveness {
        if self.inner.shared {
            Liveness::Shared
        } else {
            Liveness::Alone
        }
    }

    fn trusted_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.inner
            .trusted_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Trusts the lease set until `until`, never shortening what a later renewal set.
    fn trust_until(&self, until: Instant) {
        let mut trusted = self.trusted_until();
        if trusted.is_none_or(|t| t < until) {
            *trusted = Some(until);
        }
    }

    fn owned(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner.owned.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn taking(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .taking_on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this node holds `key`'s lease, as far as it knows without asking.
    fn holds(&self, key: &str) -> bool {
        let trusted = self.trusted_until().is_some_and(|t| Instant::now() < t);
        trusted && self.owned().contains(key)
    }

    /// Takes `key`'s lease, or says who holds it. `Here` with `fresh` set when this node did
    /// not hold it a moment ago: its copy in memory, if any, may be stale.
    async fn claim(&self, key: &str) -> Result<(Ownership, bool), StoreError> {
        if self.holds(key) {
            return Ok((Ownership::Here { interrupted: false }, false));
        }
        let sent = Instant::now();
        let claim = self
            .inner
            .store
            .claim_lease(key, &self.inner.node, self.lease_ms(), self.liveness())
            .await?;
        Ok(match claim {
            Claim::Ours { interrupted, .. } => {
                self.owned().insert(key.to_owned());
                // A first lease also makes the set trustworthy for a while.
                self.trust_until(sent + self.inner.lease);
                (Ownership::Here { interrupted }, true)
            }
            Claim::Held { node } => (Ownership::Elsewhere(node), false),
        })
    }

    /// The live node other than this one holding `key`'s lease, running a turn or not: the
    /// node work for `key` is handed to.
    pub async fn lease_elsewhere(&self, key: &str) -> Result<Option<String>, StoreError> {
        if !self.inner.shared || self.holds(key) {
            return Ok(None);
        }
        let owner = self.inner.store.live_lease_owner(key).await?;
        Ok(owner.filter(|n| *n != self.inner.node))
    }

    /// The live node other than this one running a turn in `key`, if any: a click on a
    /// request of that turn is that node's to deliver, never "a turn gone" here.
    pub async fn remote_owner(&self, key: &str) -> Result<Option<String>, StoreError> {
        if !self.inner.shared || self.holds(key) {
            return Ok(None);
        }
        let owner = self.inner.store.turn_owner(key).await?;
        Ok(owner.filter(|n| *n != self.inner.node))
    }

    /// Renews every lease of this node (one statement) and re-reads which it holds when the
    /// count disagrees. A database that does not answer leaves the set untrusted once the
    /// lease has run out, so the next turn asks again rather than assume.
    pub async fn renew(&self) -> Result<(), StoreError> {
        let sent = Instant::now();
        let held = self
            .inner
            .store
            .renew_leases(&self.inner.node, self.lease_ms())
            .await?;
        let known = self.owned().len();
        if usize::try_from(held).unwrap_or(usize::MAX) != known {
            tracing::info!(node = %self.inner.node, held, known, "lease set changed; re-reading it");
            let keys = self.inner.store.leases_of(&self.inner.node).await?;
            *self.owned() = keys.into_iter().collect();
        }
        self.trust_until(sent + self.inner.lease);
        Ok(())
    }

    /// Marks a turn running (or ended) in `key`, so a node that takes over after a crash
    /// knows it was interrupted. A failure is logged: it costs only that mark.
    pub async fn mark_turn(&self, key: &str, running: bool) {
        let at = running.then(now_ms);
        match self.inner.store.mark_turn(key, &self.inner.node, at).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(
                    workstream = key,
                    running,
                    "turn not marked: the lease is not ours"
                );
            }
            Err(e) => {
                tracing::warn!(workstream = key, running, error = %e, "could not mark the turn");
            }
        }
    }

    /// Leaves `payload` for `key`'s owner `node` and wakes it. The payload is durable: if the
    /// owner dies first, whoever takes the workstream over runs it.
    pub async fn hand_over(&self, key: &str, node: &str, payload: &str) -> Result<(), StoreError> {
        let id = self
            .inner
            .store
            .push_handoff(key, payload, now_ms())
            .await?;
        tracing::info!(
            workstream = key,
            to = node,
            handoff = id,
            "work handed to the owner"
        );
        if let Some(bus) = &self.inner.bus {
            bus.signal(node, &Signal::Handoff(id)).await?;
        }
        Ok(())
    }

    /// Workstreams a dead node left a running turn or waiting work in (at most `limit`). On
    /// SQLite only what earlier processes left counts, so it is looked for once, at start: a
    /// second node there is refused, and one started anyway (tests) must not adopt the first
    /// one's running turns.
    async fn orphans(&self, limit: i64) -> Result<Vec<String>, StoreError> {
        if !self.inner.shared && self.inner.adopted.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        let orphans = self
            .inner
            .store
            .orphaned_leases(&self.inner.node, self.liveness(), limit)
            .await?;
        if !self.inner.shared && (orphans.len() as i64) < limit {
            // All of them found (a longer list is taken over the next beats).
            self.inner.adopted.store(true, Ordering::Release);
        }
        Ok(orphans.into_iter().map(|o| o.workstream).collect())
    }

    /// A clean stop: idle leases are dropped and running ones expired, so other nodes take
    /// over at once. After [`Cluster::crash`] nothing is released (the leases run out).
    pub async fn release(&self) {
        if self.inner.crashed.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.inner.store.release_leases(&self.inner.node).await {
            tracing::warn!(node = %self.inner.node, error = %e, "could not release the leases");
        }
        self.owned().clear();
    }

    /// A stopping node that starts no more turns drops the leases of workstreams where no
    /// turn of it runs (marked in the database), so the next owner starts there at once
    /// instead of waiting the lease out; those still running keep theirs until they end.
    /// The set trusted in memory is re-read. After [`Cluster::crash`] nothing is released.
    pub async fn release_idle(&self) {
        if self.crashed() {
            return;
        }
        let released = async {
            let dropped = self
                .inner
                .store
                .release_idle_leases(&self.inner.node)
                .await?;
            let kept = self.inner.store.leases_of(&self.inner.node).await?;
            *self.owned() = kept.into_iter().collect();
            Ok::<_, StoreError>(dropped)
        };
        match released.await {
            Ok(0) => {}
            Ok(dropped) => tracing::info!(node = %self.inner.node, dropped, "idle leases released"),
            Err(e) => {
                tracing::warn!(node = %self.inner.node, error = %e, "could not release idle leases")
            }
        }
    }

    /// Makes this node stop as a killed process would (tests): nothing is released.
    pub fn crash(&self) {
        self.inner.crashed.store(true, Ordering::Release);
    }

    /// Whether [`Cluster::crash`] was called.
    pub fn crashed(&self) -> bool {
        self.inner.crashed.load(Ordering::Acquire)
    }
}

impl Agent {
    /// Joins a cluster: from now on turns take their workstream's lease first.
    pub fn join_cluster(&self, cluster: Cluster) {
        if self.cluster_slot().set(cluster).is_err() {
            tracing::warn!("this agent already joined a cluster");
        }
    }

    /// This node's cluster membership, when it joined one.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster_slot().get()
    }

    /// Where `key`'s turns run: here (taking the lease, and reloading the workstream from the
    /// database when this node did not hold it) or on the live node that holds it. Always
    /// here outside a cluster.
    pub async fn ownership(&self, key: &str) -> Result<Ownership, AgentError> {
        let Some(cluster) = self.cluster() else {
            return Ok(Ownership::Here { interrupted: false });
        };
        let (ownership, fresh) = cluster.claim(key).await?;
        if fresh {
            // Another node may have run turns here since this one last did.
            self.forget(key);
        }
        Ok(ownership)
    }

    /// Takes over workstreams a dead node left a running turn or waiting work in (at most
    /// `limit` per call), each with what its turn left ([`Takeover`]). Outside a cluster,
    /// none.
    pub async fn adopt_orphans(&self, limit: i64) -> Result<Vec<(String, Takeover)>, AgentError> {
        let Some(cluster) = self.cluster() else {
            return Ok(Vec::new());
        };
        let mut adopted = Vec::new();
        for key in cluster.orphans(limit).await? {
            let Ownership::Here { interrupted } = self.ownership(&key).await? else {
                continue;
            };
            let left = match interrupted {
                false => Takeover::Idle,
                true if self.decided_while_away(&key).await? => Takeover::Resumable,
                true => Takeover::Interrupted,
            };
            adopted.push((key, left));
        }
        Ok(adopted)
    }

    /// Whether the turn a dead node left in `key` was waiting for approval and every call it
    /// asked about has since been decided by a person, with no turn having taken the answer:
    /// the clicks landed while the dead node's lease still ran, so none of those calls ran.
    /// Such a turn can go on from the stored decisions without running anything twice.
    async fn decided_while_away(&self, key: &str) -> Result<bool, AgentError> {
        let history = self.history(key).await?;
        let dangling = crate::approvals::resume::unanswered_calls(&history);
        if dangling.is_empty() {
            return Ok(false);
        }
        for call in &dangling {
            if !self.store().decided_untaken_for_call(key, &call.id).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Leaves `payload` (a channel's waiting work, serialized: this node accepted it but will
    /// not run it, because it is stopping) for whoever owns `key` next; durable, so another
    /// node's heartbeat (or this node, restarted) adopts it and runs it in order.
    ///
    /// When another node already holds `key`'s lease (it took over while this one drains), it
    /// is woken at once; otherwise whoever claims the workstream next takes it first
    /// ([`Agent::take_handoffs`]), or a heartbeat adopts it.
    pub async fn leave_for_next_owner(&self, key: &str, payload: &str) -> Result<(), StoreError> {
        let id = self.store().push_handoff(key, payload, now_ms()).await?;
        tracing::info!(
            workstream = key,
            handoff = id,
            "waiting work left for the next owner"
        );
        let Some(cluster) = self.cluster() else {
            return Ok(());
        };
        let owner = self.store().lease_owner(key).await?;
        if let (Some(owner), Some(bus)) = (owner, cluster.bus())
            && owner != cluster.node()
        {
            bus.signal(&owner, &Signal::Handoff(id)).await?;
        }
        Ok(())
    }

    /// Takes every piece of work waiting in `key`'s handoffs (oldest first), for a node that
    /// has just claimed `key`: work another node accepted before this one took over runs here
    /// in its place, before what came after it. Each is taken once, whoever else looks.
    pub async fn take_handoffs(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let mut taken = Vec::new();
        for id in self.store().handoffs_for(key).await? {
            if let Some(handoff) = self.store().take_handoff(id).await? {
                taken.push(handoff.payload);
            }
        }
        Ok(taken)
    }

    /// Whether this node knows, without asking, that no other node runs `key`'s turns: it is
    /// in no cluster, or it holds the lease.
    pub fn holds_here(&self, key: &str) -> bool {
        self.cluster().is_none_or(|c| c.holds(key))
    }

    /// Marks `key` as being taken on here until the guard drops: a handoff for it is then
    /// left for the turn taking it on, which takes it in place order with its own message.
    pub fn taking_on(&self, key: &str) -> TakingOn {
        let cluster = self.cluster().cloned();
        if let Some(c) = &cluster {
            c.taking().insert(key.to_owned());
        }
        TakingOn {
            cluster,
            key: key.to_owned(),
        }
    }

    /// How long a handoff for `key` that reached this node waits before it is taken: a settle
    /// window while a turn here takes `key` on ([`Agent::taking_on`]), so that turn takes it
    /// from the table in place order with its own message; else nothing (taken now, the lane
    /// puts it in place order with what waits there).
    pub fn handoff_wait(&self, key: &str) -> std::time::Duration {
        match self.cluster() {
            Some(c) if c.taking().contains(key) => self.config().agent.settle(),
            _ => std::time::Duration::ZERO,
        }
    }

    /// Whether another live node holds `key`'s lease, so work for it is handed there (a failed
    /// lookup counts as no).
    pub async fn owned_elsewhere(&self, key: &str) -> bool {
        match self.cluster() {
            Some(cluster) => cluster.lease_elsewhere(key).await.ok().flatten().is_some(),
            None => false,
        }
    }

    /// Whether another live node runs a turn in `key` now (a failed lookup counts as no).
    pub async fn runs_elsewhere(&self, key: &str) -> bool {
        match self.cluster() {
            Some(cluster) => cluster.remote_owner(key).await.ok().flatten().is_some(),
            None => false,
        }
    }

    /// Asks the live node running a turn in `key` to stop it; false when no other node runs
    /// one (outside a cluster, always).
    pub async fn stop_remote_turn(&self, key: &str) -> Result<bool, AgentError> {
        let Some(cluster) = self.cluster() else {
            return Ok(false);
        };
        let (Some(owner), Some(bus)) = (cluster.remote_owner(key).await?, cluster.bus()) else {
            return Ok(false);
        };
        bus.signal(&owner, &Signal::Stop(key.to_owned())).await?;
        tracing::info!(workstream = key, owner = %owner, "stop sent to the owning node");
        Ok(true)
    }

    /// Hands a decision stored by another node to the turn here that waits for it. False
    /// when no turn here waits for `request_id` (it timed out, or the owner moved).
    pub async fn deliver_stored(&self, request_id: &str) -> Result<bool, AgentError> {
        if !self.live().is_waiting(request_id) {
            return Ok(false);
        }
        let Some(record) = self.store().get_approval(request_id).await? else {
            return Ok(false);
        };
        let Some(decision) = stored_decision(record) else {
            return Ok(false);
        };
        Ok(self.live().deliver(request_id, decision))
    }
}

/// The decision a click stored on another node, as the waiting turn takes it; `None` while
/// the request is undecided (or was closed without a person's decision).
fn stored_decision(record: ApprovalRecord) -> Option<Decision> {
    record.decision()
}

/// A workstream being taken on here ([`Agent::taking_on`]); dropped, it no longer is.
#[derive(Debug)]
pub struct TakingOn {
    cluster: Option<Cluster>,
    key: String,
}

impl Drop for TakingOn {
    fn drop(&mut self) {
        if let Some(c) = &self.cluster {
            c.taking().remove(&self.key);
        }
    }
}
