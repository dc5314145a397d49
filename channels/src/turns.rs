//! One lane per workstream: messages that arrive while a turn runs wait their turn (never
//! dropped, never run in parallel in one workstream), and `/stop` cancels the running turn.
//!
//! Shutdown is not `/stop`: a stopped turn records that it was stopped, while at shutdown a
//! running turn goes on until it ends or the drain halts it (see [`crate::thread::drain`]);
//! one halted while it waits for approval stays pending in the store and a click after the
//! restart resumes it. Work waiting in a lane, or arriving once shutdown began, never starts
//! here: it was submitted with what to hand over ([`TurnQueue::submit_handing_over`]), and
//! [`TurnQueue::take_waiting`] gives that back so the next owner of the workstream runs it.
//!
//! A lane keeps the order people sent their messages in, not the order they reached this
//! node: each message carries its place in the thread (the platform's own order, see
//! [`crate::thread::Work::place`]), waiting work is taken lowest place first, and no job
//! starts before a short settle window since it arrived has passed (an idle lane's first job,
//! and one that arrived just as the turn before it ended alike), so messages sent together
//! are taken together. One that comes after a later one already started is still run, marked
//! late ([`Start::late`]), so the thread can say so.
//!
//! Places are one ordering space for every way in ([`Place`]): the time the message was sent,
//! in microseconds since the Unix epoch, by the platform's clock when it has one (Slack's
//! `ts`, the time in a Discord snowflake), else by the clock of the node that received it
//! ([`Place::now`]). The settle window counts from that time ([`settle_left`]), so a message
//! that was a moment on its way waits only what remains of it; one that came after the
//! window had passed waits the whole window from its arrival, for what was held up with it.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::tasks::Tasks;

/// Most jobs that may wait in one workstream; beyond it a message is refused (with a reply),
/// so a flood cannot grow memory without bound.
pub const MAX_QUEUED: usize = 32;

/// A unit of work run in a workstream's lane.
pub type Job = Box<dyn FnOnce(Start) -> BoxFuture<'static, ()> + Send>;

/// What a job is given when its lane starts it.
#[derive(Debug, Clone)]
pub struct Start {
    /// The turn's cancellation token (`/stop`).
    pub cancel: CancellationToken,
    /// It has a place before a job this lane already started: it arrived late.
    pub late: bool,
}

/// A message's place in its thread: when it was sent, in microseconds since the Unix epoch.
/// Slack's `ts` is exactly that; a Discord snowflake carries milliseconds, and the place
/// keeps its increment below them so two messages of one millisecond stay in order; a
/// message without a platform order (the console, the page) takes the receiving node's
/// clock ([`Place::now`]). Serialized as the bare number (handoffs carry it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Place(pub u64);

/// The Discord epoch (2015-01-01) in Unix milliseconds, the base of every snowflake.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

impl Place {
    /// A place for a message received now without a platform order (typed on the console or
    /// the page): this node's clock, in the same space as the platforms' places, so it sorts
    /// among a thread's messages by when it was written (as far as the clocks agree).
    pub fn now() -> Self {
        Self::at(SystemTime::now())
    }

    /// The place of a message sent at `time`.
    pub fn at(time: SystemTime) -> Self {
        let micros = time
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        Self(u64::try_from(micros).unwrap_or(u64::MAX))
    }

    /// A Slack message's place from its `ts` (`<seconds>.<microseconds>`, Slack's own order
    /// within a channel); `None` when it is not in that form.
    pub fn from_slack_ts(ts: &str) -> Option<Self> {
        let (secs, micros) = ts.split_once('.')?;
        if micros.len() != 6 || !micros.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let secs: u64 = secs.parse().ok()?;
        let micros: u64 = micros.parse().ok()?;
        secs.checked_mul(1_000_000)?.checked_add(micros).map(Self)
    }

