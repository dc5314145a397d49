//! A turn in a chat thread, the same on every platform: the job a workstream's lane runs. It
//! starts the stream renderer on the platform's thread, builds the [`CardApprover`], runs the
//! turn (a message, or the resumption of a turn a restart interrupted), and waits until the
//! thread shows its end.
//!
//! Turns that do not start with a chat message (a watch firing, a notify reply, a resumption)
//! come through [`TurnStarter`]: "run this synthetic message in workstream K and show it in
//! its thread". Discord, Slack and the console implement it; [`Starters`] routes a workstream
//! key to the platform that owns it.

use std::sync::Arc;
use std::time::Duration;

use sandpiper_agent::cluster::{INTERRUPTED, Ownership};
use sandpiper_agent::protocol::{Approver, TurnEvent, TurnSink};
use sandpiper_agent::workstream::KeyPattern;
use sandpiper_agent::{Agent, AgentError, ResumeRequest, TurnRequest};
use tokio_util::sync::CancellationToken;

use crate::approver::{CardApprover, CardSurface};
use crate::stream::{self, StreamSink, Surface};
use crate::tasks::{Drained, Tasks};
use crate::turns::{Place, QueueFull, Queued, Start};

/// A platform thread as a turn needs it: where the answer streams and where cards go.
pub trait Thread: Surface + CardSurface {}

impl<T: Surface + CardSurface> Thread for T {}

/// What a lane job does. It crosses nodes as JSON when it arrives on one that does not own
/// its workstream (see [`run`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Work {
    /// Answer a message.
    Message {
        /// Sandpiper user id of the author, when a person wrote it.
        author: Option<String>,
        /// The message, as the model sees it.
        text: String,
        /// Shown in the thread before the turn starts (a synthetic message says where it
        /// came from); `None` for a message the thread already shows.
        shown: Option<String>,
        /// Its place in the thread, in the platform's order (see [`Place`]): the lane takes
        /// messages in this order whichever node received them. `None` for work no person sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        place: Option<Place>,
        /// Who a turn with no author is charged to (usage and budgets): the person who set
        /// up the watch that fired, or who asked for the notification answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        charged_to: Option<String>,
    },
    /// Resume a turn a restart interrupted (every dangling call is now decided).
    Resume {
        /// Sandpiper user id of who started it.
        author: Option<String>,
    },
    /// Show a notice in the thread, in its turn with the lane's other work; no turn runs (a
    /// watch that stopped or paused says so).
    Notice(String),
}

impl Work {
    /// A person's message, already shown in the thread.
    pub fn message(author: &str, text: String) -> Self {
        Work::Message {
            author: Some(author.to_owned()),
            text,
            shown: None,
            place: None,
            charged_to: None,
        }
    }

    /// This work at `place` in its thread (see [`Work::Message::place`]).
    pub fn at(mut self, at: Place) -> Self {
        if let Work::Message { place, .. } = &mut self {
            *place = Some(at);
        }
        self
    }

    /// Its place in its thread, when a person sent it.
    pub fn place(&self) -> Option<Place> {
        match self {
            Work::Message { place, .. } => *place,
            Work::Resume { .. } | Work::Notice(_) => None,
        }
    }
}

/// What a thread is told, before the answer, about a message that reached the bot after a
/// later one was already being answered.
pub const LATE: &str = "↩️ This message reached me after the one you sent next, which I had \
     already started on; it is answered now, after that one.";

/// Where a thread's turn runs. Cheap to clone.
#[derive(Clone)]
pub struct TurnPlace {
    /// The agent.
    pub agent: Agent,
    /// The workstream key.
    pub workstream: String,
    /// How often the answer message is edited.
    pub interval: Duration,
    /// The channel's tasks (the renderer runs as one).
    pub tasks: Tasks,
}

impl std::fmt::Debug for TurnPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnPlace")
            .field("workstream", &self.workstream)
            .finish_non_exhaustive()
    }
}

/// A thread opened for work that shows in it: the sink its events go to (rendered by a task
/// of the channel) and the card approver that asks its people.
pub struct OpenThread {
    /// Where events go.
    pub sink: StreamSink,
    /// Who decides approvals and reviews.
    pub approver: CardApprover,
    /// The renderer; it ends once a [`TurnEvent::TurnComplete`] is shown.
    pub renderer: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for OpenThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenThread").finish_non_exhaustive()
    }
}

