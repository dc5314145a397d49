//! Starting a confined child without forking the bot.
//!
//! A hook before exec ([`std::os::unix::process::CommandExt::pre_exec`]) makes std start the
//! child by forking the whole bot: the kernel copies its page tables and write-protects every
//! page, and the bot then takes a fault on each page it writes until the child has exec'd.
//! On a node holding a few hundred workstreams that was most of the bot's own CPU for a bash
//! call (docs/benchmarks.md, "Through the real adapters").
//!
//! So the binary acts as its own launcher: a confined child is started as
//! `/proc/self/exe` with `argv[0]` = [`ARG0`], the plan in its arguments and the program
//! after them. std starts that with `posix_spawn` (the child borrows the bot's address space
//! until it execs); the launcher, a fresh small process, confines itself exactly as the
//! forked child would ([`sys::in_child`]) and execs the program, keeping its pid, process
//! group, descriptors and environment. That environment is only what the child is given:
//! [`super::Confinement::command`] starts the launcher with an empty one, which the caller
//! fills from the allow-list ([`crate::process::env::ChildEnv`]); the bot's own never reaches it. A layer that fails ends the launcher with
//! [`CONFINE_FAILED`] before the program runs: a tool never runs less confined than the
//! probe found.
//!
//! Only a binary that calls [`enter`] first thing in `main` can be its own launcher; any
//! other (unit tests) keeps forking with the hook.
//!
//! Starting the whole bot binary only to confine and exec still costs: the dynamic loader
//! applies about a hundred thousand relocations to a large executable, faulting in and
//! copying the pages they touch, and the process maps and unmaps all of it — about 3 ms of
//! CPU per tool call, more than the tool's shell. So the package also builds
//! [`SMALL`] (`bot/src/bin/sandpiper-confine.rs`), a binary that is only this launcher; the
//! bot uses it when it lies beside the bot's own executable and answers [`PROTOCOL`] to
//! `--protocol` (a stale copy from another build is not used), else `/proc/self/exe`.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::sys::{self, HideIn, Kind, Plan};

/// `argv[0]` of a launcher process.
pub const ARG0: &str = "sandpiper-confine";
/// The program the launcher is started as: this very binary, whatever its path (and even
/// if it was replaced on disk since it started).
pub(super) const SELF: &str = "/proc/self/exe";
/// The launcher's exit status when a layer of the confinement could not be set up.
pub const CONFINE_FAILED: i32 = 125;
/// Ends the plan's arguments; the program and its arguments follow.
const END: &str = "--";
/// The file name of the small launcher binary, beside the bot's executable.
pub const SMALL: &str = "sandpiper-confine";
/// What the small launcher answers to `--protocol`: the arguments it reads ([`args`]) are
/// those of this build. Change the number with the arguments.
pub const PROTOCOL: &str = concat!("sandpiper-confine/3 ", env!("CARGO_PKG_VERSION"));

/// Whether this binary called [`enter`] (it handles [`ARG0`]).
static ABLE: AtomicBool = AtomicBool::new(false);

/// The launcher's entry: call first thing in `main`, before anything else runs. Started as
/// a launcher ([`ARG0`]), this confines the process and execs the program, and never
/// returns; otherwise it notes that this binary can launch confined children and returns.
pub fn enter() {
    let mut args = std::env::args_os();
    if args.next().as_deref() != Some(OsStr::new(ARG0)) {
        ABLE.store(Path::new(SELF).exists(), Ordering::Relaxed);
        return;
    }
    launch(args)
}

/// The small launcher's `main` ([`SMALL`]): answers `--protocol`, else confines this
/// process as its arguments say and execs the program; never returns.
pub fn small_main() -> ! {
    let mut args = std::env::args_os();
    args.next();
    let mut rest = args.peekable();
    if rest.peek().map(OsString::as_os_str) == Some(OsStr::new("--protocol")) {
        print!("{PROTOCOL}");
        std::process::exit(0);
    }
    launch(rest)
}

