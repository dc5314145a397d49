//! The standing spawner: one confined process that starts the bot's bash calls as forks of
//! itself, so a call no longer pays for confining a process of its own.
//!
//! Confining a launcher per call (start the launcher binary, a new mount namespace with the
//! bot's files covered, a Landlock domain, capabilities dropped, then exec) cost several
//! milliseconds of wall time and about a millisecond and a half of CPU per bash call, more
//! than bash itself. The spawner is a launcher that does all of that once, at the first call,
//! and then stays ([`standing`]): each call is a fork of that small, already confined
//! process, which applies the Landlock ruleset once more (a domain of its own, nested in the
//! spawner's, so no call can trace or read another call's processes or the spawner) and
//! execs. What a tool can reach is what a launcher's child could: the same mount namespace
//! contents, the same Landlock rules, the same bounding set, an environment of the
//! allow-list only.
//!
//! It is used only where Landlock is on (the nested domains are what keep two calls apart)
//! and the launcher binary exists, and only for requests that fit one message
//! ([`wire::MAX_REQUEST`]); everything else starts the old way. If the spawner cannot be
//! started or dies, the call starts the old way and the next call tries a new spawner.
//!
//! Its mount namespace covers the protected files that were at their paths when it started.
//! A file renamed over one of them later (a config saved again, a database restored) is not
//! covered there, so before each call the paths are compared with what it covered
//! ([`Covered`]); on a change the spawner is retired (it takes no more calls and stops once
//! its running ones have ended) and a new one covers the new file.
//!
//! The bot's side: [`Spawner::spawn`] sends a request with the child's three descriptors and
//! waits for the spawner to say the exec happened; one task per spawner reads the replies and
//! hands each exit status to its [`SpawnedChild`].

pub(crate) mod standing;
pub(crate) mod wire;

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::sys::Plan;
use crate::process::signal::{kill_pid, kill_process_group};
use wire::{OWN_GROUP, REPLY_LEN, Reply, Request};

/// How long after a spawner failed to start before another is tried.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// A child to start: everything about it but its descriptors (stdin is `/dev/null`, stdout
/// and stderr are pipes to the bot).
#[derive(Debug)]
pub(crate) struct Spec<'a> {
    pub program: &'a OsStr,
    pub args: &'a [OsString],
    pub env: &'a [(OsString, OsString)],
    pub cwd: &'a Path,
    pub own_group: bool,
    /// The `cgroup.procs` of the call's cgroup: the bot opens it and the child writes itself
    /// into it before exec (the spawner's mount namespace hides the cgroup file systems).
    pub cgroup: Option<&'a CStr>,
}

/// Why a spawn did not go through the spawner: the caller starts the child the old way.
#[derive(Debug)]
pub(crate) enum NotSpawned {
    /// The request cannot be carried (too long, a NUL in a string).
    Unfit,
    /// The spawner could not be reached (not started, or gone).
    Unavailable(io::Error),
}

/// The standing spawner of one [`Plan`], started at its first use.
#[derive(Debug)]
pub(crate) struct Spawner {
    plan: Arc<Plan>,
    program: std::path::PathBuf,
    link: Mutex<Option<Arc<Link>>>,
    retry_at: Mutex<Option<Instant>>,
}

impl Spawner {
    /// A spawner started through `launcher` (the launcher binary) with `plan`.
    pub(super) fn new(plan: Arc<Plan>, launcher: std::path::PathBuf) -> Self {
        Self {
            plan,
            program: launcher,
            link: Mutex::new(None),
            retry_at: Mutex::new(None),
        }
    }

