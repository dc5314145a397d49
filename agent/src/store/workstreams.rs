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

    /// Deletes a workstream with its messages, approval requests and grants.
    pub async fn delete_workstream(&self, key: &str) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        for table in ["messages", "tool_approvals", "tool_grants"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE workstream = $1"
            )))
            .bind(key)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("DELETE FROM workstreams WHERE key = $1")
            .bind(key)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    #[tokio::test]
    async fn delete_removes_everything_of_one_workstream() {
        let store = Store::memory().await.unwrap();
        for key in ["a", "b"] {
            store.ensure_workstream(key, None).await.unwrap();
            store
                .append_message(key, 0, &Message::user("hi"), None)
                .await
                .unwrap();
            store.add_grant(key, "bash", None).await.unwrap();
        }
        store.delete_workstream("a").await.unwrap();
        assert_eq!(
            store.list_workstreams().await.unwrap(),
            vec!["b".to_owned()]
        );
        assert!(store.load_messages("a").await.unwrap().is_empty());
        assert!(store.grants("a").await.unwrap().is_empty());
        assert_eq!(store.load_messages("b").await.unwrap().len(), 1);
    }
}
