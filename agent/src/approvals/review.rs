//! A review gate: people Accept, Reject or Annotate something the agent produced (a plan),
//! through the same cards, rules and store as tool-call approvals.

use tokio_util::sync::CancellationToken;

use super::{Answer, AskContext, ask, new_request_id};
use crate::Agent;
use crate::protocol::{ApprovalKind, Approver, Verdict};
use crate::store::StoreError;
use crate::store::approvals::{ApprovalRecord, ApprovalStatus};

/// What to put to review.
#[derive(Debug, Clone)]
pub struct ReviewRequest<'a> {
    /// Workstream key; the card goes to its thread.
    pub workstream: &'a str,
    /// The tool call that produced the work (its result carries the answer).
    pub call_id: &'a str,
    /// The tool that produced it (`plan`); `[approval] require_approver_for` applies to it.
    pub tool: &'a str,
    /// One line naming what is reviewed.
    pub header: &'a str,
    /// What is reviewed, as shown on the card (cut there; the whole text is elsewhere).
    pub preview: &'a str,
    /// Who started the turn.
    pub requested_by: Option<&'a str>,
    /// The turn's cancellation.
    pub cancel: &'a CancellationToken,
}

/// How a review ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewAnswer {
    /// It stands.
    Accepted {
        /// Who accepted.
        by: Option<String>,
    },
    /// It does not stand.
    Rejected {
        /// Who rejected.
        by: Option<String>,
        /// Why, when they said.
        note: Option<String>,
    },
    /// It stands with a note the model must take into account.
    Annotated {
        /// Who annotated.
        by: Option<String>,
        /// The note.
        note: String,
    },
    /// Nobody answered within the approval timeout.
    TimedOut,
    /// The turn was stopped while waiting.
    Cancelled,
}

/// Asks the people of `req.workstream` to review, through `approver` (the turn's); waits at
/// most `[approval] timeout`.
pub async fn review(
    agent: &Agent,
    approver: &dyn Approver,
    req: ReviewRequest<'_>,
) -> Result<ReviewAnswer, StoreError> {
    let record = ApprovalRecord {
        id: new_request_id(),
        kind: ApprovalKind::Review,
        workstream: req.workstream.to_owned(),
        call_id: req.call_id.to_owned(),
        tool: req.tool.to_owned(),
        header: req.header.to_owned(),
        preview: req.preview.to_owned(),
        requested_by: req.requested_by.map(str::to_owned),
        status: ApprovalStatus::Pending,
        decided_by: None,
        feedback: None,
        decided_at: None,
        created_at: 0,
        // What is reviewed is the text shown; its fingerprint ties a decision to it.
        fingerprint: Some(super::fingerprint(
            req.tool,
            &serde_json::Value::String(req.preview.to_owned()),
        )),
        approvers: Some(super::allowed_approvers(agent.store(), approver, req.workstream).await?),
        decided_via: None,
    };
    let cx = AskContext {
        store: agent.store(),
        approver,
        timeout: agent.config().approval.timeout,
        cancel: req.cancel,
    };
    let answer = ask(cx, std::slice::from_ref(&record))
        .await?
        .pop()
        .unwrap_or(Answer::Cancelled);
    Ok(match answer {
        Answer::TimedOut => ReviewAnswer::TimedOut,
        Answer::Cancelled => ReviewAnswer::Cancelled,
        Answer::Decided(d) => match (d.verdict, d.feedback) {
            (Verdict::Approve | Verdict::AlwaysAllow, _) => {
                ReviewAnswer::Accepted { by: d.decided_by }
            }
            (Verdict::Annotate, Some(note)) => ReviewAnswer::Annotated {
                by: d.decided_by,
                note,
            },
            (Verdict::Annotate, None) => ReviewAnswer::Accepted { by: d.decided_by },
            (Verdict::Deny, note) => ReviewAnswer::Rejected {
                by: d.decided_by,
                note,
            },
        },
    })
}
