//! Persistence behind one small façade: [`Store`] over sqlx's `Any` driver, serving SQLite
//! (the embedded default) and PostgreSQL with the same queries.
//!
//! One module per table: [`workstreams`], [`messages`], [`approvals`] (requests and
//! always-allow grants), [`connectors`] (connector policy tiers), [`memories`] (scoped memories), [`users`] (users, their platform
//! identities and linking), [`services`] (the registry of running nodes), [`notifications`]
//! (which workstream sent a delivered notification), [`platform_events`] (events a platform
//! delivered, so each is handled once across nodes), [`platform_names`] (what channels and
//! approver roles are called), [`web_access`] and [`status_view`] (the
//! status page's sign-in and what it reads), [`audit`] (the append-only approval audit trail), [`usage`] (tokens per model call and the budgets set in chat); [`recall`] is full-text search over the messages. Migrations are
//! embedded and run at connect time.

pub mod approvals;
pub mod audit;
mod budget_kinds;
pub mod checkpoints;
pub mod connectors;
mod db;
pub mod health;
pub mod leases;
pub mod memories;
pub mod messages;
pub mod notifications;
pub mod platform_events;
pub mod platform_names;
pub mod prompt_templates;
pub mod recall;
pub mod services;
pub mod status_view;
pub mod usage;
pub mod users;
pub mod watches;
pub mod web_access;
pub mod workstreams;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::Executor;
use sqlx::any::{AnyPoolOptions, install_default_drivers};

use db::{Db, SQLITE_PRAGMAS, SqliteConnections};

/// Why a storage operation failed. Fatal for the operation: the caller reports it to the
/// user and does not pretend the data was saved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no supported database.
    #[error("unsupported database url `{0}`: use sqlite://FILE or postgres://...")]
    UnsupportedUrl(String),
    /// The database could not be reached or a query failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The database could not be opened at start-up; the text has the URL's secrets removed.
    #[error("cannot open the database: {0}")]
    Open(String),
    /// A command that only reads found no SQLite file ([`Store::open_existing`]): nothing to
    /// read yet; the commands that write create it.
    #[error("there is no database at {} yet", .0.display())]
    NotCreated(std::path::PathBuf),
    /// Migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A search query has nothing to search for (empty, or only punctuation). Not a fault of
    /// the database: show it to whoever asked (the model), who can rephrase.
    #[error(
        "nothing to search for in {0:?}: the query needs at least one word or number (letters \
         or digits); punctuation and search operators are ignored"
    )]
    EmptyQuery(String),
    /// A stored row could not be decoded (corrupt JSON, unknown role).
    #[error("corrupt row in {table}: {message}")]
    Corrupt {
        /// Table.
        table: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A tool met a store error it cannot go on from (the database away mid-call,
    /// [`crate::tools::ToolError::Fatal`]): the turn ends with it, shown to the person.
    #[error("{0}")]
    DuringTool(String),
}

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite file or memory database.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// The database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: Db,
    backend: Backend,
}

