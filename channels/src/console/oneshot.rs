//! One turn for a script (`sandpiper chat -p "…"`, `sandpiper exec "…"`): the message is
//! answered and the session ends, with an [`Ending`] that says whether it went well.
//!
//! Nobody is at a prompt, so stdin is never read for an approval: a call that asks is
//! approved when the session runs with `--yes` (or `[approval] auto_approve`), and otherwise
//! denied with a reason the model and the script both see. A call a grant covers (an earlier
//! *always*) runs without asking, as in every channel.
//!
//! With `json`, every line written is one JSON object with a `type`: `text_delta`,
//! `tool_call`, `tool_output`, `approval_requested`, `approval_decided`, `tool_result`,
//! `notice`, `error`, and last `usage` and `result` (the final answer and the ending). Without
//! it the turn is shown as the console shows it.

use std::sync::Mutex;

use sandpiper_agent::Agent;
use sandpiper_agent::TurnRequest;
use sandpiper_agent::protocol::{
    ApprovalItem, ApprovalOutcome, Approver, Decision, DecisionPath, TurnEvent, TurnSink,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::sink::{ConsoleSink, locked};
use super::{Output, identity, say};

/// Why a call that asked was denied when the session does not approve by itself.
pub const NO_APPROVER: &str = "nobody can approve calls in a one-shot session (-p / exec): \
    run it with --yes, or allow the tool first (`a` at the console, or a card's Always allow)";

/// How a one-shot turn ended; [`Ending::exit_code`] is the process's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The model answered and no call was denied: exit 0.
    Answered,
    /// The turn failed (the model, the database, a budget): exit 1.
    Failed,
    /// A call was denied (no `--yes` and no grant, or not decided in time), or the
    /// workstream is closed: exit 3 (2 is a command-line error).
    Refused,
    /// Stopped by Ctrl-C (SIGINT) before it ended: exit 130, as a shell reports a command
    /// interrupted by it.
    Stopped,
}

impl Ending {
    /// The process's exit status for this ending.
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::Answered => 0,
            Self::Failed => 1,
            Self::Refused => 3,
            Self::Stopped => 130,
        }
    }

    const fn as_str(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::Failed => "failed",
            Self::Refused => "refused",
            Self::Stopped => "stopped",
        }
    }
}

/// A one-shot session's settings.
#[derive(Debug, Clone)]
pub struct OneShot {
    /// Workstream name; the key is `console:<name>`.
    pub workstream: String,
    /// Who asks (the OS user name).
    pub user: String,
    /// Approve every call that asks (`--yes`).
    pub auto_approve: bool,
    /// One JSON event per line instead of the console's text.
    pub json: bool,
    /// Output is a terminal (text mode draws Markdown then).
    pub styled: bool,
}

/// Where the turn's events go: the console's text, or JSON lines.
enum Shown {
    Text(Box<ConsoleSink>),
    Json(Output),
}

/// Shows events and remembers whether a call was refused.
struct OneShotSink {
    shown: Shown,
    refused: Mutex<bool>,
}

impl OneShotSink {
    fn line(&self, value: Value) {
        if let Shown::Json(out) = &self.shown {
            say(out, &format!("{value}\n"));
        }
    }

    fn text(&self, text: &str) {
        if let Shown::Text(sink) = &self.shown {
            sink.show(text);
        }
    }
}

impl TurnSink for OneShotSink {
    fn event(&self, event: TurnEvent) {
        if let TurnEvent::ToolResult {
            approval: Some(outcome),
            ..
        } = &event
            && outcome.refused()
        {
            *locked(&self.refused) = true;
        }
        match &self.shown {
            Shown::Text(sink) => sink.event(event),
            Shown::Json(_) => {
                if let Some(value) = event_json(event) {
                    self.line(value);
                }
            }
        }
    }
}

/// A turn event as one JSON line; `None` for the ones a script has no use for (the end of
/// the turn is the `result` line).
fn event_json(event: TurnEvent) -> Option<Value> {
    Some(match event {
        TurnEvent::TextDelta(text) => json!({"type": "text_delta", "text": text}),
        TurnEvent::ToolPending(v) => json!({
            "type": "tool_call",
            "call_id": v.call_id,
            "name": v.name,
            "header": v.header,
            "preview": v.preview,
            "needs_approval": v.needs_approval,
            "error": v.error,
        }),
        TurnEvent::ToolOutputChunk { call_id, chunk } => {
            json!({"type": "tool_output", "call_id": call_id, "chunk": chunk})
        }
        TurnEvent::ToolResult {
            call_id,
            name,
            output,
            is_error,
            approval,
        } => json!({
            "type": "tool_result",
            "call_id": call_id,
            "name": name,
            "output": output,
            "is_error": is_error,
            "approval": approval.map(outcome_name),
        }),
        TurnEvent::SubAgent(status) => json!({
            "type": "sub_agent",
            "call_id": status.call_id,
            "status": status.to_string(),
        }),
        TurnEvent::Attachment {
            call_id,
            filename,
            body,
            comment,
        } => json!({
            "type": "attachment",
            "call_id": call_id,
            "filename": filename,
            "comment": comment,
            "body": body,
        }),
        TurnEvent::Waiting(wait) => json!({"type": "notice", "text": wait.to_string()}),
        TurnEvent::Compacting(step) => json!({"type": "notice", "text": step.to_string()}),
        TurnEvent::Notice(text) => json!({"type": "notice", "text": text}),
        TurnEvent::Error(message) => json!({"type": "error", "message": message}),
        TurnEvent::TurnComplete { .. } => return None,
    })
}

