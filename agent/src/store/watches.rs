//! The `watches` table: commands polled in a workstream until their stop condition holds
//! (issue 13). Durable, so a restart finds every active watch; claimed for a while by the
//! runner that polls it, so with several nodes on one database exactly one node polls a due
//! watch (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite has a single writer).

use std::fmt;
use std::str::FromStr;

use super::{Backend, Store, StoreError, now_ms};
use crate::workstream::KeyPattern;

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
    /// Paused by the depth guard (too many watch turns without a person in between);
    /// `/watch resume` makes it active again.
    Paused,
    /// Its condition raised an error at run time; the thread was told.
    Failed,
}

impl WatchState {
    const ALL: [WatchState; 6] = [
        WatchState::Active,
        WatchState::Fired,
        WatchState::Cancelled,
        WatchState::Exhausted,
        WatchState::Paused,
        WatchState::Failed,
    ];

    /// The stored text.
    pub const fn as_str(self) -> &'static str {
        match self {
            WatchState::Active => "active",
            WatchState::Fired => "fired",
            WatchState::Cancelled => "cancelled",
            WatchState::Exhausted => "exhausted",
            WatchState::Paused => "paused",
            WatchState::Failed => "failed",
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

/// How a message a watch wrote into its workstream starts; the depth guard counts them.
pub const WATCH_MESSAGE_PREFIX: &str = "[watch ";

/// The watch named `which`, or else the one whose id starts with it.
fn pick<'a>(watches: &'a [WatchRecord], which: &str) -> Result<&'a WatchRecord, WatchError> {
    let by_name: Vec<&WatchRecord> = watches.iter().filter(|w| w.watch.name == which).collect();
    let matches = if by_name.is_empty() && !which.is_empty() {
        watches.iter().filter(|w| w.id.starts_with(which)).collect()
    } else {
        by_name
    };
    match matches.as_slice() {
        [] => Err(WatchError::NotFound(which.to_owned())),
        [one] => Ok(one),
        _ => Err(WatchError::Ambiguous(which.to_owned())),
    }
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
    #[error("no watch in this thread is named `{0}` or has an id starting with it")]
    NotFound(String),
    /// Several active watches' ids start with the prefix.
    #[error("`{0}` starts the id of several watches; give the name or more of the id")]
    Ambiguous(String),
}

/// A `watches` row, column for column ([`COLUMNS`]).
#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    workstream: String,
    name: String,
    command: String,
    poll_every_ms: i64,
    stop_on: Option<String>,
    max_polls: i64,
    polls: i64,
    state: String,
    created_by: Option<String>,
    created_at: i64,
    next_poll_at: i64,
    last_output: Option<String>,
    last_exit_code: Option<i64>,
}

const COLUMNS: &str = "id, workstream, name, command, poll_every_ms, stop_on, max_polls, polls, \
                       state, created_by, created_at, next_poll_at, last_output, last_exit_code";