    /// Starts `spec` through the spawner. [`SpawnError::Child`]: the child could not start
    /// (its directory or program is missing), as a spawn error; [`SpawnError::NotSpawned`]:
    /// start it the old way.
    pub(crate) async fn spawn(&self, spec: &Spec<'_>) -> Result<SpawnedChild, SpawnError> {
        let link = self.link().map_err(SpawnError::NotSpawned)?;
        let id = link.next_id.fetch_add(1, Ordering::Relaxed);
        let request = request(id, spec).ok_or(SpawnError::NotSpawned(NotSpawned::Unfit))?;
        let bytes = request
            .encode()
            .map_err(|_| SpawnError::NotSpawned(NotSpawned::Unfit))?;
        // Not opened: the child starts outside it, which the call's tree notices.
        let cgroup = spec.cgroup.and_then(|procs| open_for_writing(procs).ok());
        let (stdout, child_stdout) = pipe_pair().map_err(SpawnError::Child)?;
        let (stderr, child_stderr) = pipe_pair().map_err(SpawnError::Child)?;
        // Ready before the request goes out: nothing can fail once the child runs.
        let stdout = pipe::Receiver::from_owned_fd(stdout).map_err(SpawnError::Child)?;
        let stderr = pipe::Receiver::from_owned_fd(stderr).map_err(SpawnError::Child)?;
        let (started_tx, started) = oneshot::channel();
        let (exited_tx, exited) = oneshot::channel();
        link.lock().insert(
            id,
            Waiter {
                started: Some(started_tx),
                exited: Some(exited_tx),
                own_group: spec.own_group,
            },
        );
        let mut fds = vec![
            link.null.as_raw_fd(),
            child_stdout.as_raw_fd(),
            child_stderr.as_raw_fd(),
        ];
        fds.extend(cgroup.as_ref().map(AsRawFd::as_raw_fd));
        if let Err(e) = link.send(&bytes, &fds).await {
            link.lock().remove(&id);
            link.close();
            return Err(SpawnError::NotSpawned(NotSpawned::Unavailable(e)));
        }
        // The spawner holds its own copies now.
        drop((child_stdout, child_stderr, cgroup));
        let pid = match started.await {
            Ok(Ok(pid)) => pid,
            Ok(Err(e)) => return Err(SpawnError::Child(e)),
            Err(_) => {
                return Err(SpawnError::NotSpawned(NotSpawned::Unavailable(
                    io::Error::other("the tool spawner stopped"),
                )));
            }
        };
        Ok(SpawnedChild {
            pid,
            stdout: Some(stdout),
            stderr: Some(stderr),
            exited: Some(exited),
            status: None,
        })
    }

    /// The live link, starting a spawner when there is none (not more often than
    /// [`RETRY_AFTER`] after a failed start).
    fn link(&self) -> Result<Arc<Link>, NotSpawned> {
        let mut slot = self.link.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(link) = slot.as_ref().filter(|l| !l.closed.load(Ordering::Acquire)) {
            if link.covered == Covered::now(&self.plan.hidden) {
                return Ok(link.clone());
            }
            tracing::info!(
                "a protected file was replaced since the tool spawner started; starting another that covers it"
            );
            link.retire();
            *slot = None;
        }
        let mut retry_at = self.retry_at.lock().unwrap_or_else(PoisonError::into_inner);
        if retry_at.is_some_and(|at| Instant::now() < at) {
            return Err(NotSpawned::Unavailable(io::Error::other(
                "the tool spawner failed to start a moment ago",
            )));
        }
        match Link::start(&self.plan, &self.program) {
            Ok(link) => {
                *retry_at = None;
                *slot = Some(link.clone());
                Ok(link)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the tool spawner; tools start one launcher each");
                *retry_at = Some(Instant::now() + RETRY_AFTER);
                Err(NotSpawned::Unavailable(e))
            }
        }
    }
}

/// How a spawn through the spawner failed.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The child could not start: the error a spawn gives.
    Child(io::Error),
    /// Not started through the spawner: start it the old way.
    NotSpawned(NotSpawned),
}

/// What each protected file was when a spawner started: its (device, inode), or `None` for a
/// path that did not exist. The spawner's mount namespace covers exactly those files: one
/// saved again by rename, or restored, is a new file at that path, uncovered there, so a
/// spawner is used only while every path still names what it covered.
#[derive(Debug, PartialEq, Eq)]
struct Covered(Vec<Option<(u64, u64)>>);

impl Covered {
    /// The files at `paths` now (symlinks followed, as the covering mounts followed them).
    fn now(paths: &[CString]) -> Self {
        use std::os::unix::ffi::OsStrExt as _;
        use std::os::unix::fs::MetadataExt as _;
        Self(
            paths
                .iter()
                .map(|p| {
                    let meta = std::fs::metadata(Path::new(OsStr::from_bytes(p.to_bytes())));
                    meta.ok().map(|m| (m.dev(), m.ino()))
                })
                .collect(),
        )
    }
}

/// One running spawner: the socket, the requests waiting for it, the process.
#[derive(Debug)]
struct Link {
    sock: AsyncFd<OwnedFd>,
    waiting: Mutex<HashMap<u64, Waiter>>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// The protected files as they were before the spawner covered them.
    covered: Covered,
    /// Takes no more calls: told to stop once the calls it runs have ended.
    retired: AtomicBool,
    /// `/dev/null`, every child's stdin: opened once, sent with each request.
    null: OwnedFd,
    /// The spawner process (killed when the link is dropped).
    _process: tokio::process::Child,
}

