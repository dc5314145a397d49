//! Turns interrupted by a restart. A turn waiting for approval when sandpiper stopped leaves an
//! assistant message whose tool calls have no results, and pending requests in the store. A
//! click on such a request later still counts: once every request is decided the turn
//! resumes with the stored decisions ([`StoredDecisions`]). A new message in the thread
//! instead closes the dangling calls, so the history stays one the model accepts.

use crate::model::{Message, Role, ToolCall};
use crate::protocol::{ApprovalItem, Approver, Decision, Verdict};
use crate::store::Store;
use crate::store::approvals::ApprovalStatus;

/// The tool calls of the last assistant message that have no result yet.
pub fn unanswered_calls(history: &[Message]) -> Vec<ToolCall> {
    let Some(pos) = history
        .iter()
        .rposition(|m| m.role == Role::Assistant && !m.tool_calls.is_empty())
    else {
        return Vec::new();
    };
    let answered: Vec<&str> = history[pos + 1..]
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    history[pos]
        .tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .cloned()
        .collect()
}

/// Answers approvals from the decisions already stored for the same tool calls (made by
/// clicks after a restart). A call with no decided request is denied.
#[derive(Debug, Clone)]
pub struct StoredDecisions {
    store: Store,
    workstream: String,
}

impl StoredDecisions {
    /// Decisions of `workstream`'s requests.
    pub fn new(store: Store, workstream: impl Into<String>) -> Self {
        Self {
            store,
            workstream: workstream.into(),
        }
    }
}

#[async_trait::async_trait]
impl Approver for StoredDecisions {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            // The newest request for this call is the one the pipeline just created; the
            // decision lives on an earlier one.
            let decided = self
                .store
                .decided_approval_for_call(&self.workstream, &item.call_id)
                .await
                .ok()
                .flatten();
            let decision = match decided {
                Some(r) => {
                    let verdict = match r.status {
                        ApprovalStatus::Approved => Verdict::Approve,
                        ApprovalStatus::AlwaysAllowed => Verdict::AlwaysAllow,
                        ApprovalStatus::Annotated => Verdict::Annotate,
                        ApprovalStatus::Pending
                        | ApprovalStatus::Denied
                        | ApprovalStatus::TimedOut
                        | ApprovalStatus::Cancelled => Verdict::Deny,
                    };
                    let mut d = Decision::new(verdict, r.feedback);
                    d.decided_by = r.decided_by;
                    d
                }
                None => Decision::deny(None),
            };
            out.push(decision);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn finds_calls_without_results_in_the_last_batch_only() {
        let mut first = Message::assistant(String::new());
        first.tool_calls = vec![call("old")];
        let mut last = Message::assistant(String::new());
        last.tool_calls = vec![call("a"), call("b"), call("c")];
        let history = vec![
            Message::user("hi"),
            first,
            Message::tool_result("old", "bash", "ok"),
            last,
            Message::tool_result("b", "bash", "ok"),
        ];
        assert_eq!(unanswered_calls(&history), vec![call("a"), call("c")]);
        assert_eq!(unanswered_calls(&history[..3]), Vec::<ToolCall>::new());
    }
}
