//! What a click on an approval button does, the same on every platform: channels translate a
//! platform event into a [`Click`] and render the [`ClickOutcome`]. Every click is checked
//! against the *stored* request ([`rule_on_click`]); the button only names it. The first valid
//! click decides (an atomic update in the store, the decision's only write); later ones are
//! told it was decided.
//!
//! A click is a chain of named steps, each of which may answer early: look the request up,
//! apply the thread's rules, derive the grant, check the note, find where the turn that asked
//! is (closing the request when no turn will ever read it), record the decision, deliver it.
//!
//! A click on a request whose turn is no longer running (sandpiper restarted, or the node
//! running it stopped) still decides it: the decision is kept, the card says the turn was
//! interrupted, and once every request of that turn is decided it offers **Resume**
//! ([`AskingTurn::Interrupted`], then [`Agent::resume_click`](crate::Agent::resume_click)).
//! Nothing resumes on its own.

use super::ledger::{self, Change};
use crate::approvals::policy::{
    ClickAction, ClickContext, Clicker, Refusal, Ruling, chosen_grant, rule_on_click,
};
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
    /// Who clicked.
    pub clicker: Clicker<'a>,
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

    /// Whether `who` may press any of the buttons of pending request `request_id` by the rules
    /// of a click ([`rule_on_click`]): which approvals a place away from the thread (the
    /// status page) offers them. A decision is judged again when it is made.
    pub async fn may_decide(
        &self,
        request_id: &str,
        who: &Clicker<'_>,
    ) -> Result<bool, AgentError> {
        let Some(request) = self.store().get_approval(request_id).await? else {
            return Ok(false);
        };
        let buttons = ClickAction::for_kind(request.kind);
        let ruling = judge(self, &request, who, |ctx, who| {
            let any = buttons
                .iter()
                .any(|a| rule_on_click(ctx, who, *a) == Ruling::Allow);
            match any {
                true => Ruling::Allow,
                false => Ruling::Deny(Refusal::NotOwnerOrApprover),
            }
        })
        .await?;
        Ok(ruling == Ruling::Allow)
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

/// A click that goes no further: what to answer now, or why it could not be handled.
#[derive(Debug)]
enum Stop {
    /// The answer, decided by a step before the last (boxed: a store row is large).
    Early(Box<ClickOutcome>),
    /// The store or the cluster failed.
    Failed(AgentError),
}

impl Stop {
    /// Ends the click with `outcome`.
    fn answer(outcome: ClickOutcome) -> Self {
        Stop::Early(Box::new(outcome))
    }
}

impl From<AgentError> for Stop {
    fn from(e: AgentError) -> Self {
        Stop::Failed(e)
    }
}

impl From<crate::store::StoreError> for Stop {
    fn from(e: crate::store::StoreError) -> Self {
        Stop::Failed(e.into())
    }
}

impl From<Refusal> for Stop {
    fn from(refusal: Refusal) -> Self {
        Stop::answer(ClickOutcome::Refused(refusal.to_string()))
    }
}

async fn decide(agent: &Agent, click: Click<'_>) -> Result<ClickOutcome, AgentError> {
    match steps(agent, click).await {
        Ok(outcome) => Ok(outcome),
        Err(Stop::Early(outcome)) => Ok(*outcome),
        Err(Stop::Failed(e)) => Err(e),
    }
}

/// A click's steps, in order; any of them may answer early.
async fn steps(agent: &Agent, click: Click<'_>) -> Result<ClickOutcome, Stop> {
    let request = look_up(agent, click.request_id).await?;
    apply_rules(agent, &request, &click).await?;
    let grant = chosen_grant(&request, click.action, click.grant)?;
    let note = note_of(click.action, click.note)?;
    let turn = find_turn(agent, &request).await?;
    close_unheld(agent, &request, &turn).await?;
    let by_id = click.clicker.user_id;
    let by = ledger::name_of(agent.store(), Some(by_id), None)
        .await
        .unwrap_or_default();
    let decision = Decision::new(click.action.verdict(), note)
        .by_person(by_id, by)
        .via(click.path);
    record_decision(agent, &request, &decision, grant).await?;
    let turn = deliver(agent, &request, decision, turn).await?;
    let record = reread(agent, request).await?;
    Ok(ClickOutcome::Decided {
        record: record.into(),
        turn,
    })
}

/// The stored request the button names; a cancelled one answers at once that its turn is
/// gone (the card should say so).
async fn look_up(agent: &Agent, id: &str) -> Result<ApprovalRecord, Stop> {
    match agent.store().get_approval(id).await? {
        None => Err(Stop::answer(ClickOutcome::Unknown)),
        Some(r) if r.status == ApprovalStatus::Cancelled => {
            Err(Stop::answer(ClickOutcome::Gone(r.into())))
        }
        Some(r) => Ok(r),
    }
}

/// The thread's rules ([`rule_on_click`]); a refusal is logged and told to the clicker.
async fn apply_rules(
    agent: &Agent,
    request: &ApprovalRecord,
    click: &Click<'_>,
) -> Result<(), Stop> {
    let ruling = judge(agent, request, &click.clicker, |ctx, who| {
        rule_on_click(ctx, who, click.action)
    })
    .await?;
    let Ruling::Deny(refusal) = ruling else {
        return Ok(());
    };
    tracing::info!(
        request = %request.id,
        workstream = %request.workstream,
        tool = %request.tool,
        action = ?click.action,
        by = click.clicker.user_id,
        reason = %refusal,
        "approval click refused"
    );
    Err(refusal.into())
}

/// Judges `who`'s click on `request` with `rule`, against the workstream's owner as the store
/// says now and this node's `require_approver_for`: the one place a click's context is built,
/// for a decision and for Resume alike.
pub(super) async fn judge(
    agent: &Agent,
    request: &ApprovalRecord,
    who: &Clicker<'_>,
    rule: impl FnOnce(&ClickContext<'_>, &Clicker<'_>) -> Ruling,
) -> Result<Ruling, AgentError> {
    let owner = agent
        .store()
        .workstream(&request.workstream)
        .await?
        .and_then(|w| w.row.owner);
    let ctx = ClickContext {
        request,
        owner: owner.as_deref(),
        require_approver_for: &agent.config().approval.require_approver_for,
    };
    Ok(rule(&ctx, who))
}

/// The note the decision carries (a blank one is none); a with-note action without one
/// opens the note dialog first.
fn note_of(action: ClickAction, note: Option<String>) -> Result<Option<String>, Stop> {
    let note = note.filter(|n| !n.trim().is_empty());
    if action.needs_note() && note.is_none() {
        return Err(Stop::answer(ClickOutcome::NeedsNote));
    }
    Ok(note)
}

/// Where the turn that asked about a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TurnPlace {
    /// Waiting on this node.
    Here,
    /// Waiting on the node that owns the workstream (named): never taken for gone, nor
    /// resumed a second time, while that node lives.
    Node(String),
    /// Not running anywhere, its call still unanswered: a restart interrupted it.
    Interrupted,
    /// Not running anywhere, and the thread moved on.
    Gone,
}

