//! Read-only queries for the status page (issue 28): every workstream with its people and
//! counters, pending approvals, watches, recent turns, and the status each node writes about
//! itself (`web_node_status`), so any node can show the whole cluster.
//!
//! Nothing here changes what a turn does; the page only reads.

use super::approvals::AllowedApprovers;
use super::{Store, StoreError, now_ms};

/// What the page's live parts are read from, summed up in a few numbers: when none of them
/// moved, nothing the page shows from the database did (a workstream closed on another node
/// aside, which the page's periodic full read catches). Every number comes from an index or
/// a table of a few rows, so a status page can ask every second at no cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct PageMarker {
    /// The newest workstream (unix ms).
    pub newest_workstream: i64,
    /// The newest message's id.
    pub last_message: i64,
    /// Requests waiting for a decision.
    pub pending: i64,
    /// The newest waiting request (unix ms).
    pub newest_pending: i64,
    /// The newest status a node wrote about itself (unix ms).
    pub node_status: i64,
    /// The newest heartbeat of the registry (unix ms).
    pub heartbeat: i64,
    /// Watches, and the polls they made.
    pub watch_polls: i64,
}

/// A workstream as the page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkstreamOverview {
    /// Key (`discord:<thread>`, `slack:<team>:<channel>:<ts>`, `console:<name>`).
    pub key: String,
    /// Who started it (sandpiper user id).
    pub owner: Option<String>,
    /// Everyone who wrote in it (sandpiper user ids, the owner included), sorted.
    pub participants: Vec<String>,
    /// Prompt tokens used.
    pub tokens_in: u64,
    /// Completion tokens used.
    pub tokens_out: u64,
    /// When it was closed (unix ms).
    pub closed_at: Option<i64>,
    /// Its newest message (unix ms), or its creation when it has none.
    pub last_activity: i64,
    /// A turn was running there when its node died, and nobody took it over yet.
    pub interrupted: bool,
    /// The channel it was opened in (`discord:<channel>`, `slack:<team>:<channel>`), when
    /// recorded.
    pub channel: Option<String>,
    /// The start of its first person's message (at most 200 characters): what the page
    /// names it by.
    pub first_message: Option<String>,
}

/// A request waiting for a person's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingApproval {
    /// Request id.
    pub id: String,
    /// Workstream key.
    pub workstream: String,
    /// Tool name.
    pub tool: String,
    /// One line naming the call.
    pub header: String,
    /// What the approver is shown.
    pub preview: String,
    /// Who started the turn (sandpiper user id).
    pub requested_by: Option<String>,
    /// Who may decide, as at ask time.
    pub approvers: Option<AllowedApprovers>,
    /// When it was asked (unix ms).
    pub created_at: i64,
    /// A tool call or a review (which buttons it gets).
    pub kind: crate::protocol::ApprovalKind,
}

/// A watch as the page lists it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct WatchOverview {
    /// Id.
    pub id: String,
    /// Workstream key.
    pub workstream: String,
    /// Name.
    pub name: String,
    /// The command polled.
    pub command: String,
    /// Milliseconds between polls.
    pub poll_every_ms: i64,
    /// Polls so far.
    pub polls: i64,
    /// Most polls.
    pub max_polls: i64,
    /// Stop condition (`None`: fires when the output changes).
    pub stop_on: Option<String>,
    /// `active`, `fired`, `paused`, ….
    pub state: String,
    /// Next poll (unix ms).
    pub next_poll_at: i64,
    /// The last poll's output.
    pub last_output: Option<String>,
    /// The last poll's exit code.
    pub last_exit_code: Option<i64>,
}

/// What a node last wrote about itself.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct NodeStatusRow {
    /// Node id (as in the services registry).
    pub node: String,
    /// Its status, JSON as the writer made it.
    pub status: String,
    /// When it wrote it (unix ms).
    pub updated_at: i64,
}

/// A workstream with its last activity, as [`Store::workstream_overview`] selects it.
#[derive(sqlx::FromRow)]
struct OverviewRow {
    key: String,
    owner: Option<String>,
    tokens_in: i64,
    tokens_out: i64,
    closed_at: Option<i64>,
    active: i64,
    channel: Option<String>,
    first_message: Option<String>,
}