/// Confines this process by the plan in `args` and execs the program after it.
fn launch(args: impl Iterator<Item = OsString>) -> ! {
    let (code, error) = match Launch::parse(args) {
        Ok(mut launch) => {
            let error = launch.run();
            let code = match (launch.confined, error.kind()) {
                (false, _) => CONFINE_FAILED,
                // As a shell says it: not found, or found and not runnable.
                (true, io::ErrorKind::NotFound) => 127,
                (true, _) => 126,
            };
            (code, error)
        }
        Err(e) => (CONFINE_FAILED, e),
    };
    eprintln!("sandpiper: {error}");
    std::process::exit(code);
}

/// Whether confined children are started through the launcher.
pub(super) fn available() -> bool {
    ABLE.load(Ordering::Relaxed)
}

/// The program a launcher is started as: [`SMALL`] beside this executable when it speaks
/// this build's [`PROTOCOL`], else this binary itself ([`SELF`]). Found once.
pub(super) fn program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let small = std::env::current_exe()
            .ok()
            .map(|exe| exe.with_file_name(SMALL))
            .filter(|small| speaks_protocol(small));
        let program = small.unwrap_or_else(|| PathBuf::from(SELF));
        tracing::info!(launcher = %program.display(), "confined tool processes start through this launcher");
        program
    })
}

/// Whether `path` is a small launcher of this build.
fn speaks_protocol(path: &Path) -> bool {
    std::process::Command::new(path)
        .arg("--protocol")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout == PROTOCOL.as_bytes())
}

/// The launcher's arguments for starting `program` confined by `plan` as `kind`, first
/// joining the cgroup whose `cgroup.procs` is `join` (before it covers the cgroup file
/// systems): what [`Launch::parse`] reads back.
pub(super) fn args(plan: &Plan, kind: Kind, program: &OsStr, join: Option<&CStr>) -> Vec<OsString> {
    let (word, ruleset) = match kind {
        Kind::Tool => ("tool", plan.landlock.as_ref()),
        Kind::Math => ("math", plan.landlock_math.as_ref()),
    };
    args_as(plan, word, ruleset.is_some(), program, join)
}

/// The launcher's arguments for starting the standing spawner ([`super::spawner`]): confined
/// as a tool, then serving spawn requests on its standard input instead of exec'ing.
pub(super) fn spawner_args(plan: &Plan) -> Vec<OsString> {
    args_as(
        plan,
        SPAWNER,
        plan.landlock.is_some(),
        OsStr::new(SPAWNER),
        None,
    )
}

/// The kind word (and program) of the standing spawner.
const SPAWNER: &str = "spawner";

fn args_as(
    plan: &Plan,
    word: &str,
    landlock: bool,
    program: &OsStr,
    join: Option<&CStr>,
) -> Vec<OsString> {
    let abi = if landlock { plan.abi } else { 0 };
    let mut out: Vec<OsString> = vec![
        word.into(),
        match plan.hide {
            None => "none",
            Some(HideIn::MountNamespace) => "mount",
            Some(HideIn::UserNamespace) => "user",
        }
        .into(),
        if plan.root { "root" } else { "user" }.into(),
        abi.to_string().into(),
        OsString::from_vec(plan.uid_map.clone()),
        OsString::from_vec(plan.gid_map.clone()),
    ];
    let path = |c: &CStr| OsString::from_vec(c.to_bytes().to_vec());
    for paths in [&plan.hidden, &plan.cgroups] {
        out.push(paths.len().to_string().into());
        out.extend(paths.iter().map(|c| path(c)));
    }
    // Empty: no cgroup to join.
    out.push(join.map(path).unwrap_or_default());
    out.push(END.into());
    out.push(program.to_owned());
    out
}

/// What a launcher was asked to do.
#[derive(Debug)]
struct Launch {
    plan: Plan,
    kind: Kind,
    /// The `cgroup.procs` of the call's cgroup, joined before anything else.
    join: Option<CString>,
    /// Serve spawn requests on stdin instead of exec'ing `program` ([`super::spawner`]).
    spawner: bool,
    program: OsString,
    rest: Vec<OsString>,
    /// Set once the confinement is in place (an exec error after it is the program's).
    confined: bool,
}