impl Store {
    /// Connects (creating a SQLite file if missing, in WAL mode) and runs migrations; an
    /// operation waits up to 10 s for the database to answer.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        Self::connect_with(url, max_connections, Duration::from_secs(10)).await
    }

    /// [`Self::connect`], where an operation waits up to `patience` for a connection: a
    /// database that restarts within it costs a delay, not an error.
    pub async fn connect_with(
        url: &str,
        max_connections: u32,
        patience: Duration,
    ) -> Result<Self, StoreError> {
        install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::UnsupportedUrl(redact_url(url)));
        };
        let (url, max_connections) = match backend {
            Backend::Sqlite => sqlite_url(url, max_connections),
            Backend::Postgres => (postgres_driver_url(url), max_connections.max(1)),
        };
        let mut options = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(patience);
        if backend == Backend::Sqlite {
            // A connection to a local file does not go stale between two queries, and each
            // test is a round trip to the connection's worker thread: one per query, on
            // every turn's hot path. (PostgreSQL keeps the test: a server restart leaves
            // dead connections in the pool.)
            options = options.test_before_acquire(false);
            options = options.after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute(SQLITE_PRAGMAS).await?;
                    Ok(())
                })
            });
        }
        if backend == Backend::Sqlite {
            protect_sqlite_file(&url)?;
        }
        let pool = options
            .connect(&url)
            .await
            .map_err(|e| StoreError::Open(scrub_url(&e.to_string(), &url)))?;
        match backend {
            Backend::Sqlite => sqlx::migrate!("../migrations/sqlite").run(&pool).await?,
            Backend::Postgres => sqlx::migrate!("../migrations/postgres").run(&pool).await?,
        }
        let pool = match backend {
            // Statements on a file go through direct connections (see `db`); sqlx's pool,
            // beside them, opens its own (lazily, up to the same limit) for transactions.
            Backend::Sqlite if sqlite_path(&url).is_some() => {
                let direct = SqliteConnections::new(&url, max_connections, patience)
                    .map_err(|e| StoreError::Open(scrub_url(&e.to_string(), &url)))?;
                Db::sqlite(pool, direct)
            }
            _ => Db::pooled(pool),
        };
        tracing::debug!(backend = ?backend, "database ready");
        Ok(Self { pool, backend })
    }

    /// [`Self::connect_with`] for a command that only reads (`doctor`, `audit`, `whoami`): a
    /// SQLite file is opened as it is and never created; a missing one is
    /// [`StoreError::NotCreated`].
    pub async fn open_existing(
        url: &str,
        max_connections: u32,
        patience: Duration,
    ) -> Result<Self, StoreError> {
        let Some(file) = sqlite_path(url) else {
            return Self::connect_with(url, max_connections, patience).await;
        };
        if !file.exists() {
            return Err(StoreError::NotCreated(file));
        }
        // `mode=rw`: a file removed meanwhile is an error here too, not a new database.
        let url = match url.contains("mode=") {
            true => url.to_owned(),
            false if url.contains('?') => format!("{url}&mode=rw"),
            false => format!("{url}?mode=rw"),
        };
        Self::connect_with(&url, max_connections, patience).await
    }

    /// A private in-memory SQLite database (unit tests, benchmarks).
    pub async fn memory() -> Result<Self, StoreError> {
        Self::connect("sqlite::memory:", 1).await
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The executor of the query modules.
    pub(crate) fn pool(&self) -> &Db {
        &self.pool
    }

    /// Moves the SQLite write-ahead log into the main database file and truncates it (before a
    /// backup, or to keep a benchmark's setup from paying off its WAL inside the measurement).
    /// A no-op on PostgreSQL.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        if self.backend == Backend::Sqlite {
            self.pool.execute("PRAGMA wal_checkpoint(TRUNCATE)").await?;
        }
        Ok(())
    }

    /// Starts a transaction that reads and then writes what it read decides: on SQLite it
    /// takes the write lock at once (`BEGIN IMMEDIATE`), so no other writer commits between
    /// its reads and its writes (a deferred one would fail to upgrade then). On PostgreSQL the
    /// writes still guard themselves with conditions.
    pub(crate) async fn begin_write(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Adds `mode=rwc` so a missing file is created; in-memory databases get one connection
/// (each pooled connection to `:memory:` would be a separate database).
fn sqlite_url(url: &str, max_connections: u32) -> (String, u32) {
    if url.contains(":memory:") {
        return (url.to_owned(), 1);
    }
    let url = if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    };
    (url, max_connections.max(1))
}

/// The connect parameters sqlx's PostgreSQL driver reads (sqlx-postgres 0.9's
/// `PgConnectOptions::parse_from_url`), besides `options[NAME]`. The driver logs any other
/// parameter with its value in clear ("ignoring unrecognized connect parameter"), so
/// `sslpassword` or a token would reach the logs.
const POSTGRES_DRIVER_PARAMS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The PostgreSQL `url` as the driver (sqlx's pool, and a cluster node's `LISTEN`
/// connection) gets it: only the parameters it reads. The others change nothing there; they
/// are named, without their values, in a warning.
pub fn postgres_driver_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return url.to_owned();
    };
    let read = |key: &str| POSTGRES_DRIVER_PARAMS.contains(&key) || key.starts_with("options[");
    let (kept, dropped): (Vec<_>, Vec<_>) = parsed
        .query_pairs()
        .into_owned()
        .partition(|(key, _)| read(key));
    if dropped.is_empty() {
        return url.to_owned();
    }
    // A bare parameter (`?TOKEN`) is a value: its name is not shown either.
    let ignored: Vec<&str> = dropped
        .iter()
        .map(|(key, value)| match value.is_empty() {
            true => "<redacted>",
            false => key.as_str(),
        })
        .collect();
    tracing::warn!(
        ignored = ?ignored,
        "the database URL has parameters the PostgreSQL driver does not read; they are ignored"
    );
    match kept.is_empty() {
        true => parsed.set_query(None),
        false => {
            parsed.query_pairs_mut().clear().extend_pairs(kept);
        }
    }
    parsed.into()
}

/// How often a write is tried again after its connection went away mid-statement.
pub(crate) const RECONNECTS: u32 = 3;

