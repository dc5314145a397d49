//! Defaults that follow the person running sandpiper rather than the directory it happens to
//! start in: the database and the console history live in sandpiper's data directory
//! ([`sandpiper_agent::config::data_dir`]); the console works in the directory `sandpiper
//! chat` started in; the chat platforms' workstreams each get a directory under the data
//! directory; the console user is the account's name.

use std::path::{Path, PathBuf};

use sandpiper_agent::Config;
use sandpiper_agent::config::{Env, WorkdirMode, data_dir, sqlite_url_under};
use sandpiper_agent::store::sqlite_path;

/// Where each command's tools work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `sandpiper chat`: the directory it started in, or `--workdir`.
    Console,
    /// `sandpiper serve`: one directory per thread under the data directory.
    Platforms,
}

/// Sets `[tools] workdir` when the configuration left it unset: for the console the
/// directory given with `--workdir`, else `cwd`, shared by its workstreams (it is the
/// project the person is in); for the platforms `<data dir>/workstreams`, one directory per
/// thread. A `--workdir` wins over the file; `[tools] workdir` otherwise stays as written.
pub fn workdir(config: &mut Config, place: Place, flag: Option<&Path>, cwd: &Path, env: &dyn Env) {
    let tools = &mut config.tools;
    match (place, flag) {
        (Place::Console, Some(dir)) => {
            tools.workdir = Some(cwd.join(dir));
            tools.workdir_mode = WorkdirMode::Shared;
        }
        (Place::Console, None) if tools.workdir.is_none() => {
            tools.workdir = Some(cwd.to_owned());
            tools.workdir_mode = WorkdirMode::Shared;
        }
        (Place::Platforms, _) if tools.workdir.is_none() => {
            tools.workdir = data_dir(env).map(|d| d.join("workstreams"));
        }
        _ => {}
    }
}

/// The effective working directory of a workstream `key` under this configuration.
pub fn workdir_of(config: &Config, key: &str, cwd: &Path) -> PathBuf {
    sandpiper_agent::workstream::WorkdirLayout::new(
        config.tools.workdir.as_deref(),
        config.tools.workdir_mode,
        cwd,
    )
    .dir_for(key)
}

/// `--database`: a `sqlite:`/`postgres:` URL, or a file path for SQLite; a relative file is
/// made absolute under `cwd`.
pub fn database_url(flag: &str, cwd: &Path) -> String {
    if flag.contains("://") || flag.starts_with("sqlite:") {
        sqlite_url_under(flag, cwd).unwrap_or_else(|| flag.to_owned())
    } else {
        format!("sqlite://{}", cwd.join(flag).display())
    }
}

/// Where `sandpiper chat` writes its log: `chat.log` in the data directory.
pub fn chat_log_file(env: &dyn Env) -> Option<PathBuf> {
    Some(data_dir(env)?.join("chat.log"))
}

/// The SQLite file the configuration names (`None` for PostgreSQL or in-memory).
pub fn database_file(config: &Config) -> Option<PathBuf> {
    sqlite_path(&config.database.url)
}

/// Creates the directory of the SQLite file (0700: it holds every conversation) when it is
/// missing, before the store creates the file.
pub fn prepare_database(config: &Config) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let Some(dir) = database_file(config).and_then(|f| f.parent().map(Path::to_owned)) else {
        return Ok(());
    };
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
}

/// What a command that only reads says when the SQLite database does not exist yet (it
/// never creates one): `None` when there is one, or the database is PostgreSQL.
pub fn no_database_yet(config: &Config) -> Option<String> {
    let file = database_file(config)?;
    (!file.exists()).then(|| {
        format!(
            "There is no database yet at {}: it is created by the first `sandpiper chat` or \
             `sandpiper serve` (or choose another with --database, SANDPIPER_DATABASE_URL or \
             [database] url).",
            file.display()
        )
    })
}

/// The console history file of OS user `user`.
pub fn history_file(env: &dyn Env, user: &str) -> Option<PathBuf> {
    Some(
        data_dir(env)?
            .join("history")
            .join(sandpiper_agent::workstream::safe_name(user)),
    )
}

/// The person at the terminal: `$USER`, else `$LOGNAME`, else the account's name from the
/// system (`getpwuid`), else `local`.
pub fn os_user(env: &dyn Env) -> String {
    env.var("USER")
        .or_else(|| env.var("LOGNAME"))
        .or_else(account_name)
        .unwrap_or_else(|| "local".into())
}

fn account_name() -> Option<String> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::current()).ok()??;
    Some(user.name).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_console_works_where_it_started_unless_told() {
        let cwd = Path::new("/home/ann/project");
        let env = [("HOME", "/home/ann")];
        let mut c = Config::for_test();
        workdir(&mut c, Place::Console, None, cwd, &env);
        assert_eq!(workdir_of(&c, "console:default", cwd), cwd);
        let mut c = Config::for_test();
        workdir(
            &mut c,
            Place::Console,
            Some(Path::new("../other")),
            cwd,
            &env,
        );
        assert_eq!(
            workdir_of(&c, "console:default", cwd),
            Path::new("/home/ann/other")
        );
        // `[tools] workdir` from the file keeps its per-workstream layout.
        let mut c = Config::for_test();
        c.tools.workdir = Some("/srv/work".into());
        workdir(&mut c, Place::Console, None, cwd, &env);
        assert_eq!(
            workdir_of(&c, "console:x", cwd),
            Path::new("/srv/work/console_3ax")
        );
        // The platforms: one directory per thread in the data directory.
        let mut c = Config::for_test();
        workdir(&mut c, Place::Platforms, None, cwd, &env);
        assert_eq!(
            workdir_of(&c, "discord:1", cwd),
            Path::new("/home/ann/.local/share/sandpiper/workstreams/discord_3a1")
        );
    }

    #[test]
    fn a_database_flag_is_a_url_or_a_file() {
        let cwd = Path::new("/w");
        assert_eq!(database_url("x.db", cwd), "sqlite:///w/x.db");
        assert_eq!(database_url("/d/x.db", cwd), "sqlite:///d/x.db");
        assert_eq!(database_url("postgres://h/db", cwd), "postgres://h/db");
        assert_eq!(database_url("sqlite:x.db", cwd), "sqlite:///w/x.db");
        assert_eq!(database_url("sqlite:///d/x.db", cwd), "sqlite:///d/x.db");
    }

    #[test]
    fn the_user_name_falls_back_to_the_account() {
        assert_eq!(os_user(&[("USER", "ann")]), "ann");
        assert_eq!(os_user(&[("LOGNAME", "bob")]), "bob");
        let account = os_user(&[("HOME", "/x")]);
        assert!(!account.is_empty() && account != "local", "{account}");
    }
}
