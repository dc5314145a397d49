//! The `channel_events` table: which platform events (by the platform's own id) have been
//! taken. Slack redelivers an event whose acknowledgement was late and may send one event to
//! any of several Socket Mode connections, on any node; the first node to insert the id
//! handles the event, every other delivery is dropped. One statement per event:
//! `INSERT … ON CONFLICT DO NOTHING`, and the row count says who won.

use super::{Store, StoreError, now_ms};

impl Store {
    /// Records that `platform` delivered the event `event_id`; true the first time only, on
    /// every node sharing this database. A caller that gets an error should handle the event
    /// anyway (a rare duplicate beats a lost message).
    pub async fn first_delivery(&self, platform: &str, event_id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO channel_events (platform, event_id, seen_at) VALUES ($1, $2, $3) \
             ON CONFLICT (platform, event_id) DO NOTHING",
        )
        .bind(platform)
        .bind(event_id)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Forgets delivered event ids older than `max_age_ms` (redeliveries come within minutes),
    /// so the table stays small; returns how many were forgotten.
    pub async fn prune_delivered(&self, max_age_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM channel_events WHERE seen_at < $1")
            .bind(now_ms() - max_age_ms)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_redelivered_event_is_seen_once_and_old_ids_are_forgotten() {
        let store = Store::memory().await.unwrap();
        assert!(store.first_delivery("slack", "Ev1").await.unwrap());
        assert!(!store.first_delivery("slack", "Ev1").await.unwrap());
        assert!(store.first_delivery("discord", "Ev1").await.unwrap());
        assert_eq!(store.prune_delivered(60_000).await.unwrap(), 0);
        assert_eq!(store.prune_delivered(-1).await.unwrap(), 2);
        assert!(store.first_delivery("slack", "Ev1").await.unwrap());
    }
}
