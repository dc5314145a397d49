//! A cgroup v2 per call, where sandpiper may create one: every process the call starts stays
//! in it whatever it does (setsid, double fork), and `cgroup.kill` ends them all at once.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use super::procfs::Proc;
use crate::process::cgroupfs;

/// The cgroup v2 sandpiper runs in.
#[derive(Debug)]
struct OwnCgroup {
    /// Its directory on the cgroup2 mount.
    dir: PathBuf,
    /// Its path as `/proc/self/cgroup` shows it (`0::<path>`), without a trailing slash.
    path: String,
}

/// The cgroup v2 sandpiper runs in, if it is on a cgroup2 mount we can write to (root, or a
/// delegated systemd unit). Looked up once: it does not change while we run.
fn own_cgroup() -> Option<&'static OwnCgroup> {
    static OWN: OnceLock<Option<OwnCgroup>> = OnceLock::new();
    OWN.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let dir = locate(&mountinfo, &cgroup)?;
        let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
        let probe = dir.join(format!("sandpiper-probe-{}", std::process::id()));
        match std::fs::create_dir(&probe).and_then(|()| std::fs::remove_dir(&probe)) {
            Ok(()) => Some(OwnCgroup {
                dir,
                path: path.trim_end_matches('/').to_owned(),
            }),
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "cgroup not writable; using the subreaper fallback");
                None
            }
        }
    })
    .as_ref()
}

/// Call cgroups that background jobs kept busy when their call ended; removed once empty.
static BUSY: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// At most this many busy cgroups are remembered (each is one long-running background job).
const MAX_BUSY: usize = 4096;

/// Our cgroup directory from `/proc/self/mountinfo` (the cgroup2 mount point and its root)
/// and `/proc/self/cgroup` (the `0::/path` line).
pub(crate) fn locate(mountinfo: &str, cgroup: &str) -> Option<PathBuf> {
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mount = cgroupfs::mounts(mountinfo).find(|m| m.fstype == "cgroup2")?;
    let relative = own.strip_prefix(mount.root.as_str()).unwrap_or(own);
    Some(mount.point.join(relative.trim_start_matches('/')))
}

/// A call's own cgroup. Removed when the call's processes are gone.
#[derive(Debug)]
pub(crate) struct CallCgroup {
    dir: PathBuf,
    /// Its path as `/proc/<pid>/cgroup` shows it for a member (`0::<path>`).
    path: String,
    /// `<dir>/cgroup.procs` for the child to write itself into before exec.
    procs: CString,
}

impl CallCgroup {
    /// Creates `sandpiper-<our pid>-<marker>` beside sandpiper's own cgroup, or `None` when
    /// cgroups are not available to us. Cgroups of earlier calls that have emptied since are
    /// removed here.
    pub(super) fn create(marker: &str) -> Option<Self> {
        let own = own_cgroup()?;
        remove_emptied();
        let name = format!("sandpiper-{}-{marker}", std::process::id());
        let path = format!("{}/{name}", own.path);
        let dir = own.dir.join(&name);
        if let Err(e) = std::fs::create_dir(&dir) {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot create a call cgroup");
            return None;
        }
        let procs = CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .ok()?;
        Some(Self { dir, path, procs })
    }

    /// The `cgroup.procs` path, for [`cgroupfs::join`] in the child.
    pub(super) fn procs_path(&self) -> &CString {
        &self.procs
    }

    /// The shell words that move the shell running them into this cgroup, to put before a
    /// script: a builtin `echo` (no process started) into `cgroup.procs`, its errors silenced
    /// (a failed join is noticed by [`CallCgroup::ever_ran`]). `None` when the path is not
    /// UTF-8.
    pub(super) fn shell_join(&self) -> Option<String> {
        let procs = self.dir.join("cgroup.procs");
        let quoted = procs.to_str()?.replace('\'', r"'\''");
        Some(format!("{{ echo 0 >'{quoted}'; }} 2>/dev/null; "))
    }

    /// Whether any process ever ran in the cgroup (its CPU time is not zero): after a shell
    /// that was to join it has exited, whether the join worked.
    pub(super) fn ever_ran(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cpu.stat"))
            .ok()
            .and_then(|stat| {
                stat.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .is_some_and(|usec| usec > 0)
    }

    /// Whether `pid` ended up in this cgroup (the child's join can fail, e.g. on a
    /// delegated cgroup with controllers enabled).
    pub(super) fn contains(&self, pid: libc::pid_t) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            return false;
        };
        text.lines()
            .filter_map(|l| l.strip_prefix("0::"))
            .any(|own| own == self.path)
    }

    /// The processes in the cgroup now.
    pub(super) fn members(&self) -> Vec<Proc> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .filter_map(|pid| {
                let s = super::procfs::stat(pid)?;
                Some(Proc {
                    pid,
                    start: s.start,
                })
            })
            .collect()
    }

    /// Kills every process in the cgroup (`cgroup.kill`, atomic against forks); on kernels
    /// without it, signals each member.
    pub(super) fn kill(&self) {
        if std::fs::write(self.dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        for p in self.members() {
            super::signal_kill(p);
        }
    }

    /// Whether no process is left in it.
    pub(super) fn is_empty(&self) -> bool {
        self.members().is_empty()
    }

    /// Removes the directory; fails harmlessly while background jobs still live in it (a
    /// later call's [`CallCgroup::create`] removes it once they have ended).
    pub(super) fn remove(&self) {
        if std::fs::remove_dir(&self.dir).is_err() {
            let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
            if busy.len() < MAX_BUSY {
                busy.push(self.dir.clone());
            }
        }
    }
}

/// Removes the call cgroups left busy that have emptied since.
fn remove_emptied() {
    let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
    // Fails (EBUSY) while processes remain: that is the check.
    busy.retain(|dir| {
        std::fs::remove_dir(dir).is_err_and(|e| e.kind() != std::io::ErrorKind::NotFound)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_own_cgroup_is_found_under_the_cgroup2_mount() {
        let mountinfo = "\
24 1 0:22 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
30 24 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            locate(mountinfo, "4:memory:/x\n0::/system.slice/sp.service\n"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/sp.service"
            ))
        );
        assert_eq!(
            locate(mountinfo, "0::/\n"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let namespaced = "30 24 0:27 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            locate(namespaced, "0::/docker/abc/inner\n"),
            Some(PathBuf::from("/sys/fs/cgroup/inner"))
        );
        assert_eq!(locate("24 1 0:22 / /x rw - cgroup c rw\n", "0::/\n"), None);
    }
}