    /// A Discord message's place from its snowflake id: the milliseconds in its top bits, and
    /// its increment (the low 12 bits, capped below a millisecond) to order messages of one
    /// millisecond.
    pub fn from_snowflake(id: u64) -> Self {
        let millis = (id >> 22) + DISCORD_EPOCH_MS;
        let increment = (id & 0xfff).min(999);
        Self(millis.saturating_mul(1000).saturating_add(increment))
    }

    /// When the message was sent, by the clock that placed it.
    pub fn sent(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.0)
    }
}

/// How long a quiet lane still waits, at `now`, before it starts work at `place`, with a
/// settle window of `settle`: what remains of the window since the message was sent, when it
/// arrived within it (a message sent with it was sent no later, so it arrives within the
/// window too, or is late anyway). The whole window, counted from now, when it arrived after
/// the window had passed (a connection that delivered late, a replay after a reconnect, work
/// handed over or left by another node): what was sent with it was held up with it and comes
/// along in a moment, so the window counts from its arrival. The same when the send time is
/// ahead of this node's clock. Nothing for work no person sent (no place), which has no
/// message to wait for.
/// The one rule of the settle window.
pub fn settle_left(settle: Duration, place: Option<Place>, now: SystemTime) -> Duration {
    let Some(place) = place else {
        return Duration::ZERO;
    };
    match now.duration_since(place.sent()) {
        Ok(age) if age < settle => settle - age,
        Ok(_) | Err(_) => settle,
    }
}

/// How long a turn runs, or a message waits in its lane, before the thread is shown so (the
/// working indicator; the "queued" notice). An answer that comes sooner is its own signal:
/// showing one anyway costs Web API calls (Slack's reaction is two) for a flicker nobody
/// reads. Every platform follows this one rule.
pub const SHOW_PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// A platform's lanes over `tasks`: quiet threads settle for `[agent] settle_ms` unless
/// another live node runs them (work for those passes on at once, so it reaches the owner
/// within the owner's window). A thread nobody runs settles too: this node is about to, and
/// what reached it together (two events of one connection are handled side by side) is put
/// in order first.
pub fn settling(agent: &sandpiper_agent::Agent, tasks: Tasks) -> TurnQueue {
    let here = agent.clone();
    TurnQueue::new(tasks)
        .settling(agent.config().agent.settle())
        .settling_where(move |key| {
            let (agent, key) = (here.clone(), key.to_owned());
            Box::pin(async move { agent.holds_here(&key) || !agent.owned_elsewhere(&key).await })
        })
}

/// Whether a workstream's quiet lane settles ([`TurnQueue::settling_where`]).
type Settles = Arc<dyn Fn(&str) -> BoxFuture<'static, bool> + Send + Sync>;

/// Runs `work`, and `show` beside it once `work` has run for [`SHOW_PROGRESS_AFTER`]; once
/// both are done, what `work` and `show` gave (`None`: `work` was done sooner and nothing
/// was shown). `show` always runs to its end, so what it put up can be taken down.
pub async fn showing_progress<W, T>(
    work: impl Future<Output = W>,
    show: impl Future<Output = T>,
) -> (W, Option<T>) {
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => return (done, None),
        () = tokio::time::sleep(SHOW_PROGRESS_AFTER) => {}
    }
    let (shown, done) = tokio::join!(show, work);
    (done, Some(shown))
}

/// When a submitted job starts, for a notice worth sending only while it still waits.
#[derive(Debug)]
struct Started(oneshot::Receiver<()>);

impl Started {
    /// Wraps `job` so that the returned [`Started`] learns when it begins.
    fn watch(job: Job) -> (Job, Started) {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |start| {
            let _ = tx.send(());
            job(start)
        });
        (job, Started(rx))
    }

    /// Whether the job is still waiting [`SHOW_PROGRESS_AFTER`] from now. A job that will
    /// never start here (handed over at shutdown) is not waiting here.
    async fn still_waiting(self) -> bool {
        tokio::time::timeout(SHOW_PROGRESS_AFTER, self.0)
            .await
            .is_err()
    }
}

