//! The `tool_approvals` table (every approval request and its decision, so that a platform
//! button can be checked against the stored request) and `tool_grants` (always-allow).

use super::{Store, StoreError, now_ms};
use crate::protocol::{ApprovalKind, ApprovalStatus, ApprovalView, UnknownApprovalStatus, Verdict};

/// Who may decide a request, as it stood when the request was asked. Stored with the request
/// (`tool_approvals.approvers`, JSON) so that a click is judged the same on every node, whatever
/// that node's configuration says now.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllowedApprovers {
    /// The workstream's owner (sandpiper user id); `None` when it has none.
    pub owner: Option<String>,
    /// Platform roles or user groups whose members may decide (`approver_roles`,
    /// `approver_usergroups`).
    #[serde(default)]
    pub roles: Vec<String>,
}

/// A stored approval request. Its fields are the approval engine's: outside the crate it is
/// passed around whole (to [`ledger::record`](crate::approvals::ledger::record)) and read as an
/// [`ApprovalView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    /// Request id (what buttons name).
    pub(crate) id: String,
    /// A tool call or a review gate.
    pub(crate) kind: ApprovalKind,
    /// Workstream key.
    pub(crate) workstream: String,
    /// The tool call it is about.
    pub(crate) call_id: String,
    /// Tool name.
    pub(crate) tool: String,
    /// One line naming the call.
    pub(crate) header: String,
    /// Preview shown to the approver.
    pub(crate) preview: String,
    /// Who started the turn.
    pub(crate) requested_by: Option<String>,
    /// Who the turn is charged to (usage and budgets): `requested_by`, or the person who set
    /// up a turn no person started (a watch's creator); a resumed turn is charged to them too.
    pub(crate) charged_to: Option<String>,
    /// Where the request stands.
    pub(crate) status: ApprovalStatus,
    /// Who decided.
    pub(crate) decided_by: Option<String>,
    /// Feedback typed with the decision.
    pub(crate) feedback: Option<String>,
    /// When it was decided (unix ms).
    pub(crate) decided_at: Option<i64>,
    /// When it was asked (unix ms); set by the store.
    pub(crate) created_at: i64,
    /// sha256 (hex) of the tool name and its arguments
    /// ([`fingerprint`](crate::approvals::fingerprint)); `None` on rows older than it.
    pub(crate) fingerprint: Option<String>,
    /// Who may decide, as at ask time; `None` on rows older than it (clicks then fall back to
    /// the configuration).
    pub(crate) approvers: Option<AllowedApprovers>,
    /// How it was decided ([`DecisionPath::as_str`](crate::protocol::DecisionPath::as_str):
    /// `button`, `web`, …); `None` while pending, and for rows decided before it was kept.
    pub(crate) decided_via: Option<String>,
}

impl ApprovalRecord {
    /// The request as a channel (or the status page) shows it.
    pub fn view(&self) -> ApprovalView {
        self.clone().into()
    }

    /// The person's decision this row holds; `None` while it is pending, and for a row the
    /// engine closed without one (timed out, cancelled). The one reading of a stored state,
    /// for a waiting turn on another node and for a resumed one alike.
    pub fn decision(&self) -> Option<crate::protocol::Decision> {
        let verdict = match self.status {
            ApprovalStatus::Approved => Verdict::Approve,
            ApprovalStatus::Denied => Verdict::Deny,
            ApprovalStatus::AlwaysAllowed => Verdict::AlwaysAllow,
            ApprovalStatus::Annotated => Verdict::Annotate,
            ApprovalStatus::Pending | ApprovalStatus::TimedOut | ApprovalStatus::Cancelled => {
                return None;
            }
        };
        let mut decision = crate::protocol::Decision::new(verdict, self.feedback.clone());
        decision.decided_by = self.decided_by.clone();
        Some(decision)
    }
}