/// Whether `e` says the connection went away under a statement (the server restarted or
/// failed over, the network dropped): the statement may or may not have been applied, and a
/// new connection (the pool waits `acquire_timeout` for one) may well succeed.
pub(crate) fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        // admin_shutdown, crash_shutdown, cannot_connect_now; connection_exception and kin.
        sqlx::Error::Database(db) => matches!(
            db.code().as_deref(),
            Some("57P01" | "57P02" | "57P03" | "08000" | "08003" | "08006")
        ),
        _ => false,
    }
}

use crate::config::scrub_url;
pub use crate::config::{redact_url, sqlite_path};

/// Creates the SQLite file readable by its owner only (0600) before SQLite opens it, and
/// tightens an existing one; SQLite gives its `-wal` and `-shm` files the database file's
/// mode, and those that exist are tightened too. The database holds every conversation.
fn protect_sqlite_file(url: &str) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let Some(path) = sqlite_path(url) else {
        return Ok(());
    };
    let open_error = |e: std::io::Error| StoreError::Open(format!("{}: {e}", path.display()));
    std::fs::OpenOptions::new()
        // Only a URL that asks for it creates the file (`mode=rw` opens an existing one).
        .create(url.contains("mode=rwc"))
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(open_error)?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let file = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        if file.exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                .map_err(open_error)?;
        }
    }
    Ok(())
}

/// Now, in unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_postgres_driver_gets_only_the_parameters_it_reads() {
        let url = "postgres://bob:pw@db/x?sslmode=require&sslpassword=hunter2&options=-c%20a%3Db";
        let given = postgres_driver_url(url);
        assert_eq!(
            given,
            "postgres://bob:pw@db/x?sslmode=require&options=-c+a%3Db"
        );
        let options: sqlx::postgres::PgConnectOptions = given.parse().unwrap();
        assert_eq!(options.get_options(), Some("-c a=b"));
        assert_eq!(
            postgres_driver_url("postgres://db/x?tok"),
            "postgres://db/x"
        );
        assert_eq!(
            postgres_driver_url("postgres://db/x?sslmode=disable"),
            "postgres://db/x?sslmode=disable"
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            redact_url("postgres://bob:hunter2@db/x"),
            "postgres://<redacted>@db/x"
        );
        assert_eq!(redact_url("sqlite://a.db"), "sqlite://a.db");
        assert_eq!(
            scrub_url(
                "password authentication failed (hunter%2F2, hunter/2)",
                "postgres://bob:hunter%2F2@db/x"
            ),
            "password authentication failed (<redacted>, <redacted>)"
        );
        assert_eq!(sqlite_path("sqlite://a.db?mode=rwc"), Some("a.db".into()));
        assert_eq!(sqlite_path("sqlite:/srv/a.db"), Some("/srv/a.db".into()));
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_url("sqlite://a.db", 8).0, "sqlite://a.db?mode=rwc");
        assert_eq!(
            sqlite_url("sqlite::memory:", 8),
            ("sqlite::memory:".into(), 1)
        );
    }

    #[tokio::test]
    async fn unsupported_url_is_a_clear_error() {
        let err = Store::connect("mysql://root:pw@h/db", 1).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported database url `mysql://<redacted>@h/db`: use sqlite://FILE or postgres://..."
        );
    }

    #[tokio::test]
    async fn the_sqlite_files_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private.db");
        let url = format!("sqlite://{}", path.display());
        let store = Store::connect(&url, 2).await.unwrap();
        store.checkpoint().await.unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("private.db{suffix}"));
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
        store.close().await;
        // A database created by an older version (0644) is tightened at the next start.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let store = Store::connect(&url, 2).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        store.close().await;
    }

    #[tokio::test]
    async fn a_command_that_only_reads_never_creates_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("later.db");
        let url = format!("sqlite://{}", path.display());
        let patience = Duration::from_secs(1);
        let missing = Store::open_existing(&url, 1, patience).await.unwrap_err();
        assert_eq!(
            missing.to_string(),
            format!("there is no database at {} yet", path.display())
        );
        // Even asked directly without creation, the file is not made.
        let refused = Store::connect_with(&format!("{url}?mode=rw"), 1, patience).await;
        assert!(refused.is_err());
        assert!(!path.exists());
        Store::connect(&url, 1).await.unwrap().close().await;
        let store = Store::open_existing(&url, 1, patience).await.unwrap();
        store.ping().await.unwrap();
        store.close().await;
    }

    #[tokio::test]
    async fn sqlite_file_is_created_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = Store::connect(&format!("sqlite://{}", path.display()), 2)
            .await
            .unwrap();
        assert!(path.exists());
        let mode: (String,) = sqlx::query_as("PRAGMA journal_mode")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(mode.0, "wal");
    }
}
