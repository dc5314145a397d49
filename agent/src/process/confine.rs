//! What the processes tools start may see of the bot itself.
//!
//! An approved command runs with the bot's uid (often root, in a container). Without more,
//! one `cat /proc/<bot pid>/environ` prints the model key and the platform tokens, and a
//! `cat` of the config file or the SQLite database prints the rest. So every process a tool
//! starts (bash, man, math's sandbox, stdio MCP servers and everything they start) is
//! confined before it execs, in layers, each used where this kernel allows it:
//!
//! - **Landlock** (any uid, root included, no privilege needed): the child gets its own
//!   domain, and from then on it may not ptrace, nor open `/proc/<pid>/environ`, `mem`,
//!   `fd/*`, `root` or `ns/*` of, any process outside its domain — the bot (every thread of
//!   it), and every other process not started under the same domain — nor mount or unmount
//!   anything, nor create device nodes. With ABI 6 it may not signal them either.
//! - **A mount namespace** (root), or a user namespace that maps only our own uid and gid
//!   with a mount namespace in it (a service user): the config file and the database files
//!   are covered with `/dev/null`, so reading them gives nothing and writing them changes
//!   nothing; every cgroup file system is covered with an empty tmpfs, so a call cannot move
//!   itself out of its cgroup (it joins that cgroup before the covering). The covering cannot
//!   be undone: Landlock forbids unmounting, and a nested user namespace sees the mounts
//!   locked.
//! - **Capabilities** (root): the child's bounding set loses those that read round the
//!   other layers ([`sys::DROPPED_CAPS`], `CAP_SYS_ADMIN` for all but math).
//! - **Non-dumpable bot** ([`protect_this_process`], at start): a same-uid process that is
//!   not root cannot read the bot's environment or memory even without Landlock.
//! - **math** adds a seccomp filter (no `socket` of any family: no TCP, no Unix socket) and,
//!   with Landlock 4+, no TCP and no abstract Unix sockets, on top of its network namespace.
//!
//! [`Confinement::probe`] finds out once what works here by starting `true` confined;
//! [`Confinement::report`] says what is confined and what is not, for the start-up log and
//! `sandpiper doctor`.

pub mod launcher;
mod spawner;
mod sys;
pub mod tool_process;

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sys::{HideIn, Kind, Plan};

/// Which kind of child is being started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// bash, man, stdio MCP servers.
    Tool,
    /// math's sandbox: no network of any kind either.
    Math,
}

/// What the confinement of tool processes covers on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The kernel's Landlock ABI (0: none), used for the bot's process and math's network.
    pub landlock_abi: u32,
    /// Tools cannot read the bot's environment or memory (Landlock, or not root and the bot
    /// non-dumpable).
    pub bot_process: bool,
    /// How the config and database files are hidden, or why they are not.
    pub files: FileHiding,
    /// Tools cannot signal the bot, the standing spawner or another call's processes
    /// (Landlock 6+ scopes signals to the call's own domain).
    pub signals_scoped: bool,
    /// Tools cannot move themselves out of their call's cgroup (and so out of reach of its
    /// timeout): every cgroup file system is covered in their mount namespace.
    pub cgroups_covered: bool,
    /// Root's capabilities that read round the confinement are dropped in children.
    pub caps_dropped: bool,
    /// We run as root.
    pub root: bool,
    /// Bash's calls start from the standing spawner (one confined process forking each call
    /// into a Landlock domain of its own), not from a launcher each.
    pub spawner: bool,
}

/// How the bot's own files are kept from tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileHiding {
    /// Covered in a mount namespace of the child.
    MountNamespace,
    /// Covered in a user and mount namespace of the child.
    UserNamespace,
    /// Not hidden: the reason (namespaces not allowed here, or confinement off).
    No(String),
}

impl FileHiding {
    /// A short word for logs.
    pub fn as_str(&self) -> &str {
        match self {
            FileHiding::MountNamespace => "mount-namespace",
            FileHiding::UserNamespace => "user-namespace",
            FileHiding::No(_) => "not-hidden",
        }
    }
}

/// How child processes are confined; cheap to clone. [`Confinement::none`] leaves them as
/// they are (unit tests of other things).
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    plan: Option<Arc<Plan>>,
    report: Option<Arc<Report>>,
    /// Children start through this binary's [`launcher`] instead of forking the bot.
    launched: bool,
    /// Where bash's calls start ([`spawner`]): present with Landlock and a launcher.
    spawner: Option<Arc<spawner::Spawner>>,
}