impl From<ApprovalRecord> for ApprovalView {
    /// A `decided_via` text no [`DecisionPath`](crate::protocol::DecisionPath) has reads as
    /// unknown (`None`), as on rows decided before the path was kept.
    fn from(r: ApprovalRecord) -> Self {
        ApprovalView {
            item: crate::protocol::ApprovalItem {
                request_id: r.id,
                kind: r.kind,
                call_id: r.call_id,
                name: r.tool,
                header: r.header,
                preview: r.preview,
            },
            workstream: r.workstream,
            owner: r.approvers.and_then(|a| a.owner),
            requested_by: r.requested_by,
            status: r.status,
            decided_by: r.decided_by,
            decided_at: r.decided_at,
            decided_via: r
                .decided_via
                .as_deref()
                .and_then(crate::protocol::DecisionPath::parse),
            feedback: r.feedback,
        }
    }
}

/// A stored always-allow grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRow {
    /// The grant as stored (`bash`, `bash:git status`, `mcp__github__*`; see
    /// [`Grant`](crate::approvals::Grant)).
    pub grant: String,
    /// Who made it, as records name people (`Alice (@alice)`).
    pub granted_by: Option<String>,
    /// When (unix ms).
    pub created_at: i64,
}

/// A `tool_approvals` row as [`COLUMNS`] reads it.
#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    kind: String,
    workstream: String,
    call_id: String,
    tool: String,
    header: String,
    preview: String,
    requested_by: Option<String>,
    status: String,
    decided_by: Option<String>,
    feedback: Option<String>,
    decided_at: Option<i64>,
    created_at: i64,
    fingerprint: Option<String>,
    approvers: Option<String>,
    decided_via: Option<String>,
    charged_to: Option<String>,
}

const COLUMNS: &str = "id, kind, workstream, call_id, tool, header, preview, requested_by, status, \
                       decided_by, feedback, decided_at, created_at, fingerprint, approvers, \
                       decided_via, charged_to";

/// A row as a record; an unknown status is [`StoreError::Corrupt`], never a guess.
fn record(row: Row) -> Result<ApprovalRecord, StoreError> {
    let Row {
        id,
        kind,
        workstream,
        call_id,
        tool,
        header,
        preview,
        requested_by,
        status,
        decided_by,
        feedback,
        decided_at,
        created_at,
        fingerprint,
        approvers,
        decided_via,
        charged_to,
    } = row;
    let status = status.parse().map_err(|e: UnknownApprovalStatus| {
        tracing::error!(request = %id, status = %e.0, "approval row with an unknown status");
        StoreError::Corrupt {
            table: "tool_approvals",
            message: format!("request {id}: {e}"),
        }
    })?;
    let kind = ApprovalKind::parse(&kind).ok_or_else(|| {
        tracing::error!(request = %id, kind = %kind, "approval row with an unknown kind");
        StoreError::Corrupt {
            table: "tool_approvals",
            message: format!("request {id}: unknown kind `{kind}`"),
        }
    })?;
    let approvers = approvers
        .map(|text| serde_json::from_str::<AllowedApprovers>(&text))
        .transpose()
        .map_err(|e| {
            tracing::error!(request = %id, error = %e, "approval row with unreadable approvers");
            StoreError::Corrupt {
                table: "tool_approvals",
                message: format!("request {id}: approvers: {e}"),
            }
        })?;
    Ok(ApprovalRecord {
        id,
        kind,
        workstream,
        call_id,
        tool,
        header,
        preview,
        requested_by,
        charged_to,
        status,
        decided_by,
        feedback,
        decided_at,
        created_at,
        fingerprint,
        approvers,
        decided_via,
    })
}