fn outcome_name(outcome: ApprovalOutcome) -> &'static str {
    match outcome {
        ApprovalOutcome::Approved => "approved",
        ApprovalOutcome::AlwaysAllowed => "always",
        ApprovalOutcome::Annotated => "annotated",
        ApprovalOutcome::Denied => "denied",
        ApprovalOutcome::TimedOut => "timed_out",
        ApprovalOutcome::Cancelled => "cancelled",
    }
}

/// Decides every item at once: approves with `--yes`, denies with [`NO_APPROVER`] otherwise;
/// each question and decision is shown.
struct OneShotApprover<'a> {
    sink: &'a OneShotSink,
    approve: bool,
}

#[async_trait::async_trait]
impl Approver for OneShotApprover<'_> {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        items
            .iter()
            .map(|item| {
                self.sink.line(json!({
                    "type": "approval_requested",
                    "request_id": item.request_id,
                    "call_id": item.call_id,
                    "name": item.name,
                    "header": item.header,
                }));
                let (decision, by) = if self.approve {
                    (Decision::approve(), "--yes")
                } else {
                    self.sink.text(&format!(
                        "denied {}: {NO_APPROVER}",
                        crate::card::header(&item.header)
                    ));
                    (Decision::deny(Some(NO_APPROVER.to_owned())), "nobody")
                };
                self.sink.line(json!({
                    "type": "approval_decided",
                    "request_id": item.request_id,
                    "call_id": item.call_id,
                    "decision": if self.approve { "approved" } else { "denied" },
                    "by": by,
                    "reason": decision.feedback,
                }));
                decision.via(DecisionPath::Automatic)
            })
            .collect()
    }
}

impl OneShot {
    /// Runs `text` as one turn of the workstream, writing to `out`, until it ends or `stop`
    /// is cancelled (Ctrl-C); says how it ended.
    pub async fn run(
        &self,
        agent: &Agent,
        text: String,
        out: Output,
        stop: CancellationToken,
    ) -> Ending {
        let sink = OneShotSink {
            shown: if self.json {
                Shown::Json(out.clone())
            } else {
                Shown::Text(Box::new(ConsoleSink::new(out.clone(), self.styled)))
            },
            refused: Mutex::new(false),
        };
        let key = sandpiper_agent::workstream::WorkstreamKey::console(&self.workstream).to_string();
        let (ending, answer, usage) = self.turn(agent, &key, text, &sink, stop).await;
        let usage = json!({
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        });
        sink.line(json!({"type": "usage", "usage": usage}));
        sink.line(json!({
            "type": "result",
            "status": ending.as_str(),
            "exit_code": ending.exit_code(),
            "text": answer,
            "workstream": key,
        }));
        ending
    }

    /// The turn itself: its ending, final answer and token usage.
    async fn turn(
        &self,
        agent: &Agent,
        key: &str,
        text: String,
        sink: &OneShotSink,
        stop: CancellationToken,
    ) -> (Ending, String, sandpiper_agent::model::Usage) {
        let none = sandpiper_agent::model::Usage::default();
        let user = match agent.person(identity(&self.user)).await {
            Ok(user) => user,
            Err(e) => {
                sink.event(TurnEvent::Error(format!("cannot look up user: {e}")));
                return (Ending::Failed, String::new(), none);
            }
        };
        if let Err(e) = super::open_workstream(agent, key, &user.id).await {
            sink.event(TurnEvent::Error(e.to_string()));
            return (Ending::Failed, String::new(), none);
        }
        match agent.is_closed(key).await {
            Ok(false) => {}
            Ok(true) => {
                sink.event(TurnEvent::Notice(crate::thread::CLOSED.to_owned()));
                return (Ending::Refused, String::new(), none);
            }
            Err(e) => {
                sink.event(TurnEvent::Error(e.to_string()));
                return (Ending::Failed, String::new(), none);
            }
        }
        let approver = OneShotApprover {
            sink,
            approve: self.auto_approve,
        };
        let result = agent
            .run_turn(TurnRequest {
                workstream: key,
                author: Some(&user.id),
                text,
                sink,
                approver: &approver,
                cancel: stop,
            })
            .await;
        match result {
            Err(e) => {
                tracing::debug!(workstream = %key, error = %e, "one-shot turn failed");
                (Ending::Failed, String::new(), none)
            }
            Ok(outcome) if outcome.cancelled => (Ending::Stopped, outcome.text, outcome.usage),
            Ok(outcome) if *locked(&sink.refused) => (Ending::Refused, outcome.text, outcome.usage),
            Ok(outcome) => (Ending::Answered, outcome.text, outcome.usage),
        }
    }
}
