//! How a query reaches the database: [`Db`], the executor every query module runs on.
//!
//! PostgreSQL goes through sqlx's pool, which tests a connection before lending it and pings it
//! when it comes back: a server restart leaves dead connections behind, and a statement cut
//! off mid-protocol must not poison the next borrower.
//!
//! A SQLite file is read and written through [`SqliteConnections`] instead. Each sqlx SQLite
//! connection is a worker thread that runs commands in the order they were sent, so a
//! connection cannot be left mid-protocol: a statement whose caller went away is finished or
//! reset by the worker before the next command runs. sqlx's pool still pings every connection
//! it gets back (one more hand-off to the worker thread and back, per statement: measured, a
//! third of serve's context switches on a bash turn), which for a local file only costs. So
//! the direct connections lend and take back without a round trip; a connection whose worker
//! is gone is dropped and another opened in its place.
//!
//! sqlx's pool stays beside them for what needs a [`sqlx::Transaction`] (rare writes:
//! linking, memories, long audit batches) and for the migrations. Both sets of connections
//! open the file with the same [`SQLITE_PRAGMAS`].

use std::str::FromStr as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::any::{AnyConnectOptions, AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo};
use sqlx::{Any, AnyConnection, AnyPool, ConnectOptions as _, Connection as _, Either, Executor};
use tokio::sync::{Semaphore, SemaphorePermit};

/// What every SQLite connection is opened with.
///
/// `wal_autocheckpoint`: pages of write-ahead log before a commit copies them back into the
/// database file (SQLite's default is 1,000). A checkpoint writes each page changed since
/// the last one once and syncs both files, so its cost grows with the pages it copies, not
/// with the commits that wrote them; the turn path rewrites the same few pages (the newest
/// messages, the full-text index's segments) on every commit, and with the default a
/// checkpoint ran every few turns (6% of serve's CPU on a bash turn). 10,000 pages (about
/// 40 MB of log) checkpoint a tenth as often; a reader finds a page in the log through its
/// hash index, whatever the log's size.
pub(crate) const SQLITE_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
     PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 10000;";

/// The executor of every query: `&Db` runs a statement on a connection it borrows for
/// that statement alone.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    /// sqlx's pool: every PostgreSQL statement, SQLite transactions and migrations.
    pool: AnyPool,
    /// A SQLite file's direct connections (`None`: PostgreSQL, or SQLite in memory, where
    /// each connection would be a database of its own).
    direct: Option<Arc<SqliteConnections>>,
}

impl Db {
    /// Every statement through `pool`.
    pub(crate) fn pooled(pool: AnyPool) -> Self {
        Self { pool, direct: None }
    }

    /// Statements through `direct`; transactions through `pool`.
    pub(crate) fn sqlite(pool: AnyPool, direct: SqliteConnections) -> Self {
        Self {
            pool,
            direct: Some(Arc::new(direct)),
        }
    }

    /// Starts a transaction (on sqlx's pool).
    pub(crate) async fn begin(&self) -> Result<sqlx::Transaction<'static, Any>, sqlx::Error> {
        self.pool.begin().await
    }

    /// Starts a transaction with `statement` (`BEGIN IMMEDIATE`) on sqlx's pool.
    pub(crate) async fn begin_with(
        &self,
        statement: &'static str,
    ) -> Result<sqlx::Transaction<'static, Any>, sqlx::Error> {
        self.pool.begin_with(statement).await
    }

    /// Closes every connection.
    pub(crate) async fn close(&self) {
        if let Some(direct) = &self.direct {
            direct.close().await;
        }
        self.pool.close().await;
    }
}

/// SQLite connections lent for one statement each, at most `max` at once, taken back
/// without a round trip to their worker thread.
#[derive(Debug)]
pub(crate) struct SqliteConnections {
    options: AnyConnectOptions,
    idle: Mutex<Vec<AnyConnection>>,
    permits: Semaphore,
    /// How long a statement waits for a connection before it fails.
    patience: Duration,
}