/// Finds where the turn that asked about `request` is.
async fn find_turn(agent: &Agent, request: &ApprovalRecord) -> Result<TurnPlace, AgentError> {
    if agent.live().is_waiting(&request.id) {
        return Ok(TurnPlace::Here);
    }
    if let Some(cluster) = agent.cluster()
        && let Some(owner) = cluster.remote_owner(&request.workstream).await?
    {
        return Ok(TurnPlace::Node(owner));
    }
    Ok(if interrupted_call(agent, request).await? {
        TurnPlace::Interrupted
    } else {
        TurnPlace::Gone
    })
}

/// What a click does about the request before any decision, given where its turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unheld {
    /// A turn will read the decision (now, or when resumed): decide.
    Decide,
    /// The turn was interrupted and the approval timeout passed meanwhile (nobody enforced it
    /// while sandpiper was down): it times out now.
    TimeOut,
    /// No turn will ever read it: cancel it.
    Cancel,
}

/// The rule for a request whose turn may not be waiting any more.
fn unheld(turn: &TurnPlace, expired: bool) -> Unheld {
    match turn {
        TurnPlace::Here | TurnPlace::Node(_) => Unheld::Decide,
        TurnPlace::Interrupted if expired => Unheld::TimeOut,
        TurnPlace::Interrupted => Unheld::Decide,
        TurnPlace::Gone => Unheld::Cancel,
    }
}

