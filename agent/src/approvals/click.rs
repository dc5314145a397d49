//! What a click on an approval button does, the same on every platform: channels translate a
//! platform event into a [`Click`] and render the [`ClickOutcome`]. Every click is checked
//! against the *stored* request ([`rule_on_click`]); the button only names it. The first valid
//! click decides (an atomic update in the store, the decision's only write); later ones are
//! told it was decided.
//!
//! A click on a request whose turn is no longer running (sandpiper restarted, or the node
//! running it stopped) still decides it: the decision is kept, the card says the turn was
//! interrupted, and once every request of that turn is decided it offers **Resume**
//! ([`AskingTurn::Interrupted`], then [`Agent::resume_click`](crate::Agent::resume_click)).
//! Nothing resumes on its own.

use super::ledger::{self, Change};
use crate::approvals::policy::{ClickAction, ClickContext, Clicker, Ruling, rule_on_click};
use crate::protocol::{ApprovalStatus, ApprovalView, Decision, DecisionPath};
use crate::store::approvals::ApprovalRecord;
use crate::store::audit::CancelCause;
use crate::{Agent, AgentError};

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
    /// Where the click happened (a card's button, its note dialog, the status page); the
    /// audit trail records it.
    pub path: DecisionPath,
    /// What an Always allow allows, when the button offered less than the whole tool (a
    /// command pattern, an MCP server); `None`: the request's tool.
    pub grant: Option<super::Grant>,
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
    /// Decided; re-render the card from this record, saying where the turn that asked stands.
    Decided {
        /// The request as stored after the decision.
        record: ApprovalView,
        /// Whether the turn got the decision or is no longer running.
        turn: AskingTurn,
    },
    /// The turn that asked is gone (stopped, or the thread moved on): the card should say so.
    Gone(ApprovalView),
}

/// Where the turn that asked stands after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskingTurn {
    /// It is running and was waiting for this decision; it has it now.
    Live,
    /// It is not running any more (sandpiper restarted, or the node running it stopped). The
    /// decision is kept; the card says so, and offers Resume once `resumable`: every request
    /// of that turn is decided.
    Interrupted {
        /// Every request of the interrupted turn is decided.
        resumable: bool,
    },
}

impl Agent {
    /// Decides a click: checks it against the stored request, stores the decision (first
    /// valid click wins) and hands it to the waiting turn, or keeps it for an interrupted one.
    pub async fn decide(&self, click: Click<'_>) -> Result<ClickOutcome, AgentError> {
        decide(self, click).await
    }

    /// [`Agent::decide`] for a button on the status page: the same rules and the same single
    /// write, and the stored decision says it came from the web (`decided_via`), so the thread's
    /// card (redrawn by the turn that waited, on whichever node runs it) can say so.
    pub async fn decide_from_web(&self, click: Click<'_>) -> Result<ClickOutcome, AgentError> {
        let click = Click {
            path: crate::protocol::DecisionPath::Web,
            ..click
        };
        decide(self, click).await
    }

    /// Approve all / Deny all: each pending request of a card judged on its own.
    pub async fn decide_all(&self, batch: BatchClick<'_>) -> BatchOutcome {
        decide_all(self, batch).await
    }

    /// The approver roles or user groups stored with `requests` (as they were when each was
    /// asked, maybe on another node), for a platform that must look up a clicker's membership
    /// in them; unknown requests, and a store that does not answer, add none.
    pub async fn approver_groups_of(&self, requests: &[String]) -> Vec<String> {
        let mut groups: Vec<String> = Vec::new();
        for id in requests {
            if let Ok(Some(r)) = self.store().get_approval(id).await
                && let Some(approvers) = r.approvers
            {
                for group in approvers.roles {
                    if !groups.contains(&group) {
                        groups.push(group);
                    }
                }
            }
        }
        groups
    }
}

