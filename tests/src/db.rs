//! Test databases: a fresh SQLite file, or a fresh PostgreSQL schema, per test.
//!
//! PostgreSQL comes from `SANDPIPER_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). When it cannot be reached the PostgreSQL half
//! of a test is skipped with a notice, unless `SANDPIPER_REQUIRE_POSTGRES=1` (CI), where it fails.

use sqlx::{Connection, Executor};

/// Which database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A private schema in the PostgreSQL test database.
    Postgres,
}

/// A database for one test; removed when dropped.
#[derive(Debug)]
pub struct TestDb {
    /// URL to give sandpiper.
    pub url: String,
    /// Which backend.
    pub backend: Backend,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

const DEFAULT_PG: &str = "postgres://postgres@127.0.0.1:5432/test";

impl TestDb {
    /// A fresh SQLite file.
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir for the test database");
        let url = format!("sqlite://{}", dir.path().join("sandpiper.db").display());
        Self {
            url,
            backend: Backend::Sqlite,
            _dir: Some(dir),
            pg: None,
        }
    }

    /// A fresh PostgreSQL schema, or `None` (with a notice) when PostgreSQL is not reachable
    /// and not required.
    pub async fn postgres() -> Option<Self> {
        let admin =
            std::env::var("SANDPIPER_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_PG.into());
        let required = std::env::var("SANDPIPER_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
        sqlx::any::install_default_drivers();
        let mut conn = match sqlx::AnyConnection::connect(&admin).await {
            Ok(c) => c,
            Err(e) if !required => {
                eprintln!(
                    "NOTICE: PostgreSQL at {admin} is not reachable ({e}); skipping the PostgreSQL half of this test"
                );
                return None;
            }
            Err(e) => panic!(
                "PostgreSQL is required (SANDPIPER_REQUIRE_POSTGRES=1) but {admin} is not reachable: {e}"
            ),
        };
        let schema = format!("sp_test_{}", uuid::Uuid::new_v4().simple());
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .await
            .expect("create test schema");
        let _ = conn.close().await;
        let sep = if admin.contains('?') { '&' } else { '?' };
        let url = format!("{admin}{sep}options=-c%20search_path%3D{schema}");
        Some(Self {
            url,
            backend: Backend::Postgres,
            _dir: None,
            pg: Some((admin, schema)),
        })
    }

    /// The database for `backend` (see [`Self::postgres`] for when it is `None`).
    pub async fn new(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => Some(Self::sqlite()),
            Backend::Postgres => Self::postgres().await,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin, schema)) = self.pg.take() else {
            return;
        };
        // Drop runs inside a test's runtime: use a thread with its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) = sqlx::AnyConnection::connect(&admin).await {
                    let _ = conn
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP SCHEMA IF EXISTS {schema} CASCADE"
                        )))
                        .await;
                    let _ = conn.close().await;
                }
            });
        })
        .join();
    }
}

/// Runs a test body against SQLite and PostgreSQL: `both_backends! { async fn name(db) { ... } }`
/// makes `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! both_backends {
    ($(async fn $name:ident($db:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                #[allow(unused_imports)]
                use pretty_assertions::assert_eq;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let $db = $crate::db::TestDb::sqlite();
                    $body
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let Some($db) = $crate::db::TestDb::postgres().await else {
                        return;
                    };
                    $body
                }
            }
        )*
    };
}
