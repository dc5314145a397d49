//! What a click on an approval button does, the same on every platform. Every click is checked
//! against the *stored* request ([`rule_on_click`]); the button only names it. The first
//! valid click decides (an atomic update in the store); later ones are told it was decided.

use sandpiper_agent::approval_policy::{ClickAction, ClickContext, Clicker, Ruling, rule_on_click};
use sandpiper_agent::protocol::{Decision, Verdict};
use sandpiper_agent::store::approvals::ApprovalRecord;
use sandpiper_agent::{Agent, AgentError};

use crate::live::LiveApprovals;

/// A click, resolved to sandpiper identities.
#[derive(Debug, Clone)]
pub struct Click<'a> {
    /// The request the button names.
    pub request_id: &'a str,
    /// What the button does.
    pub action: ClickAction,
    /// The clicker's sandpiper user id.
    pub user_id: &'a str,
    /// The clicker's username (shown on the card).
    pub username: &'a str,
    /// The clicker's platform roles or user groups.
    pub roles: &'a [String],
    /// Roles whose members may decide (`approver_roles`, `approver_usergroups`).
    pub approver_roles: &'a [String],
    /// The note typed in the modal, for the with-note actions.
    pub note: Option<String>,
}

/// What the platform should do after a click.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClickOutcome {
    /// No such request (forged or deleted): tell the clicker, change nothing.
    Unknown,
    /// Not allowed or already decided: tell only the clicker why; change nothing.
    Refused(String),
    /// A with-note action without its note yet: open the note dialog.
    NeedsNote,
    /// Decided; re-render the card from this record. `resume` is set when the turn was
    /// interrupted by a restart and every call of it is now decided: resume it.
    Decided {
        /// The request as stored after the decision.
        record: ApprovalRecord,
        /// Whether to resume an interrupted turn (after a restart).
        resume: bool,
    },
    /// The turn that asked is gone (stopped, or the thread moved on): the card should say so.
    Gone(ApprovalRecord),
}

fn verdict(action: ClickAction) -> Verdict {
    match action {
        ClickAction::Approve | ClickAction::ApproveWithNote => Verdict::Approve,
        ClickAction::Deny | ClickAction::DenyWithNote => Verdict::Deny,
        ClickAction::AlwaysAllow => Verdict::AlwaysAllow,
    }
}

/// Decides a click.
pub async fn decide(
    agent: &Agent,
    live: &LiveApprovals,
    click: Click<'_>,
) -> Result<ClickOutcome, AgentError> {
    let store = agent.store();
    let Some(record) = store.get_approval(click.request_id).await? else {
        return Ok(ClickOutcome::Unknown);
    };
    let owner = store
        .workstream(&record.workstream)
        .await?
        .and_then(|w| w.row.owner);
    let ctx = ClickContext {
        request: &record,
        owner: owner.as_deref(),
        approver_roles: click.approver_roles,
    };
    let who = Clicker {
        user_id: click.user_id,
        roles: click.roles,
    };
    if let Ruling::Deny(reason) = rule_on_click(&ctx, &who, click.action) {
        return Ok(ClickOutcome::Refused(reason));
    }
    let with_note = matches!(
        click.action,
        ClickAction::ApproveWithNote | ClickAction::DenyWithNote
    );
    if with_note && click.note.as_deref().is_none_or(|n| n.trim().is_empty()) {
        return Ok(ClickOutcome::NeedsNote);
    }
    let live_turn = live.is_waiting(&record.id);
    let interrupted = !live_turn && interrupted_call(agent, &record).await?;
    if !live_turn && !interrupted {
        store
            .decide_approval(&record.id, "cancelled", None, None)
            .await?;
        let record = store.get_approval(&record.id).await?.unwrap_or(record);
        return Ok(ClickOutcome::Gone(record));
    }
    let decision = Decision {
        verdict: verdict(click.action),
        feedback: click.note.filter(|n| !n.trim().is_empty()),
        decided_by: Some(click.username.to_owned()),
    };
    let first = store
        .decide_approval(
            &record.id,
            decision.verdict.as_str(),
            decision.decided_by.as_deref(),
            decision.feedback.as_deref(),
        )
        .await?;
    if !first {
        return Ok(ClickOutcome::Refused(
            "this request was already decided".into(),
        ));
    }
    tracing::info!(
        request = %record.id,
        workstream = %record.workstream,
        decision = decision.verdict.as_str(),
        by = click.username,
        "approval decided"
    );
    let resume = if live_turn {
        live.deliver(&record.id, decision);
        false
    } else {
        batch_decided(agent, &record.workstream).await?
    };
    let record = store.get_approval(&record.id).await?.unwrap_or(record);
    Ok(ClickOutcome::Decided { record, resume })
}

/// Whether `record` asks about a call of a turn interrupted by a restart.
async fn interrupted_call(agent: &Agent, record: &ApprovalRecord) -> Result<bool, AgentError> {
    if record.status != "pending" {
        return Ok(false);
    }
    let history = agent.history(&record.workstream).await?;
    Ok(sandpiper_agent::resume::unanswered_calls(&history)
        .iter()
        .any(|c| c.id == record.call_id))
}

/// Whether every dangling call of an interrupted turn that was asked about is now decided.
async fn batch_decided(agent: &Agent, workstream: &str) -> Result<bool, AgentError> {
    let history = agent.history(workstream).await?;
    for call in sandpiper_agent::resume::unanswered_calls(&history) {
        if let Some(r) = agent
            .store()
            .approval_for_call(workstream, &call.id)
            .await?
            && r.status == "pending"
        {
            return Ok(false);
        }
    }
    Ok(true)
}