impl PartialEq for Confinement {
    fn eq(&self, other: &Self) -> bool {
        match (&self.plan, &other.plan) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for Confinement {}

impl Confinement {
    /// No confinement.
    pub fn none() -> Self {
        Self::default()
    }

    /// The strongest confinement this machine allows that keeps `hidden` (the config file,
    /// the database files) from tools: found by starting `/bin/true` with each set of layers
    /// in turn. Costs a few process starts; call once. Children start through the
    /// [`launcher`] when this binary is one ([`launcher::enter`]), the probe's too.
    pub fn probe(hidden: &[PathBuf]) -> Self {
        let launched = launcher::available();
        let (euid, uid, gid) = sys::ids();
        let root = euid == 0;
        let abi = sys::landlock_abi();
        let landlock = (abi > 0).then(|| sys::landlock_ruleset(abi, false).ok());
        let landlock_math = (abi > 0).then(|| sys::landlock_ruleset(abi, true).ok());
        let mut hidden_c: Vec<CString> = Vec::new();
        for path in hidden {
            for p in [
                path.clone(),
                crate::tools::path_policy::canonicalize_lenient(path),
            ] {
                if let Ok(c) = CString::new(p.as_os_str().as_bytes())
                    && !hidden_c.contains(&c)
                {
                    hidden_c.push(c);
                }
            }
        }
        let cgroups = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|m| crate::process::cgroupfs::cgroup_mount_points(&m))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| CString::new(p.into_os_string().into_vec()).ok())
            .collect::<Vec<_>>();
        let cgroups_found = cgroups.len();
        let plan = Plan {
            hide: Some(match root {
                true => HideIn::MountNamespace,
                false => HideIn::UserNamespace,
            }),
            hidden: hidden_c,
            cgroups,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            abi,
            landlock: landlock.flatten(),
            landlock_math: landlock_math.flatten(),
            filter: sys::math_filter(),
            root,
        };
        let mut why_not_hidden = None;
        let (mut plan, mut outcome) = try_plan(plan, launched);
        if let Err(e) = &outcome
            && !plan.cgroups.is_empty()
        {
            tracing::warn!(error = %e, "cannot cover the cgroup file systems for tools; trying without");
            plan.cgroups.clear();
            (plan, outcome) = try_plan(plan, launched);
        }
        if let Err(e) = outcome {
            why_not_hidden = Some(format!("cannot create a {:?} here: {e}", plan.hide));
            plan.hide = None;
            plan.cgroups.clear();
            let (mut again, outcome) = try_plan(plan, launched);
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "Landlock is reported but unusable; not using it");
                again.landlock = None;
                again.landlock_math = None;
            }
            plan = again;
        }
        let files = match (plan.hide, why_not_hidden) {
            (Some(HideIn::MountNamespace), _) => FileHiding::MountNamespace,
            (Some(HideIn::UserNamespace), _) => FileHiding::UserNamespace,
            (None, why) => FileHiding::No(why.unwrap_or_default()),
        };
        let mut report = Report {
            landlock_abi: if plan.landlock.is_some() { abi } else { 0 },
            bot_process: plan.landlock.is_some() || !root,
            signals_scoped: plan.landlock.is_some() && abi >= sys::ABI_SCOPES,
            cgroups_covered: plan.hide.is_some() && cgroups_found == plan.cgroups.len(),
            files,
            caps_dropped: root,
            root,
            spawner: false,
        };
        let plan = Arc::new(plan);
        // Calls share the spawner's mount namespace; what keeps them apart is the Landlock
        // domain each applies again (see `spawner`). Without Landlock, each keeps a launcher.
        let spawner = (launched && plan.landlock.is_some()).then(|| {
            Arc::new(spawner::Spawner::new(
                plan.clone(),
                launcher::program().to_owned(),
            ))
        });
        report.spawner = spawner.is_some();
        Self {
            plan: Some(plan),
            report: Some(Arc::new(report)),
            launched,
            spawner,
        }
    }

    /// The standing spawner of bash's calls, when this machine has one.
    pub(crate) fn spawner(&self) -> Option<&spawner::Spawner> {
        self.spawner.as_deref()
    }

    /// What is confined here (`None` for [`Confinement::none`]).
    pub fn report(&self) -> Option<&Report> {
        self.report.as_deref()
    }

    /// A command that starts `program` confined as `profile` says, with an empty
    /// environment: the caller adds the child's own ([`crate::process::env::ChildEnv`] does),
    /// so neither the launcher nor the tool it execs inherits the bot's secrets. Arguments
    /// added to it are `program`'s.
    pub(crate) fn command(&self, program: &OsStr, profile: Profile) -> tokio::process::Command {
        self.command_joining(program, profile, None)
    }

    /// [`Confinement::command`] whose child first joins the cgroup whose `cgroup.procs` is
    /// `join`, before the confinement covers the cgroup file systems.
    pub(crate) fn command_joining(
        &self,
        program: &OsStr,
        profile: Profile,
        join: Option<&CStr>,
    ) -> tokio::process::Command {
        let kind = match profile {
            Profile::Tool => Kind::Tool,
            Profile::Math => Kind::Math,
        };
        match &self.plan {
            Some(plan) => confined(plan, kind, program, self.launched, join),
            None => empty_env(std::process::Command::new(program)),
        }
        .into()
    }

    /// Whether children are confined at all (not [`Confinement::none`]): a confined child
    /// cannot reach the cgroup file systems once it runs, so it joins its cgroup as it starts.
    pub(crate) fn is_confined(&self) -> bool {
        self.plan.is_some()
    }
}