impl Store {
    /// Stores a new pending request. Only the approval engine's writer
    /// ([`crate::approvals::ledger`]) calls this, so every request is audited.
    pub(crate) async fn create_approval(&self, r: &ApprovalRecord) -> Result<(), StoreError> {
        let approvers = r
            .approvers
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Corrupt {
                table: "tool_approvals",
                message: format!("request {}: approvers: {e}", r.id),
            })?;
        sqlx::query(
            "INSERT INTO tool_approvals (id, workstream, call_id, tool, header, preview, \
             requested_by, status, created_at, kind, fingerprint, approvers, charged_to) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(&r.id)
        .bind(&r.workstream)
        .bind(&r.call_id)
        .bind(&r.tool)
        .bind(&r.header)
        .bind(&r.preview)
        .bind(r.requested_by.as_deref())
        .bind(r.status.as_str())
        .bind(now_ms())
        .bind(r.kind.as_str())
        .bind(r.fingerprint.as_deref())
        .bind(approvers)
        .bind(r.charged_to.as_deref())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records a decision on a pending request. Returns false when the request does not exist
    /// or was already decided (a second click changes nothing). Only the approval engine's
    /// writer ([`crate::approvals::ledger`]) calls this.
    pub(crate) async fn decide_approval(
        &self,
        id: &str,
        status: ApprovalStatus,
        decided_by: Option<&str>,
        feedback: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.decide_approval_via(id, status, decided_by, feedback, None)
            .await
    }

    /// [`Store::decide_approval`], recording the path that decided when it was not the
    /// thread (`web`). Only the approval engine's writer calls this.
    pub(crate) async fn decide_approval_via(
        &self,
        id: &str,
        status: ApprovalStatus,
        decided_by: Option<&str>,
        feedback: Option<&str>,
        via: Option<&str>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE tool_approvals SET status = $1, decided_by = $2, feedback = $3, \
             decided_at = $4, decided_via = $7 WHERE id = $5 AND status = $6",
        )
        .bind(status.as_str())
        .bind(decided_by)
        .bind(feedback)
        .bind(now_ms())
        .bind(id)
        .bind(ApprovalStatus::Pending.as_str())
        .bind(via)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Looks a request up.
    pub async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tool_approvals WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.map(record).transpose()
    }

