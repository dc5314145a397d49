use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;

use super::*;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The policy of a server whose config is /srv/sp/sandpiper.toml and database
/// /srv/sp/sandpiper.db, with the default deny list and HOME=/home/sp.
fn policy() -> PathPolicy {
    let mut protected = vec![PathBuf::from("/srv/sp/sandpiper.toml")];
    protected.extend(database_files("sqlite://sandpiper.db?mode=rwc"));
    PathPolicy::new(
        &strings(crate::config::DEFAULT_DENY_READ),
        Some(Path::new("/home/sp")),
        Path::new("/srv/sp"),
        protected,
    )
}

fn judge(path: &str) -> PathAccess {
    let workdir = Path::new("/srv/sp/workstreams/discord_3a1");
    policy().judge(workdir, Path::new(path), Path::new(path))
}

#[test]
fn inside_the_workdir_runs_unasked_and_outside_asks() {
    assert_eq!(
        judge("/srv/sp/workstreams/discord_3a1/src/main.rs"),
        PathAccess::Inside
    );
    assert_eq!(judge("/srv/sp/workstreams/discord_3a1"), PathAccess::Inside);
    assert_eq!(judge("/etc/passwd"), PathAccess::Outside);
    // Another workstream's directory, and a sibling whose name starts the same way.
    assert_eq!(
        judge("/srv/sp/workstreams/discord_3a2/notes.txt"),
        PathAccess::Outside
    );
    assert_eq!(
        judge("/srv/sp/workstreams/discord_3a10/notes.txt"),
        PathAccess::Outside
    );
}

#[test]
fn config_and_database_files_are_always_denied() {
    for path in [
        "/srv/sp/sandpiper.toml",
        "/srv/sp/sandpiper.db",
        "/srv/sp/sandpiper.db-wal",
        "/srv/sp/sandpiper.db-shm",
        "/srv/sp/sandpiper.db-journal",
    ] {
        assert_eq!(judge(path), PathAccess::Denied(Denial::Protected), "{path}");
    }
    // Even when the workdir holds them (shared mode pointed at the bot's own directory).
    let shared = Path::new("/srv/sp");
    let db = Path::new("/srv/sp/sandpiper.db");
    assert_eq!(
        policy().judge(shared, db, db),
        PathAccess::Denied(Denial::Protected)
    );
    assert_eq!(
        policy().judge(
            shared,
            Path::new("/srv/sp/README"),
            Path::new("/srv/sp/README")
        ),
        PathAccess::Inside
    );
}

#[test]
fn deny_read_globs_match_one_component_and_everything_under() {
    let ssh = Denial::DenyRead("~/.ssh".into());
    assert_eq!(judge("/home/sp/.ssh"), PathAccess::Denied(ssh.clone()));
    assert_eq!(judge("/home/sp/.ssh/id_ed25519"), PathAccess::Denied(ssh));
    assert_eq!(judge("/home/sp/.sshx"), PathAccess::Outside);
    assert_eq!(judge("/proc/1/cmdline"), PathAccess::Outside);
    assert_eq!(
        judge("/etc/shadow"),
        PathAccess::Denied(Denial::DenyRead("/etc/shadow".into()))
    );
}

#[test]
fn every_path_to_a_processs_environment_or_memory_is_denied() {
    let denied = PathAccess::Denied(Denial::ProcessSecret);
    for path in [
        "/proc/1/environ",
        "/proc/self/environ",
        "/proc/thread-self/environ",
        "/proc/1/task/1/environ",
        "/proc/self/task/4242/environ",
        "/proc/1/mem",
        "/proc/self/task/7/mem",
    ] {
        assert_eq!(judge(path), denied, "{path}");
    }
    // Also with `deny_read` emptied by the operator.
    let bare = PathPolicy::new(&[], None, Path::new("/"), Vec::<PathBuf>::new());
    assert_eq!(
        bare.judge(
            Path::new("/srv"),
            Path::new("/proc/self/task/1/environ"),
            Path::new("/proc/99/task/1/environ")
        ),
        denied
    );
    for path in [
        "/proc/1/cmdline",
        "/proc/environ",
        "/home/x/proc/1/environ",
        "/srv/mem",
    ] {
        assert_ne!(judge(path), denied, "{path}");
    }
}

