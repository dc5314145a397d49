//! The approval engine: the one place where approval requests are asked, decided and closed,
//! whatever the platform.
//!
//! - [`policy`]: who may decide a click (small pure rules over the stored request).
//! - [`NewRequest`] (in `request`): the one builder of a request before it is asked.
//! - [`ask`]: one round-trip for a batch of requests. It stores them as pending, puts them to
//!   the channel's [`Approver`], and stores every outcome the approver did not already store
//!   (a timeout, a stop, an answer typed at the console); then it tells the approver which
//!   requests it closed ([`Approver::closed`]), so a card can say so without polling.
//! - [`Agent::decide`] and [`Agent::decide_all`] (in `click`): a click on a card, checked
//!   against the stored request by [`policy::rule_on_click`] and stored once (the first valid
//!   click wins), then handed to the waiting turn through [`LiveApprovals`], or, after a
//!   restart, resuming the interrupted turn.
//! - [`review`]: a review gate (Accept / Reject / Annotate) through the same machinery, for
//!   work the agent produced (a plan).
//! - [`resume`]: turns interrupted by a restart while they waited; [`Agent::resume_click`]:
//!   the **Resume** button a card offers once every request of such a turn is decided.
//! - [`fingerprint`]: what a request is about (tool name and arguments), stored with it so a
//!   stored decision is never used for a different call; [`allowed_approvers`]: who may decide,
//!   stored with it so every node judges a click the same.
//! - [`grant`], [`pattern`], [`grants`]: what Always allow allows (a tool, a command
//!   pattern, an MCP server), the pure command-pattern matcher, and a workstream's grants.
//! - [`ledger`]: the one writer. Every stored change (a request asked, decided, timed out,
//!   cancelled, its answer taken by the turn that asked; a grant made or taken back) and
//!   every call that runs unasked goes through [`ledger::record`], which also writes the
//!   audit trail.
//! - [`Answer::of_stored`]: the one reading of a stored state, for a waiting turn on another
//!   node and for a resumed one alike.

mod click;
mod fingerprint;
pub mod grant;
pub mod grants;
pub mod ledger;
mod live;
pub mod pattern;
pub mod policy;
mod request;
pub mod resume;
mod resume_click;
mod review;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::protocol::{ApprovalItem, ApprovalStatus, Approver, Decision};
use crate::store::approvals::{AllowedApprovers, ApprovalRecord};
use crate::store::audit::CancelCause;
use crate::store::{Store, StoreError};

use ledger::Change;

pub use click::{AskingTurn, BatchClick, BatchOutcome, BatchRefusal, Click, ClickOutcome};
pub use fingerprint::{fingerprint, fingerprint_raw};
pub use grant::Grant;
pub use grants::{GrantedBy, Grants, RevokeTarget};
pub use live::{LiveApprovals, Waiters};
pub use policy::{ClickAction, Clicker, Refusal};
pub use request::NewRequest;
pub use resume_click::{ResumeClick, ResumeOutcome};
pub use review::{ReviewAnswer, ReviewRequest, review};

/// How one request of an [`ask`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A person (or the approver) decided.
    Decided(Decision),
    /// Nobody decided within the approval timeout.
    TimedOut,
    /// The turn was stopped while waiting.
    Cancelled,
}

impl Answer {
    /// What a stored request means to the turn that reads it (a waiting turn on another node,
    /// a resumed turn): the decision it holds; timed out; or, for one cancelled or still
    /// pending though the wait ended, cancelled. The call runs only for a decision that runs.
    /// The one mapping from a stored state to what a turn does.
    pub fn of_stored(r: &ApprovalRecord) -> Self {
        match (r.decision(), r.status) {
            (Some(d), _) => Answer::Decided(d),
            (None, ApprovalStatus::TimedOut) => Answer::TimedOut,
            (None, _) => Answer::Cancelled,
        }
    }

    /// The decision a resumed call is answered with: a stored decision as it was, anything
    /// else a denial.
    pub fn into_decision(self) -> Decision {
        match self {
            Answer::Decided(d) => d,
            Answer::TimedOut | Answer::Cancelled => Decision::deny(None),
        }
    }
}

/// Where an [`ask`] waits.
#[derive(Clone, Copy)]
pub struct AskContext<'a> {
    /// Where requests and decisions are stored.
    pub store: &'a Store,
    /// Who is asked.
    pub approver: &'a dyn Approver,
    /// How long to wait; zero waits forever.
    pub timeout: Duration,
    /// The turn's cancellation.
    pub cancel: &'a CancellationToken,
}