/// Where a submitted job landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// It starts now.
    Now,
    /// It waits behind this many jobs (the running one included).
    Behind(usize),
}

/// The queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{MAX_QUEUED} messages are already waiting in this thread; try again when it is done")]
pub struct QueueFull;

#[derive(Default)]
struct Lane {
    /// Lowest place first; work without a place keeps its arrival order.
    waiting: VecDeque<Waiting>,
    running: Option<CancellationToken>,
    /// Nothing runs: the lane waits out the settle window of its next job, holding the token
    /// that job starts with (a `/stop` meanwhile already counts).
    settling: bool,
    /// The highest place a job of this lane started with.
    started: Option<Place>,
}

impl Lane {
    /// Puts `waiting` before the first waiting job with a later place (after every one
    /// otherwise, and always last when it has no place). Where it went.
    fn wait(&mut self, waiting: Waiting) -> usize {
        let at = waiting.place.and_then(|place| {
            self.waiting
                .iter()
                .position(|w| w.place.is_some_and(|p| p > place))
        });
        match at {
            Some(at) => {
                self.waiting.insert(at, waiting);
                at
            }
            None => {
                self.waiting.push_back(waiting);
                self.waiting.len() - 1
            }
        }
    }

    /// The next job to run and how it starts, or when it is due if the lane is `patient` and
    /// that is after `now` (the lane settles until then: a message sent before it may still
    /// be on its way, and whatever comes meanwhile is taken in place order).
    fn next(&mut self, now: Instant, patient: bool) -> Option<Next> {
        let due = self.waiting.front()?.due;
        if patient && due > now {
            if !self.settling {
                self.settling = true;
                self.running = Some(CancellationToken::new());
            }
            return Some(Next::Due(due));
        }
        let next = self.waiting.pop_front()?;
        let late = next
            .place
            .is_some_and(|p| self.started.is_some_and(|s| p < s));
        if let Some(place) = next.place {
            self.started = Some(self.started.map_or(place, |s| s.max(place)));
        }
        let cancel = match (std::mem::take(&mut self.settling), &self.running) {
            (true, Some(held)) => held.clone(),
            _ => CancellationToken::new(),
        };
        self.running = Some(cancel.clone());
        Some(Next::Run(next.job, Start { cancel, late }))
    }
}

/// What a lane does next.
enum Next {
    Run(Job, Start),
    /// Settle until then, and ask again.
    Due(Instant),
}

/// A job that waits, its place in the thread, when it may start ([`settle_left`] from its
/// arrival), and what to hand the next owner if this node stops first.
struct Waiting {
    job: Job,
    place: Option<Place>,
    due: Instant,
    handover: Option<String>,
}

/// Per-workstream lanes. Cheap to clone.
#[derive(Clone)]
pub struct TurnQueue {
    lanes: Arc<Mutex<HashMap<String, Lane>>>,
    tasks: Tasks,
    settle: Duration,
    settles: Settles,
}

impl std::fmt::Debug for TurnQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnQueue").finish_non_exhaustive()
    }
}

impl TurnQueue {
    /// Lanes run as `tasks` (starting at once; see [`TurnQueue::settling`]): their running turns are dropped (not cancelled) when those
    /// tasks' shutdown begins, and the drain counts them.
    pub fn new(tasks: Tasks) -> Self {
        Self {
            lanes: Arc::default(),
            tasks,
            settle: Duration::ZERO,
            settles: Arc::new(|_: &str| Box::pin(async { true })),
        }
    }

