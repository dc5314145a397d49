//! What each running turn is doing now, for watchers outside the turn (the status page):
//! thinking, running a tool, or waiting for a person, with the answer so far and the tool
//! calls of the turn. Every turn's events pass through [`Activity::observe`] on their way to
//! the channel's sink; the turn itself does not change. Watchers read [`Activity::live`] and
//! learn of changes from [`Activity::subscribe`] (the key of the workstream that changed).
//!
//! Bounded: the answer is kept to [`MAX_TEXT`] bytes, each call's output to [`MAX_OUTPUT`]
//! bytes, [`MAX_CALLS`] calls per turn; a turn's entry goes when the turn ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;

use crate::protocol::{TurnEvent, TurnSink};

/// Most bytes of a turn's answer kept.
pub const MAX_TEXT: usize = 64 * 1024;
/// Most bytes of one call's output kept.
pub const MAX_OUTPUT: usize = 16 * 1024;
/// Most calls of one turn kept (the newest).
pub const MAX_CALLS: usize = 50;

/// Where a running turn is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnPhase {
    /// Waiting for the model, or reading its answer.
    Thinking,
    /// A tool call runs (its name).
    RunningTool(String),
    /// A tool call waits for a person's decision (its name).
    WaitingForApproval(String),
}

/// One tool call of a running turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveCall {
    /// The call's id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// One line naming the call.
    pub header: String,
    /// What it will do (command, diff).
    pub preview: String,
    /// Output so far, then its result.
    pub output: String,
    /// Whether it failed or was denied.
    pub is_error: bool,
    /// Whether it is over.
    pub done: bool,
    /// Whether it needs a decision.
    pub needs_approval: bool,
}

/// A running turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveTurn {
    /// Where it is.
    pub phase: TurnPhase,
    /// The answer so far.
    pub text: String,
    /// Its tool calls, oldest first.
    pub calls: Vec<LiveCall>,
}

/// The running turns of this node.
#[derive(Debug, Clone)]
pub struct Activity {
    turns: Arc<Mutex<HashMap<String, LiveTurn>>>,
    changed: broadcast::Sender<String>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            turns: Arc::default(),
            changed: broadcast::channel(256).0,
        }
    }
}

impl Activity {
    /// A sink that records `workstream`'s turn and passes every event on to `sink`.
    pub fn observe<'a>(&'a self, workstream: &str, sink: &'a dyn TurnSink) -> ObservedSink<'a> {
        ObservedSink {
            activity: self,
            workstream: workstream.to_owned(),
            sink,
        }
    }

    /// Tells of every change: the key of the workstream whose turn moved. A watcher that lags
    /// behind misses keys (`Lagged`) and should re-read everything.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    /// The running turns now, by workstream.
    pub fn live(&self) -> HashMap<String, LiveTurn> {
        self.turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, workstream: &str, event: &TurnEvent) {
        {
            let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
            if matches!(event, TurnEvent::TurnComplete { .. } | TurnEvent::Error(_)) {
                turns.remove(workstream);
            } else {
                let turn = turns
                    .entry(workstream.to_owned())
                    .or_insert_with(|| LiveTurn {
                        phase: TurnPhase::Thinking,
                        text: String::new(),
                        calls: Vec::new(),
                    });
                apply(turn, event);
            }
        }
        let _ = self.changed.send(workstream.to_owned());
    }
}

/// Appends `more` to `to`, keeping at most `max` bytes (cut at a character boundary).
fn push_capped(to: &mut String, more: &str, max: usize) {
    let room = max.saturating_sub(to.len());
    let mut end = room.min(more.len());
    while !more.is_char_boundary(end) {
        end -= 1;
    }
    to.push_str(&more[..end]);
}

