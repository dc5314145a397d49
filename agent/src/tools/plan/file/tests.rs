//! The plan file attacks: a link (to sandpiper's config, to a file outside the working
//! directory, dangling), a hard link, a FIFO, a path `deny_read` covers. Each is refused or
//! replaced, and the file behind it is never read into a prompt nor written.

use std::path::Path;
use std::sync::Arc;

use pretty_assertions::assert_eq;

use super::*;
use crate::tools::path_policy::PathPolicy;

struct Rig {
    _root: tempfile::TempDir,
    workdir: PathBuf,
    outside: PathBuf,
    config: PathBuf,
    plan: PathBuf,
    ctx: ToolContext,
}

fn rig(deny_read: &[&str]) -> Rig {
    let root = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(root.path()).unwrap();
    let workdir = base.join("work");
    let outside = base.join("elsewhere");
    std::fs::create_dir_all(&workdir).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let config = base.join("sandpiper.toml");
    std::fs::write(&config, "[discord]\ntoken = \"secret\"\n").unwrap();
    let deny: Vec<String> = deny_read.iter().map(|d| (*d).to_owned()).collect();
    let mut ctx = ToolContext::for_test(&workdir);
    ctx.paths = Arc::new(PathPolicy::new(&deny, None, &base, [config.clone()]));
    let plan = workdir.join(".plan-discord_3a1.md");
    Rig {
        _root: root,
        workdir,
        outside,
        config,
        plan,
        ctx,
    }
}

fn refusal(result: Result<impl std::fmt::Debug, ToolError>) -> String {
    match result {
        Err(ToolError::Model(text)) => text,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test]
async fn a_link_to_the_config_is_neither_read_nor_written_through() {
    let r = rig(&[]);
    std::os::unix::fs::symlink(&r.config, &r.plan).unwrap();
    let err = refusal(read_previous(&r.ctx, &r.plan).await);
    assert!(err.contains("sandpiper's own configuration"), "{err}");
    assert!(!err.contains("secret"), "{err}");
    let err = refusal(save(&r.ctx, &r.plan, "1. overwrite the config\n").await);
    assert!(err.contains("sandpiper's own configuration"), "{err}");
    assert_eq!(read(&r.config), "[discord]\ntoken = \"secret\"\n");
}

#[tokio::test]
async fn a_link_out_of_the_working_directory_is_refused_and_its_target_untouched() {
    let r = rig(&[]);
    let target = r.outside.join("notes.md");
    std::fs::write(&target, "private notes").unwrap();
    std::os::unix::fs::symlink(&target, &r.plan).unwrap();
    let err = refusal(read_previous(&r.ctx, &r.plan).await);
    assert!(
        err.contains("leads outside this workstream's directory"),
        "{err}"
    );
    assert!(!err.contains("private notes"));
    refusal(save(&r.ctx, &r.plan, "1. x\n").await);
    assert_eq!(read(&target), "private notes");
    // `/proc/self/environ` is outside too.
    std::fs::remove_file(&r.plan).unwrap();
    std::os::unix::fs::symlink("/proc/self/environ", &r.plan).unwrap();
    let err = refusal(read_previous(&r.ctx, &r.plan).await);
    assert!(err.contains("refused"), "{err}");
}

#[tokio::test]
async fn links_hard_links_and_fifos_inside_are_refused_too() {
    let r = rig(&[]);
    let other = r.workdir.join("main.rs");
    std::fs::write(&other, "fn main() {}").unwrap();
    std::os::unix::fs::symlink(&other, &r.plan).unwrap();
    assert!(refusal(read_previous(&r.ctx, &r.plan).await).contains("symbolic link"));
    std::fs::remove_file(&r.plan).unwrap();
    std::fs::hard_link(&other, &r.plan).unwrap();
    assert!(refusal(read_previous(&r.ctx, &r.plan).await).contains("hard link"));
    std::fs::remove_file(&r.plan).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&r.plan)
        .status()
        .unwrap();
    assert!(made.success());
    // A FIFO would block a plain read forever; this returns at once.
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        read_previous(&r.ctx, &r.plan),
    )
    .await
    .expect("does not block on a FIFO");
    assert!(refusal(err).contains("not a regular file"));
}

#[tokio::test]
async fn deny_read_covers_the_plan_file() {
    let r = rig(&["work/.plan-*"]);
    std::fs::write(&r.plan, "1. a\n").unwrap();
    let err = refusal(read_previous(&r.ctx, &r.plan).await);
    assert!(err.contains("deny_read"), "{err}");
    refusal(save(&r.ctx, &r.plan, "1. b\n").await);
    assert_eq!(read(&r.plan), "1. a\n");
}

#[tokio::test]
async fn a_plain_plan_is_read_and_saving_replaces_a_dangling_link_not_its_target() {
    let r = rig(&[]);
    assert_eq!(read_previous(&r.ctx, &r.plan).await.unwrap(), None);
    save(&r.ctx, &r.plan, "1. dump\n").await.unwrap();
    assert_eq!(
        read_previous(&r.ctx, &r.plan).await.unwrap().as_deref(),
        Some("1. dump\n")
    );
    // A dangling link planted where the plan goes: the link is replaced, nothing is created
    // where it pointed.
    std::fs::remove_file(&r.plan).unwrap();
    let target = r.outside.join("created-by-the-link");
    std::os::unix::fs::symlink(&target, &r.plan).unwrap();
    save(&r.ctx, &r.plan, "1. restore\n").await.unwrap();
    assert!(
        !target.exists(),
        "nothing written outside the working directory"
    );
    assert!(
        !std::fs::symlink_metadata(&r.plan)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(read(&r.plan), "1. restore\n");
    let left: Vec<_> = std::fs::read_dir(&r.workdir).unwrap().collect();
    assert_eq!(left.len(), 1, "no temporary file is left: {left:?}");
}
