//! Everything one tool call started, so a timeout or `/stop` ends all of it.
//!
//! Killing the call's process group is not enough: `setsid sleep 600 &` or a daemon that
//! double-forks leaves the group and would outlive the call. So each call is contained twice:
//!
//! - **cgroup v2**, where sandpiper may create one (running as root, or a systemd unit with
//!   `Delegate=yes`): the child joins a fresh cgroup before exec, nothing it starts can leave,
//!   and `cgroup.kill` ends them all atomically.
//! - **marker and subreaper** otherwise (and in addition): the call's environment carries
//!   [`MARKER_VAR`]`=<call id>`, which every descendant inherits, so a kill finds the call's
//!   processes in `/proc` whatever their group, session or parent. With
//!   [`become_subreaper`](super::signal::become_subreaper), orphans are reparented to sandpiper rather than to init, and
//!   sandpiper reaps the ones it killed.
//!
//! Hazards handled: tokio reaps its own children by pid, so nothing here calls `waitpid(-1)`;
//! only pids this module killed (or recorded as a finished call's leftovers) are reaped, each
//! checked by pid *and* start time so a reused pid is never touched.

mod cgroup;
mod procfs;

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::sync::Mutex;
use std::time::Duration;

use procfs::Proc;

use super::confine::tool_process::ToolCommand;
use super::signal;

/// The variable that marks every process of one call (value: the call's id).
pub const MARKER_VAR: &str = "SANDPIPER_CALL_ID";

/// How long killing and reaping may take before we give up and log what is left.
const KILL_DEADLINE: Duration = Duration::from_secs(3);
/// How often a kill re-checks for stragglers.
const POLL: Duration = Duration::from_millis(20);

/// How a call's processes are contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Containment {
    /// A cgroup where one can be created, plus the marker.
    #[default]
    Auto,
    /// The marker (and subreaper) only; for tests of the fallback.
    MarkerOnly,
}

/// How the call's first process enters its cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    /// In the forked child, before exec ([`ProcessTree::prepare`]).
    BeforeExec,
    /// As it starts, after the bot saw it start ([`ProcessTree::prepare_shell`]): the
    /// launcher before it confines itself, the spawner's fork before exec, or an unconfined
    /// shell as the first step of its script. Whether it did is seen when the call ends.
    AsItStarts,
}

/// What ending a call's processes could check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The call's cgroup is empty: nothing it started is running.
    All,
    /// Every process found carrying the call's marker or in its process group is gone; the
    /// call had no cgroup, so a process that cleared its environment and left the group
    /// cannot be found.
    Found,
    /// This many of its processes were still there when the kill gave up.
    Left(usize),
}

/// A command a call's processes start from: what containment sets on it (the marker
/// variable, a process group of its own, the shell's script). A child of the bot's
/// (`tokio::process::Command`) or a tool's shell that may start through the standing spawner
/// ([`ToolCommand`]).
pub trait Containable {
    /// Sets an environment variable.
    fn mark(&mut self, name: &str, value: &str);
    /// Makes the child lead a process group of its own.
    fn own_process_group(&mut self);
    /// Adds an argument.
    fn push_arg(&mut self, arg: &str);
    /// Has the child join the cgroup whose `cgroup.procs` is `procs` as it starts; `false`
    /// when it cannot, and the shell's script must.
    fn join_cgroup(&mut self, procs: &CStr) -> bool;
}

impl Containable for tokio::process::Command {
    fn mark(&mut self, name: &str, value: &str) {
        self.env(name, value);
    }

    fn own_process_group(&mut self) {
        self.process_group(0);
    }

    fn push_arg(&mut self, arg: &str) {
        self.arg(arg);
    }

    fn join_cgroup(&mut self, _procs: &CStr) -> bool {
        // A hook before exec would make std fork all of sandpiper to start the child.
        false
    }
}

impl Containable for ToolCommand {
    fn mark(&mut self, name: &str, value: &str) {
        self.env(name, value);
    }

    fn own_process_group(&mut self) {
        ToolCommand::own_process_group(self);
    }

    fn push_arg(&mut self, arg: &str) {
        self.arg(arg);
    }

    fn join_cgroup(&mut self, procs: &CStr) -> bool {
        ToolCommand::join_cgroup(self, procs)
    }
}

/// The processes of one call: killed when asked, or when dropped before
/// [`ProcessTree::release`].
#[derive(Debug)]
pub struct ProcessTree {
    marker: String,
    cgroup: Option<cgroup::CallCgroup>,
    join: Join,
    leader: Option<libc::pid_t>,
    done: bool,
}

