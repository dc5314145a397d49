//! Shows a turn as it happens, on any platform: the answer streams into one message edited
//! at most every `interval`, split at the platform's limit without breaking code blocks;
//! each tool call is a compact line edited from pending to running (with its streamed
//! output) to done or error; long tool output goes as a `.txt` attachment instead of being
//! cut. The platform supplies a [`Surface`]; the agent talks to a [`StreamSink`].
//!
//! Memory is bounded whatever a tool prints: streamed output is kept as an [`OutputTail`]
//! (the last few KiB and counts), both in the queue between the agent and the renderer and
//! in the renderer, so a command printing 100 MB costs kilobytes here.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandpiper_agent::protocol::{Compacting, TurnEvent, TurnSink};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::split::split_message;

mod tail;

pub use tail::{OutputTail, TAIL_BYTES};

/// How often a typing indicator is renewed while a turn runs (Discord's lasts 10 s).
const TYPING_EVERY: Duration = Duration::from_secs(8);
/// How long a burst of deltas may gather before the next edit (never past the turn's end).
const GATHER: Duration = Duration::from_millis(50);
/// How long the first post of an answer, or of a tool call that runs without asking, is held
/// back. What is whole by then is posted once, as it ends: an answer without the Stop button
/// it would have been edited to drop, a call (most: `ls`, `git status`, a file read) finished
/// instead of posted running and edited a moment later. What takes longer shows from then on
/// as before; anything posted after a held-back line (an answer, a notice, a card) brings it
/// out first, so the order never changes.
const HOLD_FIRST_POST: Duration = Duration::from_millis(250);
/// Output longer than this many lines (or [`ATTACH_CHARS`]) is attached as a file.
pub const ATTACH_LINES: usize = 5;
/// See [`ATTACH_LINES`].
pub const ATTACH_CHARS: usize = 1500;
/// Lines of streamed output shown under a running tool.
const TAIL_LINES: usize = 8;

/// Where a tool call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolState {
    /// Waiting for someone to approve it.
    AwaitingApproval,
    /// Running (or about to).
    Running,
    /// Finished.
    Done,
    /// Failed, denied or not run.
    Failed,
}

/// A tool call as one compact message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLine {
    /// Tool name.
    pub name: String,
    /// One line naming the call.
    pub header: String,
    /// Where it is.
    pub state: ToolState,
    /// The last lines of its streamed output, or its whole result when short.
    pub output: String,
    /// Whether the full output went as an attachment.
    pub attached: bool,
}

impl ToolLine {
    /// Whether the call still runs or waits for approval: its line is the turn's live
    /// message then, and carries Stop.
    pub fn is_live(&self) -> bool {
        matches!(self.state, ToolState::AwaitingApproval | ToolState::Running)
    }
}

/// What the renderer shows; the platform turns it into its own message format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Post {
    /// A piece of the answer; `live` while the turn runs (the platform adds a Stop button).
    Answer {
        /// Markdown text, within the platform's limit.
        text: String,
        /// Whether the turn still runs.
        live: bool,
    },
    /// A tool call.
    Tool(ToolLine),
    /// Something the user should know that is not the answer.
    Notice(String),
    /// The turn waits for a place before it starts (too many turns run).
    Waiting(String),
    /// What the turn does that takes long and shows nothing else (compacting); `live` while it
    /// lasts (the platform adds a Stop button: it is the turn's live message then).
    Progress {
        /// One line.
        text: String,
        /// Whether it still lasts.
        live: bool,
    },
    /// The turn failed.
    Error(String),
}

/// A platform request failed after the platform's own retries; the renderer logs it and goes
/// on (the answer is in the store whatever happens to its display).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SurfaceError(pub String);