async fn decide(agent: &Agent, click: Click<'_>) -> Result<ClickOutcome, AgentError> {
    let live = agent.live();
    let store = agent.store();
    let Some(record) = store.get_approval(click.request_id).await? else {
        return Ok(ClickOutcome::Unknown);
    };
    if record.status == ApprovalStatus::Cancelled {
        // The turn that asked was stopped or is gone: the card should say so.
        return Ok(ClickOutcome::Gone(record.into()));
    }
    let owner = store
        .workstream(&record.workstream)
        .await?
        .and_then(|w| w.row.owner);
    let ctx = ClickContext {
        request: &record,
        owner: owner.as_deref(),
        approver_roles: click.approver_roles,
        require_approver_for: &agent.config().approval.require_approver_for,
    };
    let who = Clicker {
        user_id: click.user_id,
        roles: click.roles,
    };
    if let Ruling::Deny(reason) = rule_on_click(&ctx, &who, click.action) {
        tracing::info!(
            request = %record.id,
            workstream = %record.workstream,
            tool = %record.tool,
            action = ?click.action,
            by = click.username,
            reason = %reason,
            "approval click refused"
        );
        return Ok(ClickOutcome::Refused(reason));
    }
    let grant = match click.action {
        ClickAction::AlwaysAllowPattern | ClickAction::AlwaysAllowServer => {
            match super::policy::offered_grant(&record.tool, &record.preview) {
                Some((offered, grant)) if offered == click.action => Some(grant),
                _ => {
                    return Ok(ClickOutcome::Refused(
                        "this call offers no such Always allow; use Always allow for the tool"
                            .into(),
                    ));
                }
            }
        }
        _ => click.grant.clone(),
    };
    if click.action.needs_note() && click.note.as_deref().is_none_or(|n| n.trim().is_empty()) {
        return Ok(ClickOutcome::NeedsNote);
    }
    let live_turn = live.is_waiting(&record.id);
    // In a cluster the turn may wait on the node that owns the workstream: never take it
    // for gone (or resume it a second time) while that node lives.
    let remote = match agent.cluster() {
        Some(cluster) if !live_turn => cluster.remote_owner(&record.workstream).await?,
        _ => None,
    };
    let interrupted = !live_turn && remote.is_none() && interrupted_call(agent, &record).await?;
    let timeout = agent.config().approval.timeout;
    let expired = !timeout.is_zero()
        && crate::store::now_ms() - record.created_at
            > i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    if interrupted && expired {
        // Nobody enforced the timeout while sandpiper was down: it applies now.
        ledger::record(store, Change::TimedOut(&record)).await?;
        let turn = interrupted_turn(agent, &record.workstream).await?;
        let record = store
            .get_approval(&record.id)
            .await?
            .unwrap_or(record)
            .into();
        return Ok(ClickOutcome::Decided { record, turn });
    }
    if !live_turn && !interrupted && remote.is_none() {
        let change = Change::Cancelled {
            request: &record,
            cause: CancelCause::Restart,
        };
        ledger::record(store, change).await?;
        let record = store.get_approval(&record.id).await?.unwrap_or(record);
        return Ok(ClickOutcome::Gone(record.into()));
    }
    let decision = Decision::new(
        click.action.verdict(),
        click.note.filter(|n| !n.trim().is_empty()),
    )
    .by(click.username)
    .via(click.path);
    let change = Change::Decided {
        request: &record,
        decision: &decision,
        by_id: Some(click.user_id),
        grant,
    };
    if !ledger::record(store, change).await?.happened() {
        return Ok(ClickOutcome::Refused(
            "this request was already decided".into(),
        ));
    }
    tracing::info!(
        request = %record.id,
        workstream = %record.workstream,
        decision = %ApprovalStatus::from(decision.verdict),
        by = click.username,
        via = click.path.as_str(),
        "approval decided"
    );
    let turn = if live_turn {
        live.deliver(&record.id, decision);
        AskingTurn::Live
    } else if let (Some(owner), Some(bus)) = (&remote, agent.cluster().and_then(|c| c.bus())) {
        // Stored above; the owner's waiting turn reads it from there.
        bus.signal(owner, &crate::cluster::Signal::Decided(record.id.clone()))
            .await?;
        tracing::info!(request = %record.id, owner = %owner, "decision sent to the owning node");
        AskingTurn::Live
    } else {
        let turn = interrupted_turn(agent, &record.workstream).await?;
        tracing::info!(
            request = %record.id,
            workstream = %record.workstream,
            turn = ?turn,
            "decision kept for an interrupted turn"
        );
        turn
    };
    let record = store
        .get_approval(&record.id)
        .await?
        .unwrap_or(record)
        .into();
    Ok(ClickOutcome::Decided { record, turn })
}

/// Approve all / Deny all: one person's click on a batch card.
#[derive(Debug, Clone)]
pub struct BatchClick<'a> {
    /// Every request on the card.
    pub request_ids: &'a [String],
    /// [`ClickAction::Approve`] or [`ClickAction::Deny`].
    pub action: ClickAction,
    /// The clicker's sandpiper user id.
    pub user_id: &'a str,
    /// The clicker's username (shown on the card).
    pub username: &'a str,
    /// The clicker's platform roles or user groups.
    pub roles: &'a [String],
    /// Roles whose members may decide (`approver_roles`, `approver_usergroups`).
    pub approver_roles: &'a [String],
    /// Where the click happened (the audit trail records it).
    pub path: DecisionPath,
}

/// A request of a batch the clicker could not decide, and why (shown only to them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The request's header (`bash: env`).
    pub header: String,
    /// Why it was not decided.
    pub reason: String,
}