impl SqliteConnections {
    /// Connections to the SQLite file of `url` (already `mode=rwc`), opened when first
    /// needed; `max` at most.
    pub(crate) fn new(url: &str, max: u32, patience: Duration) -> Result<Self, sqlx::Error> {
        let options = AnyConnectOptions::from_str(url)?;
        let max = usize::try_from(max.max(1)).unwrap_or(1);
        Ok(Self {
            options,
            idle: Mutex::new(Vec::with_capacity(max)),
            permits: Semaphore::new(max),
            patience,
        })
    }

    /// A connection for one statement: an idle one, or a new one while fewer than `max` are
    /// open (every lent connection holds a permit, so open ≤ permits).
    async fn lend(&self) -> Result<Lent<'_>, sqlx::Error> {
        let permit = tokio::time::timeout(self.patience, self.permits.acquire())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let idle = self.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.open().await?,
        };
        Ok(Lent {
            conn: Some(conn),
            owner: self,
            _permit: permit,
        })
    }

    async fn open(&self) -> Result<AnyConnection, sqlx::Error> {
        let mut conn = tokio::time::timeout(self.patience, self.options.connect())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        conn.execute(SQLITE_PRAGMAS).await?;
        Ok(conn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AnyConnection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the idle connections and refuses further statements.
    async fn close(&self) {
        self.permits.close();
        let idle: Vec<AnyConnection> = std::mem::take(&mut *self.lock());
        for conn in idle {
            let _ = conn.close().await;
        }
    }
}

/// A connection lent for one statement; it goes back to the idle list when dropped, unless
/// its worker thread is gone.
struct Lent<'a> {
    conn: Option<AnyConnection>,
    owner: &'a SqliteConnections,
    _permit: SemaphorePermit<'a>,
}

impl Lent<'_> {
    fn conn(&mut self) -> &mut AnyConnection {
        self.conn
            .as_mut()
            .expect("a lent connection is present until it is dropped")
    }

    /// Forgets the connection when `e` says it cannot run another statement.
    fn judge(&mut self, e: &sqlx::Error) {
        if matches!(e, sqlx::Error::WorkerCrashed | sqlx::Error::Io(_)) {
            tracing::warn!(error = %e, "a SQLite connection failed; opening another");
            self.conn = None;
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !self.owner.permits.is_closed()
        {
            self.owner.lock().push(conn);
        }
    }
}

type Item = Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>;

