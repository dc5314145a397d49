//! The `audit_events` table: every approval event as an append-only row (issue 30), written by
//! the approval engine's one writer ([`crate::approvals::ledger`]). Normal operation only
//! inserts; [`Store::prune_audit`] removes rows older than the retention.

use serde::{Deserialize, Serialize};

use super::approvals::{AllowedApprovers, ApprovalRecord};
use super::{Store, StoreError};
use crate::protocol::{ApprovalKind, DecisionPath, Verdict};

/// One approval event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When it happened (unix ms).
    pub at: i64,
    /// The workstream whose rules applied (a sub-agent's parent thread).
    pub workstream: String,
    /// The approval request it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The tool call it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Who acted: who asked, decided, granted or revoked (a username or shown name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Their sandpiper user id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub kind: AuditKind,
}

/// What happened, with what only that kind of event has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditKind {
    /// A request was asked.
    Requested {
        /// What the decision is tied to (tool name and arguments).
        fingerprint: Option<String>,
        /// What the approver was shown.
        preview: String,
        /// Who started the turn (a sandpiper user id).
        requested_by: Option<String>,
        /// Who may decide.
        approvers: Option<AllowedApprovers>,
    },
    /// Someone decided.
    Decided {
        /// What they decided.
        decision: DecisionKind,
        /// Through which path.
        path: DecisionPath,
        /// The note typed with it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A call ran without asking anyone.
    AutoApproved {
        /// Why it did not ask.
        reason: AutoReason,
        /// The grant it ran under (for [`AutoReason::Grant`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<String>,
        /// Who made that grant.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        granted_by: Option<String>,
    },
    /// Nobody decided within the approval timeout.
    TimedOut,
    /// The call will not run: the turn that asked ended first.
    Cancelled {
        /// Why.
        cause: CancelCause,
    },
    /// An Always allow made a grant.
    GrantCreated {
        /// The grant as stored (`bash`, `bash:git status`, `mcp__github__*`).
        grant: String,
    },
    /// A grant was taken back.
    GrantRevoked {
        /// The grant as stored.
        grant: String,
    },
    /// sandpiper started with every call approved (`--yes`, `[approval] auto_approve`).
    AutoApproveSession {
        /// Where it was set.
        source: String,
    },
    /// An admin changed a daily budget (`/budget`, the status page).
    BudgetChanged {
        /// A person's, a thread's or a channel's.
        scope: super::budget_kinds::BudgetScope,
        /// The person's user id, the thread's or the channel's key.
        subject: String,
        /// The person as records name them (a person's budget only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subject_name: Option<String>,
        /// Tokens or money.
        unit: super::budget_kinds::BudgetUnit,
        /// The cap in force before (tokens or micro-dollars; `None`: none).
        old: Option<u64>,
        /// The cap from now on.
        new: Option<u64>,
    },
}

impl AuditKind {
    /// The stored `kind` column.
    pub fn name(&self) -> &'static str {
        match self {
            AuditKind::Requested { .. } => "requested",
            AuditKind::Decided { .. } => "decided",
            AuditKind::AutoApproved { .. } => "auto_approved",
            AuditKind::TimedOut => "timed_out",
            AuditKind::Cancelled { .. } => "cancelled",
            AuditKind::GrantCreated { .. } => "grant_created",
            AuditKind::GrantRevoked { .. } => "grant_revoked",
            AuditKind::AutoApproveSession { .. } => "auto_approve_session",
            AuditKind::BudgetChanged { .. } => "budget_changed",
        }
    }

    /// The message of the event's log line: what a reader of the logs searches for.
    pub fn log_message(&self) -> &'static str {
        match self {
            AuditKind::Requested { .. }
            | AuditKind::Decided { .. }
            | AuditKind::AutoApproved { .. }
            | AuditKind::TimedOut
            | AuditKind::Cancelled { .. }
            | AuditKind::GrantCreated { .. }
            | AuditKind::GrantRevoked { .. }
            | AuditKind::AutoApproveSession { .. } => "approval event",
            AuditKind::BudgetChanged { .. } => "budget change",
        }
    }
}

/// What a person decided, in the words of the card they decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// A tool call approved.
    Approved,
    /// A tool call denied.
    Denied,
    /// A tool call approved, and its tool (or pattern) from now on.
    AlwaysAllowed,
    /// A review accepted.
    Accepted,
    /// A review rejected.
    Rejected,
    /// A review accepted with a note.
    Annotated,
}