impl Launch {
    /// Reads [`args`] back (after `argv[0]`); the program's own arguments follow.
    fn parse(mut args: impl Iterator<Item = OsString>) -> io::Result<Self> {
        let bad = |what: &str| io::Error::other(format!("bad launcher arguments: {what}"));
        let mut next = |what: &str| args.next().ok_or_else(|| bad(what));
        let (kind, spawner) = match next("kind")?.to_str() {
            Some("tool") => (Kind::Tool, false),
            Some("math") => (Kind::Math, false),
            Some(SPAWNER) => (Kind::Tool, true),
            _ => return Err(bad("kind")),
        };
        let hide = match next("hide")?.to_str() {
            Some("none") => None,
            Some("mount") => Some(HideIn::MountNamespace),
            Some("user") => Some(HideIn::UserNamespace),
            _ => return Err(bad("hide")),
        };
        let root = match next("root")?.to_str() {
            Some("root") => true,
            Some("user") => false,
            _ => return Err(bad("root")),
        };
        let abi: u32 = next("abi")?
            .to_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("abi"))?;
        let uid_map = next("uid map")?.into_vec();
        let gid_map = next("gid map")?.into_vec();
        let mut paths = |what: &str| -> io::Result<Vec<CString>> {
            let count: usize = next(what)?
                .to_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad(what))?;
            let mut paths = Vec::with_capacity(count.min(64));
            for _ in 0..count {
                paths.push(CString::new(next(what)?.into_vec()).map_err(|_| bad(what))?);
            }
            Ok(paths)
        };
        let hidden = paths("hidden files")?;
        let cgroups = paths("cgroup mounts")?;
        let join = next("cgroup to join")?;
        let join = match join.is_empty() {
            true => None,
            false => Some(CString::new(join.into_vec()).map_err(|_| bad("cgroup to join"))?),
        };
        if next("end")? != END {
            return Err(bad("end"));
        }
        let program = next("program")?;
        let rest = args.collect();
        // The ruleset is made here, as the probe made it: a descriptor does not survive the
        // parent's exec of us (close-on-exec), and making one is a single system call.
        let ruleset = match abi {
            0 => None,
            abi => Some(sys::landlock_ruleset(abi, kind == Kind::Math)?),
        };
        let (landlock, landlock_math) = match kind {
            Kind::Tool => (ruleset, None),
            Kind::Math => (None, ruleset),
        };
        Ok(Self {
            plan: Plan {
                hide,
                hidden,
                cgroups,
                uid_map,
                gid_map,
                abi,
                landlock,
                landlock_math,
                filter: sys::math_filter(),
                root,
            },
            kind,
            join,
            spawner,
            program,
            rest,
            confined: false,
        })
    }

    /// Confines this process and execs the program; returns only on failure.
    fn run(&mut self) -> io::Error {
        // Before the confinement covers the cgroup file systems.
        if let Some(procs) = &self.join {
            crate::process::cgroupfs::join(procs);
        }
        if let Err(e) = sys::in_child(&self.plan, self.kind) {
            return io::Error::other(format!("cannot confine the tool process: {e}"));
        }
        self.confined = true;
        if self.spawner {
            return match super::spawner::standing::take_stdin() {
                Ok(sock) => super::spawner::standing::serve(sock, self.plan.landlock.take()),
                Err(e) => e,
            };
        }
        // The launcher's own environment is only the allow-list it was started with
        // (`confined` clears the bot's), so the program inherits exactly that.
        let e = std::process::Command::new(&self.program)
            .args(&self.rest)
            .exec();
        io::Error::new(
            e.kind(),
            format!("cannot run {}: {e}", self.program.to_string_lossy()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn plan(hide: Option<HideIn>, root: bool) -> Plan {
        Plan {
            hide,
            hidden: vec![c"/etc/sandpiper.toml".into(), c"/var/lib/a b.db".into()],
            cgroups: vec![c"/sys/fs/cgroup".into()],
            uid_map: b"1000 1000 1".to_vec(),
            gid_map: b"100 100 1".to_vec(),
            abi: 0,
            landlock: None,
            landlock_math: None,
            filter: sys::math_filter(),
            root,
        }
    }

    fn parse(args: Vec<OsString>) -> Launch {
        Launch::parse(args.into_iter()).expect("parses")
    }

    #[test]
    fn the_plan_goes_through_the_arguments_unchanged() {
        for (hide, root, kind) in [
            (None, false, Kind::Tool),
            (Some(HideIn::MountNamespace), true, Kind::Tool),
            (Some(HideIn::UserNamespace), false, Kind::Math),
        ] {
            let sent = plan(hide, root);
            let join = c"/sys/fs/cgroup/sandpiper-1-ab/cgroup.procs";
            let mut args = args(&sent, kind, OsStr::new("/usr/bin/bash"), Some(join));
            args.extend(["-c".into(), "echo -- hi".into()]);
            let got = parse(args);
            assert_eq!(got.kind, kind);
            assert_eq!(got.plan.hide, sent.hide);
            assert_eq!(got.plan.root, root);
            assert_eq!(got.plan.hidden, sent.hidden);
            assert_eq!(got.plan.cgroups, sent.cgroups);
            assert_eq!(got.join.as_deref(), Some(join));
            assert_eq!(got.plan.uid_map, sent.uid_map);
            assert_eq!(got.plan.gid_map, sent.gid_map);
            assert_eq!(got.plan.abi, 0);
            assert!(got.plan.landlock.is_none() && got.plan.landlock_math.is_none());
            assert_eq!(got.program, "/usr/bin/bash");
            assert_eq!(got.rest, ["-c", "echo -- hi"]);
        }
    }

    #[test]
    fn the_spawner_is_confined_as_a_tool_and_asks_for_the_tools_ruleset() {
        let sent = plan(Some(HideIn::MountNamespace), true);
        let got = parse(spawner_args(&sent));
        assert!(got.spawner);
        assert_eq!(got.kind, Kind::Tool);
        assert_eq!(got.plan.hidden, sent.hidden);
        assert_eq!(got.plan.cgroups, sent.cgroups);
        assert_eq!(got.join, None);
        assert!(got.rest.is_empty());
        assert!(!parse(args(&sent, Kind::Tool, OsStr::new("sh"), None)).spawner);
    }

    #[test]
    fn landlock_is_asked_for_only_where_the_probe_had_it() {
        let abi = sys::landlock_abi();
        if abi == 0 {
            eprintln!("skipped: no Landlock on this kernel");
            return;
        }
        let mut sent = plan(None, false);
        sent.abi = abi;
        sent.landlock = sys::landlock_ruleset(abi, false).ok();
        let tool = parse(args(&sent, Kind::Tool, OsStr::new("sh"), None));
        assert_eq!(tool.plan.abi, abi);
        assert!(tool.plan.landlock.is_some() && tool.plan.landlock_math.is_none());
        // No ruleset for math in the probe's plan: none asked for.
        let math = parse(args(&sent, Kind::Math, OsStr::new("sh"), None));
        assert_eq!(math.plan.abi, 0);
        assert!(math.plan.landlock_math.is_none());
    }

    #[test]
    fn only_a_launcher_that_speaks_this_builds_protocol_is_used() {
        let dir = tempfile::tempdir().expect("temp dir");
        let script = |name: &str, says: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\nprintf '%s' '{says}'\n")).expect("script");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod");
            path
        };
        assert!(speaks_protocol(&script("current", PROTOCOL)));
        assert!(!speaks_protocol(&script(
            "stale",
            "sandpiper-confine/0 0.0.1"
        )));
        assert!(!speaks_protocol(&dir.path().join("missing")));
    }

    #[test]
    fn bad_arguments_are_refused_with_what_is_wrong() {
        for (args, what) in [
            (vec!["shell"], "kind"),
            (vec!["tool", "none", "user", "x"], "abi"),
            (
                vec!["tool", "none", "user", "0", "", "", "1", "/a", "x"],
                "cgroup mounts",
            ),
            (
                vec![
                    "tool", "none", "user", "0", "", "", "1", "/a", "0", "", "sh",
                ],
                "end",
            ),
            (
                vec!["tool", "none", "user", "0", "", "", "0", "0", "", "--"],
                "program",
            ),
        ] {
            let e = Launch::parse(args.into_iter().map(OsString::from)).expect_err("refused");
            assert!(e.to_string().contains(what), "{e} should name {what}");
        }
    }
}