/// Whether a request asked at `created_at` waited longer than `timeout` (zero: forever) by
/// `now` (milliseconds).
fn expired(created_at: i64, timeout: std::time::Duration, now: i64) -> bool {
    !timeout.is_zero() && now - created_at > i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX)
}

/// Times out or cancels a request no turn will read a decision of ([`unheld`]), answering
/// at once.
async fn close_unheld(
    agent: &Agent,
    request: &ApprovalRecord,
    turn: &TurnPlace,
) -> Result<(), Stop> {
    let timeout = agent.config().approval.timeout;
    let expired = expired(request.created_at, timeout, crate::store::now_ms());
    match unheld(turn, expired) {
        Unheld::Decide => Ok(()),
        Unheld::TimeOut => {
            ledger::record(agent.store(), Change::TimedOut(request)).await?;
            let turn = interrupted_turn(agent, &request.workstream).await?;
            let record = reread(agent, request.clone()).await?;
            Err(Stop::answer(ClickOutcome::Decided {
                record: record.into(),
                turn,
            }))
        }
        Unheld::Cancel => {
            let change = Change::Cancelled {
                request,
                cause: CancelCause::Restart,
            };
            ledger::record(agent.store(), change).await?;
            let record = reread(agent, request.clone()).await?;
            Err(Stop::answer(ClickOutcome::Gone(record.into())))
        }
    }
}

/// Stores the decision (the only write); another click or the timeout that stored first wins.
async fn record_decision(
    agent: &Agent,
    request: &ApprovalRecord,
    decision: &Decision,
    grant: Option<super::Grant>,
) -> Result<(), Stop> {
    let change = Change::Decided {
        request,
        decision,
        grant,
    };
    if !ledger::record(agent.store(), change).await?.happened() {
        return Err(Refusal::DecidedMeanwhile.into());
    }
    tracing::info!(
        request = %request.id,
        workstream = %request.workstream,
        decision = %ApprovalStatus::from(decision.verdict),
        by = decision.decided_by.as_deref().unwrap_or_default(),
        via = decision.via.map_or("", DecisionPath::as_str),
        "approval decided"
    );
    Ok(())
}

/// Hands the stored decision to the turn that asked, where it is; an interrupted turn keeps
/// it for Resume.
async fn deliver(
    agent: &Agent,
    request: &ApprovalRecord,
    decision: Decision,
    turn: TurnPlace,
) -> Result<AskingTurn, AgentError> {
    match turn {
        TurnPlace::Here => {
            agent.live().deliver(&request.id, decision);
            return Ok(AskingTurn::Live);
        }
        TurnPlace::Node(owner) => {
            if let Some(bus) = agent.cluster().and_then(|c| c.bus()) {
                // Stored already; the owner's waiting turn reads it from there.
                let signal = crate::cluster::Signal::Decided(request.id.clone());
                bus.signal(&owner, &signal).await?;
                tracing::info!(request = %request.id, owner = %owner, "decision sent to the owning node");
                return Ok(AskingTurn::Live);
            }
        }
        TurnPlace::Interrupted | TurnPlace::Gone => {}
    }
    let turn = interrupted_turn(agent, &request.workstream).await?;
    tracing::info!(
        request = %request.id,
        workstream = %request.workstream,
        turn = ?turn,
        "decision kept for an interrupted turn"
    );
    Ok(turn)
}