#[derive(Debug)]
struct Waiter {
    started: Option<oneshot::Sender<io::Result<i32>>>,
    exited: Option<oneshot::Sender<i32>>,
    /// The child leads a process group of its own (killed as a group if nobody takes it).
    own_group: bool,
}

impl Link {
    /// Starts a spawner confined by `plan` through the launcher `program`, and the task that
    /// reads its replies.
    fn start(plan: &Plan, program: &Path) -> io::Result<Arc<Self>> {
        use std::os::unix::process::CommandExt as _;
        // Before the spawner covers them: a file replaced in between is seen as changed.
        let covered = Covered::now(&plan.hidden);
        let (ours, theirs) = socket_pair()?;
        let mut command = std::process::Command::new(program);
        command
            .env_clear()
            .arg0(super::launcher::ARG0)
            .args(super::launcher::spawner_args(plan))
            .stdin(std::process::Stdio::from(theirs))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        let process = tokio::process::Command::from(command)
            .kill_on_drop(true)
            .spawn()?;
        tracing::debug!(pid = process.id(), "tool spawner started");
        // SAFETY: an OwnedFd's descriptor stays open and the same until the AsyncFd drops it.
        #[allow(unsafe_code)]
        let sock = unsafe { AsyncFd::register(ours) }.map_err(io::Error::from)?;
        let link = Arc::new(Self {
            sock,
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            covered,
            retired: AtomicBool::new(false),
            null: std::fs::File::open("/dev/null")?.into(),
            _process: process,
        });
        tokio::spawn(read_replies(link.clone()));
        Ok(link)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends one request with `fds`.
    async fn send(&self, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
        loop {
            let mut ready = self.sock.writable().await?;
            match ready.try_io(|sock| send_with_fds(sock.get_ref(), bytes, fds)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// The spawner is gone: every waiting request and child learns it (their senders drop).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waiting = std::mem::take(&mut *self.lock());
        drop(waiting);
    }

    /// Takes no more calls; the spawner is told to stop once those it runs have ended (its
    /// calls' exits still arrive until then).
    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.stop_if_idle();
    }

    /// Tells a retired spawner with no call left to stop: it sees the end of the socket and
    /// exits, and [`read_replies`] then sees it gone.
    #[allow(unsafe_code)]
    fn stop_if_idle(&self) {
        if self.retired.load(Ordering::SeqCst) && self.lock().is_empty() {
            // SAFETY: shutdown on a descriptor this link owns.
            unsafe {
                libc::shutdown(self.sock.get_ref().as_raw_fd(), libc::SHUT_WR);
            }
        }
    }

    fn dispatch(&self, reply: Reply) {
        self.dispatch_one(reply);
        self.stop_if_idle();
    }

    fn dispatch_one(&self, reply: Reply) {
        let mut waiting = self.lock();
        let Some(waiter) = waiting.get_mut(&reply.id()) else {
            return;
        };
        match reply {
            Reply::Started { pid, .. } => {
                if let Some(tx) = waiter.started.take()
                    && tx.send(Ok(pid)).is_err()
                {
                    // The call went away while the spawner forked (its future was dropped,
                    // and its process tree found nothing to kill yet): nobody will own this
                    // child, so it is ended here, with what it started in its group.
                    if waiter.own_group {
                        kill_process_group(pid);
                    } else {
                        kill_pid(pid);
                    }
                }
            }
            Reply::Failed { errno, .. } => {
                if let Some(tx) = waiter.started.take() {
                    let _ = tx.send(Err(io::Error::from_raw_os_error(errno)));
                }
                waiting.remove(&reply.id());
            }
            Reply::Exited { status, .. } => {
                if let Some(tx) = waiter.exited.take() {
                    let _ = tx.send(status);
                }
                waiting.remove(&reply.id());
            }
        }
    }
}

/// Reads replies until the spawner's end closes.
async fn read_replies(link: Arc<Link>) {
    let mut buf = [0u8; REPLY_LEN + 1];
    loop {
        let received = async {
            loop {
                let mut ready = link.sock.readable().await?;
                match ready.try_io(|sock| recv(sock.get_ref(), &mut buf)) {
                    Ok(result) => return result,
                    Err(_would_block) => continue,
                }
            }
        }
        .await;
        match received {
            Ok(0) => break,
            Ok(n) => match Reply::decode(&buf[..n]) {
                Some(reply) => link.dispatch(reply),
                None => tracing::warn!(bytes = n, "the tool spawner sent something unreadable"),
            },
            Err(e) => {
                tracing::warn!(error = %e, "reading from the tool spawner failed");
                break;
            }
        }
    }
    tracing::info!("the tool spawner stopped; the next tool call starts another");
    link.close();
}

/// A child started by the spawner: its pid, the read ends of its output, its exit.
#[derive(Debug)]
pub(crate) struct SpawnedChild {
    pid: i32,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    exited: Option<oneshot::Receiver<i32>>,
    status: Option<ExitStatus>,
}

impl SpawnedChild {
    /// The child's pid.
    pub(crate) fn id(&self) -> u32 {
        u32::try_from(self.pid).unwrap_or(0)
    }

    /// Its standard output, once.
    pub(crate) fn take_stdout(&mut self) -> Option<pipe::Receiver> {
        self.stdout.take()
    }

    /// Its standard error, once.
    pub(crate) fn take_stderr(&mut self) -> Option<pipe::Receiver> {
        self.stderr.take()
    }

    /// Waits for it to end. Cancel-safe: a wait dropped before the end loses nothing.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let Some(exited) = self.exited.as_mut() else {
            return Err(io::Error::other("the tool spawner stopped"));
        };
        let status = exited
            .await
            .map_err(|_| io::Error::other("the tool spawner stopped before the call ended"));
        self.exited = None;
        let status = ExitStatus::from_raw(status?);
        self.status = Some(status);
        Ok(status)
    }
}

