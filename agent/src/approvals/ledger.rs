//! The one writer of approval state: every request asked, every decision, every request closed
//! without one, every answer a turn took, every grant made or taken back goes through
//! [`record`]. Nothing else in sandpiper writes `tool_approvals` or `tool_grants`, so there is
//! one place that says what a change is, and one place the audit trail hangs on.
//!
//! A decision is a conditional update (only a pending request is decided), so when a click and
//! a timeout race, the first write wins and the second is told nothing changed
//! ([`Recorded::changed`]). An Always allow adds its grant in the same call.

use crate::protocol::{ApprovalKind, ApprovalStatus, Decision, Verdict};
use crate::store::approvals::ApprovalRecord;
use crate::store::audit::{AuditEvent, AuditKind, AutoReason, CancelCause, DecisionKind};
use crate::store::{Store, StoreError};

use super::grant::Grant;

/// One change to approval state.
#[derive(Debug, Clone)]
pub enum Change<'a> {
    /// New requests, stored pending.
    Asked(&'a [ApprovalRecord]),
    /// A person's (or the approver's) decision on a pending request. An Always allow adds
    /// `grant` (the request's whole tool when `None`) in the same call.
    Decided {
        /// The request as it was read (its id, workstream, tool).
        request: &'a ApprovalRecord,
        /// What was decided, by whom (named by their user id when a person decided) and
        /// through which path.
        decision: &'a Decision,
        /// What an Always allow allows; `None`: the request's tool.
        grant: Option<Grant>,
    },
    /// Nobody decided within the approval timeout.
    TimedOut(&'a ApprovalRecord),
    /// The turn that asked will not run the call.
    Cancelled {
        /// The request.
        request: &'a ApprovalRecord,
        /// Why.
        cause: CancelCause,
    },
    /// The turn that asked has the answers to these requests and acts on them, so a node that
    /// takes the workstream over must not run their calls again on its own
    /// ([`Store::decided_untaken_for_call`]). Bookkeeping, not an approval event: no audit
    /// row. A request already taken keeps its time.
    Taken(&'a [ApprovalRecord]),
    /// Every pending request of a workstream is cancelled: the turn that asked is gone.
    CancelPending {
        /// Workstream key.
        workstream: &'a str,
        /// Why.
        cause: CancelCause,
    },
    /// Calls of one batch run without asking anyone; nothing but the audit trail is written,
    /// in one transaction.
    Unasked {
        /// The workstream whose rules applied (a sub-agent's parent thread).
        workstream: &'a str,
        /// Who started the turn (a sandpiper user id).
        requested_by: Option<&'a str>,
        /// The calls.
        calls: &'a [UnaskedCall<'a>],
    },
    /// sandpiper started with every call approved (`--yes`, `[approval] auto_approve`).
    AutoApproveSession {
        /// Where the session runs (`console:default`, `*` for a gateway).
        workstream: &'a str,
        /// What turned it on (`--yes`, `[approval] auto_approve`).
        source: &'a str,
    },
    /// Grants taken back.
    Revoked {
        /// Workstream key.
        workstream: &'a str,
        /// The grants (as stored: `bash`, `bash:git status`, `mcp__github__*`).
        grants: &'a [String],
        /// Who took them back (shown name).
        by: &'a str,
        /// Their sandpiper user id.
        by_id: Option<&'a str>,
    },
}

/// What a [`record`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Rows changed: requests asked, decided, closed or taken, grants taken back. Zero for a
    /// decision on a request that was no longer pending (someone else decided first).
    pub changed: u64,
    /// An Always allow made a new grant (false when it already existed).
    pub granted: bool,
}

impl Recorded {
    /// Whether anything changed.
    pub fn happened(self) -> bool {
        self.changed > 0
    }
}