/// A thread on a platform, as the renderer needs it.
#[async_trait::async_trait]
pub trait Surface: Send + Sync + 'static {
    /// Characters one message may hold.
    fn limit(&self) -> usize;
    /// Posts a message; returns its id.
    async fn post(&self, post: &Post) -> Result<String, SurfaceError>;
    /// Replaces a message's content.
    async fn edit(&self, id: &str, post: &Post) -> Result<(), SurfaceError>;
    /// Uploads a text file into the thread.
    async fn upload(
        &self,
        filename: &str,
        body: Vec<u8>,
        comment: &str,
    ) -> Result<(), SurfaceError>;
    /// Shows (renews) a typing indicator.
    async fn typing(&self) -> Result<(), SurfaceError> {
        Ok(())
    }
}

/// An event waiting for the renderer; streamed output is gathered into a bounded tail.
#[derive(Debug)]
enum Queued {
    Event(TurnEvent),
    Output { call_id: String, tail: OutputTail },
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Queued>,
    pushed: u64,
}

impl Queue {
    /// Whether an event that ends the turn waits (its answer or its error).
    fn holds_end(&self) -> bool {
        self.events.iter().any(|q| {
            matches!(
                q,
                Queued::Event(TurnEvent::TurnComplete { .. } | TurnEvent::Error(_))
            )
        })
    }

    /// Adds `event`, merging it into what already waits where that loses nothing the
    /// renderer shows: consecutive text, and output of a call into the output of the same
    /// call queued since the last other event (parallel calls interleave their chunks). So
    /// the queue holds at most a few entries per event that is not output, however fast a
    /// tool prints and however slow the platform is.
    fn push(&mut self, event: TurnEvent) {
        self.pushed += 1;
        match event {
            TurnEvent::ToolOutputChunk { call_id, chunk } => {
                let waiting = self
                    .events
                    .iter_mut()
                    .rev()
                    .map_while(|q| match q {
                        Queued::Output { call_id, tail } => Some((call_id, tail)),
                        Queued::Event(_) => None,
                    })
                    .find(|(id, _)| **id == call_id);
                match waiting {
                    Some((_, tail)) => tail.push(&chunk),
                    None => {
                        let mut tail = OutputTail::default();
                        tail.push(&chunk);
                        self.events.push_back(Queued::Output { call_id, tail });
                    }
                }
            }
            // Only a sub-agent's latest status matters: it replaces one still waiting.
            TurnEvent::SubAgent(status) => match self.events.back_mut() {
                Some(Queued::Event(TurnEvent::SubAgent(prev)))
                    if prev.call_id == status.call_id =>
                {
                    *prev = status;
                }
                _ => self
                    .events
                    .push_back(Queued::Event(TurnEvent::SubAgent(status))),
            },
            TurnEvent::TextDelta(t) => match self.events.back_mut() {
                Some(Queued::Event(TurnEvent::TextDelta(prev))) => prev.push_str(&t),
                _ => self
                    .events
                    .push_back(Queued::Event(TurnEvent::TextDelta(t))),
            },
            event => self.events.push_back(Queued::Event(event)),
        }
    }
}

/// The agent's side: events are queued (consecutive text merged, output gathered into
/// bounded tails) and never block the turn.
#[derive(Clone)]
pub struct StreamSink {
    queue: Arc<Mutex<Queue>>,
    wake: Arc<Notify>,
    done: watch::Receiver<u64>,
}

impl std::fmt::Debug for StreamSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSink").finish_non_exhaustive()
    }
}

impl StreamSink {
    /// Whether the turn's end waits for the renderer.
    fn end_queued(&self) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .holds_end()
    }
}

impl TurnSink for StreamSink {
    fn event(&self, event: TurnEvent) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push(event);
        drop(q);
        self.wake.notify_one();
    }
}

impl StreamSink {
    /// Waits until everything sent so far is on the platform (an approval card goes after
    /// the tool lines it is about).
    pub async fn settle(&self) {
        let target = self.queue.lock().unwrap_or_else(|e| e.into_inner()).pushed;
        let mut done = self.done.clone();
        let _ = done.wait_for(|n| *n >= target).await;
    }
}

