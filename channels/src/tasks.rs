//! The background tasks of a running channel, tracked so shutdown can wait for them.
//!
//! Every task a channel starts (turn lanes, stream renderers, notices, card updates, its
//! gateway connection) and every platform callback it runs (serenity's per-event tasks) goes
//! through one [`Tasks`]. Stopping has two steps. At shutdown the channel stops listening
//! and housekeeping ([`Tasks::spawn`]) is dropped, but turns and what shows them
//! ([`Tasks::spawn_turn`]) go on, so a restart does not cut a turn off in the middle; the
//! drain ([`crate::thread::drain`]) waits for them up to a deadline, then halts
//! ([`Tasks::halt`]) what is left where it is, as a process exit would: a turn waiting for
//! approval keeps its stored requests and a click after the restart resumes it.
//! [`Tasks::drain`] then waits for what is still finishing (closing the gateway, a click
//! being answered), and says how many tasks it left behind, so `serve` exits on time and
//! says why it did not wait longer.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TrackedFuture;

/// A channel's tracked tasks and the shutdown signal that stops them. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Tasks {
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Cancelled when the drain gives up on the turns still running (or at once, for a
    /// node that stops as a killed one would).
    halt: CancellationToken,
}

/// What a drain left running when its deadline passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use = "tasks left running should be logged"]
pub struct Drained {
    /// Tasks still running at the deadline (dropped when the process exits).
    pub left: usize,
}

impl Tasks {
    /// Tasks that stop when `shutdown` is cancelled.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self {
            tracker: TaskTracker::new(),
            shutdown,
            halt: CancellationToken::new(),
        }
    }

    /// The shutdown signal these tasks obey.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Runs `fut` in the background until it ends or shutdown begins, whichever is first;
    /// at shutdown it is dropped where it is (turns stay resumable from the store).
    pub fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        let shutdown = self.shutdown.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = fut => {}
                () = shutdown.cancelled() => {}
            }
        })
    }

    /// Runs a turn's work (its lane, its renderer), or the handling of a delivery the platform
    /// was told was received, in the background until it ends or the drain halts it
    /// ([`Tasks::halt`]): shutdown alone lets it finish.
    pub fn spawn_turn(&self, fut: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        let halt = self.halt.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = fut => {}
                () = halt.cancelled() => {}
            }
        })
    }

    /// Drops every turn still running where it is ([`Tasks::spawn_turn`]).
    pub fn halt(&self) {
        self.halt.cancel();
    }

    /// Cancelled once the turns still running are dropped.
    pub fn halted(&self) -> &CancellationToken {
        &self.halt
    }

    /// Runs `fut` in the background to its end, shutdown or not: for work that itself reacts
    /// to shutdown and must finish cleanly (closing the gateway connection). Drained like the
    /// rest, so it is bounded by the drain deadline.
    pub fn spawn_to_end<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> JoinHandle<T> {
        self.tracker.spawn(fut)
    }

    /// Counts `fut` among the running tasks while it runs in a task someone else spawned
    /// (serenity runs each gateway event in a task of its own).
    pub fn track<F: Future>(&self, fut: F) -> TrackedFuture<F> {
        self.tracker.track_future(fut)
    }

    /// How many tasks run now.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Waits until every task has ended or `grace` has passed since the call, whichever is
    /// first. Call it after shutdown began; tasks started later are waited for too.
    pub async fn drain(&self, grace: Duration) -> Drained {
        self.tracker.close();
        match tokio::time::timeout(grace, self.tracker.wait()).await {
            Ok(()) => Drained::default(),
            Err(_) => Drained {
                left: self.tracker.len(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn shutdown_drops_spawned_work_and_the_drain_waits_for_what_finishes() {
        let shutdown = CancellationToken::new();
        let tasks = Tasks::new(shutdown.clone());
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _told_when_dropped = dropped_tx;
            std::future::pending::<()>().await;
        });
        let finisher = tasks.spawn_to_end(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            7
        });
        let tracked = tasks.track(tokio::time::sleep(Duration::from_millis(30)));
        let handler = tokio::spawn(tracked);
        assert_eq!(tasks.running(), 3);
        shutdown.cancel();
        assert!(dropped_rx.await.is_err(), "the spawned work was dropped");
        assert_eq!(
            tasks.drain(Duration::from_secs(5)).await,
            Drained { left: 0 }
        );
        assert_eq!(finisher.await.unwrap(), 7);
        handler.await.unwrap();
    }

    #[tokio::test]
    async fn turns_outlive_shutdown_until_they_are_halted() {
        let shutdown = CancellationToken::new();
        let tasks = Tasks::new(shutdown.clone());
        let (finished_tx, finished_rx) = tokio::sync::oneshot::channel();
        tasks.spawn_turn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let _ = finished_tx.send(());
        });
        let (halted_tx, halted_rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn_turn(async move {
            let _told_when_dropped = halted_tx;
            std::future::pending::<()>().await;
        });
        shutdown.cancel();
        finished_rx.await.expect("a turn finishes after shutdown");
        assert_eq!(tasks.running(), 1, "the stuck turn still runs");
        tasks.halt();
        assert!(halted_rx.await.is_err(), "halting dropped it");
        assert_eq!(
            tasks.drain(Duration::from_secs(5)).await,
            Drained { left: 0 }
        );
    }

    #[tokio::test]
    async fn the_drain_gives_up_at_its_deadline_and_counts_what_is_left() {
        let shutdown = CancellationToken::new();
        let tasks = Tasks::new(shutdown.clone());
        let stuck = tasks.spawn_to_end(std::future::pending::<()>());
        shutdown.cancel();
        let started = tokio::time::Instant::now();
        assert_eq!(
            tasks.drain(Duration::from_millis(100)).await,
            Drained { left: 1 }
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        stuck.abort();
    }
}
