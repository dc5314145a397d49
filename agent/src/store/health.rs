//! Read-only queries across tables for a node's `/ready` and `/metrics`: whether the database
//! answers, and counts of stored workstreams, approval requests and active watches.

use super::{Store, StoreError};

/// Counts for `/ready` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredCounts {
    /// Workstreams in the store.
    pub workstreams: i64,
    /// Approval requests waiting for a decision.
    pub approvals_pending: i64,
    /// Approval requests decided (approved, denied, timed out, …).
    pub approvals_decided: i64,
    /// Watches still polling.
    pub watches_active: i64,
}

impl Store {
    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(self.pool()).await?;
        Ok(())
    }

    /// Stored workstreams and approval requests, counted.
    pub async fn stored_counts(&self) -> Result<StoredCounts, StoreError> {
        let (workstreams,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM workstreams")
            .fetch_one(self.pool())
            .await?;
        let (pending,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM tool_approvals WHERE status = 'pending'")
                .fetch_one(self.pool())
                .await?;
        let (all,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM tool_approvals")
            .fetch_one(self.pool())
            .await?;
        let (watches_active,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM watches WHERE state = 'active'")
                .fetch_one(self.pool())
                .await?;
        Ok(StoredCounts {
            workstreams,
            approvals_pending: pending,
            approvals_decided: all - pending,
            watches_active,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn counts_of_an_empty_store() {
        let store = Store::memory().await.unwrap();
        store.ping().await.unwrap();
        assert_eq!(
            store.stored_counts().await.unwrap(),
            StoredCounts::default()
        );
        store.ensure_workstream("console:a", None).await.unwrap();
        assert_eq!(store.stored_counts().await.unwrap().workstreams, 1);
    }
}