/// Stores `requests` as pending, asks about them in one round-trip, stores each outcome the
/// engine did not already store, and returns one answer per request, in order. When a click
/// and the timeout race, the stored decision wins.
pub async fn ask(
    cx: AskContext<'_>,
    requests: &[ApprovalRecord],
) -> Result<Vec<Answer>, StoreError> {
    ledger::record(cx.store, Change::Asked(requests)).await?;
    let items: Vec<ApprovalItem> = requests.iter().map(item).collect();
    let answers = round_trip(cx, &items).await;
    let mut out = Vec::with_capacity(requests.len());
    let mut closed = Vec::new();
    for (request, answer) in requests.iter().zip(answers) {
        // The store's conditional update is the one arbiter: a click stored its decision
        // first (then this finds the request decided and reads what is stored), or this
        // stores the approver's answer, the timeout or the stop.
        let change = match &answer {
            Answer::Decided(d) => Change::Decided {
                request,
                decision: d,
                grant: narrower_grant(request, d),
            },
            Answer::TimedOut => Change::TimedOut(request),
            Answer::Cancelled => Change::Cancelled {
                request,
                cause: CancelCause::Stop,
            },
        };
        if ledger::record(cx.store, change).await?.happened() {
            closed.push(request.id.clone());
            out.push(answer);
        } else {
            // A click decided it just as the wait ended: what is stored is what happened.
            let stored = cx.store.get_approval(&request.id).await?;
            out.push(match stored {
                Some(r) => Answer::of_stored(&r),
                None => answer,
            });
        }
    }
    // The turn has the answers now and acts on them: a node that takes the workstream over
    // after this one died must not run these calls again on its own.
    ledger::record(cx.store, Change::Taken(requests)).await?;
    if !closed.is_empty() {
        cx.approver.closed(&closed).await;
    }
    Ok(out)
}

/// Who may decide requests asked now in `workstream`: its owner and the roles or user groups
/// `approver` (the channel asking) lets decide. Stored with every request.
pub async fn allowed_approvers(
    store: &Store,
    approver: &dyn Approver,
    workstream: &str,
) -> Result<AllowedApprovers, StoreError> {
    let owner = store
        .workstream(workstream)
        .await?
        .and_then(|w| w.row.owner);
    Ok(AllowedApprovers {
        owner,
        roles: approver.approver_roles(),
    })
}

/// What an approver's Always allow grants: the narrower grant the request offers when the
/// person chose it (the rule a card's button follows), else the whole tool (`None`).
fn narrower_grant(request: &ApprovalRecord, decision: &Decision) -> Option<Grant> {
    if !decision.narrower {
        return None;
    }
    let offered = policy::offered_grant(&request.tool, &request.preview).map(|(_, grant)| grant);
    if offered.is_none() {
        tracing::warn!(request = %request.id, "a narrower Always allow was chosen where none is offered");
    }
    offered
}

/// The request as the channel is asked about it.
pub fn item(r: &ApprovalRecord) -> ApprovalItem {
    ApprovalItem {
        request_id: r.id.clone(),
        kind: r.kind,
        call_id: r.call_id.clone(),
        name: r.tool.clone(),
        header: r.header.clone(),
        preview: r.preview.clone(),
    }
}

/// A new request id (`ap_<uuid>`; button ids name it).
pub fn new_request_id() -> String {
    format!("ap_{}", uuid::Uuid::new_v4().simple())
}

/// One round-trip to the approver, bounded by the timeout and the turn's cancellation.
async fn round_trip(cx: AskContext<'_>, items: &[ApprovalItem]) -> Vec<Answer> {
    let wait = cx.approver.approve(items);
    let decided = if cx.timeout.is_zero() {
        tokio::select! {
            d = wait => Some(d),
            () = cx.cancel.cancelled() => return vec![Answer::Cancelled; items.len()],
        }
    } else {
        tokio::select! {
            d = tokio::time::timeout(cx.timeout, wait) => d.ok(),
            () = cx.cancel.cancelled() => return vec![Answer::Cancelled; items.len()],
        }
    };
    match decided {
        Some(mut d) => {
            d.resize(items.len(), Decision::deny(None));
            d.into_iter().map(Answer::Decided).collect()
        }
        None => vec![Answer::TimedOut; items.len()],
    }
}
