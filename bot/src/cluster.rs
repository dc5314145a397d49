//! This node's part in a cluster (see [`sandpiper_agent::cluster`]): it listens for the other
//! nodes' signals, renews its leases, and takes over what dead nodes left behind.
//!
//! - A **handoff** signal names work another node received for a workstream this node owns:
//!   it is taken from the database (once, whoever else looks) and started in the thread
//!   through the platform that shows it ([`Starters`]).
//! - A **decided** signal names an approval request clicked on another node: the turn here
//!   that waits for it gets the stored decision.
//! - A **stop** signal is `/stop` (or a Stop button) used on another node for a turn running
//!   here.
//! - Every third of the lease: renew every lease (one statement), take handoffs whose wake-up
//!   was lost, and adopt orphans — workstreams whose owner died with a turn running (their
//!   threads are told the turn was interrupted) or with work waiting for it.
//!
//! At a clean stop the leases are released so other nodes take over at once; a killed node's
//! leases simply run out.

use std::time::Duration;

use sandpiper_agent::Agent;
use sandpiper_agent::cluster::bus::{Heard, Listener};
use sandpiper_agent::cluster::{INTERRUPTED, RESUMED_AFTER_TAKEOVER, Signal, Takeover};
use sandpiper_channels::thread::{OutsideTurn, Starters, Work, handed_over, take_left};
use tokio_util::sync::CancellationToken;

/// Orphans adopted per heartbeat at most, so one beat stays short after a large node died.
const ADOPT_PER_BEAT: i64 = 200;

/// When a node's cluster duties wind down.
#[derive(Debug, Clone)]
pub struct Stopping {
    /// The node stops: it takes no more work (no handoffs, no orphans) but keeps its leases
    /// alive while its channels drain, so nobody else runs a turn that still runs here.
    pub shutdown: CancellationToken,
    /// The channels drained: the leases are released and the duties end.
    pub release: CancellationToken,
}

/// Runs the node's cluster duties until `stopping.release`, then releases its leases (see
/// [`Stopping`]). `listen_url` is the PostgreSQL to listen on (`None` on SQLite: one node,
/// nothing to hear).
pub async fn run(agent: Agent, starters: Starters, listen_url: Option<String>, stopping: Stopping) {
    let Some(cluster) = agent.cluster().cloned() else {
        return;
    };
    let mut listener = match listen_url {
        Some(url) => match Listener::connect(&url, cluster.node()).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::error!(node = cluster.node(), error = %e, "cannot listen for other nodes; handoffs arrive with the heartbeat only");
                None
            }
        },
        None => None,
    };
    let duties = Duties {
        agent,
        starters,
        draining: stopping.shutdown.clone(),
    };
    let mut beat = tokio::time::interval(cluster.lease() / 3);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stopping.release.cancelled() => break,
            heard = next_signal(listener.as_mut()) => match heard {
                Heard::Signal(signal) => duties.on_signal(signal).await,
                Heard::Reconnected => duties.sweep_handoffs().await,
                Heard::Garbage(payload) => {
                    tracing::warn!(payload, "a signal this node does not understand");
                }
                Heard::Failed(e) => {
                    tracing::warn!(error = %e, "listening for other nodes failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            _ = beat.tick() => duties.heartbeat().await,
        }
    }
    cluster.release().await;
}

async fn next_signal(listener: Option<&mut Listener>) -> Heard {
    match listener {
        Some(l) => l.next().await,
        None => std::future::pending().await,
    }
}

struct Duties {
    agent: Agent,
    starters: Starters,
    /// Cancelled once the node stops: it takes no new work, only keeps its leases.
    draining: CancellationToken,
}

impl Duties {
    async fn on_signal(&self, signal: Signal) {
        match signal {
            // Left in the table: whoever owns the workstream next takes it.
            Signal::Handoff(_) if self.draining.is_cancelled() => {}
            Signal::Handoff(id) => self.wake_for(id).await,
            Signal::Decided(request) => match self.agent.deliver_stored(&request).await {
                Ok(true) => tracing::info!(request, "decision from another node delivered"),
                Ok(false) => tracing::debug!(request, "no turn here waits for this decision"),
                Err(e) => tracing::warn!(request, error = %e, "could not deliver a decision"),
            },
            Signal::Stop(workstream) => {
                let stopped = self.starters.stop(&workstream);
                tracing::info!(workstream, stopped, "stop from another node");
            }
        }
    }

