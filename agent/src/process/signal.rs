//! Signals and reaping: the few system calls both sides of a tool call need, the bot (ending
//! a call's processes, reaping what it killed) and the standing spawner (reaping the calls it
//! forked). Every one takes integers and an out-pointer at most; the callers decide which
//! pids are theirs to touch.

use std::io;

/// Makes this process the reaper of orphans its descendants leave (`PR_SET_CHILD_SUBREAPER`),
/// so a daemon a call started is reparented here, not to init, and a kill can reap it.
///
/// Process-wide: the bot calls it once at start (`bot/src/main.rs`), the standing spawner
/// when it starts serving; without it, kills still find and end a call's processes by their
/// marker, and init reaps them.
#[allow(unsafe_code)]
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Kills the process `pid` (a tool's child that is not the bot's own, dropped before it
/// ended). Pids 1 and below are never signalled.
pub(crate) fn kill_pid(pid: libc::pid_t) {
    if pid > 1 {
        send(pid, libc::SIGKILL);
    }
}

/// Sends SIGKILL to every process in group `pgid` (the group created for one call by
/// `process_group(0)`). Groups 1 and below are never signalled.
#[allow(unsafe_code)]
pub(crate) fn kill_process_group(pgid: libc::pid_t) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg takes two integers and touches no memory of ours; `pgid` is greater than
    // 1, so the call cannot signal every process (0 or -1) or init.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

#[allow(unsafe_code)]
fn send(pid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill takes two integers and touches no memory of ours; both callers pass a pid
    // greater than 1, so it never signals a group, every process, or init.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Reaps `pid` if it is a zombie child of this process; `true` while it is still running.
/// The caller has checked that `pid` is its own child (tokio reaps the children it spawned,
/// so nothing here waits for any pid but the one named).
#[allow(unsafe_code)]
pub(crate) fn reap_one(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on one positive pid with WNOHANG; `status` is a valid out-pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    rc == 0
}

/// Every child of this process that has ended, with its wait status. Only for a process
/// that owns all its children (the standing spawner): it would steal tokio's.
#[allow(unsafe_code)]
pub(crate) fn reap_all() -> Vec<(libc::pid_t, i32)> {
    let mut ended = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return ended;
        }
        ended.push((pid, status));
    }
}
