//! The standing spawner's side: a launcher that confined itself once ([`super::super::sys::in_child`])
//! and then, instead of exec'ing one tool, starts every tool the bot asks for as a fork of
//! itself, until the bot closes the socket.
//!
//! Single-threaded and blocking: it waits in `poll` for a request or a `SIGCHLD`
//! (`signalfd`). A child gets its own Landlock domain nested in the spawner's (the same
//! ruleset applied again), so two calls' processes cannot trace, read or (Landlock ABI 6)
//! signal each other, nor the spawner; its call's cgroup, joined through the `cgroup.procs`
//! the bot opened and sent along (the spawner's namespace hides every cgroup file system);
//! its descriptors, its process group and its working directory; then it execs. Whether the exec happened is learnt through a close-on-exec pipe (end of file: it
//! did; four bytes: the `errno` of what failed), so a missing directory or program is an
//! error of the request, not a child that exits 127. Exits are reported by request id.
//! The spawner is a subreaper, so the background jobs a call leaves behind are reaped here.
//!
//! Every descriptor the spawner holds is close-on-exec: a tool inherits only its three.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::super::sys;
use super::wire::{MAX_REQUEST, OWN_GROUP, Reply, Request};

/// [`sys::check`] of a call that returns a C `int`.
fn check_int(rc: libc::c_int) -> io::Result<()> {
    sys::check(rc.into())
}

/// Serves requests on `sock` until the bot closes it, then exits. `nested`: the Landlock
/// ruleset each child applies to itself (`None`: no Landlock here).
pub(crate) fn serve(sock: OwnedFd, nested: Option<OwnedFd>) -> ! {
    match run(&sock, nested.as_ref()) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("sandpiper: the tool spawner stopped: {e}");
            std::process::exit(1)
        }
    }
}

/// The socket the bot gave as standard input, moved to a close-on-exec descriptor, with
/// `/dev/null` as standard input in its place.
#[allow(unsafe_code)]
pub(crate) fn take_stdin() -> io::Result<OwnedFd> {
    // SAFETY: fcntl and open on descriptors and a NUL-terminated path.
    unsafe {
        let fd = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        check_int(fd)?;
        let sock = OwnedFd::from_raw_fd(fd);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        check_int(null)?;
        check_int(libc::dup2(null, 0))?;
        libc::close(null);
        Ok(sock)
    }
}

#[allow(unsafe_code)]
fn run(sock: &OwnedFd, nested: Option<&OwnedFd>) -> io::Result<()> {
    // SAFETY (whole function): plain system calls on integers, on descriptors this process
    // owns and on buffers that outlive each call.
    let sigchld = unsafe {
        crate::process::signal::become_subreaper()?;
        // A tool of the same uid may not read this process's memory or trace it.
        sys::set_non_dumpable()?;
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        libc::sigaddset(&mut mask, libc::SIGCHLD);
        check_int(libc::sigprocmask(
            libc::SIG_BLOCK,
            &mask,
            std::ptr::null_mut(),
        ))?;
        let fd = libc::signalfd(-1, &mask, libc::SFD_CLOEXEC);
        check_int(fd)?;
        OwnedFd::from_raw_fd(fd)
    };
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    let mut running: HashMap<libc::pid_t, u64> = HashMap::new();
    loop {
        let mut polls = [
            libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigchld.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `polls` is a valid array of two pollfd.
        if unsafe { libc::poll(polls.as_mut_ptr(), 2, -1) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if polls[1].revents != 0 {
            drain_signalfd(&sigchld);
            for (pid, status) in crate::process::signal::reap_all() {
                if let Some(id) = running.remove(&pid) {
                    send(sock, Reply::Exited { id, pid, status })?;
                }
            }
        }
        if polls[0].revents != 0 {
            let Some((len, truncated, fds)) = receive(sock, &mut buf)? else {
                return Ok(()); // The bot closed its end.
            };
            let reply = match (truncated, Request::decode(&buf[..len]), &fds[..]) {
                (false, Ok(req), [stdin, stdout, stderr, cgroup @ ..]) if cgroup.len() < 2 => {
                    let reply = start(&req, [stdin, stdout, stderr], cgroup.first(), nested);
                    if let Reply::Started { id, pid } = reply {
                        running.insert(pid, id);
                    }
                    reply
                }
                (_, Ok(req), _) => Reply::Failed {
                    id: req.id,
                    errno: libc::EINVAL,
                },
                _ => Reply::Failed {
                    id: 0,
                    errno: libc::EINVAL,
                },
            };
            drop(fds);
            send(sock, reply)?;
        }
    }
}

/// Forks and execs `req` with `fds` as its standard input, output and error, in the cgroup
/// whose `cgroup.procs` is open as `cgroup`.
#[allow(unsafe_code)]
fn start(
    req: &Request,
    fds: [&OwnedFd; 3],
    cgroup: Option<&OwnedFd>,
    nested: Option<&OwnedFd>,
) -> Reply {
    let argv = pointers(&req.args);
    let envp = pointers(&req.env);
    let mut pipe: [RawFd; 2] = [-1; 2];
    // SAFETY: `pipe` is a valid out-array of two descriptors.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return failed(req.id);
    }
    // SAFETY: the kernel just gave us both ends.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    // SAFETY: this process has one thread, so the child may do anything the parent could;
    // it only makes system calls on what was prepared above and ends in exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return failed(req.id);
    }
    if pid == 0 {
        // SAFETY: see above; `in_child` never returns.
        unsafe {
            in_child(
                req,
                Child {
                    fds,
                    cgroup,
                    nested,
                },
                &argv,
                &envp,
                write_end.as_raw_fd(),
            )
        }
    }
    drop(write_end);
    let mut errno = [0u8; 4];
    let n = loop {
        // SAFETY: `errno` is a valid 4-byte buffer.
        let n = unsafe { libc::read(read_end.as_raw_fd(), errno.as_mut_ptr().cast(), 4) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n;
        }
    };
    match n {
        0 => Reply::Started { id: req.id, pid },
        4 => Reply::Failed {
            id: req.id,
            errno: i32::from_ne_bytes(errno),
        },
        _ => failed(req.id),
    }
}

