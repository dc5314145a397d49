//! The watch runner: every few seconds it claims the due watches of the workstreams its
//! process shows (a lease in the database, so with several nodes exactly one polls a watch),
//! polls up to `max_parallel` of them at once, records each poll, and when one fires hands its
//! message to a [`Dispatch`] that starts a turn in the workstream's thread.
//!
//! Ordering makes a fire happen at most once: the poll is recorded only while the watch is
//! still this node's, and the watch is ended (`fired`, `exhausted`, `failed`, `paused`) before
//! its message is dispatched, so a crash in between loses the message rather than repeating it
//! after the restart. A watch overdue after downtime polls once, then keeps its interval from
//! then on.
//!
//! The depth guard: when the workstream's last [`DEPTH_LIMIT`] user messages all came from
//! watches, the next firing watch is paused instead, and the thread is told.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Poll;
use super::verdict::{self, Fired, PollJudged, Verdict};
use crate::Agent;
use crate::store::watches::{WatchRecord, WatchState};
use crate::store::{Store, StoreError, now_ms};
use crate::tools::bash::{self, Ran};
use crate::tools::{NoOutput, ToolError};
use crate::workstream::KeyPattern;

/// Most watch-started turns in a row in one workstream without a person's message.
pub const DEPTH_LIMIT: usize = 5;
/// Bytes of a poll's output kept (stored, and given to the condition).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Waits between attempts to hand a fired watch to a full lane.
const DISPATCH_RETRIES: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(3),
    Duration::from_secs(10),
];

/// What a watch puts into its workstream's thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A turn: the synthetic message the model answers, and the line shown first.
    Turn {
        /// The message, as the model reads it (starts with `[watch `).
        text: String,
        /// Shown in the thread before the answer.
        shown: String,
        /// Who set the watch up (a sandpiper user id): the turn is charged to them.
        charged_to: Option<String>,
    },
    /// A notice in the thread, no turn (a failed condition, a paused watch).
    Notice(String),
}

/// Why a delivery could not be handed over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// The workstream's lane is full for now; worth another try.
    #[error("the thread's queue is full")]
    Busy,
    /// Nothing in this process shows that workstream.
    #[error("{0}")]
    Unreachable(String),
}

/// Where fired watches go: the chat platforms of this process. Implemented by the channels.
pub trait Dispatch: Send + Sync {
    /// The workstreams this process shows, whose watches it polls.
    fn keys(&self) -> Vec<KeyPattern>;
    /// Hands `delivery` to workstream `workstream`'s thread (queued in its lane).
    fn deliver(&self, workstream: &str, delivery: Delivery) -> Result<(), DispatchError>;
}

/// How the runner works.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// This node's name in claims (`claimed_by`).
    pub node: String,
    /// How often it looks for due watches.
    pub tick: Duration,
    /// Polls at once.
    pub max_parallel: usize,
    /// How long a claim holds: longer than a poll can take.
    pub lease: Duration,
}

/// Runs `poll`, one poll of `watch`; if it panics, anywhere, the watch ends as failed and its
/// thread is told, instead of the watch staying active and claimed, never polled again.
/// Whether the poll ran to its end.
pub async fn guard_poll(
    store: &Store,
    dispatch: &dyn Dispatch,
    watch: &WatchRecord,
    poll: impl Future<Output = ()>,
) -> bool {
    if AssertUnwindSafe(poll).catch_unwind().await.is_ok() {
        return true;
    }
    tracing::error!(watch = %watch.id, "a watch's poll panicked; the watch is marked failed");
    match store.finish_watch(&watch.id, WatchState::Failed).await {
        Ok(true) => {
            let notice = format!(
                "⚠️ watch `{}` stopped: an internal error ended its poll; it is marked failed \
                 and polls no more",
                watch.watch.name
            );
            if let Err(e) = dispatch.deliver(&watch.watch.workstream, Delivery::Notice(notice)) {
                tracing::warn!(watch = %watch.id, error = %e, "cannot tell the thread a watch failed");
            }
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(watch = %watch.id, error = %e, "cannot mark a panicked watch failed")
        }
    }
    false
}

/// Polls the watches of one process's workstreams until shut down.
pub struct WatchRunner {
    agent: Agent,
    dispatch: Arc<dyn Dispatch>,
    config: RunnerConfig,
}