impl<'p> Executor<'p> for &'p Db {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Item>
    where
        'p: 'e,
        E: 'q + sqlx::Execute<'q, Any>,
    {
        let Some(direct) = &self.direct else {
            return self.pool.fetch_many(query);
        };
        // The connection is lent for the statement, so its results are gathered before they
        // are handed on (every query here is bounded by its LIMIT or its key).
        let gathered = async move {
            let mut lent = match direct.lend().await {
                Ok(lent) => lent,
                Err(e) => return vec![Err(e)],
            };
            let mut items = Vec::new();
            let mut results = lent.conn().fetch_many(query);
            while let Some(item) = results.next().await {
                let failed = item.is_err();
                items.push(item);
                if failed {
                    break;
                }
            }
            drop(results);
            if let Some(Err(e)) = items.last() {
                lent.judge(e);
            }
            items
        };
        futures::stream::once(gathered)
            .flat_map(futures::stream::iter)
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + sqlx::Execute<'q, Any>,
    {
        let Some(direct) = &self.direct else {
            return self.pool.fetch_optional(query);
        };
        Box::pin(async move {
            let mut lent = direct.lend().await?;
            let row = lent.conn().fetch_optional(query).await;
            if let Err(e) = &row {
                lent.judge(e);
            }
            row
        })
    }

    fn prepare_with<'e>(
        self,
        sql: sqlx::SqlStr,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<AnyStatement, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: sqlx::SqlStr,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Any>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    async fn file_store(dir: &tempfile::TempDir, max: u32) -> Store {
        let url = format!("sqlite://{}", dir.path().join("db.sqlite").display());
        Store::connect(&url, max).await.unwrap()
    }

    /// The one integer `sql` selects.
    async fn number(store: &Store, sql: &'static str) -> i64 {
        let (n,): (i64,) = sqlx::query_as(sql).fetch_one(store.pool()).await.unwrap();
        n
    }

    fn direct(store: &Store) -> &SqliteConnections {
        store
            .pool()
            .direct
            .as_deref()
            .expect("a file has direct connections")
    }

    #[tokio::test]
    async fn a_file_uses_direct_connections_and_memory_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(&dir, 4).await;
        assert!(store.pool().direct.is_some());
        let memory = Store::memory().await.unwrap();
        assert!(memory.pool().direct.is_none());
    }

    #[tokio::test]
    async fn one_statement_at_a_time_reuses_one_connection() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(&dir, 8).await;
        for n in 0..20i64 {
            let (v,): (i64,) = sqlx::query_as("SELECT $1")
                .bind(n)
                .fetch_one(store.pool())
                .await
                .unwrap();
            assert_eq!(v, n);
        }
        // Taken back without a round trip, and lent again first: one connection was opened,
        // so its page cache stays warm across statements.
        assert_eq!(direct(&store).lock().len(), 1);
    }

    #[tokio::test]
    async fn more_statements_than_connections_wait_for_one_and_every_one_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(&dir, 2).await;
        sqlx::query("CREATE TABLE t (n INTEGER)")
            .execute(store.pool())
            .await
            .unwrap();
        let writes = (0..50i64).map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                sqlx::query("INSERT INTO t (n) VALUES ($1)")
                    .bind(n)
                    .execute(store.pool())
                    .await
                    .map(|r| r.rows_affected())
            })
        });
        for write in futures::future::join_all(writes).await {
            assert_eq!(write.unwrap().unwrap(), 1);
        }
        assert_eq!(number(&store, "SELECT COUNT(*) FROM t").await, 50);
        assert!(direct(&store).lock().len() <= 2);
    }

    #[tokio::test]
    async fn a_statement_whose_caller_went_away_leaves_the_connection_usable() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(&dir, 1).await;
        // A slow statement (a long recursive count), abandoned at once.
        let slow = sqlx::query(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) \
             SELECT COUNT(*) FROM c",
        )
        .fetch_one(store.pool());
        let _ = tokio::time::timeout(Duration::from_millis(1), slow).await;
        assert_eq!(number(&store, "SELECT 7").await, 7);
    }

    #[tokio::test]
    async fn errors_come_back_and_the_connection_stays() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(&dir, 1).await;
        let Err(err) = sqlx::query("SELECT * FROM no_such_table")
            .fetch_all(store.pool())
            .await
        else {
            panic!("a missing table is an error");
        };
        assert!(err.to_string().contains("no_such_table"), "{err}");
        assert_eq!(direct(&store).lock().len(), 1);
        let rows = sqlx::query("SELECT 1 UNION ALL SELECT 2")
            .fetch_all(store.pool())
            .await
            .unwrap();
        assert_eq!(rows.len(), 2);
    }

    #[tokio::test]
    async fn transactions_and_direct_statements_see_each_others_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(&dir, 2).await;
        sqlx::query("CREATE TABLE t (n INTEGER)")
            .execute(store.pool())
            .await
            .unwrap();
        let mut tx = store.pool().begin().await.unwrap();
        sqlx::query("INSERT INTO t (n) VALUES (1)")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(number(&store, "SELECT n FROM t").await, 1);
        assert_eq!(number(&store, "PRAGMA wal_autocheckpoint").await, 10_000);
    }

    #[tokio::test]
    async fn a_closed_store_refuses_statements() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(&dir, 2).await;
        store.close().await;
        let Err(err) = sqlx::query("SELECT 1").fetch_one(store.pool()).await else {
            panic!("a closed store runs nothing");
        };
        assert!(matches!(err, sqlx::Error::PoolClosed), "{err:?}");
    }
}
