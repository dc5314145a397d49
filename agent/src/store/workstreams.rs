//! The `workstreams` table: one row per conversation, keyed by the platform's thread key.

use super::{Store, StoreError, now_ms};
use crate::protocol::{ConsoleWorkstream, WorkstreamView};
use crate::workstream::WorkstreamKey;

/// A stored workstream. Outside the crate a workstream is a [`WorkstreamView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkstreamRow {
    /// Key such as `discord:<thread id>` or `console:<name>`.
    pub(crate) key: String,
    /// Who started it.
    pub(crate) owner: Option<String>,
    /// Creation time (unix ms).
    pub(crate) created_at: i64,
}

/// A workstream with its counters, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkstreamInfo {
    /// Key, owner, creation time.
    pub(crate) row: WorkstreamRow,
    /// Prompt tokens used so far.
    pub(crate) tokens_in: u64,
    /// Completion tokens used so far.
    pub(crate) tokens_out: u64,
    /// When it was closed (unix ms), if it was.
    pub(crate) closed_at: Option<i64>,
    /// The model it was switched to with `/model` (`None`: the configured one).
    pub(crate) model: Option<String>,
}

impl From<WorkstreamInfo> for WorkstreamView {
    fn from(info: WorkstreamInfo) -> Self {
        WorkstreamView {
            key: info.row.key,
            owner: info.row.owner,
            closed: info.closed_at.is_some(),
        }
    }
}

/// `key, owner, created_at, tokens_in, tokens_out, closed_at, model` as selected.
type InfoRow = (
    String,
    Option<String>,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<String>,
);

impl Store {
    /// Returns the workstream, creating it (owned by `owner`) if it does not exist.
    pub async fn ensure_workstream(
        &self,
        key: &str,
        owner: Option<&str>,
    ) -> Result<WorkstreamView, StoreError> {
        let channel = crate::connectors::channel_from_key(key);
        self.ensure_workstream_in(key, owner, channel.as_deref())
            .await
    }