fn apply(turn: &mut LiveTurn, event: &TurnEvent) {
    match event {
        TurnEvent::TextDelta(t) => {
            push_capped(&mut turn.text, t, MAX_TEXT);
            turn.phase = TurnPhase::Thinking;
        }
        TurnEvent::ToolPending(view) => {
            if turn.calls.len() >= MAX_CALLS {
                turn.calls.remove(0);
            }
            let mut preview = String::new();
            push_capped(&mut preview, &view.preview, MAX_OUTPUT);
            turn.calls.push(LiveCall {
                call_id: view.call_id.clone(),
                name: view.name.clone(),
                header: view.header.clone(),
                preview,
                output: view.error.clone().unwrap_or_default(),
                is_error: view.error.is_some(),
                done: view.error.is_some(),
                needs_approval: view.needs_approval,
            });
            turn.phase = phase_of(&turn.calls);
        }
        TurnEvent::ToolOutputChunk { call_id, chunk } => {
            if let Some(call) = turn.calls.iter_mut().find(|c| c.call_id == *call_id) {
                push_capped(&mut call.output, chunk, MAX_OUTPUT);
                call.needs_approval = false;
            }
            turn.phase = phase_of(&turn.calls);
        }
        TurnEvent::ToolResult {
            call_id,
            output,
            is_error,
            ..
        } => {
            if let Some(call) = turn.calls.iter_mut().find(|c| c.call_id == *call_id) {
                call.output.clear();
                push_capped(&mut call.output, output, MAX_OUTPUT);
                call.is_error = *is_error;
                call.done = true;
                call.needs_approval = false;
            }
            turn.phase = phase_of(&turn.calls);
        }
        _ => {}
    }
}

/// Waiting while any open call needs a decision, running while any runs, else thinking.
fn phase_of(calls: &[LiveCall]) -> TurnPhase {
    let open = || calls.iter().filter(|c| !c.done);
    if let Some(c) = open().find(|c| c.needs_approval) {
        return TurnPhase::WaitingForApproval(c.name.clone());
    }
    match open().next() {
        Some(c) => TurnPhase::RunningTool(c.name.clone()),
        None => TurnPhase::Thinking,
    }
}

/// A turn's sink as [`Activity::observe`] wraps it.
pub struct ObservedSink<'a> {
    activity: &'a Activity,
    workstream: String,
    sink: &'a dyn TurnSink,
}

impl TurnSink for ObservedSink<'_> {
    fn event(&self, event: TurnEvent) {
        self.activity.record(&self.workstream, &event);
        self.sink.event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{NullSink, ToolCallView};
    use pretty_assertions::assert_eq;

    fn pending(id: &str, needs_approval: bool) -> TurnEvent {
        TurnEvent::ToolPending(ToolCallView {
            call_id: id.into(),
            name: "bash".into(),
            header: "bash: ls".into(),
            preview: "ls".into(),
            needs_approval,
            error: None,
        })
    }

    #[test]
    fn a_turn_goes_from_thinking_to_waiting_to_running_and_away() {
        let activity = Activity::default();
        let mut changes = activity.subscribe();
        let sink = activity.observe("w", &NullSink);
        sink.event(TurnEvent::TextDelta("let me look".into()));
        assert_eq!(activity.live()["w"].phase, TurnPhase::Thinking);
        sink.event(pending("c1", true));
        assert_eq!(
            activity.live()["w"].phase,
            TurnPhase::WaitingForApproval("bash".into())
        );
        sink.event(TurnEvent::ToolOutputChunk {
            call_id: "c1".into(),
            chunk: "a\n".into(),
        });
        assert_eq!(
            activity.live()["w"].phase,
            TurnPhase::RunningTool("bash".into())
        );
        sink.event(TurnEvent::ToolResult {
            call_id: "c1".into(),
            name: "bash".into(),
            output: "a\nb\n".into(),
            is_error: false,
            approval: None,
        });
        let live = activity.live();
        assert_eq!(live["w"].phase, TurnPhase::Thinking);
        assert_eq!(live["w"].calls[0].output, "a\nb\n");
        assert_eq!(live["w"].text, "let me look");
        sink.event(TurnEvent::TurnComplete {
            text: "done".into(),
            cancelled: false,
        });
        assert!(activity.live().is_empty());
        assert_eq!(changes.try_recv().unwrap(), "w");
    }

    #[test]
    fn long_text_is_capped_at_a_character_boundary() {
        let mut s = String::new();
        push_capped(&mut s, &"é".repeat(MAX_TEXT), MAX_TEXT);
        assert!(s.len() <= MAX_TEXT && s.len() > MAX_TEXT - 2);
    }
}