impl ProcessTree {
    /// Prepares `command` to start a contained call: the marker variable (set after the
    /// environment, which [`crate::process::env::ChildEnv::apply`] clears), its own process
    /// group, and joining a fresh cgroup before exec where possible. The hook before exec
    /// makes std fork all of sandpiper to start the child; a shell is started more cheaply
    /// with [`ProcessTree::prepare_shell`].
    #[allow(unsafe_code)]
    pub fn prepare(command: &mut tokio::process::Command, containment: Containment) -> Self {
        let tree = Self::contain(command, containment, Join::BeforeExec);
        if let Some(cg) = &tree.cgroup {
            let procs = cg.procs_path().clone();
            // SAFETY: the closure runs in the forked child before exec and only calls
            // `cgroupfs::join`, which makes async-signal-safe system calls and allocates nothing.
            unsafe {
                command.pre_exec(move || {
                    crate::process::cgroupfs::join(&procs);
                    Ok(())
                });
            }
        }
        tree
    }

    /// Prepares `command`, a POSIX shell, to run `script` contained: adds `-c` and the
    /// script. Without a hook before exec, std starts the shell with `posix_spawn` instead
    /// of forking sandpiper (most of sandpiper's own cost of a bash call). A confined shell
    /// joins the call's cgroup as it starts (the launcher or the spawner's fork does it
    /// before the confinement hides the cgroup file systems); an unconfined one joins with a
    /// builtin `echo` into its `cgroup.procs` before the first word of `script` runs. Either
    /// way nothing the script starts is outside it.
    pub fn prepare_shell(
        command: &mut impl Containable,
        containment: Containment,
        script: &str,
    ) -> Self {
        let mut tree = Self::contain(command, containment, Join::AsItStarts);
        let joined = tree
            .cgroup
            .as_ref()
            .is_some_and(|cg| command.join_cgroup(cg.procs_path()));
        let prelude = match joined {
            true => Some(String::new()),
            false => tree
                .cgroup
                .as_ref()
                .and_then(cgroup::CallCgroup::shell_join),
        };
        if tree.cgroup.is_some() && prelude.is_none() {
            // A cgroup path the shell cannot be given: the marker finds everything.
            tree.drop_cgroup("the cgroup path cannot be quoted for the shell");
        }
        command.push_arg("-c");
        match prelude {
            Some(prelude) => command.push_arg(&format!("{prelude}{script}")),
            None => command.push_arg(script),
        }
        tree
    }

    /// The marker, the process group and (where possible) a fresh cgroup for a call.
    fn contain(command: &mut impl Containable, containment: Containment, join: Join) -> Self {
        sweep_leftovers();
        let marker = uuid::Uuid::new_v4().simple().to_string();
        command.mark(MARKER_VAR, &marker);
        command.own_process_group();
        let cgroup = match containment {
            Containment::Auto => cgroup::CallCgroup::create(&marker),
            Containment::MarkerOnly => None,
        };
        Self {
            marker,
            cgroup,
            join,
            leader: None,
            done: false,
        }
    }

    /// Records the started child (the leader of the process group). A cgroup the child
    /// failed to join before exec is dropped; the marker still finds everything. (A child
    /// that joins as it starts is checked when the call ends: see [`ProcessTree::release`].)
    pub fn started(&mut self, pid: Option<u32>) {
        self.leader = pid.and_then(|p| libc::pid_t::try_from(p).ok());
        if self.join == Join::BeforeExec
            && let (Some(cg), Some(pid)) = (&self.cgroup, self.leader)
            && !cg.contains(pid)
        {
            self.drop_cgroup("the child did not join its cgroup");
        }
    }

    /// Falls back to the marker alone for this call.
    fn drop_cgroup(&mut self, why: &str) {
        if let Some(cg) = self.cgroup.take() {
            tracing::debug!(call = %self.marker, why, "using the marker without a cgroup");
            cg.remove();
        }
    }