impl DecisionKind {
    /// The decision `verdict` stands for on a request of `kind`.
    pub fn of(kind: ApprovalKind, verdict: Verdict) -> Self {
        match (kind, verdict) {
            (ApprovalKind::Review, Verdict::Approve | Verdict::AlwaysAllow) => Self::Accepted,
            (ApprovalKind::Review, Verdict::Deny) => Self::Rejected,
            (_, Verdict::Annotate) => Self::Annotated,
            (_, Verdict::Approve) => Self::Approved,
            (_, Verdict::Deny) => Self::Denied,
            (_, Verdict::AlwaysAllow) => Self::AlwaysAllowed,
        }
    }
}

/// Why a call ran without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoReason {
    /// The tool's `auto_approve` (its JSON, or the MCP server's list).
    ToolAutoApprove,
    /// A read inside the workstream's own directory.
    ReadInWorkdir,
    /// An Always allow grant of the workstream.
    Grant,
    /// `--yes` or `[approval] auto_approve`.
    AutoApproveSession,
}

/// Why a request was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelCause {
    /// `/stop`, the Stop button, Ctrl-C or shutdown stopped the turn.
    Stop,
    /// sandpiper restarted (or the node running the turn stopped) and the turn is gone.
    Restart,
    /// A new message in the thread moved the conversation on.
    NewMessage,
}

impl AuditEvent {
    /// An event about request `r`, happening now, by nobody yet.
    pub fn about(r: &ApprovalRecord, kind: AuditKind) -> Self {
        Self {
            at: super::now_ms(),
            workstream: r.workstream.clone(),
            request: Some(r.id.clone()),
            call_id: Some(r.call_id.clone()),
            tool: Some(r.tool.clone()),
            actor: None,
            actor_id: None,
            kind,
        }
    }

    /// Names who acted.
    pub fn by(mut self, actor: Option<String>, actor_id: Option<String>) -> Self {
        self.actor = actor;
        self.actor_id = actor_id;
        self
    }

    /// The event's log line (`target: "audit"`), so a log shipper can keep the trail too.
    pub fn log(&self) {
        let detail = serde_json::to_string(&self.kind).unwrap_or_default();
        tracing::info!(
            target: "audit",
            kind = self.kind.name(),
            workstream = %self.workstream,
            request = self.request.as_deref(),
            call = self.call_id.as_deref(),
            tool = self.tool.as_deref(),
            actor = self.actor.as_deref(),
            actor_id = self.actor_id.as_deref(),
            detail = %detail,
            "{}",
            self.kind.log_message()
        );
    }
}

/// A stored event with its row id (ascending in the order written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    /// Row id.
    pub id: i64,
    /// The event.
    #[serde(flatten)]
    pub event: AuditEvent,
}

/// Which events [`Store::audit`] returns; every field narrows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only this workstream.
    pub workstream: Option<String>,
    /// Only events this person acted in: a user id, a username or a platform handle (never a
    /// display name).
    pub user: Option<String>,
    /// Only events at or after this time (unix ms).
    pub since: Option<i64>,
    /// At most this many, the newest (all when `None`), still in the order written.
    pub limit: Option<u32>,
}

/// The columns one audit row binds.
const AUDIT_COLUMNS: usize = 8;

/// Rows per `INSERT`: far below either database's limit on bound parameters.
const AUDIT_ROWS_PER_STATEMENT: usize = 64;