    /// [`Self::ensure_workstream`], recording the channel the workstream lives in (a Discord
    /// thread's parent: its key does not say). A channel already recorded is kept.
    pub async fn ensure_workstream_in(
        &self,
        key: &str,
        owner: Option<&str>,
        channel: Option<&str>,
    ) -> Result<WorkstreamView, StoreError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO workstreams (key, owner, created_at, updated_at, channel) \
             VALUES ($1, $2, $3, $3, $4) \
             ON CONFLICT (key) DO UPDATE SET channel = excluded.channel \
             WHERE workstreams.channel IS NULL AND excluded.channel IS NOT NULL",
        )
        .bind(key)
        .bind(owner)
        .bind(now)
        .bind(channel)
        .execute(self.pool())
        .await?;
        let (key, owner, closed_at): (String, Option<String>, Option<i64>) =
            sqlx::query_as("SELECT key, owner, closed_at FROM workstreams WHERE key = $1")
                .bind(key)
                .fetch_one(self.pool())
                .await?;
        Ok(WorkstreamView {
            key,
            owner,
            closed: closed_at.is_some(),
        })
    }

    /// A workstream's row, or `None` when there is no such workstream.
    pub(crate) async fn workstream(&self, key: &str) -> Result<Option<WorkstreamInfo>, StoreError> {
        let row: Option<InfoRow> = sqlx::query_as(
            "SELECT key, owner, created_at, tokens_in, tokens_out, closed_at, model \
             FROM workstreams WHERE key = $1",
        )
        .bind(key)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(
            |(key, owner, created_at, tokens_in, tokens_out, closed_at, model)| WorkstreamInfo {
                row: WorkstreamRow {
                    key,
                    owner,
                    created_at,
                },
                tokens_in: u64::try_from(tokens_in).unwrap_or(0),
                tokens_out: u64::try_from(tokens_out).unwrap_or(0),
                closed_at,
                model,
            },
        ))
    }

    /// The model a workstream was switched to with `/model`, if any.
    pub(crate) async fn chosen_model(&self, key: &str) -> Result<Option<String>, StoreError> {
        let model: Option<Option<String>> =
            sqlx::query_scalar("SELECT model FROM workstreams WHERE key = $1")
                .bind(key)
                .fetch_optional(self.pool())
                .await?;
        Ok(model.flatten())
    }

    /// Switches a workstream to `model` (`None`: back to the configured one). Every node
    /// reads it when a turn starts.
    pub(crate) async fn choose_model(
        &self,
        key: &str,
        model: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE workstreams SET model = $1 WHERE key = $2")
            .bind(model)
            .bind(key)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Adds a model call's token counts to the workstream's totals.
    pub async fn add_usage(&self, key: &str, input: u64, output: u64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE workstreams SET tokens_in = tokens_in + $1, tokens_out = tokens_out + $2 \
             WHERE key = $3",
        )
        .bind(i64::try_from(input).unwrap_or(i64::MAX))
        .bind(i64::try_from(output).unwrap_or(i64::MAX))
        .bind(key)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Marks a workstream closed (`/close`): its thread no longer gets answers, and its
    /// watches end (cancelled), so nothing polls or fires in it any more. Its history stays
    /// (recall still finds it).
    pub async fn close_workstream(&self, key: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE workstreams SET closed_at = $1 WHERE key = $2 AND closed_at IS NULL")
            .bind(now_ms())
            .bind(key)
            .execute(self.pool())
            .await?;
        let ended = self.cancel_workstream_watches(key).await?;
        if ended > 0 {
            tracing::info!(
                workstream = key,
                watches = ended,
                "closed: its watches ended"
            );
        }
        Ok(())
    }

    /// Whether the workstream was closed (`/close`); an unknown one is not.
    pub async fn is_closed(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self
            .workstream(key)
            .await?
            .is_some_and(|w| w.closed_at.is_some()))
    }

    /// The console's workstreams (not their sub-agents'), most recently active first.
    pub async fn console_workstreams(&self) -> Result<Vec<ConsoleWorkstream>, StoreError> {
        type Row = (String, Option<String>, i64, Option<i64>, Option<String>);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT w.key, w.workdir, w.updated_at, w.closed_at, \
             (SELECT m.content FROM messages m WHERE m.workstream = w.key AND m.role = 'user' \
              ORDER BY m.seq DESC LIMIT 1) \
             FROM workstreams w WHERE w.key LIKE $1 ORDER BY w.updated_at DESC, w.key",
        )
        .bind("console:%")
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(key, workdir, updated_at, closed_at, last_message)| {
                let WorkstreamKey::Console { name } = key.parse().ok()? else {
                    return None;
                };
                Some(ConsoleWorkstream {
                    name,
                    workdir,
                    last_active_ms: updated_at,
                    last_message,
                    closed: closed_at.is_some(),
                })
            })
            .collect())
    }

    /// Records the directory a console workstream's tools work in this session, and that it
    /// was used now (so it is the one `--resume` picks next).
    pub async fn set_workdir(&self, key: &str, workdir: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE workstreams SET workdir = $1, updated_at = $2 WHERE key = $3")
            .bind(workdir)
            .bind(now_ms())
            .bind(key)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Makes `owner` the owner of a workstream that has none (a console workstream from
    /// before the console recorded its person).
    pub async fn claim_owner(&self, key: &str, owner: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE workstreams SET owner = $1 WHERE key = $2 AND owner IS NULL")
            .bind(owner)
            .bind(key)
            .execute(self.pool())
            .await?;
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

    #[tokio::test]
    async fn usage_adds_up_and_closing_is_recorded() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        store.add_usage("w", 100, 20).await.unwrap();
        store.add_usage("w", 5, 1).await.unwrap();
        store.close_workstream("w").await.unwrap();
        let info = store.workstream("w").await.unwrap().unwrap();
        assert_eq!((info.tokens_in, info.tokens_out), (105, 21));
        assert!(info.closed_at.is_some());
        assert_eq!(store.workstream("nope").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_workstream_is_shown_as_its_key_owner_and_whether_it_is_closed() {
        let store = Store::memory().await.unwrap();
        let open = WorkstreamView {
            key: "w".into(),
            owner: Some("alice".into()),
            closed: false,
        };
        assert_eq!(
            store.ensure_workstream("w", Some("alice")).await.unwrap(),
            open
        );
        let info = store.workstream("w").await.unwrap().unwrap();
        assert_eq!(WorkstreamView::from(info), open);
        store.close_workstream("w").await.unwrap();
        let closed = WorkstreamView {
            closed: true,
            ..open
        };
        // A second open keeps the owner it had, and says it is closed.
        assert_eq!(
            store.ensure_workstream("w", Some("bob")).await.unwrap(),
            closed
        );
        let info = store.workstream("w").await.unwrap().unwrap();
        assert_eq!(WorkstreamView::from(info), closed);
    }
}