/// `request` as stored now (after this click's write), or as it was read when it is gone.
async fn reread(agent: &Agent, request: ApprovalRecord) -> Result<ApprovalRecord, AgentError> {
    Ok(agent
        .store()
        .get_approval(&request.id)
        .await?
        .unwrap_or(request))
}

/// Approve all / Deny all: one person's click on a batch card.
#[derive(Debug, Clone)]
pub struct BatchClick<'a> {
    /// Every request on the card.
    pub request_ids: &'a [String],
    /// [`ClickAction::Approve`] or [`ClickAction::Deny`].
    pub action: ClickAction,
    /// Who clicked.
    pub clicker: Clicker<'a>,
    /// Where the click happened (the audit trail records it).
    pub path: DecisionPath,
}

/// A request of a batch the clicker could not decide, and why (shown only to them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRefusal {
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
    pub refused: Vec<BatchRefusal>,
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
            clicker: batch.clicker,
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
            Ok(ClickOutcome::Refused(reason)) => outcome.refused.push(BatchRefusal {
                header: record.header,
                reason,
            }),
            Ok(ClickOutcome::Unknown | ClickOutcome::NeedsNote) => {}
            Err(e) => outcome.refused.push(store_failure(&record.header, &e)),
        }
    }
    outcome
}

fn store_failure(header: &str, e: &dyn std::fmt::Display) -> BatchRefusal {
    tracing::warn!(error = %e, "deciding a batch request failed");
    BatchRefusal {
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
    fn a_note_is_asked_for_only_by_the_with_note_actions_and_a_blank_one_is_none() {
        use ClickAction::*;
        let note = |n: &str| Some(n.to_owned());
        let cases = [
            (Approve, None, Some(None)),
            (Approve, note("  "), Some(None)),
            (Deny, note("not now"), Some(note("not now"))),
            (ApproveWithNote, note("careful"), Some(note("careful"))),
            (ApproveWithNote, None, None),
            (DenyWithNote, note(" \n"), None),
            (Annotate, note("fine, but"), Some(note("fine, but"))),
            (Annotate, None, None),
        ];
        for (action, given, want) in cases {
            let got = match note_of(action, given.clone()) {
                Ok(n) => Some(n),
                Err(Stop::Early(o)) if *o == ClickOutcome::NeedsNote => None,
                Err(other) => panic!("{action:?} {given:?}: {other:?}"),
            };
            assert_eq!(got, want, "{action:?} {given:?}");
        }
    }

    #[test]
    fn a_turn_waiting_anywhere_is_decided_an_interrupted_one_may_time_out_a_gone_one_is_cancelled()
    {
        let node = TurnPlace::Node("node-b".into());
        let cases = [
            (TurnPlace::Here, false, Unheld::Decide),
            (TurnPlace::Here, true, Unheld::Decide),
            (node.clone(), false, Unheld::Decide),
            (node, true, Unheld::Decide),
            (TurnPlace::Interrupted, false, Unheld::Decide),
            (TurnPlace::Interrupted, true, Unheld::TimeOut),
            (TurnPlace::Gone, false, Unheld::Cancel),
            (TurnPlace::Gone, true, Unheld::Cancel),
        ];
        for (turn, expired, want) in cases {
            assert_eq!(unheld(&turn, expired), want, "{turn:?} expired: {expired}");
        }
    }

    #[test]
    fn a_request_expires_only_after_a_nonzero_timeout_has_passed() {
        use std::time::Duration;
        let minute = Duration::from_secs(60);
        assert!(!expired(1_000, minute, 61_000), "exactly the timeout");
        assert!(expired(1_000, minute, 61_001));
        assert!(
            !expired(1_000, Duration::ZERO, i64::MAX),
            "zero waits forever"
        );
        assert!(!expired(0, Duration::MAX, i64::MAX), "a timeout beyond i64");
    }

    #[test]
    fn a_batch_refusal_names_each_request_and_why() {
        let refused = vec![BatchRefusal {
            header: "bash: env".into(),
            reason: Refusal::NotOwnerOrApprover.to_string(),
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