/// A pending `tool_approvals` row, as [`Store::pending_approvals`] selects it.
#[derive(sqlx::FromRow)]
struct PendingRow {
    id: String,
    workstream: String,
    tool: String,
    header: String,
    preview: String,
    requested_by: Option<String>,
    approvers: Option<String>,
    created_at: i64,
    kind: String,
}

/// Finished watches are listed for a day after they ended.
const FINISHED_WATCHES_SHOWN_MS: i64 = 24 * 60 * 60 * 1000;

impl Store {
    /// The `limit` most recently active workstreams, newest first.
    pub async fn workstream_overview(
        &self,
        limit: i64,
    ) -> Result<Vec<WorkstreamOverview>, StoreError> {
        let rows: Vec<OverviewRow> = sqlx::query_as(
            "SELECT w.key AS key, w.owner AS owner, w.tokens_in AS tokens_in, \
             w.tokens_out AS tokens_out, w.closed_at AS closed_at, \
             COALESCE((SELECT MAX(m.created_at) FROM messages m WHERE m.workstream = w.key), \
             w.created_at) AS active, w.channel AS channel, \
             (SELECT SUBSTR(m.content, 1, 200) FROM messages m \
              WHERE m.workstream = w.key AND m.role = 'user' ORDER BY m.seq LIMIT 1) \
             AS first_message \
             FROM workstreams w ORDER BY active DESC, w.key LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let people: Vec<(String, String)> = sqlx::query_as(
            "SELECT DISTINCT workstream, author FROM messages WHERE author IS NOT NULL",
        )
        .fetch_all(self.pool())
        .await?;
        let interrupted: Vec<String> = sqlx::query_scalar(
            "SELECT workstream FROM workstream_leases \
             WHERE turn_started_at IS NOT NULL AND expires_at < $1",
        )
        .bind(now_ms())
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |OverviewRow {
                     key,
                     owner,
                     tokens_in,
                     tokens_out,
                     closed_at,
                     active,
                     channel,
                     first_message,
                 }| {
                    let mut participants: Vec<String> = people
                        .iter()
                        .filter(|(w, _)| *w == key)
                        .map(|(_, a)| a.clone())
                        .chain(owner.clone())
                        .collect();
                    participants.sort();
                    participants.dedup();
                    WorkstreamOverview {
                        interrupted: interrupted.contains(&key),
                        key,
                        owner,
                        participants,
                        tokens_in: u64::try_from(tokens_in).unwrap_or(0),
                        tokens_out: u64::try_from(tokens_out).unwrap_or(0),
                        closed_at,
                        last_activity: active,
                        channel,
                        first_message,
                    }
                },
            )
            .collect())
    }

    /// Every request still waiting for a decision, oldest first.
    pub async fn pending_approvals(&self) -> Result<Vec<PendingApproval>, StoreError> {
        let rows: Vec<PendingRow> = sqlx::query_as(
            "SELECT id, workstream, tool, header, preview, requested_by, approvers, created_at, \
             kind FROM tool_approvals WHERE status = 'pending' ORDER BY created_at, id",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| PendingApproval {
                // An unknown kind gets a tool call's buttons; a click on them is judged
                // against the stored request anyway.
                kind: crate::protocol::ApprovalKind::parse(&row.kind)
                    .unwrap_or(crate::protocol::ApprovalKind::ToolCall),
                approvers: row.approvers.and_then(|a| serde_json::from_str(&a).ok()),
                id: row.id,
                workstream: row.workstream,
                tool: row.tool,
                header: row.header,
                preview: row.preview,
                requested_by: row.requested_by,
                created_at: row.created_at,
            })
            .collect())
    }

    /// Active and paused watches, and those that ended within the last day.
    pub async fn watch_overview(&self) -> Result<Vec<WatchOverview>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, workstream, name, command, poll_every_ms, polls, max_polls, stop_on, \
             state, next_poll_at, last_output, last_exit_code FROM watches \
             WHERE state IN ('active', 'paused') OR finished_at >= $1 \
             ORDER BY created_at DESC, id",
        )
        .bind(now_ms() - FINISHED_WATCHES_SHOWN_MS)
        .fetch_all(self.pool())
        .await?)
    }

    /// Who wrote each message of `workstream` (sandpiper user ids; `None` for the agent's
    /// and tools' messages), in the order of [`Store::load_messages`].
    pub async fn message_authors(
        &self,
        workstream: &str,
    ) -> Result<Vec<Option<String>>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT author FROM messages WHERE workstream = $1 ORDER BY seq")
                .bind(workstream)
                .fetch_all(self.pool())
                .await?,
        )
    }

    /// Messages people sent since `since` (unix ms): each starts a turn.
    pub async fn turns_since(&self, since: i64) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM messages WHERE role = 'user' AND created_at >= $1",
        )
        .bind(since)
        .fetch_one(self.pool())
        .await?)
    }

    /// The page's change marker now ([`PageMarker`]).
    pub async fn page_marker(&self) -> Result<PageMarker, StoreError> {
        Ok(sqlx::query_as(
            "SELECT \
             (SELECT COALESCE(MAX(created_at), 0) FROM workstreams) AS newest_workstream, \
             (SELECT COALESCE(MAX(id), 0) FROM messages) AS last_message, \
             (SELECT COUNT(*) FROM tool_approvals WHERE status = 'pending') AS pending, \
             (SELECT COALESCE(MAX(created_at), 0) FROM tool_approvals \
              WHERE status = 'pending') AS newest_pending, \
             (SELECT COALESCE(MAX(updated_at), 0) FROM web_node_status) AS node_status, \
             (SELECT COALESCE(MAX(heartbeat_at), 0) FROM services) AS heartbeat, \
             (SELECT CAST(COALESCE(SUM(polls), 0) + COUNT(*) AS BIGINT) FROM watches) \
              AS watch_polls",
        )
        .fetch_one(self.pool())
        .await?)
    }

    /// Records what node `node` says about itself now.
    pub async fn put_node_status(&self, node: &str, status: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO web_node_status (node, status, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (node) DO UPDATE SET status = excluded.status, \
             updated_at = excluded.updated_at",
        )
        .bind(node)
        .bind(status)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// What every node last wrote about itself; rows of nodes gone from the registry for a
    /// day are dropped.
    pub async fn node_statuses(&self) -> Result<Vec<NodeStatusRow>, StoreError> {
        sqlx::query(
            "DELETE FROM web_node_status WHERE updated_at < $1 \
             AND node NOT IN (SELECT id FROM services)",
        )
        .bind(now_ms() - 24 * 60 * 60 * 1000)
        .execute(self.pool())
        .await?;
        Ok(
            sqlx::query_as("SELECT node, status, updated_at FROM web_node_status ORDER BY node")
                .fetch_all(self.pool())
                .await?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn the_overview_names_everyone_who_wrote() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        store
            .append_message("w", 0, &Message::user("hi"), Some("bob"))
            .await
            .unwrap();
        store.add_usage("w", 10, 2).await.unwrap();
        let all = store.workstream_overview(10).await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].participants, vec!["alice".to_owned(), "bob".into()]);
        assert_eq!((all[0].tokens_in, all[0].tokens_out), (10, 2));
        assert!(!all[0].interrupted);
        assert_eq!(store.turns_since(0).await.unwrap(), 1);
        store.put_node_status("n1", "{}").await.unwrap();
        store.put_node_status("n1", "{\"a\":1}").await.unwrap();
        let nodes = store.node_statuses().await.unwrap();
        assert_eq!(
            nodes.iter().map(|n| n.status.as_str()).collect::<Vec<_>>(),
            vec!["{\"a\":1}"]
        );
    }

    #[tokio::test]
    async fn the_page_marker_moves_with_a_message_and_stays_without_one() {
        let store = Store::memory().await.unwrap();
        let empty = store.page_marker().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        let before = store.page_marker().await.unwrap();
        assert_ne!(before, empty, "a new workstream moves it");
        assert_eq!(store.page_marker().await.unwrap(), before);
        store
            .append_message("w", 0, &Message::user("hi"), Some("bob"))
            .await
            .unwrap();
        let after = store.page_marker().await.unwrap();
        assert_ne!(after, before);
        assert_eq!(store.page_marker().await.unwrap(), after);
    }
}
