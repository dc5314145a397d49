//! A tool's shell process, started the cheapest confined way there is: through the standing
//! spawner ([`super::spawner`]) where this machine has one, else as a child of the bot
//! through its own launcher like every other confined command ([`super::Confinement::command`]).
//! Either way the child has `/dev/null` for input, pipes for its output, the environment it
//! is given and nothing else of the bot's, and is killed if dropped before it ends.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStderr, ChildStdout};

use super::spawner::{NotSpawned, SpawnError, SpawnedChild, Spec};
use super::{Confinement, Profile};

/// What to start: a program (already looked up on the child's `PATH`), its arguments, its
/// whole environment and its directory.
#[derive(Debug, Clone)]
pub struct ToolCommand {
    confinement: Confinement,
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    own_group: bool,
    /// The `cgroup.procs` of the call's cgroup, joined by the child as it starts.
    cgroup: Option<CString>,
}

impl ToolCommand {
    /// `program` with `env` as its whole environment, confined as `confinement` says.
    pub(crate) fn new(
        confinement: Confinement,
        program: OsString,
        env: Vec<(OsString, OsString)>,
    ) -> Self {
        Self {
            confinement,
            program,
            args: Vec::new(),
            env,
            cwd: PathBuf::from("."),
            own_group: false,
            cgroup: None,
        }
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Sets an environment variable (replacing one of the same name).
    pub fn env(&mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        let (name, value) = (name.as_ref(), value.as_ref());
        match self.env.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value.to_owned(),
            None => self.env.push((name.to_owned(), value.to_owned())),
        }
        self
    }

    /// The child's working directory.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.cwd = dir.as_ref().to_owned();
        self
    }

    /// The child leads a process group of its own.
    pub fn own_process_group(&mut self) -> &mut Self {
        self.own_group = true;
        self
    }

    /// Has the child join the cgroup whose `cgroup.procs` is `procs` as it starts, before it
    /// runs anything of the tool's; `false` when the child is not confined and the tool
    /// itself must join (the confinement hides the cgroup file systems from a confined one).
    pub fn join_cgroup(&mut self, procs: &CStr) -> bool {
        if !self.confinement.is_confined() {
            return false;
        }
        self.cgroup = Some(procs.to_owned());
        true
    }

    /// Starts the child.
    pub async fn spawn(&self) -> io::Result<ToolChild> {
        if let Some(spawner) = self.confinement.spawner() {
            let spec = Spec {
                program: &self.program,
                args: &self.args,
                env: &self.env,
                cwd: &self.cwd,
                own_group: self.own_group,
                cgroup: self.cgroup.as_deref(),
            };
            match spawner.spawn(&spec).await {
                Ok(child) => return Ok(ToolChild(Started::Spawned(child))),
                Err(SpawnError::Child(e)) => return Err(e),
                Err(SpawnError::NotSpawned(NotSpawned::Unfit)) => {}
                Err(SpawnError::NotSpawned(NotSpawned::Unavailable(e))) => {
                    tracing::debug!(error = %e, "tool spawner unavailable; starting a launcher");
                }
            }
        }
        self.bot_child().spawn().map(|c| ToolChild(Started::Bot(c)))
    }

    /// The child as a command of the bot's (through the launcher, or forked with the hook).
    fn bot_child(&self) -> tokio::process::Command {
        let mut command =
            self.confinement
                .command_joining(&self.program, Profile::Tool, self.cgroup.as_deref());
        command
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(n, v)| (n, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if self.own_group {
            command.process_group(0);
        }
        command
    }
}

/// A running tool process.
#[derive(Debug)]
pub struct ToolChild(Started);

#[derive(Debug)]
enum Started {
    /// A child of the bot.
    Bot(Child),
    /// A child of the standing spawner.
    Spawned(SpawnedChild),
}

impl ToolChild {
    /// Its pid.
    pub fn id(&self) -> Option<u32> {
        match &self.0 {
            Started::Bot(c) => c.id(),
            Started::Spawned(c) => Some(c.id()),
        }
    }

    /// Its standard output, once.
    pub fn take_stdout(&mut self) -> Option<ToolPipe> {
        match &mut self.0 {
            Started::Bot(c) => c.stdout.take().map(|p| ToolPipe(Pipe::Stdout(p))),
            Started::Spawned(c) => c.take_stdout().map(|p| ToolPipe(Pipe::Spawned(p))),
        }
    }

    /// Its standard error, once.
    pub fn take_stderr(&mut self) -> Option<ToolPipe> {
        match &mut self.0 {
            Started::Bot(c) => c.stderr.take().map(|p| ToolPipe(Pipe::Stderr(p))),
            Started::Spawned(c) => c.take_stderr().map(|p| ToolPipe(Pipe::Spawned(p))),
        }
    }

    /// Waits for it to end; cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.0 {
            Started::Bot(c) => c.wait().await,
            Started::Spawned(c) => c.wait().await,
        }
    }
}

/// The read end of a tool's output.
#[derive(Debug)]
pub struct ToolPipe(Pipe);

#[derive(Debug)]
enum Pipe {
    /// A bot child's stdout.
    Stdout(ChildStdout),
    /// A bot child's stderr.
    Stderr(ChildStderr),
    /// A spawned child's stdout or stderr.
    Spawned(pipe::Receiver),
}

impl AsyncRead for ToolPipe {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Pipe::Stdout(p) => Pin::new(p).poll_read(cx, buf),
            Pipe::Stderr(p) => Pin::new(p).poll_read(cx, buf),
            Pipe::Spawned(p) => Pin::new(p).poll_read(cx, buf),
        }
    }
}