#[test]
fn globs_within_a_component() {
    assert!(glob_component("*", "anything"));
    assert!(glob_component("*.pem", "server.pem"));
    assert!(!glob_component("*.pem", "server.pem.txt"));
    assert!(glob_component("id_*", "id_rsa"));
    assert!(glob_component("a*b*c", "aXXbYYc"));
    assert!(!glob_component("a*b*c", "aXXc"));
    assert!(glob_component("exact", "exact"));
    assert!(!glob_component("exact", "exactly"));
    assert!(!glob_component("ab*ba", "aba"));
}

#[test]
fn the_lexical_path_is_denied_too() {
    // A link named like the config file elsewhere is judged by what it points at, but the
    // config file reached through a path that canonicalizes elsewhere is still refused.
    let p = policy();
    assert_eq!(
        p.judge(
            Path::new("/w"),
            Path::new("/srv/sp/sandpiper.toml"),
            Path::new("/mnt/real.toml")
        ),
        PathAccess::Denied(Denial::Protected)
    );
}

#[test]
fn database_urls_name_their_files() {
    let files = |url| {
        database_files(url)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        files("sqlite:///var/lib/sp.db?mode=rwc"),
        [
            "/var/lib/sp.db",
            "/var/lib/sp.db-wal",
            "/var/lib/sp.db-shm",
            "/var/lib/sp.db-journal"
        ]
    );
    assert_eq!(files("sqlite:data.db").len(), 4);
    assert!(files("sqlite::memory:").is_empty());
    assert!(files("postgres://u:p@h/db").is_empty());
}

mod on_disk {
    use super::*;
    use crate::tools::ToolContext;
    use std::sync::Arc;

    /// A workdir `work/` beside `outside/secret.txt`, `work/link -> ../outside` and
    /// `config.toml`, the protected file.
    fn tree() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("work/sub")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("outside/secret.txt"), "s3cret").unwrap();
        std::fs::write(root.join("config.toml"), "token = 1").unwrap();
        std::fs::write(root.join("work/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(root.join("outside"), root.join("work/link")).unwrap();
        std::os::unix::fs::symlink(root.join("config.toml"), root.join("work/cfg")).unwrap();
        let mut ctx = ToolContext::for_test(&root.join("work"));
        ctx.paths = Arc::new(PathPolicy::build(
            &crate::config::ToolsConfig::default(),
            &[root.join("config.toml")],
        ));
        (dir, ctx)
    }

    #[test]
    fn dot_dot_and_symlinks_that_lead_out_are_outside() {
        let (_dir, ctx) = tree();
        assert!(!ctx.check_path("a.txt").unwrap().outside);
        assert!(!ctx.check_path("sub/../a.txt").unwrap().outside);
        assert!(ctx.check_path("../outside/secret.txt").unwrap().outside);
        let linked = ctx.check_path("link/secret.txt").unwrap();
        assert!(linked.outside);
        assert!(linked.canonical.ends_with("outside/secret.txt"));
        assert!(ctx.check_path("/etc/passwd").unwrap().outside);
    }

    #[test]
    fn a_path_that_does_not_exist_is_judged_by_its_nearest_ancestor() {
        let (_dir, ctx) = tree();
        assert!(!ctx.check_path("new/deeper/file.txt").unwrap().outside);
        assert!(ctx.check_path("link/new/file.txt").unwrap().outside);
    }

    #[test]
    fn the_config_file_is_refused_by_any_name() {
        let (_dir, ctx) = tree();
        for path in ["cfg", "../config.toml", "sub/../../config.toml"] {
            let err = ctx.check_path(path).unwrap_err().to_string();
            assert!(
                err.starts_with("refused:") && err.contains("configuration"),
                "{path}: {err}"
            );
        }
    }

    #[test]
    fn an_inside_path_that_now_leads_out_is_refused_at_execute() {
        let (dir, ctx) = tree();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert!(!ctx.check_path("moved").unwrap().outside);
        std::os::unix::fs::symlink(root.join("outside"), root.join("work/moved")).unwrap();
        let err = ctx
            .recheck_read("moved/secret.txt", false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("now leads outside the working directory"),
            "{err}"
        );
        assert!(ctx.recheck_read("moved/secret.txt", true).is_ok());
    }
}
