//! Turns interrupted by a restart. A turn waiting for approval when sandpiper stopped leaves an
//! assistant message whose tool calls have no results, and pending requests in the store. A
//! click on such a request later still counts: once every request is decided the turn
//! resumes with the stored decisions ([`StoredDecisions`]). A new message in the thread
//! instead closes the dangling calls, so the history stays one the model accepts.
//!
//! A stored decision is used only for the call it was made about: its request's fingerprint
//! (tool name and arguments, see [`fingerprint`](crate::approvals::fingerprint)) must match
//! the dangling call's; a mismatch is not a decision, and the call is denied with the reason.

use crate::model::{Message, Role, ToolCall};
use crate::protocol::{ApprovalItem, Approver, Decision, DecisionPath};
use crate::store::Store;

/// What the model is told when a stored decision was made about a different call.
pub const FINGERPRINT_MISMATCH: &str = "the decision stored for this call was made about a \
    different tool or different arguments, so it was not used; ask again if it should run";

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

impl StoredDecisions {
    /// The decision stored for `item`'s call, if it was made about this very call.
    async fn decision(&self, item: &ApprovalItem) -> Decision {
        // The newest request for this call is the one the pipeline just created (with the
        // dangling call's fingerprint); the decision lives on an earlier one.
        let decided = match self
            .store
            .decided_approval_for_call(&self.workstream, &item.call_id)
            .await
        {
            Ok(Some(r)) => r,
            Ok(None) => return Decision::deny(None).via(DecisionPath::Resumed),
            Err(e) => {
                tracing::warn!(workstream = %self.workstream, call = %item.call_id, error = %e,
                    "could not read the stored decision of an interrupted call; denying it");
                return Decision::deny(None).via(DecisionPath::Resumed);
            }
        };
        if let Some(stored) = decided.fingerprint.as_deref() {
            let current = match self.store.get_approval(&item.request_id).await {
                Ok(Some(r)) => r.fingerprint,
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(workstream = %self.workstream, call = %item.call_id,
                        error = %e, "could not read the resumed call's request; denying it");
                    None
                }
            };
            if current.as_deref() != Some(stored) {
                tracing::warn!(
                    workstream = %self.workstream,
                    call = %item.call_id,
                    tool = %item.name,
                    decided_request = %decided.id,
                    request = %item.request_id,
                    stored_fingerprint = stored,
                    call_fingerprint = current.as_deref().unwrap_or("unknown"),
                    "stored decision does not match the interrupted call; denying it"
                );
                return Decision::deny(Some(FINGERPRINT_MISMATCH.into()))
                    .via(DecisionPath::Resumed);
            }
        }
        super::Answer::of_stored(&decided)
            .into_decision()
            .via(DecisionPath::Resumed)
    }
}

#[async_trait::async_trait]
impl Approver for StoredDecisions {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(self.decision(item).await);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::ledger::{self, Change};
    use crate::protocol::ApprovalStatus;
    use crate::protocol::Verdict;
    use crate::store::approvals::ApprovalRecord;
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

    /// A request about call `c1` of `w`, with the fingerprint of `bash` running `command`
    /// (none when `command` is `None`: a row from before fingerprints).
    fn request(id: &str, command: Option<&str>) -> ApprovalRecord {
        ApprovalRecord {
            id: id.into(),
            kind: crate::protocol::ApprovalKind::ToolCall,
            workstream: "w".into(),
            call_id: "c1".into(),
            tool: "bash".into(),
            header: "bash".into(),
            preview: String::new(),
            requested_by: None,
            charged_to: None,
            status: ApprovalStatus::Pending,
            decided_by: None,
            feedback: None,
            decided_at: None,
            created_at: 0,
            fingerprint: command
                .map(|c| crate::approvals::fingerprint("bash", &serde_json::json!({"command": c}))),
            approvers: None,
            decided_via: None,
        }
    }

    /// alice approved `decided_about` before the restart; the resumed call is `resumed`.
    async fn resumed_with(decided_about: Option<&str>, resumed: &str) -> Decision {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        let before = request("ap_before", decided_about);
        ledger::record(&store, Change::Asked(std::slice::from_ref(&before)))
            .await
            .unwrap();
        let approve = Decision::new(Verdict::Approve, None).by("alice");
        let change = Change::Decided {
            request: &before,
            decision: &approve,
            grant: None,
        };
        assert!(ledger::record(&store, change).await.unwrap().happened());
        let now = request("ap_now", Some(resumed));
        ledger::record(&store, Change::Asked(std::slice::from_ref(&now)))
            .await
            .unwrap();
        let stored = StoredDecisions::new(store, "w");
        let mut decisions = stored.approve(&[crate::approvals::item(&now)]).await;
        assert_eq!(decisions.len(), 1);
        decisions.remove(0)
    }

    #[tokio::test]
    async fn a_stored_decision_resumes_only_the_call_it_was_made_about() {
        let resumed = DecisionPath::Resumed;
        assert_eq!(
            resumed_with(Some("ls"), "ls").await,
            Decision::approve().by("alice").via(resumed)
        );
        assert_eq!(
            resumed_with(Some("ls"), "rm -rf /").await,
            Decision::deny(Some(FINGERPRINT_MISMATCH.into())).via(resumed),
            "a mismatch is not a decision"
        );
        // A decision stored before fingerprints existed is used as before.
        assert_eq!(
            resumed_with(None, "ls").await,
            Decision::approve().by("alice").via(resumed)
        );
    }

    #[tokio::test]
    async fn a_call_without_a_stored_decision_is_denied() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", None).await.unwrap();
        let now = request("ap_now", Some("ls"));
        ledger::record(&store, Change::Asked(std::slice::from_ref(&now)))
            .await
            .unwrap();
        let stored = StoredDecisions::new(store, "w");
        assert_eq!(
            stored.approve(&[crate::approvals::item(&now)]).await,
            vec![Decision::deny(None).via(DecisionPath::Resumed)]
        );
    }
}
