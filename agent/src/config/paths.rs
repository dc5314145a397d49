//! Relative paths of the configuration, made absolute once at load time.
//!
//! A path written in the config file is relative to the file's directory, not to wherever the
//! command happens to run: `sandpiper init` writes `sqlite://sandpiper.db`, and a `doctor` or
//! `serve` started from another directory must find that same database rather than create an
//! empty one there. A path from the environment is relative to the current directory, as a
//! shell user expects. Either way it is absolute afterwards, so every message shows where the
//! file really is.

use std::path::{Path, PathBuf};

use super::Config;

impl Config {
    /// Makes the SQLite file of `[database] url` and `[tools] workdir` absolute, relative
    /// ones taken from `base` (itself relative to the current directory when it is).
    pub(super) fn resolve_paths(&mut self, base: &Path) {
        if let Some(url) = sqlite_url_under(&self.database.url, base) {
            self.database.url = url;
        }
        if let Some(dir) = &self.tools.workdir {
            self.tools.workdir = Some(absolute(base, dir));
        }
    }
}

/// The directory the paths of config file `file` are relative to.
pub(super) fn base_of(file: &Path) -> &Path {
    file.parent().unwrap_or(Path::new(""))
}

/// `path` under `base`, absolute. The base (the config file's directory, or the current
/// one) exists, so it is shown as the system names it (`/etc/sandpiper`, not
/// `/home/ann/../../etc/sandpiper`); the rest is left as written. Stays relative only when
/// the current directory cannot be read.
fn absolute(base: &Path, path: &Path) -> PathBuf {
    let dir = match base.as_os_str().is_empty() {
        true => Path::new("."),
        false => base,
    };
    let joined = match std::fs::canonicalize(dir) {
        Ok(dir) => dir.join(path),
        Err(_) => base.join(path),
    };
    std::path::absolute(&joined).unwrap_or(joined)
}

/// The file of a `sqlite:` URL; `None` for an in-memory database or another scheme.
pub fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let file = rest.split('?').next().unwrap_or_default();
    (!file.is_empty() && !file.contains(":memory:") && !url.contains("mode=memory"))
        .then(|| std::path::PathBuf::from(file))
}

/// A `sqlite:` URL whose file is relative, with the file made absolute under `base` and the
/// query kept; `None` for other URLs (absolute files, in-memory databases, PostgreSQL).
pub fn sqlite_url_under(url: &str, base: &Path) -> Option<String> {
    let file = sqlite_path(url)?;
    if file.is_absolute() {
        return None;
    }
    let query = url.split_once('?').map(|(_, q)| format!("?{q}"));
    Some(format!(
        "sqlite://{}{}",
        absolute(base, &file).display(),
        query.unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn relative_files_go_under_the_base_and_others_stay() {
        let base = Path::new("/etc/sandpiper");
        for (url, resolved) in [
            (
                "sqlite://sandpiper.db",
                Some("sqlite:///etc/sandpiper/sandpiper.db"),
            ),
            (
                "sqlite:data/x.db?mode=rwc",
                Some("sqlite:///etc/sandpiper/data/x.db?mode=rwc"),
            ),
            ("sqlite:///srv/x.db", None),
            ("sqlite::memory:", None),
            ("postgres://sp:pw@db/sp", None),
        ] {
            assert_eq!(sqlite_url_under(url, base).as_deref(), resolved, "{url}");
        }
        let mut config = Config::default();
        config.tools.workdir = Some("work".into());
        config.resolve_paths(base);
        assert_eq!(config.database.url, "sqlite:///etc/sandpiper/sandpiper.db");
        assert_eq!(config.tools.workdir, Some("/etc/sandpiper/work".into()));
    }

    #[test]
    fn a_relative_base_is_under_the_current_directory() {
        let cwd = std::env::current_dir().unwrap();
        let mut config = Config::default();
        config.resolve_paths(base_of(Path::new("sandpiper.toml")));
        assert_eq!(
            config.database.url,
            format!("sqlite://{}", cwd.join("sandpiper.db").display())
        );
    }
}