    /// An idle lane waits what remains of `settle` since its first job's message was sent
    /// ([`settle_left`]) before it starts it, so a message sent with it but delivered a moment
    /// later (another connection, another node) is taken in its place.
    pub fn settling(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Only lanes whose workstream `settles` settle: asked once the lane's first job is in,
    /// within its window (a lane on a node that hands its work to the owner passes it on at
    /// once, so the owner's window still covers it).
    pub fn settling_where(
        mut self,
        settles: impl Fn(&str) -> BoxFuture<'static, bool> + Send + Sync + 'static,
    ) -> Self {
        self.settles = Arc::new(settles);
        self
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lane>> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `job` in `key`'s lane after the jobs already there.
    pub fn submit(&self, key: &str, job: Job) -> Result<Queued, QueueFull> {
        self.submit_handing_over(key, job, None, None)
    }

    /// [`TurnQueue::submit`] at `place` in the thread, with `handover`: what the job does, as
    /// a durable handoff, for the node that owns the workstream next if this one stops before
    /// the job runs.
    pub fn submit_handing_over(
        &self,
        key: &str,
        job: Job,
        place: Option<Place>,
        handover: Option<String>,
    ) -> Result<Queued, QueueFull> {
        let mut lanes = self.lanes();
        let lane = lanes.entry(key.to_owned()).or_default();
        if self.tasks.shutdown().is_cancelled() {
            // Stopping: nothing new starts here. Work with a handover waits for
            // `take_waiting`; work without one (a card's Resume) is the next owner's to redo.
            if let Some(handover) = handover {
                lane.wait(Waiting {
                    job,
                    place,
                    due: Instant::now(),
                    handover: Some(handover),
                });
                return Ok(Queued::Behind(lane.waiting.len()));
            }
            tracing::info!(workstream = key, "work refused: this node is stopping");
            return Ok(Queued::Behind(lane.waiting.len()));
        }
        let idle = lane.running.is_none() && lane.waiting.is_empty();
        // The job a settling lane is about to start does not wait.
        if !idle && lane.waiting.len() - usize::from(lane.settling) >= MAX_QUEUED {
            return Err(QueueFull);
        }
        let due = Instant::now() + settle_left(self.settle, place, SystemTime::now());
        let at = lane.wait(Waiting {
            job,
            place,
            due,
            handover,
        });
        tracing::debug!(
            workstream = key,
            place = place.map(|p| p.0),
            idle,
            at,
            "work queued"
        );
        if !idle {
            // Behind the jobs before it, and the one running unless the lane still settles.
            let ahead = at + usize::from(!lane.settling);
            return Ok(if ahead == 0 {
                Queued::Now
            } else {
                Queued::Behind(ahead)
            });
        }
        // Held as running while it settles, so what comes meanwhile waits in place order.
        lane.running = Some(CancellationToken::new());
        lane.settling = true;
        drop(lanes);
        self.spawn_worker(key.to_owned());
        Ok(Queued::Now)
    }

    /// [`TurnQueue::submit_handing_over`], and the sender is told what became of the job:
    /// `tell` runs (as a task of this queue) with `Ok(ahead)` when the job is still waiting
    /// after [`SHOW_PROGRESS_AFTER`], or at once with the refusal when the lane is full. A job
    /// that starts within the grace, or now, tells nothing.
    pub fn submit_telling<F, Fut>(
        &self,
        key: &str,
        job: Job,
        place: Option<Place>,
        handover: Option<String>,
        tell: F,
    ) -> Result<Queued, QueueFull>
    where
        F: FnOnce(Result<usize, QueueFull>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (job, started) = Started::watch(job);
        let queued = self.submit_handing_over(key, job, place, handover);
        let (held, started) = match queued {
            Ok(Queued::Now) => return queued,
            Ok(Queued::Behind(ahead)) => (Ok(ahead), Some(started)),
            Err(full) => (Err(full), None),
        };
        self.tasks.spawn(async move {
            if let Some(started) = started
                && !started.still_waiting().await
            {
                return;
            }
            tell(held).await;
        });
        queued
    }

    /// At shutdown: takes every waiting job out of its lane (none of them will run here) and
    /// returns, in each lane's order, `(workstream, handover)` for those that have one.
    pub fn take_waiting(&self) -> Vec<(String, String)> {
        let mut lanes = self.lanes();
        let mut out = Vec::new();
        for (key, lane) in lanes.iter_mut() {
            for waiting in lane.waiting.drain(..) {
                if let Some(handover) = waiting.handover {
                    out.push((key.clone(), handover));
                }
            }
        }
        out
    }

    /// Runs `key`'s lane: each job once it is due ([`settle_left`] from its arrival) when the
    /// workstream settles here (asked once, when a job is first due later), else at once.
    fn spawn_worker(&self, key: String) {
        let this = self.clone();
        // A running job outlives shutdown until the drain halts it (`Tasks::spawn_turn`);
        // then the worker is dropped with the job it runs.
        self.tasks.spawn_turn(async move {
            let mut patient = None;
            while let Some(next) = this.next(&key, patient != Some(false)) {
                match next {
                    Next::Due(until) => {
                        if patient.is_none() {
                            patient = Some((this.settles)(&key).await);
                        }
                        if patient == Some(true) {
                            tokio::time::sleep_until(until).await;
                        }
                    }
                    Next::Run(job, start) => {
                        tracing::debug!(workstream = %key, late = start.late, "lane starts a job");
                        if start.late {
                            tracing::info!(workstream = %key, "a message arrived after a later one started");
                        }
                        job(start).await;
                    }
                }
            }
        });
    }

    /// What `key`'s lane does next (see [`Lane::next`]), or `None` when the lane is done (it
    /// is then removed) or this node is stopping (what waits is handed to the next owner by
    /// `take_waiting`).
    fn next(&self, key: &str, patient: bool) -> Option<Next> {
        let mut lanes = self.lanes();
        let lane = lanes.get_mut(key)?;
        if self.tasks.shutdown().is_cancelled() {
            lane.running = None;
            return None;
        }
        if let Some(next) = lane.next(Instant::now(), patient) {
            return Some(next);
        }
        lanes.remove(key);
        // A burst of busy threads leaves the table sized for the peak.
        if lanes.capacity() > 4 * lanes.len().max(64) {
            lanes.shrink_to_fit();
        }
        None
    }

    /// Cancels the running turn of `key` (waiting messages still run). False when idle.
    pub fn stop(&self, key: &str) -> bool {
        match self.lanes().get(key).and_then(|l| l.running.as_ref()) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The workstreams a turn runs in now.
    pub fn running(&self) -> Vec<String> {
        self.lanes()
            .iter()
            .filter(|(_, lane)| lane.running.is_some())
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Whether a turn runs in `key`.
    pub fn is_busy(&self, key: &str) -> bool {
        self.lanes().get(key).is_some_and(|l| l.running.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;

    fn job(log: mpsc::UnboundedSender<String>, name: &'static str, ms: u64) -> Job {
        Box::new(move |start: Start| {
            let cancel = start.cancel;
            Box::pin(async move {
                let late = if start.late { " late" } else { "" };
                let _ = log.send(format!("start {name}{late}"));
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {
                        let _ = log.send(format!("end {name}"));
                    }
                    () = cancel.cancelled() => {
                        let _ = log.send(format!("cancelled {name}"));
                    }
                }
            })
        })
    }

    #[tokio::test]
    async fn at_shutdown_waiting_work_is_given_back_in_order_and_never_runs_here() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        q.submit("w", job(tx.clone(), "running", 10_000)).unwrap();
        assert_eq!(rx.recv().await.unwrap(), "start running");
        q.submit_handing_over("w", job(tx.clone(), "a", 1), None, Some("first".into()))
            .unwrap();
        q.submit("w", job(tx.clone(), "b", 1)).unwrap();
        q.submit_handing_over("w", job(tx.clone(), "c", 1), None, Some("second".into()))
            .unwrap();
        assert_eq!(
            q.take_waiting(),
            [
                ("w".to_owned(), "first".to_owned()),
                ("w".to_owned(), "second".to_owned())
            ]
        );
        assert!(q.take_waiting().is_empty(), "given back once");
        q.stop("w");
        assert_eq!(rx.recv().await.unwrap(), "cancelled running");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err(), "the taken jobs never ran here");
    }

    #[tokio::test]
    async fn after_shutdown_the_running_job_finishes_and_nothing_new_starts() {
        let shutdown = CancellationToken::new();
        let q = TurnQueue::new(Tasks::new(shutdown.clone()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        q.submit("w", job(tx.clone(), "running", 50)).unwrap();
        assert_eq!(rx.recv().await.unwrap(), "start running");
        q.submit_handing_over(
            "w",
            job(tx.clone(), "queued", 1),
            None,
            Some("queued".into()),
        )
        .unwrap();
        shutdown.cancel();
        assert_eq!(q.running(), ["w".to_owned()]);
        q.submit_handing_over("new", job(tx.clone(), "late", 1), None, Some("late".into()))
            .unwrap();
        q.submit("new", job(tx.clone(), "unsaved", 1)).unwrap();
        assert_eq!(
            rx.recv().await.unwrap(),
            "end running",
            "not cut off by shutdown"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err(), "nothing else started here");
        assert!(q.running().is_empty());
        let mut left = q.take_waiting();
        left.sort();
        assert_eq!(
            left,
            [
                ("new".to_owned(), "late".to_owned()),
                ("w".to_owned(), "queued".to_owned())
            ]
        );
    }

    #[tokio::test]
    async fn jobs_in_one_lane_run_in_order_and_stop_cancels_only_the_running_one() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        assert_eq!(q.submit("w", job(tx.clone(), "a", 10_000)), Ok(Queued::Now));
        assert_eq!(
            q.submit("w", job(tx.clone(), "b", 10)),
            Ok(Queued::Behind(1))
        );
        assert_eq!(q.submit("other", job(tx.clone(), "c", 10)), Ok(Queued::Now));
        let mut seen = Vec::new();
        while seen.len() < 3 {
            seen.push(rx.recv().await.unwrap());
        }
        assert!(seen.contains(&"start a".to_owned()) && seen.contains(&"end c".to_owned()));
        assert!(q.is_busy("w"));
        assert!(q.stop("w"));
        assert_eq!(rx.recv().await.unwrap(), "cancelled a");
        assert_eq!(rx.recv().await.unwrap(), "start b");
        assert_eq!(rx.recv().await.unwrap(), "end b");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!q.is_busy("w"));
        assert!(!q.stop("w"));
    }

    #[tokio::test]
    async fn a_queued_job_is_waiting_only_when_it_has_not_started_within_the_grace() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let long = SHOW_PROGRESS_AFTER.as_millis() as u64 * 2;
        q.submit("slow", job(tx.clone(), "long", long)).unwrap();
        q.submit("quick", job(tx.clone(), "short", 10)).unwrap();
        let (behind_long, long_wait) = Started::watch(job(tx.clone(), "after long", 1));
        let (behind_short, short_wait) = Started::watch(job(tx.clone(), "after short", 1));
        assert_eq!(q.submit("slow", behind_long), Ok(Queued::Behind(1)));
        assert_eq!(q.submit("quick", behind_short), Ok(Queued::Behind(1)));
        let (long_waits, short_waits) =
            tokio::join!(long_wait.still_waiting(), short_wait.still_waiting());
        assert!(long_waits, "behind a long turn: worth telling");
        assert!(!short_waits, "started within the grace: nothing to tell");
        let mut seen = Vec::new();
        while seen.len() < 8 {
            seen.push(rx.recv().await.unwrap());
        }
        assert_eq!(seen.last().map(String::as_str), Some("end after long"));
    }

    #[tokio::test]
    async fn progress_is_shown_only_for_work_that_outlasts_the_grace() {
        let quick = showing_progress(tokio::time::sleep(Duration::from_millis(10)), async {
            "shown"
        });
        assert_eq!(quick.await, ((), None));
        let slow = showing_progress(tokio::time::sleep(SHOW_PROGRESS_AFTER * 2), async {
            "shown"
        });
        assert_eq!(slow.await, ((), Some("shown")));
    }

    /// The lines of `rx` until `n` came.
    async fn seen(rx: &mut mpsc::UnboundedReceiver<String>, n: usize) -> Vec<String> {
        let mut seen = Vec::new();
        while seen.len() < n {
            seen.push(rx.recv().await.unwrap());
        }
        seen
    }

    /// What `jobs` log when they run one after another, in this order.
    fn one_by_one(jobs: &[&str]) -> Vec<String> {
        jobs.iter()
            .flat_map(|name| [format!("start {name}"), format!("end {name}")])
            .collect()
    }

    #[tokio::test]
    async fn a_burst_delivered_in_reverse_is_taken_in_place_order() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()))
            .settling(Duration::from_millis(40));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let placed = |name, place| (job(tx.clone(), name, 1), Some(Place(place)));
        for (name, place) in [("third", 30), ("first", 10), ("second", 20)] {
            let (job, place) = placed(name, place);
            q.submit_handing_over("w", job, place, None).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            seen(&mut rx, 6).await,
            one_by_one(&["first", "second", "third"])
        );
    }

    #[tokio::test]
    async fn waiting_work_is_taken_by_place_and_unplaced_work_keeps_its_arrival() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        q.submit_handing_over(
            "w",
            job(tx.clone(), "running", 10_000),
            Some(Place(1)),
            None,
        )
        .unwrap();
        assert_eq!(rx.recv().await.unwrap(), "start running");
        let submit =
            |name, place| q.submit_handing_over("w", job(tx.clone(), name, 1), place, None);
        assert_eq!(submit("at 5", Some(Place(5))), Ok(Queued::Behind(1)));
        assert_eq!(submit("notice", None), Ok(Queued::Behind(2)));
        assert_eq!(submit("at 3", Some(Place(3))), Ok(Queued::Behind(1)));
        q.stop("w");
        assert_eq!(
            seen(&mut rx, 7).await,
            [
                "cancelled running",
                "start at 3",
                "end at 3",
                "start at 5",
                "end at 5",
                "start notice",
                "end notice"
            ]
        );
    }

    #[tokio::test]
    async fn work_placed_before_one_already_started_runs_next_marked_late() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        q.submit_handing_over("w", job(tx.clone(), "second", 100), Some(Place(20)), None)
            .unwrap();
        assert_eq!(rx.recv().await.unwrap(), "start second");
        q.submit_handing_over("w", job(tx.clone(), "third", 1), Some(Place(30)), None)
            .unwrap();
        q.submit_handing_over("w", job(tx.clone(), "first", 1), Some(Place(10)), None)
            .unwrap();
        assert_eq!(
            seen(&mut rx, 5).await,
            [
                "end second",
                "start first late",
                "end first",
                "start third",
                "end third"
            ]
        );
    }

    /// The owner of a thread ran a turn; a message reached it straight as that turn ended,
    /// while the one sent before it was still being handed over by another node.
    #[tokio::test(start_paused = true)]
    async fn work_that_arrives_as_the_turn_before_it_ends_still_waits_its_window() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()))
            .settling(Duration::from_millis(100));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let submit = |name, place, ms| {
            q.submit_handing_over("w", job(tx.clone(), name, ms), Some(Place(place)), None)
        };
        submit("first", 10, 200).unwrap();
        tokio::time::sleep(Duration::from_millis(290)).await;
        assert_eq!(submit("third", 30, 1), Ok(Queued::Behind(1)));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(
            submit("second", 20, 1),
            Ok(Queued::Now),
            "nothing runs while the lane waits out third's window: second is next"
        );
        assert_eq!(
            seen(&mut rx, 6).await,
            one_by_one(&["first", "second", "third"])
        );
    }

    #[tokio::test]
    async fn a_lane_that_does_not_settle_starts_at_once() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()))
            .settling(Duration::from_secs(60))
            .settling_where(|key| {
                let here = key != "elsewhere";
                Box::pin(async move { here })
            });
        let (tx, mut rx) = mpsc::unbounded_channel();
        q.submit("elsewhere", job(tx.clone(), "handed on", 1))
            .unwrap();
        let started = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(started.ok().flatten().as_deref(), Some("start handed on"));
    }

    #[tokio::test]
    async fn stop_while_the_lane_settles_cancels_its_first_job() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()))
            .settling(Duration::from_millis(50));
        let (tx, mut rx) = mpsc::unbounded_channel();
        assert_eq!(q.submit("w", job(tx.clone(), "a", 10_000)), Ok(Queued::Now));
        assert!(q.is_busy("w"), "settling counts as busy");
        assert!(q.stop("w"));
        assert_eq!(seen(&mut rx, 2).await, ["start a", "cancelled a"]);
    }

    #[tokio::test]
    async fn a_full_lane_refuses() {
        let q = TurnQueue::new(Tasks::new(CancellationToken::new()));
        let (tx, _rx) = mpsc::unbounded_channel();
        q.submit("w", job(tx.clone(), "run", 10_000)).unwrap();
        for _ in 0..MAX_QUEUED {
            q.submit("w", job(tx.clone(), "wait", 1)).unwrap();
        }
        assert_eq!(q.submit("w", job(tx, "one too many", 1)), Err(QueueFull));
    }

    #[test]
    fn a_quiet_lane_waits_what_remains_of_the_window_or_all_of_it_for_a_late_message() {
        let settle = Duration::from_millis(40);
        // A whole microsecond, as places are.
        let now = Place::now().sent();
        let sent = |ago_ms: u64| Some(Place::at(now - Duration::from_millis(ago_ms)));
        assert_eq!(settle_left(settle, sent(0), now), settle);
        assert_eq!(
            settle_left(settle, sent(15), now),
            Duration::from_millis(25)
        );
        assert_eq!(settle_left(settle, sent(39), now), Duration::from_millis(1));
        assert_eq!(
            settle_left(settle, sent(900), now),
            settle,
            "arrived late: what was sent with it comes along, counted from now"
        );
        assert_eq!(
            settle_left(settle, None, now),
            Duration::ZERO,
            "no person's message"
        );
        // A clock that does not compare with ours: counted from now, when it was received.
        let ahead = Some(Place::at(now + Duration::from_millis(5)));
        assert_eq!(settle_left(settle, ahead, now), settle);
        assert_eq!(settle_left(settle, sent(3_600_000), now), settle);
        assert_eq!(
            settle_left(Duration::ZERO, sent(0), now),
            Duration::ZERO,
            "off"
        );
    }

    #[test]
    fn places_of_every_way_in_are_one_time_ordered_space() {
        let slack = Place::from_slack_ts("1700000000.000100").unwrap();
        assert_eq!(slack, Place(1_700_000_000_000_100));
        assert!(
            Place::from_slack_ts("1699999999.999999") < Place::from_slack_ts("1700000000.000000")
        );
        for bad in [
            "1700000000.1",
            "abc.123456",
            "1700000000",
            "1700000000.+12345",
        ] {
            assert_eq!(Place::from_slack_ts(bad), None, "{bad}");
        }
        // A snowflake of 2023-11-14T22:13:20.001Z, increment 7, and the next in that millisecond.
        let millis = 1_700_000_000_001 - DISCORD_EPOCH_MS;
        let discord = Place::from_snowflake((millis << 22) | 7);
        assert_eq!(discord, Place(1_700_000_000_001_007));
        assert!(Place::from_snowflake((millis << 22) | 8) > discord);
        assert!(
            slack < discord,
            "one space: Slack's 0.1 ms is before Discord's 1.007 ms"
        );
        let before = Place::now();
        let now = Place::now();
        assert!(before <= now);
        let ago = SystemTime::now().duration_since(now.sent()).unwrap();
        assert!(ago < Duration::from_secs(1), "the node's clock: {ago:?}");
    }
}
