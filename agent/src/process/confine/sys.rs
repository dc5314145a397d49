//! The raw system calls of the confinement: Landlock, seccomp, namespaces, mounts and
//! capabilities. Everything that runs in a forked child before exec ([`in_child`]) makes
//! async-signal-safe system calls only and allocates nothing: the parent prepares every
//! string, file descriptor and filter first ([`Plan`]).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask for the ABI instead of creating a ruleset.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
/// `LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK`: the file-system rights the
/// ruleset handles (and, with no rule, denies everywhere). Handling one is what gives the
/// child a Landlock domain at all: from then on it may not ptrace or open the memory or
/// environment of any process outside its domain (the bot), nor mount or unmount anything.
const FS_MAKE_DEVICES: u64 = (1 << 6) | (1 << 11);
/// `LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP` (ABI 4).
const NET_TCP: u64 = 0b11;
/// `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET` (ABI 6).
const SCOPE_ABSTRACT_UNIX: u64 = 1;
/// `LANDLOCK_SCOPE_SIGNAL` (ABI 6): no signal to a process outside the domain (the bot, the
/// standing spawner, another call's processes); a call still signals its own.
const SCOPE_SIGNAL: u64 = 2;
/// The first Landlock ABI with scopes ([`SCOPE_SIGNAL`], [`SCOPE_ABSTRACT_UNIX`]).
pub(super) const ABI_SCOPES: u32 = 6;

