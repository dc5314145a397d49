//! Connector policy tiers that live in the database: the workstream tier (a column on
//! `workstreams`), the channel a workstream lives in, and the channel tier
//! (`channel_connectors`, keyed `discord:<channel id>` / `slack:<team>:<channel>`). Lists are
//! JSON text; a missing list means the tier says nothing (see [`crate::connectors`]).

use super::{Store, StoreError, now_ms};

/// What the database holds for one workstream's policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredTiers {
    /// Whether the workstream exists.
    pub exists: bool,
    /// The workstream tier.
    pub workstream: Option<Vec<String>>,
    /// The channel the workstream lives in, when known.
    pub channel: Option<String>,
    /// That channel's tier.
    pub channel_ids: Option<Vec<String>>,
}

fn encode(ids: Option<&[String]>) -> Option<String> {
    ids.map(|ids| serde_json::Value::from(ids.to_vec()).to_string())
}

fn decode(table: &'static str, text: Option<String>) -> Result<Option<Vec<String>>, StoreError> {
    text.map(|t| {
        serde_json::from_str::<Vec<String>>(&t).map_err(|e| StoreError::Corrupt {
            table,
            message: format!("connector_ids {t:?}: {e}"),
        })
    })
    .transpose()
}

impl Store {
    /// Both stored tiers of a workstream and its channel, in one query (the dispatcher asks on
    /// every MCP call, so a change applies to the very next call).
    pub async fn connector_tiers(&self, workstream: &str) -> Result<StoredTiers, StoreError> {
        /// Both tiers' stored ids, and the channel that joins them.
        #[derive(sqlx::FromRow)]
        struct Row {
            workstream_ids: Option<String>,
            channel: Option<String>,
            channel_ids: Option<String>,
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT w.connector_ids AS workstream_ids, w.channel AS channel, \
             c.connector_ids AS channel_ids FROM workstreams w \
             LEFT JOIN channel_connectors c ON c.channel = w.channel WHERE w.key = $1",
        )
        .bind(workstream)
        .fetch_optional(self.pool())
        .await?;
        let Some(row) = row else {
            return Ok(StoredTiers::default());
        };
        Ok(StoredTiers {
            exists: true,
            workstream: decode("workstreams", row.workstream_ids)?,
            channel: row.channel,
            channel_ids: decode("channel_connectors", row.channel_ids)?,
        })
    }

    /// Sets (`Some`) or clears (`None`) a workstream's tier; false when there is no such
    /// workstream.
    pub async fn set_workstream_connectors(
        &self,
        workstream: &str,
        ids: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE workstreams SET connector_ids = $1 WHERE key = $2")
            .bind(encode(ids))
            .bind(workstream)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A channel's tier.
    pub async fn channel_connectors(
        &self,
        channel: &str,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT connector_ids FROM channel_connectors WHERE channel = $1")
                .bind(channel)
                .fetch_optional(self.pool())
                .await?;
        decode("channel_connectors", row.map(|r| r.0))
    }

    /// Sets (`Some`) or clears (`None`) a channel's tier.
    pub async fn set_channel_connectors(
        &self,
        channel: &str,
        ids: Option<&[String]>,
        by: Option<&str>,
    ) -> Result<(), StoreError> {
        match encode(ids) {
            Some(json) => {
                sqlx::query(
                    "INSERT INTO channel_connectors (channel, connector_ids, updated_by, updated_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (channel) DO UPDATE SET \
                     connector_ids = excluded.connector_ids, updated_by = excluded.updated_by, \
                     updated_at = excluded.updated_at",
                )
                .bind(channel)
                .bind(json)
                .bind(by)
                .bind(now_ms())
                .execute(self.pool())
                .await?;
            }
            None => {
                sqlx::query("DELETE FROM channel_connectors WHERE channel = $1")
                    .bind(channel)
                    .execute(self.pool())
                    .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn list(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[tokio::test]
    async fn tiers_round_trip_and_clear() {
        let store = Store::memory().await.unwrap();
        assert_eq!(
            store.connector_tiers("discord:1").await.unwrap(),
            StoredTiers::default()
        );
        store
            .ensure_workstream_in("discord:1", Some("alice"), Some("discord:10"))
            .await
            .unwrap();
        let github = list(&["github"]);
        assert!(
            store
                .set_workstream_connectors("discord:1", Some(&github))
                .await
                .unwrap()
        );
        store
            .set_channel_connectors("discord:10", Some(&[]), Some("admin"))
            .await
            .unwrap();
        assert_eq!(
            store.connector_tiers("discord:1").await.unwrap(),
            StoredTiers {
                exists: true,
                workstream: Some(github.clone()),
                channel: Some("discord:10".into()),
                channel_ids: Some(Vec::new()),
            }
        );
        store
            .set_workstream_connectors("discord:1", None)
            .await
            .unwrap();
        store
            .set_channel_connectors("discord:10", None, None)
            .await
            .unwrap();
        assert_eq!(
            store.connector_tiers("discord:1").await.unwrap(),
            StoredTiers {
                exists: true,
                channel: Some("discord:10".into()),
                ..StoredTiers::default()
            }
        );
        assert_eq!(store.channel_connectors("discord:10").await.unwrap(), None);
        assert!(
            !store
                .set_workstream_connectors("discord:404", Some(&github))
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn slack_workstreams_know_their_channel_and_a_parent_is_recorded_once() {
        let store = Store::memory().await.unwrap();
        store
            .ensure_workstream("slack:T1:C2:1700000000.000100", None)
            .await
            .unwrap();
        let t = store
            .connector_tiers("slack:T1:C2:1700000000.000100")
            .await
            .unwrap();
        assert_eq!(t.channel.as_deref(), Some("slack:T1:C2"));
        // A Discord thread created before parents were recorded learns it later; a recorded
        // parent is never replaced.
        store.ensure_workstream("discord:5", None).await.unwrap();
        assert_eq!(
            store.connector_tiers("discord:5").await.unwrap().channel,
            None
        );
        store
            .ensure_workstream_in("discord:5", None, Some("discord:50"))
            .await
            .unwrap();
        store
            .ensure_workstream_in("discord:5", None, Some("discord:51"))
            .await
            .unwrap();
        assert_eq!(
            store
                .connector_tiers("discord:5")
                .await
                .unwrap()
                .channel
                .as_deref(),
            Some("discord:50")
        );
    }
}