/// What a forked child is given besides its request.
struct Child<'a> {
    /// Its standard input, output and error.
    fds: [&'a OwnedFd; 3],
    /// The call's `cgroup.procs`, open for writing.
    cgroup: Option<&'a OwnedFd>,
    /// The Landlock ruleset it applies to itself.
    nested: Option<&'a OwnedFd>,
}

/// The child between fork and exec: its call's cgroup, its own Landlock domain, signals as a
/// new process has them, its process group, descriptors and directory, then the program.
///
/// # Safety
///
/// Only in the child of `fork` in the spawner, which has one thread; `argv` and `envp` are
/// NUL-terminated arrays of pointers into strings that outlive the call, and `report` is the
/// write end of the parent's error pipe.
#[allow(unsafe_code)]
unsafe fn in_child(
    req: &Request,
    Child {
        fds,
        cgroup,
        nested,
    }: Child<'_>,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    report: RawFd,
) -> ! {
    let fail = || -> ! {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        // SAFETY: `report` is the pipe's write end; the buffer is 4 bytes.
        unsafe {
            libc::write(report, errno.to_ne_bytes().as_ptr().cast(), 4);
            libc::_exit(127)
        }
    };
    if let Some(cgroup) = cgroup {
        // Before anything of the call runs; a failed join is noticed by the bot.
        crate::process::cgroupfs::join_through(cgroup.as_raw_fd());
    }
    // SAFETY (the rest): system calls on prepared, NUL-terminated data and owned descriptors.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Rust ignores SIGPIPE in its own processes; a shell pipeline must not inherit that.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if req.flags & OWN_GROUP != 0 && libc::setpgid(0, 0) < 0 {
            fail();
        }
        if let Some(ruleset) = nested
            && sys::restrict_self(ruleset).is_err()
        {
            fail();
        }
        for (target, fd) in fds.iter().enumerate() {
            if libc::dup2(fd.as_raw_fd(), target as RawFd) < 0 {
                fail();
            }
        }
        if libc::chdir(req.cwd.as_ptr()) < 0 {
            fail();
        }
        libc::execve(req.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        fail()
    }
}

/// A NULL-terminated array of pointers into `strings`.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn failed(id: u64) -> Reply {
    Reply::Failed {
        id,
        errno: io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    }
}

/// Reads what the signalfd holds (the signals themselves say nothing `waitpid` does not).
#[allow(unsafe_code)]
fn drain_signalfd(fd: &OwnedFd) {
    let mut info = [0u8; 128 * 8];
    // SAFETY: `info` is a valid buffer of its length; the fd is non-blocking in effect here
    // (poll said it is readable), and one read takes every queued signal that fits.
    unsafe {
        libc::read(fd.as_raw_fd(), info.as_mut_ptr().cast(), info.len());
    }
}

/// One message from the bot: its length, whether it was cut, and the descriptors it carried
/// (close-on-exec). `None` when the bot closed its end.
#[allow(unsafe_code)]
fn receive(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<(usize, bool, Vec<OwnedFd>)>> {
    let mut control = [0u64; 16]; // room for a few descriptors, aligned for cmsghdr
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; the pointers set below are valid for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = loop {
        // SAFETY: `msg` points at live buffers.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: walking the control messages the kernel wrote into `control`.
    let fds = unsafe { super::descriptors(&msg) };
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    let truncated = msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok(Some((n as usize, truncated, fds)))
}

#[allow(unsafe_code)]
fn send(sock: &OwnedFd, reply: Reply) -> io::Result<()> {
    let bytes = reply.encode();
    loop {
        // SAFETY: `bytes` is a valid buffer of its length.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
