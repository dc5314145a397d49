//! Compaction checkpoints: which older messages of a workstream the model no longer sees
//! verbatim, and the summary it sees instead (see [`crate::turn::context::compact`]).

use super::{Store, StoreError, now_ms};

/// A workstream's checkpoint in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Messages with a lower sequence number are summarised.
    pub upto_seq: i64,
    /// What the model sees instead of them.
    pub summary: String,
    /// Estimated prompt tokens before the compaction.
    pub tokens_before: u64,
    /// Estimated prompt tokens after it.
    pub tokens_after: u64,
}

impl Store {
    /// Records a checkpoint of `workstream` (a later one for the same `upto_seq` replaces it).
    pub async fn save_checkpoint(
        &self,
        workstream: &str,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO checkpoints \
             (workstream, upto_seq, summary, tokens_before, tokens_after, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (workstream, upto_seq) DO UPDATE SET summary = excluded.summary, \
             tokens_before = excluded.tokens_before, tokens_after = excluded.tokens_after, \
             created_at = excluded.created_at",
        )
        .bind(workstream)
        .bind(checkpoint.upto_seq)
        .bind(checkpoint.summary.as_str())
        .bind(i64::try_from(checkpoint.tokens_before).unwrap_or(i64::MAX))
        .bind(i64::try_from(checkpoint.tokens_after).unwrap_or(i64::MAX))
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The newest checkpoint of `workstream`, if it was ever compacted.
    pub async fn latest_checkpoint(
        &self,
        workstream: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT upto_seq, summary, tokens_before, tokens_after FROM checkpoints \
             WHERE workstream = $1 ORDER BY upto_seq DESC LIMIT 1",
        )
        .bind(workstream)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|row| Checkpoint {
            upto_seq: row.upto_seq,
            summary: row.summary,
            tokens_before: u64::try_from(row.tokens_before).unwrap_or(0),
            tokens_after: u64::try_from(row.tokens_after).unwrap_or(0),
        }))
    }
}

/// A `checkpoints` row as [`Store::latest_checkpoint`] reads it.
#[derive(sqlx::FromRow)]
struct Row {
    upto_seq: i64,
    summary: String,
    tokens_before: i64,
    tokens_after: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn the_newest_checkpoint_is_in_force() {
        let store = Store::memory().await.unwrap();
        assert_eq!(store.latest_checkpoint("w").await.unwrap(), None);
        let first = Checkpoint {
            upto_seq: 10,
            summary: "- set up CI".into(),
            tokens_before: 3000,
            tokens_after: 900,
        };
        store.save_checkpoint("w", &first).await.unwrap();
        let second = Checkpoint {
            upto_seq: 24,
            summary: "- set up CI\n- fixed the build".into(),
            ..first.clone()
        };
        store.save_checkpoint("w", &second).await.unwrap();
        store.save_checkpoint("other", &first).await.unwrap();
        assert_eq!(store.latest_checkpoint("w").await.unwrap(), Some(second));
    }
}