/// Starts rendering into `thread` and builds its card approver.
pub fn open<T: Thread>(place: &TurnPlace, thread: Arc<T>) -> OpenThread {
    let (sink, renderer) = stream::start(thread.clone(), place.interval, &place.tasks);
    let cards: Arc<dyn CardSurface> = thread;
    let approver = CardApprover::new(
        place.agent.clone(),
        cards,
        sink.clone(),
        place.workstream.as_str(),
    );
    OpenThread {
        sink,
        approver,
        renderer,
    }
}

/// Runs `work` in `thread` and waits until the thread shows how it ended. Returns whether the
/// turn ran without an error.
///
/// In a cluster the workstream's lease comes first: when another live node owns the
/// workstream, the work is handed to it (it shows in the same thread from there); when this
/// node takes it over from a node that died mid-turn, the thread is told before the work runs.
/// A node that has just claimed the workstream first runs, in place order with `work`, what
/// other nodes left waiting for it ([`Agent::take_handoffs`]): a message a stopping node
/// accepted is answered before the one sent after it, whichever node that reached.
/// A job that starts late ([`Start::late`]) says so in the thread first ([`LATE`]).
pub async fn run<T: Thread>(place: &TurnPlace, thread: Arc<T>, work: Work, start: Start) -> bool {
    let held = place.agent.holds_here(&place.workstream);
    let interrupted = match place.agent.ownership(&place.workstream).await {
        Ok(Ownership::Here { interrupted }) => interrupted,
        Ok(Ownership::Elsewhere(node)) => {
            tracing::debug!(workstream = %place.workstream, owner = %node, place = work.place().map(|p| p.0), "handing the work to the owner");
            return hand_over(place, thread, &node, work).await;
        }
        Err(e) => {
            // The turn itself will meet the database and say so in the thread.
            tracing::warn!(workstream = %place.workstream, error = %e, "could not take the workstream's lease");
            false
        }
    };
    let works = if held {
        vec![work]
    } else {
        with_handed_over(&place.agent, &place.workstream, work).await
    };
    let mut notices: Vec<&str> = Vec::new();
    if interrupted {
        notices.push(INTERRUPTED);
    }
    if start.late {
        notices.push(LATE);
    }
    let mut ok = true;
    for work in works {
        let notices = std::mem::take(&mut notices);
        ok &= run_here(place, thread.clone(), work, &notices, &start.cancel).await;
    }
    ok
}

/// `work` and the work other nodes left waiting for `key` before this node claimed it that
/// was sent before `work`, in place order (work without a place, a notice, first, in the
/// order it was left). Nobody ran the workstream, so the lane settled before it started
/// `work`, and so did any other node that got a message sent with it: that node finds this
/// one the owner as this one claims, and hands its message over within a moment. One more
/// window is waited for it here (only when a node takes a workstream on, not on every turn).
/// What was left that was sent after `work` goes back to this node's lane ([`pass_back`]):
/// run here, it would go before a message of this lane sent ahead of it.
async fn with_handed_over(agent: &Agent, key: &str, work: Work) -> Vec<Work> {
    let _taking_on = agent.taking_on(key);
    let settle = agent.config().agent.settle();
    if !settle.is_zero() {
        tokio::time::sleep(settle).await;
    }
    let left = match take_left(agent, key).await {
        Ok(left) => left,
        Err(e) => {
            // They stay in the table; a heartbeat sweeps them.
            tracing::warn!(workstream = key, error = %e, "could not take the work left here");
            return vec![work];
        }
    };
    let (mut works, later): (Vec<Work>, Vec<Work>) = left
        .into_iter()
        .partition(|left| left.place() <= work.place());
    if !works.is_empty() || !later.is_empty() {
        tracing::info!(
            workstream = key,
            first = works.len(),
            later = later.len(),
            "work left for this workstream runs in place order"
        );
    }
    for left in later {
        pass_back(agent, key, left).await;
    }
    works.push(work);
    works
}