/// Writes one change, and its audit events. The only writer of approval state.
pub async fn record(store: &Store, change: Change<'_>) -> Result<Recorded, StoreError> {
    let mut done = Recorded::default();
    match change {
        Change::Asked(requests) => {
            for r in requests {
                store.create_approval(r).await?;
                let requester = name_of(store, r.requested_by.as_deref(), None).await;
                let event = AuditEvent::about(
                    r,
                    AuditKind::Requested {
                        fingerprint: r.fingerprint.clone(),
                        preview: r.preview.clone(),
                        requested_by: r.requested_by.clone(),
                        approvers: r.approvers.clone(),
                    },
                )
                .by(requester, r.requested_by.clone());
                audit(store, event).await?;
                done.changed += 1;
            }
        }
        Change::Decided {
            request,
            decision,
            grant,
        } => {
            let by_id = decision.decided_by_id.as_deref();
            let status = ApprovalStatus::from(decision.verdict);
            let decided_by = name_of(store, by_id, decision.decided_by.as_deref()).await;
            // Stored with the request too: a card on any node says where it was decided.
            let first = store
                .decide_approval_via(
                    &request.id,
                    status,
                    decided_by.as_deref(),
                    decision.feedback.as_deref(),
                    decision.via.map(crate::protocol::DecisionPath::as_str),
                )
                .await?;
            if !first {
                return Ok(done);
            }
            done.changed = 1;
            let path = decision
                .via
                .unwrap_or(crate::protocol::DecisionPath::Automatic);
            let event = AuditEvent::about(
                request,
                AuditKind::Decided {
                    decision: DecisionKind::of(request.kind, decision.verdict),
                    path,
                    note: decision.feedback.clone(),
                },
            )
            .by(decided_by.clone(), by_id.map(str::to_owned));
            audit(store, event).await?;
            // A resumed call's Always allow was granted when it was clicked (perhaps for a
            // pattern only): copying it must not widen it to the whole tool.
            if decision.verdict == Verdict::AlwaysAllow
                && request.kind == ApprovalKind::ToolCall
                && path != crate::protocol::DecisionPath::Resumed
            {
                let grant = grant.unwrap_or_else(|| Grant::Tool(request.tool.clone()));
                let text = grant.to_string();
                done.granted = store
                    .add_grant(&request.workstream, &text, decided_by.as_deref())
                    .await?;
                if done.granted {
                    let event = AuditEvent::about(request, AuditKind::GrantCreated { grant: text })
                        .by(decided_by.clone(), by_id.map(str::to_owned));
                    audit(store, event).await?;
                }
            }
        }
        Change::TimedOut(request) => {
            if store
                .decide_approval(&request.id, ApprovalStatus::TimedOut, None, None)
                .await?
            {
                done.changed = 1;
                audit(store, AuditEvent::about(request, AuditKind::TimedOut)).await?;
            }
        }
        Change::Cancelled { request, cause } => {
            done.changed = u64::from(cancel(store, request, cause).await?);
        }
        Change::Taken(requests) => {
            let ids: Vec<String> = requests.iter().map(|r| r.id.clone()).collect();
            done.changed = store.mark_approvals_taken(&ids).await?;
        }
        Change::CancelPending { workstream, cause } => {
            for request in store.pending_in(workstream).await? {
                done.changed += u64::from(cancel(store, &request, cause).await?);
            }
        }
        Change::Unasked {
            workstream,
            requested_by,
            calls,
        } => {
            if calls.is_empty() {
                return Ok(done);
            }
            let requester = name_of(store, requested_by, None).await;
            let at = crate::store::now_ms();
            let events: Vec<AuditEvent> = calls
                .iter()
                .map(|call| AuditEvent {
                    workstream: workstream.to_owned(),
                    request: None,
                    call_id: Some(call.call_id.to_owned()),
                    tool: Some(call.tool.to_owned()),
                    actor: requester.clone(),
                    actor_id: requested_by.map(str::to_owned),
                    at,
                    kind: AuditKind::AutoApproved {
                        reason: call.reason,
                        grant: call.grant.map(|(g, _)| g.to_owned()),
                        granted_by: call.grant.and_then(|(_, by)| by.map(str::to_owned)),
                    },
                })
                .collect();
            for event in &events {
                event.log();
            }
            store.append_audits(&events).await?;
        }
        Change::AutoApproveSession { workstream, source } => {
            let event = AuditEvent {
                workstream: workstream.to_owned(),
                request: None,
                call_id: None,
                tool: None,
                actor: None,
                actor_id: None,
                at: crate::store::now_ms(),
                kind: AuditKind::AutoApproveSession {
                    source: source.to_owned(),
                },
            };
            audit(store, event).await?;
            done.changed = 1;
        }
        Change::Revoked {
            workstream,
            grants,
            by,
            by_id,
        } => {
            let actor = name_of(store, by_id, Some(by)).await;
            for grant in grants {
                if store.remove_grant(workstream, grant).await? {
                    done.changed += 1;
                    let event = AuditEvent {
                        workstream: workstream.to_owned(),
                        request: None,
                        call_id: None,
                        tool: Some(Grant::tool_of(grant).to_owned()),
                        actor: actor.clone(),
                        actor_id: by_id.map(str::to_owned),
                        at: crate::store::now_ms(),
                        kind: AuditKind::GrantRevoked {
                            grant: grant.clone(),
                        },
                    };
                    audit(store, event).await?;
                }
            }
        }
    }
    Ok(done)
}