impl std::fmt::Debug for WatchRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchRunner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WatchRunner {
    /// A runner for `agent`'s watches, delivering through `dispatch`, configured by the
    /// agent's `[watch]` section, named by the agent's cluster node (else a new name).
    pub fn new(agent: Agent, dispatch: Arc<dyn Dispatch>) -> Self {
        let watch = &agent.config().watch;
        let config = RunnerConfig {
            // The node's one id (the registry's) when it has joined a cluster.
            node: agent.cluster().map_or_else(
                || format!("node-{}", uuid::Uuid::new_v4().simple()),
                |c| c.node().to_owned(),
            ),
            tick: watch.tick,
            max_parallel: watch.max_parallel.max(1),
            lease: agent.config().tools.bash_timeout + Duration::from_secs(60),
        };
        Self::with_config(agent, dispatch, config)
    }

    /// A runner with explicit settings (tests name their nodes).
    pub fn with_config(agent: Agent, dispatch: Arc<dyn Dispatch>, config: RunnerConfig) -> Self {
        Self {
            agent,
            dispatch,
            config,
        }
    }

    /// Runs until `shutdown`: claims, polls, delivers. Running polls are stopped at shutdown
    /// and the node's claims released, so the next runner polls them at once.
    pub async fn run(self, shutdown: CancellationToken) {
        let runner = Arc::new(self);
        let mut polls = JoinSet::new();
        tracing::info!(node = %runner.config.node, "watch runner started");
        loop {
            let free = runner.config.max_parallel.saturating_sub(polls.len());
            if free > 0 {
                match runner.claim(free).await {
                    Ok(due) => {
                        for watch in due {
                            let r = runner.clone();
                            let cancel = shutdown.child_token();
                            polls.spawn(async move { r.poll_guarded(watch, cancel).await });
                        }
                    }
                    // The database is away for a moment: the next tick tries again.
                    Err(e) => tracing::warn!(error = %e, "cannot claim due watches"),
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(runner.config.tick) => {}
                Some(_) = polls.join_next(), if !polls.is_empty() => {}
            }
            while polls.try_join_next().is_some() {}
        }
        polls.shutdown().await;
        if let Err(e) = runner
            .agent
            .store()
            .release_watches(&runner.config.node)
            .await
        {
            tracing::warn!(error = %e, "cannot release this node's watches; their leases run out");
        }
        tracing::info!(node = %runner.config.node, "watch runner stopped");
    }

    async fn claim(&self, limit: usize) -> Result<Vec<WatchRecord>, StoreError> {
        let keys = self.dispatch.keys();
        let lease = i64::try_from(self.config.lease.as_millis()).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.agent
            .store()
            .claim_due_watches(&self.config.node, &keys, now_ms(), lease, limit)
            .await
    }

    /// [`WatchRunner::poll`] under [`guard_poll`].
    async fn poll_guarded(&self, watch: WatchRecord, cancel: CancellationToken) {
        let store = self.agent.store().clone();
        let copy = watch.clone();
        guard_poll(
            &store,
            self.dispatch.as_ref(),
            &copy,
            self.poll(watch, cancel),
        )
        .await;
    }

    /// One poll of a claimed watch, and what follows from it.
    async fn poll(&self, watch: WatchRecord, cancel: CancellationToken) {
        let Some(ran) = self.run_command(&watch, cancel).await else {
            return;
        };
        let polls = watch.polls + 1;
        let poll = Poll {
            output: &ran.output,
            exit_code: ran.exit.code(),
            prev_output: watch.last_output.as_deref(),
        };
        let verdict = verdict::judge_off_runtime(
            PollJudged {
                stop_on: watch.watch.stop_on.clone(),
                output: ran.output.clone(),
                exit_code: poll.exit_code,
                prev_output: watch.last_output.clone(),
                polls,
                max_polls: watch.watch.max_polls,
            },
            verdict::EVAL_TIME_CAP,
        )
        .await;
        tracing::debug!(watch = %watch.id, polls, exit_code = poll.exit_code, ?verdict, "watch polled");
        self.agent.metrics().watch_poll(match verdict {
            Verdict::Wait => "waiting",
            Verdict::Fire(_) => "fired",
            Verdict::Fail(_) => "failed",
        });
        let store = self.agent.store();
        let next = now_ms().saturating_add(watch.watch.poll_every_ms);
        match store
            .record_poll(
                &watch.id,
                &self.config.node,
                poll.output,
                poll.exit_code,
                next,
            )
            .await
        {
            Ok(true) => {}
            // Cancelled meanwhile, or its lease ran out and another node polls it now.
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(watch = %watch.id, error = %e, "cannot record a poll; it polls again when the lease runs out");
                return;
            }
        }
        let name = &watch.watch.name;
        let (state, delivery) = match verdict {
            Verdict::Wait => return,
            Verdict::Fail(error) => (
                WatchState::Failed,
                Delivery::Notice(format!(
                    "⚠️ watch `{name}` stopped: its condition failed on poll {polls}: {error}"
                )),
            ),
            Verdict::Fire(why) => self.fire(&watch, why, polls, &poll).await,
        };
        match store.finish_watch(&watch.id, state).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(watch = %watch.id, error = %e, "cannot end a watch that fired; it fires on a later poll");
                return;
            }
        }
        tracing::info!(watch = %watch.id, workstream = %watch.watch.workstream, %state, polls, "watch ended");
        self.deliver(&watch, delivery).await;
    }

    /// Runs the watch's command like bash; `None` when the runner is shutting down.
    async fn run_command(&self, watch: &WatchRecord, cancel: CancellationToken) -> Option<Ran> {
        let command = &watch.watch.command;
        // Checked at create time; checked again in case the blocklist grew since.
        if let Err(ToolError::Model(refusal)) = bash::check_command(command) {
            return Some(Ran {
                output: refusal,
                exit: bash::Exit::Abnormal,
            });
        }
        let ctx = self
            .agent
            .background_context(&watch.watch.workstream, cancel)
            .await;
        match bash::run_command(command, &ctx, &NoOutput, MAX_OUTPUT_BYTES).await {
            Ok(ran) => Some(ran),
            Err(ToolError::Cancelled) => None,
            Err(ToolError::Model(e) | ToolError::Fatal(e)) => Some(Ran {
                output: e,
                exit: bash::Exit::Abnormal,
            }),
        }
    }

    /// The state and delivery of a firing watch: a turn, or a pause when the depth guard
    /// says the workstream has had enough watch turns in a row.
    async fn fire(
        &self,
        watch: &WatchRecord,
        why: Fired,
        polls: i64,
        poll: &Poll<'_>,
    ) -> (WatchState, Delivery) {
        let limit = i64::try_from(DEPTH_LIMIT).unwrap_or(i64::MAX);
        let streak = self
            .agent
            .store()
            .watch_streak(&watch.watch.workstream, limit)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(watch = %watch.id, error = %e, "cannot count watch turns; assuming none");
                0
            });
        if streak >= DEPTH_LIMIT {
            let name = &watch.watch.name;
            return (
                WatchState::Paused,
                Delivery::Notice(format!(
                    "⏸ watch `{name}` paused: the last {DEPTH_LIMIT} turns here were started by \
                     watches, with no message from a person in between. `/watch resume {name}` \
                     lets it go on; `/watch cancel {name}` ends it."
                )),
            );
        }
        let (text, shown) = verdict::message(watch, why, polls, poll);
        let charged_to = watch.watch.created_by.clone();
        (
            why.state(),
            Delivery::Turn {
                text,
                shown,
                charged_to,
            },
        )
    }

    /// Hands `delivery` to the thread, retrying a full lane for a while.
    async fn deliver(&self, watch: &WatchRecord, delivery: Delivery) {
        let workstream = &watch.watch.workstream;
        let mut waits = DISPATCH_RETRIES.iter();
        loop {
            match self.dispatch.deliver(workstream, delivery.clone()) {
                Ok(()) => return,
                Err(DispatchError::Busy) => match waits.next() {
                    Some(wait) => tokio::time::sleep(*wait).await,
                    None => break,
                },
                Err(e @ DispatchError::Unreachable(_)) => {
                    tracing::warn!(watch = %watch.id, %workstream, error = %e, "a fired watch cannot reach its thread");
                    return;
                }
            }
        }
        tracing::warn!(watch = %watch.id, %workstream, "a fired watch found its thread's queue full; its message is dropped");
    }
}