/// Hands `work` to this node's own lane for `key` through the handoff table, where the lane
/// takes it in place order with what waits there (a failure is logged; the row, once in the
/// table, is swept by the heartbeat).
async fn pass_back(agent: &Agent, key: &str, work: Work) {
    let here = agent
        .cluster()
        .map(|c| c.node().to_owned())
        .unwrap_or_default();
    if let Err(e) = hand_to(agent, key, &here, work).await {
        tracing::error!(workstream = key, error = %e, "work left here could not go back to the lane; it is lost");
    }
}

/// Leaves `work` for `key` in the handoff table for `node` (the owner, or this node) and
/// wakes it; why not, when it could not.
async fn hand_to(agent: &Agent, key: &str, node: &str, work: Work) -> Result<(), String> {
    let turn = OutsideTurn {
        workstream: key.to_owned(),
        work,
    };
    match (agent.cluster(), serde_json::to_string(&turn)) {
        (Some(cluster), Ok(payload)) => cluster
            .hand_over(key, node, &payload)
            .await
            .map_err(|e| e.to_string()),
        (None, _) => Err("this node is in no cluster".to_owned()),
        (_, Err(e)) => Err(e.to_string()),
    }
}

/// Takes every piece of work other nodes left waiting for `key`, in place order (work without
/// a place, a notice, first, in the order it was left): what a node that starts running the
/// workstream runs first, whether a message or a heartbeat made it take the workstream.
pub async fn take_left(agent: &Agent, key: &str) -> Result<Vec<Work>, sandpiper_agent::StoreError> {
    let mut works: Vec<Work> = agent
        .take_handoffs(key)
        .await?
        .iter()
        .filter_map(|payload| handed_over(key, payload))
        .map(|turn| turn.work)
        .collect();
    works.sort_by_key(Work::place);
    Ok(works)
}

/// The work a handoff for `key` carries; `None`, logged, when this node cannot read it or it
/// names another workstream.
pub fn handed_over(key: &str, payload: &str) -> Option<OutsideTurn> {
    match serde_json::from_str::<OutsideTurn>(payload) {
        Ok(turn) if turn.workstream == key => Some(turn),
        Ok(_) | Err(_) => {
            tracing::error!(workstream = key, "a handoff this node cannot read; dropped");
            None
        }
    }
}

/// Runs `work` here, after `notices`, and waits until the thread shows how it ended.
async fn run_here<T: Thread>(
    place: &TurnPlace,
    thread: Arc<T>,
    work: Work,
    notices: &[&str],
    cancel: &CancellationToken,
) -> bool {
    let OpenThread {
        sink,
        approver,
        renderer,
    } = open(place, thread);
    for notice in notices {
        sink.event(TurnEvent::Notice((*notice).to_owned()));
    }
    let result = run_work(
        &place.agent,
        &place.workstream,
        work,
        &sink,
        &approver,
        cancel.clone(),
    )
    .await;
    if let Err(e) = &result {
        tracing::warn!(workstream = %place.workstream, error = %e, "turn failed");
    }
    // Ends the renderer when the agent had nothing to say (nothing to resume, an early error);
    // ignored when the turn already said it was over.
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    let mut renderer = renderer;
    tokio::select! {
        _ = &mut renderer => {}
        () = place.tasks.halted().cancelled() => renderer.abort(),
    }
    result.is_ok()
}

/// `/stop` (or the Stop button) for `key`, wherever its turn runs: here through `local`
/// (the platform's lanes), or on the node that owns the workstream. Whether a turn was stopped.
pub async fn stop_anywhere(agent: &Agent, key: &str, local: impl FnOnce(&str) -> bool) -> bool {
    if local(key) {
        return true;
    }
    match agent.stop_remote_turn(key).await {
        Ok(sent) => sent,
        Err(e) => {
            tracing::warn!(workstream = key, error = %e, "could not ask the owning node to stop");
            false
        }
    }
}