fn record(row: Row) -> Result<WatchRecord, StoreError> {
    let state = row.state.parse().map_err(|message| StoreError::Corrupt {
        table: "watches",
        message: format!("watch {}: {message}", row.id),
    })?;
    Ok(WatchRecord {
        id: row.id,
        watch: NewWatch {
            workstream: row.workstream,
            name: row.name,
            command: row.command,
            poll_every_ms: row.poll_every_ms,
            stop_on: row.stop_on,
            max_polls: row.max_polls,
            created_by: row.created_by,
        },
        polls: row.polls,
        state,
        created_at: row.created_at,
        next_poll_at: row.next_poll_at,
        last_output: row.last_output,
        last_exit_code: row.last_exit_code,
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
        let watch = pick(&active, which)?.clone();
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

    /// Ends every watch of `workstream` still to run (active or paused) as cancelled: what
    /// `/close` does, so a closed thread polls nothing more. How many were ended.
    pub async fn cancel_workstream_watches(&self, workstream: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE watches SET state = $1, finished_at = $2, claimed_by = NULL, \
             claimed_until = NULL WHERE workstream = $3 AND state IN ($4, $5)",
        )
        .bind(WatchState::Cancelled.as_str())
        .bind(now_ms())
        .bind(workstream)
        .bind(WatchState::Active.as_str())
        .bind(WatchState::Paused.as_str())
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Claims up to `limit` due active watches of the workstreams `keys` matches, for `node`
    /// until `now + lease_ms`: a watch another node holds (lease not expired) is skipped, so
    /// each due watch is claimed once.
    pub async fn claim_due_watches(
        &self,
        node: &str,
        keys: &[KeyPattern],
        now: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<WatchRecord>, StoreError> {
        if keys.is_empty() || limit <= 0 {
            return Ok(Vec::new());
        }
        // PostgreSQL: concurrent claimers skip rows another transaction is claiming. SQLite
        // serializes writers, so the plain subquery is already exclusive.
        let lock = match self.backend() {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        // One test per pattern, its values bound after the five above; `substr` counts
        // characters on both databases.
        let mut next = 5;
        let mut param = || {
            next += 1;
            next
        };
        let owned = keys
            .iter()
            .map(|key| match key {
                KeyPattern::Platform(_) => {
                    let (text, len) = (param(), param());
                    format!("substr(workstream, 1, ${len}) = ${text}")
                }
                KeyPattern::Exact(_) => format!("workstream = ${}", param()),
            })
            .collect::<Vec<_>>()
            .join(" OR ");
        let sql = format!(
            "UPDATE watches SET claimed_by = $1, claimed_until = $2 WHERE id IN (\
             SELECT id FROM watches WHERE state = $3 AND next_poll_at <= $4 \
             AND (claimed_until IS NULL OR claimed_until < $4) AND ({owned}) \
             ORDER BY next_poll_at LIMIT $5{lock}) RETURNING {COLUMNS}"
        );
        let mut query = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql))
            .bind(node)
            .bind(now.saturating_add(lease_ms))
            .bind(WatchState::Active.as_str())
            .bind(now)
            .bind(limit);
        for key in keys {
            query = match key {
                KeyPattern::Platform(p) => query
                    .bind(p.prefix())
                    .bind(i32::try_from(p.prefix().chars().count()).unwrap_or(i32::MAX)),
                KeyPattern::Exact(k) => query.bind(k.to_string()),
            };
        }
        let rows = query.fetch_all(self.pool()).await?;
        let mut claimed = rows
            .into_iter()
            .map(record)
            .collect::<Result<Vec<_>, _>>()?;
        claimed.sort_by_key(|w| w.next_poll_at);
        Ok(claimed)
    }

    /// Lets go of every watch `node` holds (a clean shutdown), so another runner, or this one
    /// after a restart, polls them without waiting for the leases to run out.
    pub async fn release_watches(&self, node: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE watches SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = $1",
        )
        .bind(node)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// A workstream's watches that are still to run: active and paused, oldest first.
    pub async fn watches_of(&self, workstream: &str) -> Result<Vec<WatchRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM watches WHERE workstream = $1 AND state IN ($2, $3) \
             ORDER BY created_at, id"
        )))
        .bind(workstream)
        .bind(WatchState::Active.as_str())
        .bind(WatchState::Paused.as_str())
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }

    /// Makes the paused watch of `workstream` named `which` (or whose id starts with it)
    /// active again, polled at once. Refused when its name was taken meanwhile or the
    /// workstream already has its most active watches.
    pub async fn resume_watch(
        &self,
        workstream: &str,
        which: &str,
    ) -> Result<WatchRecord, WatchError> {
        let paused: Vec<WatchRecord> = self
            .watches_of(workstream)
            .await?
            .into_iter()
            .filter(|w| w.state == WatchState::Paused)
            .collect();
        let watch = pick(&paused, which)?.clone();
        let active = self.active_watches(workstream).await?;
        if active.iter().any(|a| a.watch.name == watch.watch.name) {
            return Err(WatchError::NameTaken(watch.watch.name));
        }
        if i64::try_from(active.len()).unwrap_or(i64::MAX) >= MAX_ACTIVE_PER_WORKSTREAM {
            return Err(WatchError::TooMany);
        }
        let now = now_ms();
        let done = sqlx::query(
            "UPDATE watches SET state = $1, next_poll_at = $2, finished_at = NULL \
             WHERE id = $3 AND state = $4",
        )
        .bind(WatchState::Active.as_str())
        .bind(now)
        .bind(&watch.id)
        .bind(WatchState::Paused.as_str())
        .execute(self.pool())
        .await;
        match done {
            Ok(d) if d.rows_affected() == 1 => Ok(WatchRecord {
                state: WatchState::Active,
                next_poll_at: now,
                ..watch
            }),
            Ok(_) => Err(WatchError::NotFound(which.to_owned())),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                Err(WatchError::NameTaken(watch.watch.name))
            }
            Err(e) => Err(StoreError::from(e).into()),
        }
    }

    /// How many of the workstream's latest user messages, up to `limit`, were written by
    /// watches (no author, the `[watch ` prefix) with no person's message after them: the
    /// depth guard's count.
    pub async fn watch_streak(&self, workstream: &str, limit: i64) -> Result<usize, StoreError> {
        let rows: Vec<(Option<String>, String)> = sqlx::query_as(
            "SELECT author, content FROM messages WHERE workstream = $1 AND role = 'user' \
             ORDER BY seq DESC LIMIT $2",
        )
        .bind(workstream)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .take_while(|(author, content)| {
                author.is_none() && content.starts_with(WATCH_MESSAGE_PREFIX)
            })
            .count())
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