/// `struct landlock_ruleset_attr` (ABI 6 layout; older kernels take a prefix of it).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// The Landlock ABI version of the running kernel; 0 when Landlock is off or missing.
#[allow(unsafe_code)]
pub(super) fn landlock_abi() -> u32 {
    // SAFETY: with the VERSION flag, a null attribute and size 0 are what the call expects;
    // it reads and writes no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// A Landlock ruleset that denies creating device nodes and nothing else on the file system,
/// and (ABI 6) signalling any process outside the domain; with `no_network`, also every TCP
/// bind and connect (ABI 4) and connecting to abstract Unix sockets outside the domain
/// (ABI 6).
#[allow(unsafe_code)]
pub(super) fn landlock_ruleset(abi: u32, no_network: bool) -> io::Result<OwnedFd> {
    let scopes = abi >= ABI_SCOPES;
    let attr = RulesetAttr {
        handled_access_fs: FS_MAKE_DEVICES,
        handled_access_net: if no_network && abi >= 4 { NET_TCP } else { 0 },
        scoped: match (scopes, no_network) {
            (false, _) => 0,
            (true, false) => SCOPE_SIGNAL,
            (true, true) => SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX,
        },
    };
    let size = match abi {
        0..=3 => 8,
        4 | 5 => 16,
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: `attr` is a valid `landlock_ruleset_attr` of at least `size` bytes that lives
    // across the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bad ruleset fd"))?;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor (close-on-exec) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, arch)`.
const ARCH_OFFSET: u32 = 4;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// System calls math's Python may not make: `socket` (no socket of any family, so no Unix
/// socket either, which a network namespace does not cover), `io_uring_setup` (io_uring
/// opens sockets without the `socket` call), and the ways round the other layers:
/// `open_by_handle_at` (opens a hidden file by its handle), `bpf` and `perf_event_open`
/// (read other processes' memory), `ptrace` and `process_vm_readv`.
fn math_denied() -> [libc::c_long; 7] {
    [
        libc::SYS_socket,
        libc::SYS_io_uring_setup,
        libc::SYS_open_by_handle_at,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
    ]
}

/// The seccomp filter of math: the calls of [`math_denied`] fail with `EACCES`; a foreign
/// architecture (and, on x86-64, the x32 ABI) is refused too; everything else is allowed.
pub(super) fn math_filter() -> Vec<Insn> {
    let denied = math_denied();
    let n = u8::try_from(denied.len()).unwrap_or(u8::MAX);
    let mut prog = vec![
        Insn {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: ARCH_OFFSET,
        },
        // A foreign architecture: jump to the last instruction (kill).
        Insn {
            code: BPF_JEQ_K,
            jt: 0,
            jf: n + 4,
            k: AUDIT_ARCH,
        },
        Insn {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // x32 system calls (bit 30) on x86-64: refused like the denied ones.
        Insn {
            code: BPF_JGE_K,
            jt: n + 1,
            jf: 0,
            k: if cfg!(target_arch = "x86_64") {
                0x4000_0000
            } else {
                u32::MAX
            },
        },
    ];
    for (i, nr) in denied.iter().enumerate() {
        let left = u8::try_from(denied.len() - i).unwrap_or(u8::MAX);
        prog.push(Insn {
            code: BPF_JEQ_K,
            // To the ERRNO return: past the rest of the list and the ALLOW return.
            jt: left,
            jf: 0,
            k: u32::try_from(*nr).unwrap_or(u32::MAX),
        });
    }
    prog.extend([
        Insn {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
        Insn {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
        },
        Insn {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
    ]);
    prog
}

/// Capabilities a root child gives up (bounding set), because each reads round the other
/// layers: `CAP_DAC_READ_SEARCH` (open_by_handle_at opens a hidden file), `CAP_SYS_MODULE`,
/// `CAP_SYS_RAWIO` (kernel memory), `CAP_SYS_PTRACE`, `CAP_MKNOD` (a disk's device node),
/// `CAP_SYSLOG`, `CAP_PERFMON` and `CAP_BPF` (other processes' memory); for every child but
/// math's sandbox (whose `unshare` needs it), `CAP_SYS_ADMIN` too.
pub(super) const DROPPED_CAPS: [libc::c_ulong; 8] = [2, 16, 17, 19, 27, 34, 38, 39];
/// `CAP_SYS_ADMIN`.
pub(super) const CAP_SYS_ADMIN: libc::c_ulong = 21;

/// How the child hides files: which namespaces it enters first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HideIn {
    /// A new mount namespace (root: CAP_SYS_ADMIN).
    MountNamespace,
    /// A new user namespace mapping our own uid and gid, and a mount namespace in it.
    UserNamespace,
}

/// Everything the child does, prepared by the parent so the child only makes system calls.
#[derive(Debug)]
pub(super) struct Plan {
    /// Hide files in new namespaces (`None`: not possible here).
    pub(super) hide: Option<HideIn>,
    /// Files to cover with `/dev/null`.
    pub(super) hidden: Vec<CString>,
    /// Where cgroup file systems are mounted: each covered with an empty read-only tmpfs, so
    /// a call can neither write itself into another cgroup's `cgroup.procs` nor open a cgroup
    /// for `clone3(CLONE_INTO_CGROUP)` (a read-only mount would not stop that: the kernel
    /// checks only the cgroup's own permissions). Empty: not covered.
    pub(super) cgroups: Vec<CString>,
    /// `<uid> <uid> 1` and `<gid> <gid> 1` for [`HideIn::UserNamespace`].
    pub(super) uid_map: Vec<u8>,
    pub(super) gid_map: Vec<u8>,
    /// The kernel's Landlock ABI the rulesets were made for.
    pub(super) abi: u32,
    /// The Landlock ruleset for tools (`None`: no Landlock here).
    pub(super) landlock: Option<OwnedFd>,
    /// The same plus no network, for math.
    pub(super) landlock_math: Option<OwnedFd>,
    /// The seccomp filter of math.
    pub(super) filter: Vec<Insn>,
    /// We run as root: drop [`DROPPED_CAPS`] from the child's bounding set.
    pub(super) root: bool,
}

/// What a child is about to run, for [`in_child`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Tool,
    Math,
}

pub(super) fn check(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `prctl(op, a, b, 0, 0)` with every argument a full `unsigned long`, as the kernel reads
/// them (a variadic `c_int` could leave the upper half undefined). Async-signal-safe.
#[allow(unsafe_code)]
fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> io::Result<()> {
    // SAFETY: prctl's arguments are integers; the one pointer callers pass (a seccomp
    // program) is valid for the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_prctl,
            libc::c_long::from(op),
            a,
            b,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
}

/// Writes all of `data` to `path` (a `/proc/self` file), in the child.
#[allow(unsafe_code)]
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open/write/close are async-signal-safe; `path` is NUL-terminated and `data`
    // is a valid buffer of its length, both outliving the calls.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if usize::try_from(n).ok() != Some(data.len()) {
            return Err(err);
        }
    }
    Ok(())
}

/// Confines the calling process (a forked child, before exec) as `plan` says, for `kind`.
/// A layer the plan includes that fails makes the spawn fail: a tool never runs less
/// confined than sandpiper announced.
#[allow(unsafe_code)]
pub(super) fn in_child(plan: &Plan, kind: Kind) -> io::Result<()> {
    // SAFETY (whole function): every call is a plain system call on integers or on
    // NUL-terminated strings and buffers the plan owns, which outlive the child's use.
    unsafe {
        if let Some(hide) = plan.hide {
            match hide {
                HideIn::MountNamespace => check(libc::unshare(libc::CLONE_NEWNS).into())?,
                HideIn::UserNamespace => {
                    // The bot is not dumpable, so neither is this copy of it until exec; the
                    // maps of a non-dumpable process belong to root and could not be written.
                    prctl(libc::PR_SET_DUMPABLE, 1, 0)?;
                    check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS).into())?;
                    write_file(c"/proc/self/setgroups", b"deny")?;
                    write_file(c"/proc/self/uid_map", &plan.uid_map)?;
                    write_file(c"/proc/self/gid_map", &plan.gid_map)?;
                }
            }
            // Our mounts must not propagate back to the bot's namespace.
            check(
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                )
                .into(),
            )?;
            for file in &plan.hidden {
                cover(libc::mount(
                    c"/dev/null".as_ptr(),
                    file.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            for dir in &plan.cgroups {
                cover(libc::mount(
                    c"none".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=4k,mode=555".as_ptr().cast(),
                ))?;
            }
        }
        if !plan.root {
            // Landlock and seccomp need it without CAP_SYS_ADMIN; a setuid program could
            // otherwise gain what the confinement takes away.
            prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0)?;
        }
        let ruleset = match kind {
            Kind::Tool => plan.landlock.as_ref(),
            Kind::Math => plan.landlock_math.as_ref(),
        };
        if let Some(fd) = ruleset {
            restrict_self(fd)?;
        }
        if kind == Kind::Math {
            let prog = libc::sock_fprog {
                len: u16::try_from(plan.filter.len()).unwrap_or(u16::MAX),
                filter: plan.filter.as_ptr().cast_mut().cast(),
            };
            prctl(
                libc::PR_SET_SECCOMP,
                libc::c_ulong::from(libc::SECCOMP_MODE_FILTER),
                &prog as *const libc::sock_fprog as libc::c_ulong,
            )?;
        }
        if plan.root {
            for cap in DROPPED_CAPS {
                // EINVAL: a capability this kernel does not know (CAP_BPF before 5.8).
                let _ = prctl(libc::PR_CAPBSET_DROP, cap, 0);
            }
            if kind == Kind::Tool {
                prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0)?;
            }
        }
    }
    Ok(())
}

/// The outcome of a mount covering a path: a path that does not exist (a file not created
/// yet, a cgroup mount under one covered already) has nothing to cover.
fn cover(rc: libc::c_int) -> io::Result<()> {
    match check(rc.into()) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(()),
        other => other,
    }
}

/// Makes this process non-dumpable: a process of the same uid (not root) can no longer read
/// its `/proc/<pid>/environ` or `mem`, nor ptrace it. Children get it back at exec.
pub(super) fn set_non_dumpable() -> io::Result<()> {
    prctl(libc::PR_SET_DUMPABLE, 0, 0)
}

/// Puts the calling thread under the Landlock `ruleset` (a domain nested in any it is
/// already in). Async-signal-safe.
#[allow(unsafe_code)]
pub(super) fn restrict_self(ruleset: &OwnedFd) -> io::Result<()> {
    // SAFETY: the system call takes a descriptor this process owns and a flags integer.
    check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) })
}

/// The effective uid and the real gid.
#[allow(unsafe_code)]
pub(super) fn ids() -> (libc::uid_t, libc::uid_t, libc::gid_t) {
    // SAFETY: these calls take no arguments and cannot fail.
    unsafe { (libc::geteuid(), libc::getuid(), libc::getgid()) }
}