    /// The latest request about a tool call (a call is asked about again after a restart).
    pub async fn approval_for_call(
        &self,
        workstream: &str,
        call_id: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tool_approvals WHERE workstream = $1 AND call_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT 1"
        )))
        .bind(workstream)
        .bind(call_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(record).transpose()
    }

    /// Marks `ids` as taken by the turn that asked: it has their answers and may act on them
    /// (see [`Store::decided_untaken_for_call`]); how many were not taken before (requests
    /// already taken keep their time). Only the approval engine's writer
    /// ([`crate::approvals::ledger`]) calls this.
    pub(crate) async fn mark_approvals_taken(&self, ids: &[String]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut tx = self.pool().begin().await?;
        let now = now_ms();
        let mut taken = 0;
        for id in ids {
            taken += sqlx::query(
                "UPDATE tool_approvals SET taken_at = $1 WHERE id = $2 AND taken_at IS NULL",
            )
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(taken)
    }

    /// Whether the latest request about a tool call holds a person's decision that no turn
    /// took: the click was stored, but the turn that asked was gone before it read it (its
    /// node died), so the call never ran on that decision.
    pub async fn decided_untaken_for_call(
        &self,
        workstream: &str,
        call_id: &str,
    ) -> Result<bool, StoreError> {
        let latest: Option<(String, Option<i64>)> = sqlx::query_as(
            "SELECT status, taken_at FROM tool_approvals WHERE workstream = $1 AND call_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT 1",
        )
        .bind(workstream)
        .bind(call_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(latest.is_some_and(|(status, taken)| {
            taken.is_none()
                && status
                    .parse::<ApprovalStatus>()
                    .is_ok_and(ApprovalStatus::decided_by_person)
        }))
    }

    /// The latest *decided* request about a tool call.
    pub async fn decided_approval_for_call(
        &self,
        workstream: &str,
        call_id: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tool_approvals WHERE workstream = $1 AND call_id = $2 \
             AND status <> $3 ORDER BY decided_at DESC, id DESC LIMIT 1"
        )))
        .bind(workstream)
        .bind(call_id)
        .bind(ApprovalStatus::Pending.as_str())
        .fetch_optional(self.pool())
        .await?;
        row.map(record).transpose()
    }

    /// The pending requests of a workstream, oldest first.
    pub async fn pending_in(&self, workstream: &str) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tool_approvals WHERE workstream = $1 AND status = $2 \
             ORDER BY created_at, id"
        )))
        .bind(workstream)
        .bind(ApprovalStatus::Pending.as_str())
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }

    /// Remembers "always allow `tool` in this workstream" (`tool` is a stored
    /// [`Grant`](crate::approvals::Grant)); whether it is new. Only the approval engine's
    /// writer calls this.
    pub(crate) async fn add_grant(
        &self,
        workstream: &str,
        tool: &str,
        granted_by: Option<&str>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO tool_grants (workstream, tool, granted_by, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (workstream, tool) DO NOTHING",
        )
        .bind(workstream)
        .bind(tool)
        .bind(granted_by)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Takes a grant back; whether there was one. Only the approval engine's writer calls this.
    pub(crate) async fn remove_grant(
        &self,
        workstream: &str,
        tool: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM tool_grants WHERE workstream = $1 AND tool = $2")
            .bind(workstream)
            .bind(tool)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A workstream's grants with who made them and when, by grant.
    pub async fn grant_rows(&self, workstream: &str) -> Result<Vec<GrantRow>, StoreError> {
        let rows: Vec<(String, Option<String>, i64)> = sqlx::query_as(
            "SELECT tool, granted_by, created_at FROM tool_grants WHERE workstream = $1 \
             ORDER BY tool",
        )
        .bind(workstream)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(grant, granted_by, created_at)| GrantRow {
                grant,
                granted_by,
                created_at,
            })
            .collect())
    }

    /// Tools always allowed in a workstream.
    pub async fn grants(&self, workstream: &str) -> Result<Vec<String>, StoreError> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT tool FROM tool_grants WHERE workstream = $1 ORDER BY tool")
                .bind(workstream)
                .fetch_all(self.pool())
                .await?;
        Ok(rows.into_iter().map(|r| r.0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn a_request_is_decided_once() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        let mut rec = ApprovalRecord {
            id: "ap1".into(),
            kind: ApprovalKind::Review,
            workstream: "w".into(),
            call_id: "c1".into(),
            tool: "bash".into(),
            header: "bash: ls".into(),
            preview: "ls".into(),
            requested_by: None,
            // A watch's turn: nobody's message, charged to who set the watch up.
            charged_to: Some("carol".into()),
            status: ApprovalStatus::Pending,
            decided_by: None,
            feedback: None,
            decided_at: None,
            created_at: 0,
            fingerprint: Some("ab12".into()),
            approvers: Some(AllowedApprovers {
                owner: Some("alice".into()),
                roles: vec!["ops".into()],
            }),
            decided_via: None,
        };
        store.create_approval(&rec).await.unwrap();
        assert!(
            store
                .decide_approval("ap1", ApprovalStatus::Denied, Some("alice"), Some("no"))
                .await
                .unwrap()
        );
        assert!(
            !store
                .decide_approval("ap1", ApprovalStatus::Approved, Some("mallory"), None)
                .await
                .unwrap()
        );
        assert!(
            !store
                .decide_approval("nope", ApprovalStatus::Approved, None, None)
                .await
                .unwrap()
        );
        rec.status = ApprovalStatus::Denied;
        rec.decided_by = Some("alice".into());
        rec.feedback = Some("no".into());
        let stored = store.get_approval("ap1").await.unwrap().unwrap();
        assert!(stored.decided_at.is_some());
        rec.decided_at = stored.decided_at;
        assert!(stored.created_at > 0);
        rec.created_at = stored.created_at;
        assert_eq!(stored, rec);
        assert_eq!(
            store.approval_for_call("w", "c1").await.unwrap(),
            Some(rec.clone())
        );

        // A decision from the status page says so.
        let mut web = rec;
        web.id = "ap2".into();
        web.call_id = "c2".into();
        web.status = ApprovalStatus::Pending;
        store.create_approval(&web).await.unwrap();
        assert!(
            store
                .decide_approval_via(
                    "ap2",
                    ApprovalStatus::Approved,
                    Some("bob"),
                    None,
                    Some("web")
                )
                .await
                .unwrap()
        );
        let stored = store.get_approval("ap2").await.unwrap().unwrap();
        assert_eq!(stored.decided_via.as_deref(), Some("web"));
        assert_eq!(stored.decided_by.as_deref(), Some("bob"));
    }

    #[test]
    fn a_record_is_shown_as_its_item_owner_and_decision() {
        let record = |via: Option<&str>| ApprovalRecord {
            id: "ap1".into(),
            kind: ApprovalKind::ToolCall,
            workstream: "discord:1".into(),
            call_id: "c1".into(),
            tool: "bash".into(),
            header: "bash: ls".into(),
            preview: "ls".into(),
            requested_by: Some("u2".into()),
            charged_to: Some("u2".into()),
            status: ApprovalStatus::Denied,
            decided_by: Some("alice".into()),
            feedback: Some("no".into()),
            decided_at: Some(7),
            created_at: 3,
            fingerprint: Some("ab".into()),
            approvers: Some(AllowedApprovers {
                owner: Some("u1".into()),
                roles: vec!["ops".into()],
            }),
            decided_via: via.map(str::to_owned),
        };
        assert_eq!(
            record(Some("web")).view(),
            ApprovalView {
                item: crate::protocol::ApprovalItem {
                    request_id: "ap1".into(),
                    kind: ApprovalKind::ToolCall,
                    call_id: "c1".into(),
                    name: "bash".into(),
                    header: "bash: ls".into(),
                    preview: "ls".into(),
                },
                workstream: "discord:1".into(),
                owner: Some("u1".into()),
                requested_by: Some("u2".into()),
                status: ApprovalStatus::Denied,
                decided_by: Some("alice".into()),
                decided_at: Some(7),
                decided_via: Some(crate::protocol::DecisionPath::Web),
                feedback: Some("no".into()),
            }
        );
        assert!(record(Some("web")).view().decided_from_web());
        assert!(!record(Some("button")).view().decided_from_web());
        // A path this sandpiper does not know, or none kept: not known, never a guess.
        assert_eq!(record(Some("carrier pigeon")).view().decided_via, None);
        assert_eq!(record(None).view().decided_via, None);
        let mut old = record(None);
        old.approvers = None;
        assert_eq!(old.view().owner, None);
    }

    #[test]
    fn decision_paths_read_back_from_their_stored_text() {
        use crate::protocol::DecisionPath::{self, *};
        for path in [Button, NoteDialog, Console, Web, Resumed, Automatic] {
            assert_eq!(DecisionPath::parse(path.as_str()), Some(path));
        }
        assert_eq!(DecisionPath::parse("Web"), None);
    }

    #[test]
    fn statuses_keep_their_stored_text() {
        use ApprovalStatus::*;
        for (status, text) in [
            (Pending, "pending"),
            (Approved, "approved"),
            (Denied, "denied"),
            (AlwaysAllowed, "always"),
            (TimedOut, "timed_out"),
            (Cancelled, "cancelled"),
            (Annotated, "annotated"),
        ] {
            assert_eq!(status.as_str(), text);
            assert_eq!(text.parse::<ApprovalStatus>(), Ok(status));
        }
        assert_eq!(
            "always_allowed".parse::<ApprovalStatus>(),
            Err(UnknownApprovalStatus("always_allowed".into()))
        );
        assert_eq!(ApprovalStatus::from(Verdict::AlwaysAllow), AlwaysAllowed);
    }

    #[tokio::test]
    async fn a_decision_no_turn_took_is_told_apart_from_one_a_turn_took() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        let request = |id: &str, created_at: i64| ApprovalRecord {
            id: id.into(),
            kind: ApprovalKind::ToolCall,
            workstream: "w".into(),
            call_id: "c1".into(),
            tool: "bash".into(),
            header: "bash: ls".into(),
            preview: "ls".into(),
            requested_by: Some("alice".into()),
            charged_to: Some("alice".into()),
            status: ApprovalStatus::Pending,
            decided_by: None,
            feedback: None,
            decided_at: None,
            created_at,
            fingerprint: None,
            approvers: None,
            decided_via: None,
        };
        store.create_approval(&request("ap1", 1)).await.unwrap();
        assert!(
            !store.decided_untaken_for_call("w", "c1").await.unwrap(),
            "pending"
        );
        store
            .decide_approval("ap1", ApprovalStatus::Approved, Some("alice"), None)
            .await
            .unwrap();
        assert!(store.decided_untaken_for_call("w", "c1").await.unwrap());
        assert!(!store.decided_untaken_for_call("w", "other").await.unwrap());
        assert_eq!(
            store.mark_approvals_taken(&["ap1".into()]).await.unwrap(),
            1
        );
        assert_eq!(
            store.mark_approvals_taken(&["ap1".into()]).await.unwrap(),
            0,
            "taken once"
        );
        assert!(
            !store.decided_untaken_for_call("w", "c1").await.unwrap(),
            "taken"
        );
        // A newer request about the same call (a resumed turn asks again) is the one that counts.
        store.create_approval(&request("ap2", 2)).await.unwrap();
        store
            .decide_approval("ap2", ApprovalStatus::TimedOut, None, None)
            .await
            .unwrap();
        assert!(
            !store.decided_untaken_for_call("w", "c1").await.unwrap(),
            "a timeout is nobody's decision"
        );
    }

    #[tokio::test]
    async fn an_unknown_stored_status_is_a_corrupt_row_not_a_panic() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", None).await.unwrap();
        sqlx::query(
            "INSERT INTO tool_approvals (id, workstream, call_id, tool, header, preview, \
             status, created_at) VALUES ('ap9', 'w', 'c9', 'bash', 'h', 'p', 'maybe', 1)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let err = store.get_approval("ap9").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt { table: "tool_approvals", message }
                if message.contains("maybe")),
            "{err}"
        );
        assert!(store.approval_for_call("w", "c9").await.is_err());
    }

    #[tokio::test]
    async fn rows_from_before_fingerprints_read_back_without_them() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", None).await.unwrap();
        sqlx::query(
            "INSERT INTO tool_approvals (id, workstream, call_id, tool, header, preview, \
             status, created_at) VALUES ('old', 'w', 'c1', 'bash', 'h', 'p', 'pending', 1), \
             ('bad', 'w', 'c2', 'bash', 'h', 'p', 'pending', 1)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query("UPDATE tool_approvals SET approvers = 'not json' WHERE id = 'bad'")
            .execute(store.pool())
            .await
            .unwrap();
        let old = store.get_approval("old").await.unwrap().unwrap();
        assert_eq!((old.fingerprint, old.approvers), (None, None));
        let err = store.get_approval("bad").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt { table: "tool_approvals", message }
                if message.contains("approvers")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn grants_are_per_workstream() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("a", None).await.unwrap();
        store.ensure_workstream("b", None).await.unwrap();
        store.add_grant("a", "bash", Some("alice")).await.unwrap();
        store.add_grant("a", "bash", Some("alice")).await.unwrap();
        assert_eq!(store.grants("a").await.unwrap(), vec!["bash".to_owned()]);
        assert_eq!(store.grants("b").await.unwrap(), Vec::<String>::new());
    }
}
