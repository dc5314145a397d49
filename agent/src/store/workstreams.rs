//! The `workstreams` table: one row per conversation, keyed by the platform's thread key.

use super::{Store, StoreError, now_ms};

/// A stored workstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkstreamRow {
    /// Key such as `discord:<thread id>` or `console:<name>`.
    pub key: String,
    /// Who started it.
    pub owner: Option<String>,
    /// Creation time (unix ms).
    pub created_at: i64,
}

impl Store {
    /// Returns the workstream, creating it (owned by `owner`) if it does not exist.
    pub async fn ensure_workstream(
        &self,
        key: &str,
        owner: Option<&str>,
    ) -> Result<WorkstreamRow, StoreError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO workstreams (key, owner, created_at, updated_at) VALUES ($1, $2, $3, $3) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(owner)
        .bind(now)
        .execute(self.pool())
        .await?;
        let (key, owner, created_at): (String, Option<String>, i64) =
            sqlx::query_as("SELECT key, owner, created_at FROM workstreams WHERE key = $1")
                .bind(key)
                .fetch_one(self.pool())
                .await?;
        Ok(WorkstreamRow {
            key,
            owner,
            created_at,
        })
    }

    /// Keys of every workstream, most recently active first.
    pub async fn list_workstreams(&self) -> Result<Vec<String>, StoreError> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT key FROM workstreams ORDER BY updated_at DESC, key")
                .fetch_all(self.pool())
                .await?;
        Ok(rows.into_iter().map(|r| r.0).collect())
    }
}