/// Hands `work` to `node`, the owner of the workstream. If that fails the thread is told,
/// so the person knows to send it again; nothing is silently dropped.
async fn hand_over<T: Thread>(place: &TurnPlace, thread: Arc<T>, node: &str, work: Work) -> bool {
    let handed = hand_to(&place.agent, &place.workstream, node, work).await;
    let Err(e) = handed else {
        return true;
    };
    tracing::warn!(workstream = %place.workstream, owner = node, error = %e, "could not hand the work over");
    let OpenThread { sink, renderer, .. } = open(place, thread);
    sink.event(TurnEvent::Error(format!(
        "another sandpiper node runs this thread and I could not pass your message to it ({e}); \
         please send it again"
    )));
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    let mut renderer = renderer;
    tokio::select! {
        _ = &mut renderer => {}
        () = place.tasks.halted().cancelled() => renderer.abort(),
    }
    false
}

/// What a closed thread says, once per refused piece of work, when something other than a
/// person (a watch that fired before `/close` ended it, a notification reply, a resumed
/// approval) would start a turn in it.
pub const CLOSED: &str = "🔒 This thread is closed, so nothing runs in it any more (its \
                          watches ended when it was closed). Mention me in a channel to start a \
                          new one.";

/// Runs `work` in workstream `key` with the given sink and approver: a message (shown first
/// as a notice when it is synthetic), or a resumption. Every channel's turns go through here,
/// so a closed workstream runs none: it says so ([`CLOSED`]) instead.
pub async fn run_work(
    agent: &Agent,
    key: &str,
    work: Work,
    sink: &dyn TurnSink,
    approver: &dyn Approver,
    cancel: CancellationToken,
) -> Result<(), AgentError> {
    if !matches!(work, Work::Notice(_)) && agent.is_closed(key).await? {
        tracing::info!(workstream = key, "closed: the work was not run");
        sink.event(TurnEvent::Notice(CLOSED.to_owned()));
        return Ok(());
    }
    match work {
        Work::Message {
            author,
            text,
            shown,
            charged_to,
            ..
        } => {
            if let Some(shown) = shown {
                sink.event(TurnEvent::Notice(shown));
            }
            let req = TurnRequest {
                workstream: key,
                author: author.as_deref(),
                text,
                sink,
                approver,
                cancel,
            };
            agent
                .run_turn_charged_to(req, charged_to.as_deref())
                .await
                .map(|_| ())
        }
        Work::Resume { author } => agent
            .resume_turn(ResumeRequest {
                workstream: key,
                author: author.as_deref(),
                sink,
                approver,
                cancel,
            })
            .await
            .map(|_| ()),
        Work::Notice(text) => {
            sink.event(TurnEvent::Notice(text));
            Ok(())
        }
    }
}

/// What a lane hands the next owner of `workstream` if this node stops before `work` runs
/// there ([`TurnQueue::submit_handing_over`](crate::turns::TurnQueue::submit_handing_over)).
pub fn handover(workstream: &str, work: &Work) -> Option<String> {
    let turn = OutsideTurn {
        workstream: workstream.to_owned(),
        work: work.clone(),
    };
    serde_json::to_string(&turn).ok()
}

/// At shutdown: the work still waiting in `queue`'s lanes is left in the database for the next
/// owner of each workstream (another node, or this one restarted), so a message that was
/// accepted is never lost to a restart. A failure is logged: that work is gone with the node.
pub async fn leave_waiting(agent: &Agent, queue: &crate::turns::TurnQueue) {
    for (workstream, payload) in queue.take_waiting() {
        if let Err(e) = agent.leave_for_next_owner(&workstream, &payload).await {
            tracing::error!(workstream, error = %e, "waiting work could not be left for the next owner; it is lost");
        }
    }
}

