//! The `watches` table: commands polled in a workstream until their stop condition holds
//! (issue 13). Durable, so a restart finds every active watch; claimed for a while by the
//! runner that polls it, so with several nodes on one database exactly one node polls a due
//! watch (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite has a single writer).

use std::fmt;
use std::str::FromStr;

use super::{Backend, Store, StoreError, now_ms};

/// Most active watches in one workstream.
pub const MAX_ACTIVE_PER_WORKSTREAM: i64 = 5;

/// Where a watch stands. Stored as text in `watches.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchState {
    /// Polled when due.
    Active,
    /// Its condition held (or its output changed); the thread was told.
    Fired,
    /// Cancelled by a person or the model.
    Cancelled,
    /// It reached `max_polls` without firing.
    Exhausted,
    /// Paused by the depth guard (too many watch turns without a person in between).
    Paused,
}

impl WatchState {
    const ALL: [WatchState; 5] = [
        WatchState::Active,
        WatchState::Fired,
        WatchState::Cancelled,
        WatchState::Exhausted,
        WatchState::Paused,
    ];

    /// The stored text.
    pub const fn as_str(self) -> &'static str {
        match self {
            WatchState::Active => "active",
            WatchState::Fired => "fired",
            WatchState::Cancelled => "cancelled",
            WatchState::Exhausted => "exhausted",
            WatchState::Paused => "paused",
        }
    }
}

impl fmt::Display for WatchState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WatchState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| format!("unknown watch state `{s}`"))
    }
}

/// A watch to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWatch {
    /// Workstream key.
    pub workstream: String,
    /// Unique among the workstream's active watches.
    pub name: String,
    /// The shell command polled.
    pub command: String,
    /// Milliseconds between polls.
    pub poll_every_ms: i64,
    /// The stop condition as written (`None`: fire when the output changes).
    pub stop_on: Option<String>,
    /// Polls before it gives up.
    pub max_polls: i64,
    /// Sandpiper user id of who created it.
    pub created_by: Option<String>,
}

/// A stored watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRecord {
    /// `w_<uuid>`; cancel takes a prefix of it.
    pub id: String,
    /// What was asked.
    pub watch: NewWatch,
    /// Polls so far.
    pub polls: i64,
    /// Where it stands.
    pub state: WatchState,
    /// When it was created (unix ms).
    pub created_at: i64,
    /// When it is next due (unix ms).
    pub next_poll_at: i64,
    /// The last poll's output (capped by the runner).
    pub last_output: Option<String>,
    /// The last poll's exit code.
    pub last_exit_code: Option<i64>,
}

/// Why a watch could not be created or cancelled: clear errors for the model.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An active watch of the workstream has that name.
    #[error("a watch named `{0}` is already active in this thread; pick another name or cancel it")]
    NameTaken(String),
    /// The workstream has its most active watches.
    #[error("this thread already has {MAX_ACTIVE_PER_WORKSTREAM} active watches; cancel one first")]
    TooMany,
    /// No active watch has that name or id prefix.
    #[error("no active watch is named `{0}` or has an id starting with it")]
    NotFound(String),
    /// Several active watches' ids start with the prefix.
    #[error("`{0}` starts the id of several watches; give the name or more of the id")]
    Ambiguous(String),
}

type Row = (
    String,
    String,
    String,
    String,
    i64,
    Option<String>,
    i64,
    i64,
    String,
    Option<String>,
    i64,
    i64,
    Option<String>,
    Option<i64>,
);

const COLUMNS: &str = "id, workstream, name, command, poll_every_ms, stop_on, max_polls, polls, \
                       state, created_by, created_at, next_poll_at, last_output, last_exit_code";

fn record(row: Row) -> Result<WatchRecord, StoreError> {
    let (
        id,
        workstream,
        name,
        command,
        poll_every_ms,
        stop_on,
        max_polls,
        polls,
        state,
        created_by,
        created_at,
        next_poll_at,
        last_output,
        last_exit_code,
    ) = row;
    let state = state.parse().map_err(|message| StoreError::Corrupt {
        table: "watches",
        message: format!("watch {id}: {message}"),
    })?;
    Ok(WatchRecord {
        id,
        watch: NewWatch {
            workstream,
            name,
            command,
            poll_every_ms,
            stop_on,
            max_polls,
            created_by,
        },
        polls,
        state,
        created_at,
        next_poll_at,
        last_output,
        last_exit_code,
    })
}