/// Cancels one pending request; whether it was pending.
async fn cancel(
    store: &Store,
    request: &ApprovalRecord,
    cause: CancelCause,
) -> Result<bool, StoreError> {
    let changed = store
        .decide_approval(&request.id, ApprovalStatus::Cancelled, None, None)
        .await?;
    if changed {
        audit(
            store,
            AuditEvent::about(request, AuditKind::Cancelled { cause }),
        )
        .await?;
    }
    Ok(changed)
}

/// How records name the person who acted: a sandpiper user id as [`Store::public_name`]
/// names them (whatever name came with a click, which may be a display name anyone can
/// choose), the id itself when it names nobody; without an id (the console, `--yes`), the
/// name `given`.
pub(crate) async fn name_of(
    store: &Store,
    id: Option<&str>,
    given: Option<&str>,
) -> Option<String> {
    match id {
        Some(id) => Some(store.public_name_or_id(id).await),
        None => given.map(str::to_owned),
    }
}

/// One call that ran unasked ([`Change::Unasked`]).
#[derive(Debug, Clone, Copy)]
pub struct UnaskedCall<'a> {
    /// The call.
    pub call_id: &'a str,
    /// Tool name.
    pub tool: &'a str,
    /// Why it did not ask.
    pub reason: AutoReason,
    /// The grant it ran under, and who made it, for [`AutoReason::Grant`].
    pub grant: Option<(&'a str, Option<&'a str>)>,
}

/// Appends `event` to the trail and writes its log line.
async fn audit(store: &Store, event: AuditEvent) -> Result<(), StoreError> {
    event.log();
    store.append_audit(&event).await
}

/// The banner `--yes` and `[approval] auto_approve` print at start.
pub fn auto_approve_banner(source: &str) -> String {
    format!(
        "⚠️  AUTO-APPROVE IS ON ({source}): every tool call runs without asking anyone — \
         commands, file writes, network requests. Each call is recorded in the audit trail \
         (`sandpiper audit`)."
    )
}

/// At start: prunes the audit trail to `[audit] retention_days`, and when every call is
/// approved (`source` says what turned it on) records that and returns the banner to print.
pub async fn session_started(
    store: &Store,
    config: &crate::Config,
    workstream: &str,
    source: Option<&str>,
) -> Result<Option<String>, StoreError> {
    prune(store, &config.audit).await?;
    let Some(source) = source.filter(|_| config.approval.auto_approve) else {
        return Ok(None);
    };
    tracing::warn!(
        source,
        workstream,
        "auto-approve is on: tool calls run without asking"
    );
    record(store, Change::AutoApproveSession { workstream, source }).await?;
    Ok(Some(auto_approve_banner(source)))
}

/// Removes audit rows older than the retention; how many.
pub async fn prune(store: &Store, audit: &crate::config::AuditConfig) -> Result<u64, StoreError> {
    let Some(before) = audit.keep_after(crate::store::now_ms()) else {
        return Ok(0);
    };
    let pruned = store.prune_audit(before).await?;
    if pruned > 0 {
        tracing::info!(
            pruned,
            retention_days = audit.retention_days,
            "audit trail pruned"
        );
    }
    Ok(pruned)
}