    /// Handoff `id` was left for this node: taken once its workstream's
    /// [`Agent::handoff_wait`](sandpiper_agent::Agent::handoff_wait) has passed.
    async fn wake_for(&self, id: i64) {
        let workstream = match self.agent.store().handoff_workstream(id).await {
            Ok(Some(workstream)) => workstream,
            Ok(None) => return, // already taken
            Err(e) => {
                // It stays in the table; the next beat sweeps it.
                tracing::warn!(handoff = id, error = %e, "could not look at a handoff");
                return;
            }
        };
        let wait = self.agent.handoff_wait(&workstream);
        tracing::debug!(
            handoff = id,
            workstream,
            wait_ms = wait.as_millis() as u64,
            "handoff signalled"
        );
        if wait.is_zero() {
            return self.take_handoff(id).await;
        }
        // Later, beside the signals and beats that come meanwhile.
        let later = Duties {
            agent: self.agent.clone(),
            starters: self.starters.clone(),
            draining: self.draining.clone(),
        };
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            later.take_handoff(id).await;
        });
    }

    /// Takes handoff `id` and starts it in its thread.
    async fn take_handoff(&self, id: i64) {
        if let Some(turn) = self.taken(id).await {
            self.start(turn);
        }
    }

    /// Handoff `id`, taken from the database; `None` when another taker was first or it
    /// cannot be read (logged).
    async fn taken(&self, id: i64) -> Option<OutsideTurn> {
        match self.agent.store().take_handoff(id).await {
            Ok(Some(h)) => handed_over(&h.workstream, &h.payload),
            Ok(None) => None, // another taker was first
            Err(e) => {
                // It stays in the table; the next beat sweeps it.
                tracing::warn!(handoff = id, error = %e, "could not take a handoff");
                None
            }
        }
    }

    /// Takes every handoff waiting for `workstream` and starts them in its thread in place
    /// order, all at once: started one by one as taken, the first could begin before a
    /// message sent ahead of it (left later, so stored after it) reached the lane.
    async fn take_left_for(&self, workstream: &str) {
        match take_left(&self.agent, workstream).await {
            Ok(works) => {
                for work in works {
                    self.start(OutsideTurn {
                        workstream: workstream.to_owned(),
                        work,
                    });
                }
            }
            // They stay in the table; a later beat sweeps them.
            Err(e) => tracing::warn!(workstream, error = %e, "could not take the work left here"),
        }
    }

    fn start(&self, turn: OutsideTurn) {
        let workstream = turn.workstream.clone();
        if let Err(e) = self.starters.start(turn) {
            tracing::warn!(workstream, error = %e, "could not start handed-over work");
        }
    }

    /// Handoffs for workstreams this node holds that no turn here took within a lease: their
    /// wake-up never came, or they were left for the next owner and no message followed. A
    /// younger one is the next turn's to take, in place order with its own message
    /// ([`sandpiper_channels::thread::run`]): taken here, it would reach the thread's lane
    /// after that turn started, out of order.
    async fn sweep_handoffs(&self) {
        if self.draining.is_cancelled() {
            return;
        }
        let Some(cluster) = self.agent.cluster() else {
            return;
        };
        let lease_ms = i64::try_from(cluster.lease().as_millis()).unwrap_or(i64::MAX);
        let left_before = sandpiper_agent::store::now_ms().saturating_sub(lease_ms);
        let held = self
            .agent
            .store()
            .handoffs_held_by(cluster.node(), left_before);
        let ids = match held.await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "could not look for waiting handoffs");
                return;
            }
        };
        // All taken before any starts, then in place order (see `take_left_for`).
        let mut turns = Vec::with_capacity(ids.len());
        for id in ids {
            turns.extend(self.taken(id).await);
        }
        turns.sort_by_key(|turn| turn.work.place());
        for turn in turns {
            self.start(turn);
        }
    }

    async fn heartbeat(&self) {
        let Some(cluster) = self.agent.cluster() else {
            return;
        };
        if let Err(e) = cluster.renew().await {
            tracing::warn!(node = cluster.node(), error = %e, "could not renew the leases");
            return;
        }
        if self.draining.is_cancelled() {
            return;
        }
        match self.agent.adopt_orphans(ADOPT_PER_BEAT).await {
            Ok(adopted) => {
                for (workstream, left) in adopted {
                    tracing::info!(workstream, left = ?left, "took over a workstream of a dead node");
                    // One lane, in order: what the dead node's turn left (the notice, then the
                    // turn goes on), then the messages left waiting for it.
                    let left: &[Work] = match left {
                        Takeover::Idle => &[],
                        Takeover::Interrupted => &[Work::Notice(INTERRUPTED.to_owned())],
                        Takeover::Resumable => &[
                            Work::Notice(RESUMED_AFTER_TAKEOVER.to_owned()),
                            Work::Resume { author: None },
                        ],
                    };
                    for work in left {
                        self.start(OutsideTurn {
                            workstream: workstream.clone(),
                            work: work.clone(),
                        });
                    }
                    // Taken at once, they reach the lane before a message sent after them can.
                    self.take_left_for(&workstream).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not adopt orphaned workstreams"),
        }
        self.sweep_handoffs().await;
    }
}