/// Starts rendering a turn onto `surface` as one of `tasks`; returns the sink to give the
/// agent and the task that ends once the turn's last event is shown (or at shutdown, when the
/// turn is dropped and its last event never comes).
pub fn start<S: Surface>(
    surface: Arc<S>,
    interval: Duration,
    tasks: &crate::tasks::Tasks,
) -> (StreamSink, tokio::task::JoinHandle<()>) {
    let (done_tx, done_rx) = watch::channel(0);
    let sink = StreamSink {
        queue: Arc::default(),
        wake: Arc::new(Notify::new()),
        done: done_rx,
    };
    let renderer = Renderer {
        surface,
        interval,
        segment: Segment::default(),
        tools: HashMap::new(),
        order: Vec::new(),
        wait: None,
        compacting: None,
    };
    // The renderer shows its turn to the end, through a drain (see `Tasks::spawn_turn`).
    let task = tasks.spawn_turn(renderer.run(sink.clone(), done_tx));
    (sink, task)
}

#[derive(Default)]
struct Segment {
    text: String,
    /// Posted chunks: id, text, live.
    sent: Vec<(String, String, bool)>,
    dirty: bool,
    /// When its first text arrived: the first post waits [`HOLD_FIRST_POST`] from then.
    started: Option<Instant>,
    last_flush: Option<Instant>,
}

impl Segment {
    /// When the segment's next post or edit is due, if it has something to show.
    fn due(&self, interval: Duration) -> Option<Instant> {
        if !self.dirty {
            return None;
        }
        match (self.last_flush, self.started) {
            (Some(last), _) => Some(last + interval),
            (None, Some(started)) => Some(started + HOLD_FIRST_POST),
            (None, None) => Some(Instant::now()),
        }
    }
}

struct Tool {
    id: Option<String>,
    line: ToolLine,
    streamed: OutputTail,
    dirty: bool,
    last_edit: Option<Instant>,
    /// Not posted yet: posted at this moment, when it ends, or when something after it is
    /// posted, whichever comes first ([`HOLD_FIRST_POST`]).
    show_at: Option<Instant>,
}

struct Renderer<S> {
    surface: Arc<S>,
    interval: Duration,
    segment: Segment,
    tools: HashMap<String, Tool>,
    order: Vec<String>,
    /// A wait for a place to run, posted only if it lasts past the grace
    /// ([`crate::turns::SHOW_PROGRESS_AFTER`]): the line and when it is due.
    wait: Option<(String, Instant)>,
    /// A compaction in progress: its line is posted only if it lasts past the same grace.
    compacting: Option<CompactingLine>,
}

/// The [`Compacting`] line of a summary being written.
enum CompactingLine {
    /// Not posted yet: posted at this moment if the summary has not come by then.
    Due(Instant),
    /// Posted (its id, unless posting failed): edited when the compaction ends.
    Posted(Option<String>),
}

impl CompactingLine {
    fn due(&self) -> Option<Instant> {
        match self {
            Self::Due(at) => Some(*at),
            Self::Posted(_) => None,
        }
    }
}

