//! The `tool_approvals` table (every approval request and its decision, so that a platform
//! button can be checked against the stored request) and `tool_grants` (always-allow).

use super::{Store, StoreError, now_ms};

/// A stored approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    /// Request id (what buttons name).
    pub id: String,
    /// Workstream key.
    pub workstream: String,
    /// The tool call it is about.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// One line naming the call.
    pub header: String,
    /// Preview shown to the approver.
    pub preview: String,
    /// Who started the turn.
    pub requested_by: Option<String>,
    /// `pending`, `approved`, `denied`, `always`, `timed_out` or `cancelled`.
    pub status: String,
    /// Who decided.
    pub decided_by: Option<String>,
    /// Feedback typed with the decision.
    pub feedback: Option<String>,
    /// When it was decided (unix ms).
    pub decided_at: Option<i64>,
}

type Row = (
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
);

const COLUMNS: &str = "id, workstream, call_id, tool, header, preview, requested_by, status, \
                       decided_by, feedback, decided_at";

fn record(row: Row) -> ApprovalRecord {
    let (
        id,
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
    ) = row;
    ApprovalRecord {
        id,
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
    }
}

impl Store {
    /// Stores a new pending request.
    pub async fn create_approval(&self, r: &ApprovalRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO tool_approvals (id, workstream, call_id, tool, header, preview, \
             requested_by, status, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&r.id)
        .bind(&r.workstream)
        .bind(&r.call_id)
        .bind(&r.tool)
        .bind(&r.header)
        .bind(&r.preview)
        .bind(r.requested_by.as_deref())
        .bind(&r.status)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records a decision on a pending request. Returns false when the request does not exist
    /// or was already decided (a second click changes nothing).
    pub async fn decide_approval(
        &self,
        id: &str,
        status: &str,
        decided_by: Option<&str>,
        feedback: Option<&str>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE tool_approvals SET status = $1, decided_by = $2, feedback = $3, \
             decided_at = $4 WHERE id = $5 AND status = 'pending'",
        )
        .bind(status)
        .bind(decided_by)
        .bind(feedback)
        .bind(now_ms())
        .bind(id)
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
        Ok(row.map(record))
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
        Ok(row.map(record))
    }

    /// The latest *decided* request about a tool call.
    pub async fn decided_approval_for_call(
        &self,
        workstream: &str,
        call_id: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tool_approvals WHERE workstream = $1 AND call_id = $2 \
             AND status <> 'pending' ORDER BY decided_at DESC, id DESC LIMIT 1"
        )))
        .bind(workstream)
        .bind(call_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(record))
    }

    /// Marks every pending request of a workstream `status` (`cancelled` when the turn that
    /// asked is gone). Returns how many changed.
    pub async fn close_pending_approvals(
        &self,
        workstream: &str,
        status: &str,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE tool_approvals SET status = $1, decided_at = $2 \
             WHERE workstream = $3 AND status = 'pending'",
        )
        .bind(status)
        .bind(now_ms())
        .bind(workstream)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Remembers "always allow `tool` in this workstream".
    pub async fn add_grant(
        &self,
        workstream: &str,
        tool: &str,
        granted_by: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO tool_grants (workstream, tool, granted_by, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (workstream, tool) DO NOTHING",
        )
        .bind(workstream)
        .bind(tool)
        .bind(granted_by)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
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
            workstream: "w".into(),
            call_id: "c1".into(),
            tool: "bash".into(),
            header: "bash: ls".into(),
            preview: "ls".into(),
            requested_by: Some("alice".into()),
            status: "pending".into(),
            decided_by: None,
            feedback: None,
            decided_at: None,
        };
        store.create_approval(&rec).await.unwrap();
        assert!(
            store
                .decide_approval("ap1", "denied", Some("alice"), Some("no"))
                .await
                .unwrap()
        );
        assert!(
            !store
                .decide_approval("ap1", "approved", Some("mallory"), None)
                .await
                .unwrap()
        );
        assert!(
            !store
                .decide_approval("nope", "approved", None, None)
                .await
                .unwrap()
        );
        rec.status = "denied".into();
        rec.decided_by = Some("alice".into());
        rec.feedback = Some("no".into());
        let stored = store.get_approval("ap1").await.unwrap().unwrap();
        assert!(stored.decided_at.is_some());
        rec.decided_at = stored.decided_at;
        assert_eq!(stored, rec);
        assert_eq!(store.approval_for_call("w", "c1").await.unwrap(), Some(rec));
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
