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
use sandpiper_channels::thread::{OutsideTurn, Starters, Work};
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
            Signal::Handoff(id) => self.take_handoff(id).await,
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

    /// Takes handoff `id` and starts it in its thread.
    async fn take_handoff(&self, id: i64) {
        let handoff = match self.agent.store().take_handoff(id).await {
            Ok(Some(h)) => h,
            Ok(None) => return, // another taker was first
            Err(e) => {
                // It stays in the table; the next beat sweeps it.
                tracing::warn!(handoff = id, error = %e, "could not take a handoff");
                return;
            }
        };
        match serde_json::from_str::<OutsideTurn>(&handoff.payload) {
            Ok(turn) if turn.workstream == handoff.workstream => self.start(turn),
            Ok(_) | Err(_) => tracing::error!(
                handoff = id,
                workstream = %handoff.workstream,
                "a handoff this node cannot read; dropped"
            ),
        }
    }

    fn start(&self, turn: OutsideTurn) {
        let workstream = turn.workstream.clone();
        if let Err(e) = self.starters.start(turn) {
            tracing::warn!(workstream, error = %e, "could not start handed-over work");
        }
    }

    /// Handoffs for workstreams this node holds whose wake-up never came.
    async fn sweep_handoffs(&self) {
        if self.draining.is_cancelled() {
            return;
        }
        let Some(cluster) = self.agent.cluster() else {
            return;
        };
        match self.agent.store().handoffs_held_by(cluster.node()).await {
            Ok(ids) => {
                for id in ids {
                    self.take_handoff(id).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not look for waiting handoffs"),
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
                    let work = match left {
                        Takeover::Idle => continue,
                        Takeover::Interrupted => Work::Notice(INTERRUPTED.to_owned()),
                        Takeover::Resumable => {
                            // One lane, in order: the notice, then the turn goes on.
                            self.start(OutsideTurn {
                                workstream: workstream.clone(),
                                work: Work::Notice(RESUMED_AFTER_TAKEOVER.to_owned()),
                            });
                            Work::Resume { author: None }
                        }
                    };
                    self.start(OutsideTurn { workstream, work });
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not adopt orphaned workstreams"),
        }
        self.sweep_handoffs().await;
    }
}