impl<S: Surface> Renderer<S> {
    async fn run(mut self, sink: StreamSink, done: watch::Sender<u64>) {
        // A turn that answers within the grace needs no typing indicator.
        let mut next_typing = Instant::now() + crate::turns::SHOW_PROGRESS_AFTER;
        let mut processed = 0u64;
        loop {
            if Instant::now() >= next_typing {
                if let Err(e) = self.surface.typing().await {
                    tracing::debug!(error = %e, "typing indicator failed");
                }
                next_typing = Instant::now() + TYPING_EVERY;
            }
            let (events, pushed) = {
                let mut q = sink.queue.lock().unwrap_or_else(|e| e.into_inner());
                (std::mem::take(&mut q.events), q.pushed)
            };
            let mut finished = false;
            for event in events {
                finished |= self.apply(event).await;
            }
            self.post_due_wait(finished).await;
            self.post_due_compacting(finished).await;
            self.flush(finished).await;
            processed = processed.max(pushed);
            let _ = done.send(processed);
            if finished {
                return;
            }
            // Typing is renewed on the first wake after it is due; a pending wait line is
            // posted when due.
            let mut wait = self.interval.min(TYPING_EVERY);
            let now = Instant::now();
            let dues = self.wait.iter().map(|(_, due)| *due);
            let dues = dues.chain(self.compacting.as_ref().and_then(CompactingLine::due));
            let dues = dues.chain(self.tools.values().filter_map(|t| t.show_at));
            let dues = dues.chain(self.segment.due(self.interval));
            for due in dues {
                wait = wait.min(due.saturating_duration_since(now));
            }
            tokio::select! {
                () = sink.wake.notified() => {
                    if self.segment.last_flush.is_some() {
                        self.gather(&sink).await;
                    }
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Lets a burst of deltas accumulate (up to [`GATHER`]) before the next edit, but never
    /// holds back the turn's end: the last edit goes out as soon as the end is queued.
    async fn gather(&self, sink: &StreamSink) {
        let until = tokio::time::sleep(GATHER);
        tokio::pin!(until);
        while !sink.end_queued() {
            tokio::select! {
                () = &mut until => return,
                () = sink.wake.notified() => {}
            }
        }
    }

    /// Posts the wait for a place once it has lasted past the grace; a turn that got its
    /// place sooner, or ended, never shows it.
    async fn post_due_wait(&mut self, finished: bool) {
        if finished {
            self.wait = None;
        }
        if let Some((line, _)) = self.wait.take_if(|(_, due)| Instant::now() >= *due) {
            self.show_deferred().await;
            self.post(&Post::Waiting(line)).await;
        }
    }

    /// Posts the compaction line once the summary has taken longer than the grace; a quick
    /// one, or one ended with its turn, never shows it.
    async fn post_due_compacting(&mut self, finished: bool) {
        let due = match &self.compacting {
            Some(CompactingLine::Due(at)) => *at,
            _ => return,
        };
        if finished {
            self.compacting = None;
            return;
        }
        if Instant::now() < due {
            return;
        }
        self.show_deferred().await;
        let id = self.post(&compacting_post(Compacting::Started)).await;
        self.compacting = Some(CompactingLine::Posted(id));
    }

    /// The compaction ended: its line, if posted, says how and loses its Stop button.
    async fn end_compacting(&mut self, ended: Compacting) {
        if let Some(CompactingLine::Posted(Some(id))) = self.compacting.take()
            && let Err(e) = self.surface.edit(&id, &compacting_post(ended)).await
        {
            tracing::warn!(error = %e, "editing the compaction line failed");
        }
    }

    /// Applies one queued event; true when the turn is over.
    async fn apply(&mut self, queued: Queued) -> bool {
        let event = match queued {
            Queued::Event(event) => event,
            Queued::Output { call_id, tail } => {
                if let Some(tool) = self.tools.get_mut(&call_id) {
                    tool.streamed.append(tail);
                    tool.line.state = ToolState::Running;
                    tool.line.output = tool.streamed.shown(TAIL_LINES);
                    tool.dirty = true;
                }
                return false;
            }
        };
        if !matches!(event, TurnEvent::Waiting(_)) {
            // The turn has its place: the wait was short enough to go unsaid.
            self.wait = None;
        }
        match event {
            TurnEvent::TextDelta(t) => {
                self.segment.text.push_str(&t);
                self.segment.dirty = true;
                self.segment.started.get_or_insert_with(Instant::now);
            }
            TurnEvent::ToolPending(view) => {
                self.close_segment().await;
                let (state, output) = match &view.error {
                    Some(_) => (ToolState::Failed, String::new()),
                    None if view.needs_approval => (ToolState::AwaitingApproval, String::new()),
                    None => (ToolState::Running, String::new()),
                };
                let line = ToolLine {
                    name: view.name.clone(),
                    header: view.header.clone(),
                    state,
                    output,
                    attached: false,
                };
                // A call waiting for a person (its card follows) or refused shows at once.
                let (id, show_at) = if state == ToolState::Running {
                    (None, Some(Instant::now() + HOLD_FIRST_POST))
                } else {
                    self.show_deferred().await;
                    (self.post(&Post::Tool(line.clone())).await, None)
                };
                self.order.push(view.call_id.clone());
                self.tools.insert(
                    view.call_id,
                    Tool {
                        id,
                        line,
                        streamed: OutputTail::default(),
                        dirty: false,
                        last_edit: Some(Instant::now()),
                        show_at,
                    },
                );
            }
            TurnEvent::ToolOutputChunk { .. } => {
                // Gathered into `Queued::Output` by the queue.
            }
            TurnEvent::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => self.finish_tool(&call_id, &name, &output, is_error).await,
            TurnEvent::SubAgent(status) => {
                // The sub-agent's status line is its call's line, redrawn (throttled).
                if let Some(tool) = self.tools.get_mut(&status.call_id) {
                    tool.line.state = ToolState::Running;
                    tool.line.output = status.to_string();
                    tool.dirty = true;
                }
            }
            TurnEvent::Attachment {
                filename,
                body,
                comment,
                ..
            } => {
                self.close_segment().await;
                self.show_deferred().await;
                if let Err(e) = self
                    .surface
                    .upload(&filename, body.into_bytes(), &comment)
                    .await
                {
                    tracing::warn!(error = %e, filename, "uploading an attachment failed");
                    self.post(&Post::Notice(format!("(could not attach {filename}: {e})")))
                        .await;
                }
            }
            TurnEvent::Compacting(Compacting::Started) => {
                self.close_segment().await;
                let due = Instant::now() + crate::turns::SHOW_PROGRESS_AFTER;
                self.compacting = Some(CompactingLine::Due(due));
            }
            TurnEvent::Compacting(ended @ Compacting::Ended { .. }) => {
                self.end_compacting(ended).await;
            }
            TurnEvent::Waiting(wait) => {
                self.close_segment().await;
                let due = Instant::now() + crate::turns::SHOW_PROGRESS_AFTER;
                self.wait = Some((wait.to_string(), due));
            }
            TurnEvent::Notice(text) => {
                self.close_segment().await;
                self.show_deferred().await;
                self.post(&Post::Notice(text)).await;
            }
            TurnEvent::Error(text) => {
                self.close_segment().await;
                self.show_deferred().await;
                self.post(&Post::Error(text)).await;
                return true;
            }
            TurnEvent::TurnComplete { cancelled, .. } => {
                if cancelled {
                    let sep = if self.segment.text.trim().is_empty() {
                        ""
                    } else {
                        "\n\n"
                    };
                    self.segment.text.push_str(sep);
                    self.segment.text.push_str("*(stopped)*");
                    self.segment.dirty = true;
                }
                return true;
            }
        }
        false
    }

    async fn finish_tool(&mut self, call_id: &str, name: &str, output: &str, is_error: bool) {
        let Some(tool) = self.tools.get_mut(call_id) else {
            return;
        };
        tool.line.state = if is_error {
            ToolState::Failed
        } else {
            ToolState::Done
        };
        let long = output.lines().count() > ATTACH_LINES || output.chars().count() > ATTACH_CHARS;
        tool.dirty = true;
        tool.last_edit = None;
        if !long {
            tool.line.output = output.trim_end().to_owned();
            return;
        }
        tool.line.output = tail(output, ATTACH_LINES);
        tool.line.attached = true;
        let filename = format!("{name}-output.txt");
        let comment = format!("Full output of `{}`", tool.line.header);
        // The line goes above its attachment: posted now if it was not yet.
        self.show_deferred().await;
        if let Err(e) = self
            .surface
            .upload(&filename, output.as_bytes().to_vec(), &comment)
            .await
        {
            tracing::warn!(error = %e, call_id, "uploading tool output failed");
            if let Some(tool) = self.tools.get_mut(call_id) {
                tool.line.attached = false;
                tool.dirty = true;
            }
        }
    }

    /// Posts every tool line still held back ([`HOLD_FIRST_POST`]), in order, as it stands:
    /// something is about to be posted after them.
    async fn show_deferred(&mut self) {
        let held: Vec<(String, Post)> = self
            .order
            .iter()
            .filter_map(|call_id| {
                let tool = self.tools.get_mut(call_id)?;
                tool.show_at.take()?;
                tool.dirty = false;
                tool.last_edit = Some(Instant::now());
                Some((call_id.clone(), Post::Tool(tool.line.clone())))
            })
            .collect();
        for (call_id, post) in held {
            let id = self.post(&post).await;
            if let Some(tool) = self.tools.get_mut(&call_id) {
                tool.id = id;
            }
        }
    }

    /// Ends the current answer segment (a tool line or notice goes below it).
    async fn close_segment(&mut self) {
        self.flush_segment(true).await;
        self.segment = Segment::default();
    }

    /// Sends what is due: the answer (throttled, or all of it at the end) and tool lines.
    async fn flush(&mut self, finished: bool) {
        let now = Instant::now();
        let segment_due = self.segment.due(self.interval).is_some_and(|at| at <= now);
        // A tool line held back goes out when due, once it ended, or before the answer
        // that follows it is posted.
        let held_due = self.tools.values().any(|t| {
            t.show_at.is_some_and(|at| {
                at <= now || finished || segment_due || t.line.state != ToolState::Running
            })
        });
        if held_due {
            self.show_deferred().await;
        }
        let due = |last: Option<Instant>, interval: Duration| {
            last.is_none_or(|t| t.elapsed() >= interval)
        };
        let ids: Vec<String> = self.order.clone();
        for call_id in ids {
            let interval = self.interval;
            let Some(tool) = self.tools.get_mut(&call_id) else {
                continue;
            };
            if tool.dirty && (finished || due(tool.last_edit, interval)) {
                tool.dirty = false;
                tool.last_edit = Some(Instant::now());
                let post = Post::Tool(tool.line.clone());
                if let Some(id) = tool.id.clone()
                    && let Err(e) = self.surface.edit(&id, &post).await
                {
                    tracing::warn!(error = %e, "editing a tool line failed");
                }
            }
        }
        if finished || segment_due {
            self.flush_segment(finished).await;
        }
    }

    /// Posts or edits the answer's chunks. `last` removes the live marker.
    async fn flush_segment(&mut self, last: bool) {
        let seg = &mut self.segment;
        if seg.text.trim().is_empty() {
            seg.dirty = false;
            return;
        }
        if !seg.dirty && (!last || seg.sent.last().is_none_or(|s| !s.2)) {
            return;
        }
        seg.dirty = false;
        seg.last_flush = Some(Instant::now());
        // Tool lines held back go above the answer that follows them.
        self.show_deferred().await;
        let chunks = split_message(&self.segment.text, self.surface.limit());
        let n = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let live = !last && i + 1 == n;
            let post = Post::Answer {
                text: chunk.clone(),
                live,
            };
            match self.segment.sent.get(i).cloned() {
                Some((id, text, was_live)) => {
                    if text != chunk || was_live != live {
                        if let Err(e) = self.surface.edit(&id, &post).await {
                            tracing::warn!(error = %e, "editing the answer failed");
                        }
                        self.segment.sent[i] = (id, chunk, live);
                    }
                }
                None => match self.surface.post(&post).await {
                    Ok(id) => self.segment.sent.push((id, chunk, live)),
                    Err(e) => {
                        tracing::warn!(error = %e, "posting the answer failed");
                        // Retried at the next flush.
                        self.segment.dirty = true;
                        return;
                    }
                },
            }
        }
    }

    async fn post(&self, post: &Post) -> Option<String> {
        match self.surface.post(post).await {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::warn!(error = %e, "posting to the thread failed");
                None
            }
        }
    }
}

/// The compaction line as posted: live (with Stop) until it ends.
fn compacting_post(step: Compacting) -> Post {
    Post::Progress {
        text: step.to_string(),
        live: step == Compacting::Started,
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

#[cfg(test)]
mod tests;