/// `program` started confined by `plan` as `kind`, having joined the cgroup of `join` first:
/// through the [`launcher`] (`launched`), else with hooks before exec (std then forks the bot
/// to start the child). Either starts with an empty environment: the caller adds its
/// allow-list, and the launcher passes exactly that on to the program it execs.
#[allow(unsafe_code)]
fn confined(
    plan: &Arc<Plan>,
    kind: Kind,
    program: &OsStr,
    launched: bool,
    join: Option<&CStr>,
) -> std::process::Command {
    use std::os::unix::process::CommandExt as _;
    if launched {
        let mut command = empty_env(std::process::Command::new(launcher::program()));
        command
            .arg0(launcher::ARG0)
            .args(launcher::args(plan, kind, program, join));
        return command;
    }
    let mut command = empty_env(std::process::Command::new(program));
    if let Some(procs) = join.map(CStr::to_owned) {
        // SAFETY: `join` makes async-signal-safe system calls only; the closure owns `procs`.
        unsafe {
            command.pre_exec(move || {
                crate::process::cgroupfs::join(&procs);
                Ok(())
            });
        }
    }
    let plan = plan.clone();
    // SAFETY: `in_child` makes async-signal-safe system calls only and allocates nothing;
    // everything it uses was prepared in `plan`, which the closure keeps alive.
    unsafe {
        command.pre_exec(move || sys::in_child(&plan, kind));
    }
    command
}

/// `command` with nothing of the bot's environment (its tokens, keys, database URL).
fn empty_env(mut command: std::process::Command) -> std::process::Command {
    command.env_clear();
    command
}

/// Starts `/bin/true` (or `/usr/bin/true`) confined by `plan` as a tool and as math; gives
/// the plan back with the outcome. `launched`: through the [`launcher`], as children will be.
fn try_plan(plan: Plan, launched: bool) -> (Plan, io::Result<()>) {
    let program = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("/bin/true");
    let shared = Arc::new(plan);
    let mut outcome = Ok(());
    for kind in [Kind::Tool, Kind::Math] {
        let mut command = confined(&shared, kind, OsStr::new(program), launched, None);
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        outcome = match command.output() {
            Ok(out) if out.status.success() => Ok(()),
            // The launcher says which layer failed on its stderr.
            Ok(out) => Err(io::Error::other(format!(
                "true exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
            Err(e) => Err(e),
        };
        drop(command);
        if outcome.is_err() {
            break;
        }
    }
    match Arc::try_unwrap(shared) {
        Ok(plan) => (plan, outcome),
        // Unreachable: every command holding a clone was dropped above.
        Err(_) => unreachable_plan(),
    }
}

/// A plan that confines nothing, should the probe's plan still be shared.
fn unreachable_plan() -> (Plan, io::Result<()>) {
    let plan = Plan {
        hide: None,
        hidden: Vec::new(),
        cgroups: Vec::new(),
        uid_map: Vec::new(),
        gid_map: Vec::new(),
        abi: 0,
        landlock: None,
        landlock_math: None,
        filter: sys::math_filter(),
        root: false,
    };
    (
        plan,
        Err(io::Error::other("the probe's plan is still in use")),
    )
}

/// Logs what `confinement` covers, in one structured line: `info` when the bot's process
/// and files are both out of tools' reach, `warn` naming the gap otherwise.
pub fn log_report(confinement: &Confinement) {
    let Some(r) = confinement.report() else {
        tracing::warn!("tool processes are not confined: they can read the bot's secrets");
        return;
    };
    let why = match &r.files {
        FileHiding::No(why) => why.as_str(),
        _ => "",
    };
    let hidden = !matches!(r.files, FileHiding::No(_));
    if r.bot_process && hidden && r.signals_scoped && r.cgroups_covered {
        tracing::info!(
            landlock_abi = r.landlock_abi,
            bot_process = r.bot_process,
            files = r.files.as_str(),
            signals_scoped = r.signals_scoped,
            cgroups_covered = r.cgroups_covered,
            caps_dropped = r.caps_dropped,
            root = r.root,
            spawner = r.spawner,
            "tool processes confined: the bot's environment, memory, signals, config and database are out of their reach"
        );
    } else {
        tracing::warn!(
            landlock_abi = r.landlock_abi,
            bot_process = r.bot_process,
            files = r.files.as_str(),
            why_files = why,
            signals_scoped = r.signals_scoped,
            why_signals = if r.signals_scoped {
                ""
            } else {
                "needs Landlock ABI 6 (Linux 6.12+)"
            },
            cgroups_covered = r.cgroups_covered,
            caps_dropped = r.caps_dropped,
            root = r.root,
            spawner = r.spawner,
            "tool processes only partly confined: see the README's Security model"
        );
    }
}

/// Makes the bot's own process non-dumpable ([`Report::bot_process`] for a service user):
/// called once at start by the binary.
pub fn protect_this_process() -> io::Result<()> {
    sys::set_non_dumpable()
}

#[cfg(test)]
mod tests;