impl Drop for SpawnedChild {
    /// Kills a child that has not ended (what `kill_on_drop` does for a child of the bot).
    /// Its pid cannot have been reused: the spawner reaps it only after it ended, and says so
    /// before anything else happens to that pid.
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        if let Some(exited) = self.exited.as_mut()
            && !matches!(exited.try_recv(), Err(oneshot::error::TryRecvError::Empty))
        {
            return;
        }
        kill_pid(self.pid);
    }
}

/// `spec` as a request with id `id`; `None` when a string holds a NUL.
fn request(id: u64, spec: &Spec<'_>) -> Option<Request> {
    let c = |s: &OsStr| CString::new(s.as_bytes()).ok();
    let program = c(spec.program)?;
    let mut args = Vec::with_capacity(spec.args.len() + 1);
    args.push(program.clone());
    for arg in spec.args {
        args.push(c(arg)?);
    }
    let mut env = Vec::with_capacity(spec.env.len());
    for (name, value) in spec.env {
        let mut pair = name.as_bytes().to_vec();
        pair.push(b'=');
        pair.extend_from_slice(value.as_bytes());
        env.push(CString::new(pair).ok()?);
    }
    Some(Request {
        id,
        flags: if spec.own_group { OWN_GROUP } else { 0 },
        cwd: c(spec.cwd.as_os_str())?,
        program,
        args,
        env,
    })
}

/// A `SOCK_SEQPACKET` pair: ours non-blocking, theirs blocking; both close-on-exec (theirs
/// becomes the spawner's stdin, which `dup2` leaves open across its exec).
#[allow(unsafe_code)]
fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1; 2];
    // SAFETY: `fds` is a valid out-array of two descriptors.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us both descriptors.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(ours.as_raw_fd(), libc::F_GETFL) };
    if flags < 0
        || unsafe { libc::fcntl(ours.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((ours, theirs))
}

/// `path` opened for writing only, close-on-exec.
fn open_for_writing(path: &CStr) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(Path::new(OsStr::from_bytes(path.to_bytes())))?;
    Ok(file.into())
}

/// A pipe: the bot's read end (close-on-exec) and the child's write end.
#[allow(unsafe_code)]
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1; 2];
    // SAFETY: `fds` is a valid out-array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us both ends.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One message with up to [`wire::MAX_FDS`] descriptors.
#[allow(unsafe_code)]
fn send_with_fds(sock: &OwnedFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > wire::MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    let fds_len = std::mem::size_of_val(fds);
    // SAFETY: msghdr is plain data; every pointer set below is valid for the call, and the
    // control buffer is aligned and large enough for one cmsghdr with four descriptors
    // (CMSG_SPACE(16) = 32 bytes on 64-bit Linux).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(fds_len as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fds_len as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), fds_len);
        if libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// One message into `buf`; 0 at end of file.
#[allow(unsafe_code)]
fn recv(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid buffer of its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// The descriptors an `SCM_RIGHTS` control message of `msg` carried.
///
/// # Safety
/// `msg` must be a message `recvmsg` just filled.
#[allow(unsafe_code)]
pub(super) unsafe fn descriptors(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: the caller's contract; the CMSG macros walk within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
}