impl Store {
    /// Stores a new active watch, first polled at once. Refuses a taken name and a sixth
    /// active watch in the workstream.
    pub async fn create_watch(&self, w: &NewWatch) -> Result<WatchRecord, WatchError> {
        let active = self.active_watches(&w.workstream).await?;
        if active.iter().any(|a| a.watch.name == w.name) {
            return Err(WatchError::NameTaken(w.name.clone()));
        }
        if i64::try_from(active.len()).unwrap_or(i64::MAX) >= MAX_ACTIVE_PER_WORKSTREAM {
            return Err(WatchError::TooMany);
        }
        let id = format!("w_{}", uuid::Uuid::new_v4().simple());
        let now = now_ms();
        let inserted = sqlx::query(
            "INSERT INTO watches (id, workstream, name, command, poll_every_ms, stop_on, \
             max_polls, polls, state, created_by, created_at, next_poll_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $9, $10, $10)",
        )
        .bind(&id)
        .bind(&w.workstream)
        .bind(&w.name)
        .bind(&w.command)
        .bind(w.poll_every_ms)
        .bind(w.stop_on.as_deref())
        .bind(w.max_polls)
        .bind(WatchState::Active.as_str())
        .bind(w.created_by.as_deref())
        .bind(now)
        .execute(self.pool())
        .await;
        match inserted {
            Ok(_) => {}
            // Two creates raced past the check: the unique index decides.
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                return Err(WatchError::NameTaken(w.name.clone()));
            }
            Err(e) => return Err(StoreError::from(e).into()),
        }
        Ok(WatchRecord {
            id,
            watch: w.clone(),
            polls: 0,
            state: WatchState::Active,
            created_at: now,
            next_poll_at: now,
            last_output: None,
            last_exit_code: None,
        })
    }

    /// A workstream's active watches, oldest first.
    pub async fn active_watches(&self, workstream: &str) -> Result<Vec<WatchRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM watches WHERE workstream = $1 AND state = $2 \
             ORDER BY created_at, id"
        )))
        .bind(workstream)
        .bind(WatchState::Active.as_str())
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }

    /// A watch by id.
    pub async fn watch(&self, id: &str) -> Result<Option<WatchRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM watches WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.map(record).transpose()
    }

    /// Cancels the active watch of `workstream` named `which`, or whose id starts with it.
    pub async fn cancel_watch(
        &self,
        workstream: &str,
        which: &str,
    ) -> Result<WatchRecord, WatchError> {
        let active = self.active_watches(workstream).await?;
        let by_name: Vec<&WatchRecord> = active.iter().filter(|w| w.watch.name == which).collect();
        let matches = if by_name.is_empty() && !which.is_empty() {
            active.iter().filter(|w| w.id.starts_with(which)).collect()
        } else {
            by_name
        };
        let watch = match matches.as_slice() {
            [] => return Err(WatchError::NotFound(which.to_owned())),
            [one] => (*one).clone(),
            _ => return Err(WatchError::Ambiguous(which.to_owned())),
        };
        self.finish_watch(&watch.id, WatchState::Cancelled).await?;
        Ok(WatchRecord {
            state: WatchState::Cancelled,
            ..watch
        })
    }

    /// Ends an active watch with `state`; false when it was no longer active.
    pub async fn finish_watch(&self, id: &str, state: WatchState) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE watches SET state = $1, finished_at = $2, claimed_by = NULL, \
             claimed_until = NULL WHERE id = $3 AND state = $4",
        )
        .bind(state.as_str())
        .bind(now_ms())
        .bind(id)
        .bind(WatchState::Active.as_str())
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Claims up to `limit` due active watches for `node` until `now + lease_ms`: a watch
    /// another node holds (lease not expired) is skipped, so each due watch is claimed once.
    pub async fn claim_due_watches(
        &self,
        node: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<WatchRecord>, StoreError> {
        // PostgreSQL: concurrent claimers skip rows another transaction is claiming. SQLite
        // serializes writers, so the plain subquery is already exclusive.
        let lock = match self.backend() {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE watches SET claimed_by = $1, claimed_until = $2 WHERE id IN (\
             SELECT id FROM watches WHERE state = $3 AND next_poll_at <= $4 \
             AND (claimed_until IS NULL OR claimed_until < $4) \
             ORDER BY next_poll_at LIMIT $5{lock}) RETURNING {COLUMNS}"
        )))
        .bind(node)
        .bind(now.saturating_add(lease_ms))
        .bind(WatchState::Active.as_str())
        .bind(now)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let mut claimed = rows
            .into_iter()
            .map(record)
            .collect::<Result<Vec<_>, _>>()?;
        claimed.sort_by_key(|w| w.next_poll_at);
        Ok(claimed)
    }

    /// Records a poll of a watch `node` holds: its output and exit code, one more poll, and
    /// when it is next due (never in the past: a watch overdue after a restart polls once, not
    /// once per missed interval). Releases the claim. False when the watch was not `node`'s
    /// (its lease expired and another node took it) or is no longer active.
    pub async fn record_poll(
        &self,
        id: &str,
        node: &str,
        output: &str,
        exit_code: i64,
        next_poll_at: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE watches SET polls = polls + 1, last_output = $1, last_exit_code = $2, \
             next_poll_at = $3, claimed_by = NULL, claimed_until = NULL \
             WHERE id = $4 AND claimed_by = $5 AND state = $6",
        )
        .bind(output)
        .bind(exit_code)
        .bind(next_poll_at.max(now_ms()))
        .bind(id)
        .bind(node)
        .bind(WatchState::Active.as_str())
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }
}
