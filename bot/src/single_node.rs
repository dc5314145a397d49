//! SQLite is the single-node default: a second `sandpiper serve` on the same file would run
//! the same workstreams beside the first with nothing to keep them apart (leases take over
//! from a SQLite node at once, since it is meant to be alone). So `serve` holds an exclusive
//! lock on a file beside the database for as long as it runs, and a second one is refused
//! with a message that says what to do instead.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::PathBuf;

/// Why `serve` may not start on this database.
#[derive(Debug, thiserror::Error)]
pub enum SingleNodeError {
    /// Another node serves the same SQLite file.
    #[error(
        "another sandpiper node is already serving {db} (it holds {lock}). SQLite runs one node; \
         to run several, point every node at one PostgreSQL ([database] url = \"postgres://…\")"
    )]
    Taken {
        /// The database file.
        db: String,
        /// The lock file.
        lock: String,
    },
    /// The lock file could not be opened.
    #[error("cannot open {0}: {1}")]
    Io(String, std::io::Error),
}

/// Held while this node serves a SQLite database; dropping it (the process ending) frees it.
#[derive(Debug)]
pub struct SingleNodeLock {
    _file: File,
    /// Where the lock is.
    pub path: PathBuf,
}

/// Takes the single-node lock of the SQLite database at `url` (`<file>.lock`); `None` for
/// PostgreSQL and in-memory databases, which need none.
pub fn lock(url: &str) -> Result<Option<SingleNodeLock>, SingleNodeError> {
    if !url.starts_with("sqlite:") {
        return Ok(None);
    }
    let Some(db) = sandpiper_agent::store::sqlite_path(url) else {
        return Ok(None);
    };
    let path = PathBuf::from(format!("{}.lock", db.display()));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| SingleNodeError::Io(path.display().to_string(), e))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(SingleNodeLock { _file: file, path })),
        Err(TryLockError::WouldBlock) => Err(SingleNodeError::Taken {
            db: db.display().to_string(),
            lock: path.display().to_string(),
        }),
        Err(TryLockError::Error(e)) => Err(SingleNodeError::Io(path.display().to_string(), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_node_on_one_sqlite_file_is_refused_until_the_first_stops() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let first = lock(&url).unwrap().expect("a SQLite file is locked");
        let refused = lock(&url).unwrap_err();
        let text = refused.to_string();
        assert!(text.contains("already serving"), "{text}");
        assert!(text.contains("PostgreSQL"), "{text}");
        drop(first);
        assert!(lock(&url).unwrap().is_some());
        // Other databases need no lock.
        assert!(lock("postgres://db/x").unwrap().is_none());
        assert!(lock("sqlite::memory:").unwrap().is_none());
        let other = format!("sqlite://{}", dir.path().join("other.db").display());
        let _a = lock(&url).unwrap();
        assert!(lock(&other).unwrap().is_some());
    }
}