/// What a batch click did. Every request is judged on its own, so one the clicker may not
/// decide does not stop the others (or let them through).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchOutcome {
    /// Some request changed state: redraw the card.
    pub changed: bool,
    /// Where the turn that asked stands after the last decision (`None`: nothing decided).
    pub turn: Option<AskingTurn>,
    /// The pending requests not decided, and why.
    pub refused: Vec<Refusal>,
}

impl BatchOutcome {
    /// The private answer naming each refused request, `quote` rendering a header for the
    /// platform; `None` when nothing was refused.
    pub fn refusal_text(&self, quote: impl Fn(&str) -> String) -> Option<String> {
        if self.refused.is_empty() {
            return None;
        }
        let mut out = if self.changed {
            "🚫 Some requests were not decided by you:".to_owned()
        } else {
            "🚫 Nothing was decided:".to_owned()
        };
        for r in &self.refused {
            let header: String = r.header.chars().take(80).collect();
            out.push_str(&format!("\n• {} — {}", quote(&header), r.reason));
        }
        Some(out)
    }
}

/// Decides every pending request of a batch card, each checked on its own by
/// [`rule_on_click`]; the same on every platform.
async fn decide_all(agent: &Agent, batch: BatchClick<'_>) -> BatchOutcome {
    let mut outcome = BatchOutcome::default();
    for id in batch.request_ids {
        let record = match agent.store().get_approval(id).await {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                outcome.refused.push(store_failure(id, &e));
                continue;
            }
        };
        if !matches!(
            record.status,
            ApprovalStatus::Pending | ApprovalStatus::Cancelled
        ) {
            // Decided before this click: nothing to do, nothing refused.
            continue;
        }
        let click = Click {
            request_id: id,
            action: batch.action,
            user_id: batch.user_id,
            username: batch.username,
            roles: batch.roles,
            approver_roles: batch.approver_roles,
            note: None,
            path: batch.path,
            grant: None,
        };
        match decide(agent, click).await {
            Ok(ClickOutcome::Decided { turn, .. }) => {
                outcome.changed = true;
                outcome.turn = Some(turn);
            }
            Ok(ClickOutcome::Gone(_)) => outcome.changed = true,
            Ok(ClickOutcome::Refused(reason)) => outcome.refused.push(Refusal {
                header: record.header,
                reason,
            }),
            Ok(ClickOutcome::Unknown | ClickOutcome::NeedsNote) => {}
            Err(e) => outcome.refused.push(store_failure(&record.header, &e)),
        }
    }
    outcome
}

fn store_failure(header: &str, e: &dyn std::fmt::Display) -> Refusal {
    tracing::warn!(error = %e, "deciding a batch request failed");
    Refusal {
        header: header.to_owned(),
        reason: format!("I could not record the decision ({e}); please try again"),
    }
}

/// Whether `record` asks about a call of a turn interrupted by a restart.
async fn interrupted_call(agent: &Agent, record: &ApprovalRecord) -> Result<bool, AgentError> {
    if !record.status.is_pending() {
        return Ok(false);
    }
    let history = agent.history(&record.workstream).await?;
    Ok(crate::approvals::resume::unanswered_calls(&history)
        .iter()
        .any(|c| c.id == record.call_id))
}

/// An interrupted turn, resumable once every request of it is decided.
async fn interrupted_turn(agent: &Agent, workstream: &str) -> Result<AskingTurn, AgentError> {
    Ok(AskingTurn::Interrupted {
        resumable: batch_decided(agent, workstream).await?,
    })
}

/// Whether every dangling call of an interrupted turn that was asked about is now decided.
pub(super) async fn batch_decided(agent: &Agent, workstream: &str) -> Result<bool, AgentError> {
    let history = agent.history(workstream).await?;
    for call in crate::approvals::resume::unanswered_calls(&history) {
        if let Some(r) = agent
            .store()
            .approval_for_call(workstream, &call.id)
            .await?
            && r.status.is_pending()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_batch_refusal_names_each_request_and_why() {
        let refused = vec![Refusal {
            header: "bash: env".into(),
            reason: "only the person who started this thread, or an approver, can decide this"
                .into(),
        }];
        let mixed = BatchOutcome {
            changed: true,
            turn: None,
            refused: refused.clone(),
        };
        assert_eq!(
            mixed.refusal_text(|h| format!("`{h}`")).as_deref(),
            Some(
                "🚫 Some requests were not decided by you:\n• `bash: env` — only the person who \
                 started this thread, or an approver, can decide this"
            )
        );
        let none = BatchOutcome {
            changed: false,
            turn: None,
            refused,
        };
        assert!(
            none.refusal_text(str::to_owned)
                .is_some_and(|t| t.starts_with("🚫 Nothing was decided:"))
        );
        assert_eq!(BatchOutcome::default().refusal_text(str::to_owned), None);
    }
}