impl Store {
    /// Appends one event.
    pub async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        self.append_audits(std::slice::from_ref(event)).await
    }

    /// Appends `events` atomically: one multi-row statement (one round trip, no transaction
    /// around it) for a batch's calls, a transaction only for a batch longer than
    /// [`AUDIT_ROWS_PER_STATEMENT`].
    pub async fn append_audits(&self, events: &[AuditEvent]) -> Result<(), StoreError> {
        match events.len() {
            0 => Ok(()),
            n if n <= AUDIT_ROWS_PER_STATEMENT => Self::insert_audits(self.pool(), events).await,
            _ => {
                let mut tx = self.pool().begin().await?;
                for chunk in events.chunks(AUDIT_ROWS_PER_STATEMENT) {
                    Self::insert_audits(&mut *tx, chunk).await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }
    }

    /// One `INSERT` of every event in `events` (at most [`AUDIT_ROWS_PER_STATEMENT`]).
    pub(super) async fn insert_audits<'c, E>(
        conn: E,
        events: &[AuditEvent],
    ) -> Result<(), StoreError>
    where
        E: sqlx::Executor<'c, Database = sqlx::Any>,
    {
        let details = events
            .iter()
            .map(|event| {
                serde_json::to_string(event).map_err(|e| StoreError::Corrupt {
                    table: "audit_events",
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rows: Vec<String> = (0..events.len())
            .map(|row| {
                let first = row * AUDIT_COLUMNS + 1;
                let params: Vec<String> = (first..first + AUDIT_COLUMNS)
                    .map(|n| format!("${n}"))
                    .collect();
                format!("({})", params.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO audit_events (at, kind, workstream, request_id, tool, actor, actor_id, \
             detail) VALUES {}",
            rows.join(", ")
        );
        // Only placeholders are formatted in; every value is bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (event, detail) in events.iter().zip(details) {
            query = query
                .bind(event.at)
                .bind(event.kind.name())
                .bind(&event.workstream)
                .bind(event.request.as_deref())
                .bind(event.tool.as_deref())
                .bind(event.actor.as_deref())
                .bind(event.actor_id.as_deref())
                .bind(detail);
        }
        query.execute(conn).await?;
        Ok(())
    }

    /// The events `filter` selects, oldest first.
    pub async fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRow>, StoreError> {
        let mut clauses = Vec::new();
        let mut binds: Vec<String> = Vec::new();
        if let Some(w) = &filter.workstream {
            binds.push(w.clone());
            clauses.push(format!("workstream = ${}", binds.len()));
        }
        if let Some(u) = &filter.user {
            // Only names no one can borrow: a user id, a username, a platform handle. A
            // display name is anyone's to choose, so it never selects anyone's events.
            let mut ids = vec![u.clone()];
            ids.extend(self.user_by_username(u).await?.map(|user| user.id));
            ids.extend(
                self.users_with_handle(u)
                    .await?
                    .into_iter()
                    .map(|(_, user)| user.id),
            );
            let placeholders: Vec<String> = ids
                .into_iter()
                .map(|id| {
                    binds.push(id);
                    format!("${}", binds.len())
                })
                .collect();
            clauses.push(format!("actor_id IN ({})", placeholders.join(", ")));
        }
        let since = filter.since.unwrap_or(i64::MIN);
        clauses.push(format!("at >= ${}", binds.len() + 1));
        let limit = filter.limit.map_or(i64::MAX, i64::from);
        let sql = format!(
            "SELECT id, detail FROM (SELECT id, detail FROM audit_events WHERE {} \
             ORDER BY id DESC LIMIT ${}) newest ORDER BY id",
            clauses.join(" AND "),
            binds.len() + 2
        );
        /// An `audit_events` row: its id, and the event as JSON.
        #[derive(sqlx::FromRow)]
        struct Row {
            id: i64,
            detail: String,
        }
        let mut query = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql));
        for b in binds {
            query = query.bind(b);
        }
        let rows = query.bind(since).bind(limit).fetch_all(self.pool()).await?;
        rows.into_iter()
            .map(|Row { id, detail }| {
                let event = serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt {
                    table: "audit_events",
                    message: format!("row {id}: {e}"),
                })?;
                Ok(AuditRow { id, event })
            })
            .collect()
    }

    /// Removes events older than `before` (unix ms): the retention, the one delete.
    pub async fn prune_audit(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM audit_events WHERE at < $1")
            .bind(before)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::now_ms;
    use crate::store::users::User;
    use pretty_assertions::assert_eq;

    fn event(at: i64, workstream: &str, actor: &User, kind: AuditKind) -> AuditEvent {
        AuditEvent {
            at,
            workstream: workstream.into(),
            request: Some("ap_1".into()),
            call_id: Some("c1".into()),
            tool: Some("bash".into()),
            actor: Some(actor.public_name(None)),
            actor_id: Some(actor.id.clone()),
            kind,
        }
    }

    /// A user `name` with no display name.
    fn someone(name: &str) -> User {
        User {
            id: name.into(),
            username: name.into(),
            display_name: None,
        }
    }

    /// The events `filter` selects, as written.
    async fn events(store: &Store, filter: &AuditFilter) -> Vec<AuditEvent> {
        let rows = store.audit(filter).await.unwrap();
        rows.into_iter().map(|r| r.event).collect()
    }

    #[tokio::test]
    async fn events_read_back_whole_filtered_and_pruned_by_age() {
        let store = Store::memory().await.unwrap();
        let person = async |id: &str, display: &str, handle: &str| {
            let at = now_ms();
            store
                .user_for_identity_at("discord", id, display, Some(handle), at)
                .await
                .unwrap()
        };
        let bob = person("2002", "Bob", "bob").await;
        // Mallory calls herself bob: her events are never bob's.
        let mallory = person("2003", "bob", "mallory").await;
        let decided = event(
            2_000,
            "w1",
            &mallory,
            AuditKind::Decided {
                decision: DecisionKind::Denied,
                path: DecisionPath::NoteDialog,
                note: Some("use staging".into()),
            },
        );
        let timed_out = event(3_000, "w2", &bob, AuditKind::TimedOut);
        let old = event(
            1_000,
            "w1",
            &bob,
            AuditKind::Cancelled {
                cause: CancelCause::Stop,
            },
        );
        for e in [&old, &decided, &timed_out] {
            store.append_audit(e).await.unwrap();
        }
        let pick = async |filter: AuditFilter| events(&store, &filter).await;
        assert_eq!(
            pick(AuditFilter::default()).await,
            vec![old.clone(), decided.clone(), timed_out.clone()]
        );
        let w1 = AuditFilter {
            workstream: Some("w1".into()),
            ..AuditFilter::default()
        };
        assert_eq!(pick(w1).await, vec![old.clone(), decided.clone()]);
        let bobs = AuditFilter {
            user: Some("bob".into()),
            ..AuditFilter::default()
        };
        assert_eq!(pick(bobs).await, vec![old.clone(), timed_out.clone()]);
        let by_id = AuditFilter {
            user: Some(mallory.id.clone()),
            ..AuditFilter::default()
        };
        assert_eq!(pick(by_id).await, vec![decided.clone()]);
        let by_handle = AuditFilter {
            user: Some("@Mallory".into()),
            ..AuditFilter::default()
        };
        assert_eq!(pick(by_handle).await, vec![decided.clone()]);
        let since = AuditFilter {
            since: Some(2_000),
            ..AuditFilter::default()
        };
        assert_eq!(pick(since).await, vec![decided.clone(), timed_out.clone()]);
        let last = AuditFilter {
            limit: Some(1),
            ..AuditFilter::default()
        };
        assert_eq!(pick(last).await, vec![timed_out.clone()]);
        assert_eq!(store.prune_audit(2_000).await.unwrap(), 1);
        assert_eq!(pick(AuditFilter::default()).await, vec![decided, timed_out]);
    }

    #[tokio::test]
    async fn a_batch_reads_back_whole_and_in_order_however_long() {
        let store = Store::memory().await.unwrap();
        let batch = |from: i64, n: i64| -> Vec<AuditEvent> {
            (from..from + n)
                .map(|at| event(at, "w", &someone(&format!("u{at}")), AuditKind::TimedOut))
                .collect()
        };
        // One row, a short batch (one statement) and one longer than a statement holds.
        let mut written = Vec::new();
        let long = i64::try_from(AUDIT_ROWS_PER_STATEMENT * 2 + 3).unwrap();
        for events in [batch(0, 1), batch(1, 3), batch(4, long)] {
            store.append_audits(&events).await.unwrap();
            written.extend(events);
        }
        store.append_audits(&[]).await.unwrap();
        assert_eq!(events(&store, &AuditFilter::default()).await, written);
    }

    #[test]
    fn an_event_is_flat_json_named_by_its_kind() {
        let e = event(
            5,
            "w",
            &someone("alice"),
            AuditKind::GrantCreated {
                grant: "bash".into(),
            },
        );
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({
                "at": 5, "workstream": "w", "request": "ap_1", "call_id": "c1", "tool": "bash",
                "actor": "@alice", "actor_id": "alice", "kind": "grant_created",
                "grant": "bash"
            })
        );
        assert_eq!(
            DecisionKind::of(ApprovalKind::Review, Verdict::Deny),
            DecisionKind::Rejected
        );
        assert_eq!(
            DecisionKind::of(ApprovalKind::ToolCall, Verdict::AlwaysAllow),
            DecisionKind::AlwaysAllowed
        );
    }
}
