//! What both sides of a tool call know of the cgroup file systems: where they are mounted
//! (the bot creates each call's cgroup v2 under its own, [`crate::process::tree`]; the
//! confinement covers every one of them in a tool's mount namespace so no call can move
//! itself out, [`crate::process::confine`]) and how a process joins a cgroup.

use std::ffi::CStr;
use std::path::PathBuf;

/// One line of `/proc/self/mountinfo`, the fields used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The directory of the file system mounted there (a cgroup's path, for a cgroup mount).
    pub root: String,
    /// Where it is mounted, unescaped.
    pub point: PathBuf,
    /// `cgroup2`, `cgroup`, `tmpfs`, …
    pub fstype: String,
}

/// The mounts `mountinfo` lists, in its order (parents before what is mounted under them).
pub(crate) fn mounts(mountinfo: &str) -> impl Iterator<Item = Mount> + '_ {
    mountinfo.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split_whitespace().collect();
        Some(Mount {
            root: unescape(fields.get(3)?),
            point: PathBuf::from(unescape(fields.get(4)?)),
            fstype: right.split_whitespace().next()?.to_owned(),
        })
    })
}

/// Where a cgroup file system (v1 or v2) is mounted: the places a process could move itself
/// to another cgroup from, or open a cgroup for `clone3(CLONE_INTO_CGROUP)`.
pub(crate) fn cgroup_mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mounts(mountinfo)
        .filter(|m| m.fstype == "cgroup2" || m.fstype == "cgroup")
        .map(|m| m.point)
        .collect()
}

/// A mountinfo field with its octal escapes (`\040` for a space, `\134` for a backslash)
/// turned back into bytes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match octal {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`: a forked child
/// before exec, or the launcher before it confines itself, so it only makes async-signal-safe
/// system calls. Failure is ignored here and noticed by the bot (the cgroup never ran
/// anything, or does not hold the child).
#[allow(unsafe_code)]
pub(crate) fn join(procs: &CStr) {
    // SAFETY: open/close are async-signal-safe; `procs` is NUL-terminated and outlives the call.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            join_through(fd);
            libc::close(fd);
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is open for writing as
/// `fd` (opened by the bot, which may: the kernel checks the opener's rights). For a child
/// that can no longer reach the cgroup file system by path. Async-signal-safe.
#[allow(unsafe_code)]
pub(crate) fn join_through(fd: libc::c_int) {
    // SAFETY: write of a one-byte static buffer to a descriptor; async-signal-safe.
    unsafe {
        libc::write(fd, b"0".as_ptr().cast(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 /docker/abc /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
50 23 0:40 / /srv/my\\040cgroups rw - cgroup2 cgroup2 rw
";

    #[test]
    fn every_cgroup_mount_is_found_v1_and_v2_with_escapes_undone() {
        assert_eq!(
            cgroup_mount_points(HYBRID),
            [
                PathBuf::from("/sys/fs/cgroup/memory"),
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/srv/my cgroups"),
            ]
        );
        let unified = mounts(HYBRID).nth(2).expect("three mounts");
        assert_eq!(unified.root, "/docker/abc");
        assert_eq!(unified.fstype, "cgroup2");
    }

    #[test]
    fn escapes_are_undone_and_stray_backslashes_kept() {
        assert_eq!(unescape(r"a\040b\134c"), r"a b\c");
        assert_eq!(unescape(r"a\9b\04"), r"a\9b\04");
    }
}
