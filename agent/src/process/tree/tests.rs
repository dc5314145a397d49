//! Tests of call containment: processes that left the group are still killed, on both paths.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;
use crate::config::ProcessEnv;
use crate::process::env::ChildEnv;

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: libc::pid_t) -> bool {
    procfs::stat(pid).is_some_and(|s| s.state != 'Z')
}

/// Starts a shell that leaves two processes outside its group (a setsid'd sleep and a
/// double-forked daemon) and prints their pids; returns the tree, the child and the pids.
async fn start_escapees(
    containment: Containment,
) -> (ProcessTree, tokio::process::Child, Vec<libc::pid_t>) {
    start_escapees_as(containment, false).await
}

/// [`start_escapees`], the shell started as the bash tool starts it when `shell` is set
/// ([`ProcessTree::prepare_shell`]), else with [`ProcessTree::prepare`].
async fn start_escapees_as(
    containment: Containment,
    shell: bool,
) -> (ProcessTree, tokio::process::Child, Vec<libc::pid_t>) {
    let script = r#"
        setsid sleep 600 & echo $!
        (setsid sh -c 'sleep 601 & echo $!' &)
        sleep 0.2
        echo ready
        sleep 600
    "#;
    let mut command = ChildEnv::allow_listed(&ProcessEnv).command("bash");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut tree = if shell {
        ProcessTree::prepare_shell(&mut command, containment, script)
    } else {
        command.arg("-c").arg(script);
        ProcessTree::prepare(&mut command, containment)
    };
    let mut child = command.spawn().expect("bash starts");
    tree.started(child.id());
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut pids = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if line == "ready" {
            break;
        }
        pids.push(line.trim().parse().expect("a pid"));
    }
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(pids.iter().all(|p| alive(*p)));
    (tree, child, pids)
}

async fn assert_all_dead(pids: &[libc::pid_t]) {
    for _ in 0..100 {
        if pids.iter().all(|p| !alive(*p)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "survivors: {:?}",
        pids.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_kill_ends_escaped_descendants_by_marker() {
    let (mut tree, mut child, pids) = start_escapees(Containment::MarkerOnly).await;
    assert!(!tree.in_cgroup());
    tree.kill().await;
    let _ = child.wait().await;
    assert_all_dead(&pids).await;
}

#[tokio::test]
async fn a_kill_ends_escaped_descendants_by_cgroup_where_one_is_writable() {
    let (mut tree, mut child, pids) = start_escapees(Containment::Auto).await;
    if !call_cgroups_available() {
        eprintln!("no writable cgroup v2 here; the marker path is tested above");
    } else {
        assert!(tree.in_cgroup(), "the child should have joined its cgroup");
    }
    tree.kill().await;
    let _ = child.wait().await;
    assert_all_dead(&pids).await;
}

/// The cgroup path `/proc/<pid>/cgroup` shows for `pid`.
fn cgroup_of(pid: libc::pid_t) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_shell_joins_its_cgroup_before_its_script_starts_anything() {
    let (mut tree, mut child, pids) = start_escapees_as(Containment::Auto, true).await;
    if call_cgroups_available() {
        assert!(tree.in_cgroup());
        // Both escapees (a setsid job and a double-forked daemon) were started by the
        // script, so they are in the call's cgroup, named after its marker.
        for pid in &pids {
            assert!(
                cgroup_of(*pid).ends_with(tree.marker()),
                "{pid} is in {:?}",
                cgroup_of(*pid)
            );
        }
    } else {
        eprintln!("no writable cgroup v2 here; the marker path is tested above");
    }
    tree.kill().await;
    let _ = child.wait().await;
    assert_all_dead(&pids).await;
}

#[tokio::test]
async fn a_cgroup_tells_whether_anything_ran_in_it() {
    let Some(cg) = cgroup::CallCgroup::create("ran-test") else {
        eprintln!("no writable cgroup v2 here");
        return;
    };
    assert!(!cg.ever_ran(), "nothing has joined yet");
    let join = cg.shell_join().expect("a UTF-8 path");
    let status = ChildEnv::allow_listed(&ProcessEnv)
        .command("bash")
        .arg("-c")
        .arg(format!("{join}echo joined"))
        .stdout(Stdio::null())
        .status()
        .await
        .expect("bash runs");
    assert!(status.success());
    assert!(cg.ever_ran(), "the shell ran in it");
    cg.remove();
}

#[tokio::test]
async fn dropping_the_tree_mid_call_kills_it_too() {
    let (tree, mut child, pids) = start_escapees(Containment::MarkerOnly).await;
    drop(tree);
    let _ = child.wait().await;
    assert_all_dead(&pids).await;
}

#[tokio::test]
async fn a_released_call_leaves_its_jobs_running_and_another_call_is_untouched() {
    let (mut other, mut other_child, other_pids) = start_escapees(Containment::MarkerOnly).await;
    let (mut tree, mut child, pids) = start_escapees(Containment::MarkerOnly).await;
    tree.kill().await;
    let _ = child.wait().await;
    assert_all_dead(&pids).await;
    assert!(other_pids.iter().all(|p| alive(*p)), "another call was hit");
    assert!(other_child.try_wait().expect("status").is_none());
    other.kill().await;
    let _ = other_child.wait().await;
    assert_all_dead(&other_pids).await;
}

/// In a subreaper (as `sandpiper serve` is), a killed daemon becomes our child: it must be
/// reaped, not left a zombie. Run in its own process so the flag touches no other test.
#[test]
fn as_a_subreaper_killed_orphans_are_reaped() {
    if std::env::var_os("SANDPIPER_SUBREAPER_CHILD").is_none() {
        let exe = std::env::current_exe().expect("test binary");
        let status = std::process::Command::new(exe)
            .args([
                "--exact",
                "process::tree::tests::as_a_subreaper_killed_orphans_are_reaped",
                "--nocapture",
            ])
            .env_clear()
            .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
            .env("SANDPIPER_SUBREAPER_CHILD", "1")
            .status()
            .expect("test binary runs");
        assert!(status.success());
        return;
    }
    crate::process::signal::become_subreaper().expect("prctl");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let (mut tree, mut child, pids) = start_escapees(Containment::MarkerOnly).await;
        tree.kill().await;
        let _ = child.wait().await;
        for pid in pids {
            // Gone entirely: not alive, not a zombie of ours.
            assert!(
                procfs::stat(pid).is_none(),
                "{pid} left as {:?}",
                procfs::stat(pid)
            );
        }
    });
}