    /// Whether the call runs in its own cgroup (for tests and logs).
    pub fn in_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// The call's id, as its processes see it in [`MARKER_VAR`].
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Kills every process of the call and reaps those that became sandpiper's children,
    /// except the leader, whose owner (tokio's `Child`) reaps it. Bounded by
    /// [`KILL_DEADLINE`]; whatever survives is logged. Says what could be checked.
    pub async fn kill(&mut self) -> Ended {
        self.done = true;
        let entry = self.marker_entry();
        let deadline = tokio::time::Instant::now() + KILL_DEADLINE;
        let mut killed: BTreeSet<Proc> = BTreeSet::new();
        loop {
            let found = self.kill_once(&entry);
            let alive: Vec<Proc> = found
                .iter()
                .copied()
                .filter(|p| procfs::same(*p).is_some_and(|s| s.state != 'Z'))
                .collect();
            killed.extend(found);
            reap(&mut killed, self.leader);
            let cgroup_empty = self.cgroup.as_ref().is_none_or(|cg| cg.is_empty());
            if (alive.is_empty() && cgroup_empty && killed.is_empty())
                || tokio::time::Instant::now() >= deadline
            {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        if !killed.is_empty() {
            tracing::warn!(call = %self.marker, left = ?killed, "processes of a killed call are still not gone");
            remember_leftovers(&killed);
        }
        let in_cgroup = self.in_cgroup() && self.joined();
        let members = self.cgroup.as_ref().map_or(0, |cg| cg.members().len());
        if let Some(cg) = self.cgroup.take() {
            cg.remove();
        }
        match (killed.len().max(members), in_cgroup) {
            (0, true) => Ended::All,
            (0, false) => Ended::Found,
            (left, _) => Ended::Left(left),
        }
    }

    /// Whether the first process is known to have joined the call's cgroup (a child joining
    /// as it starts: whether anything ever ran in it).
    fn joined(&self) -> bool {
        match self.join {
            Join::BeforeExec => true,
            Join::AsItStarts => self
                .cgroup
                .as_ref()
                .is_some_and(cgroup::CallCgroup::ever_ran),
        }
    }

    /// The call ended normally. Background jobs it started keep running; the ones that end
    /// up as sandpiper's children are reaped later (see [`sweep_leftovers`]).
    pub fn release(&mut self) {
        self.done = true;
        if !self.joined() {
            // The join failed: what it left is found by the marker instead.
            self.drop_cgroup("the call did not join its cgroup");
        }
        // In a cgroup, what the call left running is the cgroup's members: nothing it
        // started can leave the cgroup, so the scan of every process's environment in
        // /proc (hundreds of file reads, most of sandpiper's own cost of a bash call) is
        // only needed without one.
        let left = match &self.cgroup {
            Some(cg) => cg.members().into_iter().collect(),
            None => procfs::members(None, &self.marker_entry()),
        };
        if !left.is_empty() {
            tracing::debug!(call = %self.marker, jobs = left.len(), "background jobs outlive the call");
            remember_leftovers(&left);
        }
        if let Some(cg) = &self.cgroup {
            cg.remove();
        }
    }

    fn marker_entry(&self) -> Vec<u8> {
        format!("{MARKER_VAR}={}", self.marker).into_bytes()
    }

    /// One round: find the call's processes, SIGKILL them all; returns what was found.
    fn kill_once(&self, entry: &[u8]) -> BTreeSet<Proc> {
        let mut found = procfs::members(self.leader, entry);
        if let Some(cg) = &self.cgroup {
            found.extend(cg.members());
            cg.kill();
        }
        if let Some(pgid) = self.leader {
            signal::kill_process_group(pgid);
        }
        for p in &found {
            signal_kill(*p);
        }
        found
    }
}

impl Drop for ProcessTree {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Dropped mid-call (the future was cancelled): signal now, reap in the background.
        let found = self.kill_once(&self.marker_entry());
        let cgroup = self.cgroup.take();
        let leader = self.leader;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut killed = found;
                for _ in 0..(KILL_DEADLINE.as_millis() / POLL.as_millis()) {
                    reap(&mut killed, leader);
                    if killed.is_empty() {
                        break;
                    }
                    tokio::time::sleep(POLL).await;
                }
                remember_leftovers(&killed);
                if let Some(cg) = cgroup {
                    cg.remove();
                }
            });
        } else {
            remember_leftovers(&found);
        }
    }
}

/// SIGKILL to `p` if it is still the same process.
pub(crate) fn signal_kill(p: Proc) {
    if p.pid > 1 && procfs::same(p).is_some() {
        signal::kill_pid(p.pid);
    }
}

/// Reaps the processes of `set` that are zombies and sandpiper's children, and forgets
/// those that are gone (reaped by their parent, or a reused pid). Never touches `leader`,
/// which tokio reaps, and never waits for any other pid.
fn reap(set: &mut BTreeSet<Proc>, leader: Option<libc::pid_t>) {
    let me = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    set.retain(|p| {
        if Some(p.pid) == leader {
            return false;
        }
        let Some(s) = procfs::same(*p) else {
            return false;
        };
        if s.state != 'Z' {
            return true;
        }
        if s.ppid != me {
            // Its parent reaps it, or it is reparented to us and seen again next round.
            return true;
        }
        // Our zombie child, checked by pid and start time just above.
        signal::reap_one(p.pid)
    });
}

/// Processes of finished or killed calls that may still end up as sandpiper's zombie
/// children; reaped by [`sweep_leftovers`]. Process-wide like the subreaper flag it exists
/// for, and bounded.
static LEFTOVERS: Mutex<BTreeSet<Proc>> = Mutex::new(BTreeSet::new());
/// At most this many leftovers are remembered.
const MAX_LEFTOVERS: usize = 4096;

fn remember_leftovers(procs: &BTreeSet<Proc>) {
    let mut set = LEFTOVERS.lock().unwrap_or_else(|p| p.into_inner());
    for p in procs {
        if set.len() >= MAX_LEFTOVERS {
            break;
        }
        set.insert(*p);
    }
}

/// Reaps the remembered leftovers that have exited; run at the start of every call.
pub fn sweep_leftovers() {
    let mut set = LEFTOVERS.lock().unwrap_or_else(|p| p.into_inner());
    reap(&mut set, None);
}

/// Whether a call cgroup can be made here (root, or a delegated cgroup v2): tests expect
/// [`Ended::All`] only then.
#[cfg(test)]
pub(crate) fn call_cgroups_available() -> bool {
    let probe = cgroup::CallCgroup::create("probe-test");
    if let Some(probe) = &probe {
        probe.remove();
    }
    probe.is_some()
}

#[cfg(test)]
mod tests;