/// How often a drain looks whether the turns it waits for are done.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Stops a channel's turns after its shutdown began (it no longer listens): work waiting in
/// `queue`, or reaching it meanwhile, is left for the next owner at once ([`leave_waiting`]),
/// and every workstream where no turn runs here is released (again each time a turn ends),
/// so its next owner starts without waiting the lease out; a running turn goes on until it
/// ends, or until it waits for a person's decision (it stays pending in the store, and a
/// click after the restart resumes it), for at most `grace`; then what is left is halted
/// where it is and `tasks` are drained within what remains of `grace`. One rule for every
/// platform. A node stopping as a killed one would ([`Cluster::crash`](sandpiper_agent::cluster::Cluster::crash))
/// halts at once.
pub async fn drain(
    agent: &Agent,
    queue: &crate::turns::TurnQueue,
    tasks: &Tasks,
    grace: Duration,
) -> Drained {
    let deadline = tokio::time::Instant::now() + grace;
    leave_waiting(agent, queue).await;
    let crashed = agent.cluster().is_some_and(|c| c.crashed());
    if !crashed {
        let mut released_at = None;
        loop {
            let running = queue.running();
            // Work that reached this node since (a retried event, a connection that still
            // delivered) is the next owner's at once, not after the drain.
            leave_waiting(agent, queue).await;
            // A workstream whose turn is done here (or never ran) is handed on now: its
            // waiting work is in the table, so whoever claims it next runs that first.
            if released_at != Some(running.len()) {
                release_idle(agent).await;
                released_at = Some(running.len());
            }
            let busy: Vec<&String> = running
                .iter()
                .filter(|key| !agent.live().waits_in(key))
                .collect();
            if busy.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    turns = busy.len(),
                    grace_ms = grace.as_millis() as u64,
                    "turns still running at the shutdown deadline; they are dropped where they are"
                );
                break;
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }
    tasks.halt();
    // Work that arrived while the turns finished (a handoff, a retried event).
    leave_waiting(agent, queue).await;
    tasks
        .drain(deadline.saturating_duration_since(tokio::time::Instant::now()))
        .await
}

/// Drops this node's leases of workstreams where no turn of it runs (see
/// [`Cluster::release_idle`](sandpiper_agent::cluster::Cluster::release_idle)).
async fn release_idle(agent: &Agent) {
    if let Some(cluster) = agent.cluster() {
        cluster.release_idle().await;
    }
}

/// A turn to start from outside a chat message (also what one node hands another).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutsideTurn {
    /// The workstream key (`discord:<thread>`, `slack:<team>:<channel>:<ts>`, `console:<name>`).
    pub workstream: String,
    /// What to run.
    pub work: Work,
}

/// Why an outside turn could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// No running platform owns this workstream key.
    #[error("no running channel owns workstream {0}")]
    NoChannel(String),
    /// The workstream's lane is full.
    #[error(transparent)]
    QueueFull(#[from] QueueFull),
}

/// Starts turns in a platform's workstreams from outside a chat message.
pub trait TurnStarter: Send + Sync {
    /// The workstreams this platform shows (its key prefix; the console's one key).
    fn keys(&self) -> KeyPattern;
    /// Whether `workstream` is one of this platform's.
    fn owns(&self, workstream: &str) -> bool {
        self.keys().matches(workstream)
    }
    /// Queues the turn in the workstream's lane, behind what already waits there; its events
    /// show in the workstream's thread.
    fn start(&self, turn: OutsideTurn) -> Result<Queued, StartError>;
    /// Cancels the turn running in `workstream` on this node (`/stop` that reached another
    /// node); false when none runs here. The console, never in a cluster, has none to stop.
    fn stop(&self, workstream: &str) -> bool {
        let _ = workstream;
        false
    }
}

/// Every running platform's [`TurnStarter`], routed by workstream key. Cheap to clone.
#[derive(Clone, Default)]
pub struct Starters {
    platforms: Vec<Arc<dyn TurnStarter>>,
}

impl std::fmt::Debug for Starters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Starters")
            .field("platforms", &self.platforms.len())
            .finish()
    }
}

impl Starters {
    /// Adds a platform.
    pub fn add(&mut self, starter: Arc<dyn TurnStarter>) {
        self.platforms.push(starter);
    }

    /// The workstreams of every platform.
    pub fn keys(&self) -> Vec<KeyPattern> {
        self.platforms.iter().map(|p| p.keys()).collect()
    }

    /// Stops the turn running in `workstream` on this node, on the platform that owns it.
    pub fn stop(&self, workstream: &str) -> bool {
        self.platforms
            .iter()
            .find(|p| p.owns(workstream))
            .is_some_and(|p| p.stop(workstream))
    }

    /// Starts `turn` on the platform that owns its workstream.
    pub fn start(&self, turn: OutsideTurn) -> Result<Queued, StartError> {
        match self.platforms.iter().find(|p| p.owns(&turn.workstream)) {
            Some(p) => p.start(turn),
            None => Err(StartError::NoChannel(turn.workstream)),
        }
    }
}
