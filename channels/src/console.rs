//! The console channel: a terminal conversation with one workstream.
//!
//! # Layout
//! - [`editor`]: the line editor at a terminal (history, Ctrl-R, paste as one message, Tab).
//! - [`input`]: what a prompt reads — the editor, or piped lines for scripts.
//! - `commands`: the chat commands (`/help`, `/status`, …), which never reach the model.
//! - `approval`: approval and review questions and their answers.
//! - [`oneshot`]: one turn for a script (`chat -p`, `exec`), text or JSON lines.
//! - `sink` and `markdown`: turn events and the model's text as the terminal shows them.
//! - [`workstreams`]: a workstream per project directory, listed and resumed.
//!
//! Answers stream as they arrive; each tool call shows its header and preview; approvals are
//! `approve? [y]es / [n]o / [a]lways`, where text after a comma is feedback for the model
//! (`n, use the staging db`). When input is not a terminal every line is one user message and
//! approval answers are read from the next line, so a session can be scripted.

mod approval;
mod commands;
pub mod editor;
pub mod input;
mod markdown;
pub mod oneshot;
mod sink;
pub mod workstreams;

use std::io::Write;
use std::sync::{Arc, Mutex};

use sandpiper_agent::Agent;
use sandpiper_agent::protocol::{ApproveAll, Approver};
use sandpiper_agent::workstream::KeyPattern;
use sandpiper_agent::workstream::WorkstreamKey;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use approval::{parse_answer, parse_review};
pub use commands::command_names;
use input::{Asking, LineSource, PipedLines, Typed};

use crate::thread::{OutsideTurn, StartError, TurnStarter, Work};
use crate::turns::{QueueFull, Queued};

/// Where console output goes (stdout, or a buffer in tests).
pub type Output = Arc<Mutex<dyn Write + Send>>;

/// How the console runs.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// Workstream name; the key is `console:<name>`.
    pub workstream: String,
    /// Who is typing (the OS user name).
    pub user: String,
    /// Approve every tool call (`--yes`).
    pub auto_approve: bool,
    /// Input is a terminal: show the greeting and a blank line before each prompt.
    pub interactive: bool,
    /// Output is a terminal: draw the model's Markdown (bold, code, lists). Escaping is
    /// the same either way.
    pub styled: bool,
}

/// The identity platform name of console users (keyed by OS user name).
pub const PLATFORM: &str = "console";

/// The person at the terminal as a platform identity: their OS user name is their console
/// identity, so it is their handle there too.
pub fn identity(os_user: &str) -> sandpiper_agent::people::Identity<'_> {
    sandpiper_agent::people::Identity {
        platform: PLATFORM,
        platform_user_id: os_user,
        display_name: os_user,
        handle: Some(os_user),
    }
}

/// Cancels the running turn (Ctrl-C), never the process.
#[derive(Debug, Clone, Default)]
pub struct Interrupter(Arc<Mutex<Option<CancellationToken>>>);

impl Interrupter {
    /// Cancels the current turn. Returns false when no turn was running.
    pub fn interrupt(&self) -> bool {
        match self.0.lock().ok().and_then(|mut t| t.take()) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    fn is_running(&self) -> bool {
        self.0.lock().is_ok_and(|t| t.is_some())
    }

    fn set(&self, token: Option<CancellationToken>) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = token;
        }
    }
}

/// What a console session came to. `sandpiper chat` with piped input exits non-zero when a
/// turn failed, so a script can tell a model or database error from an answer; a turn stopped
/// with Ctrl-C is not a failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use = "a failed turn should reach the exit code"]
pub struct SessionReport {
    /// Messages that started a turn.
    pub turns: usize,
    /// Of those, the turns that ended in an error (already shown on the output), plus one
    /// when the session could not start (the user could not be looked up).
    pub failed: usize,
}

impl SessionReport {
    /// Whether every turn ended without an error.
    pub fn succeeded(&self) -> bool {
        self.failed == 0
    }
}

/// A console conversation.
pub struct Console {
    agent: Agent,
    options: ConsoleOptions,
    lines: Arc<dyn LineSource>,
    out: Output,
    interrupter: Interrupter,
    /// Turns started from outside the terminal ([`Console::starter`]), run between lines.
    outside: mpsc::Sender<Work>,
    outside_rx: tokio::sync::Mutex<mpsc::Receiver<Work>>,
}

/// What the console does next.
enum Next {
    Typed(Typed),
    Outside(Work),
}

impl Console {
    /// A console reading piped lines from `input` (each echoed as it is read) and writing to
    /// `out`.
    pub fn new(
        agent: Agent,
        options: ConsoleOptions,
        input: mpsc::Receiver<String>,
        out: Output,
    ) -> Self {
        let lines = Arc::new(PipedLines::new(input, out.clone()));
        Self::with_lines(agent, options, lines, out, Interrupter::default())
    }

    /// A console reading from `lines` (the terminal's editor, [`editor::TerminalLines`],
    /// which stops a turn on Ctrl-C through the same `interrupter`).
    pub fn with_lines(
        agent: Agent,
        options: ConsoleOptions,
        lines: Arc<dyn LineSource>,
        out: Output,
        interrupter: Interrupter,
    ) -> Self {
        let (outside, outside_rx) = mpsc::channel(crate::turns::MAX_QUEUED);
        Self {
            agent,
            options,
            lines,
            out,
            interrupter,
            outside,
            outside_rx: tokio::sync::Mutex::new(outside_rx),
        }
    }

    /// Starts turns in this console's workstream from outside the terminal (a watch firing);
    /// each runs after the turn in progress, shown like a typed message.
    pub fn starter(&self) -> Arc<dyn TurnStarter> {
        Arc::new(ConsoleStarter {
            key: self.workstream_key(),
            name: self.options.workstream.clone(),
            queue: self.outside.clone(),
            running: self.interrupter.clone(),
        })
    }

    /// The next line typed, or the next outside turn, whichever comes first.
    async fn next(&self) -> Next {
        let mut outside = self.outside_rx.lock().await;
        tokio::select! {
            typed = self.lines.read("> ", Asking::Message) => Next::Typed(typed),
            Some(work) = outside.recv() => Next::Outside(work),
        }
    }

    /// The handle that Ctrl-C uses.
    pub fn interrupter(&self) -> Interrupter {
        self.interrupter.clone()
    }

    /// The workstream key.
    pub fn workstream_key(&self) -> String {
        WorkstreamKey::console(&self.options.workstream).to_string()
    }

    /// Reads messages until input ends (or `/quit`), answering each; says how many turns
    /// failed.
    pub async fn run(&self) -> SessionReport {
        let mut report = SessionReport::default();
        let key = self.workstream_key();
        // The person at the terminal is a sandpiper user like any platform user.
        let user = match self.agent.person(identity(&self.options.user)).await {
            Ok(user) => user,
            Err(e) => {
                say(&self.out, &format!("error: cannot look up user: {e}\n"));
                report.failed += 1;
                return report;
            }
        };
        // Decisions made here are recorded under the name every record gives this person.
        let name = match self.agent.people().public_name(&user).await {
            Ok(name) => name,
            Err(e) => {
                say(&self.out, &format!("error: cannot look up user: {e}\n"));
                report.failed += 1;
                return report;
            }
        };
        if let Err(e) = open_workstream(&self.agent, &key, &user.id).await {
            say(&self.out, &format!("error: cannot open {key}: {e}\n"));
            report.failed += 1;
            return report;
        }
        let sink = sink::ConsoleSink::new(self.out.clone(), self.options.styled);
        let approver = approval::ConsoleApprover {
            lines: self.lines.clone(),
            out: self.out.clone(),
            user_id: user.id.clone(),
            user: name,
            interrupter: self.interrupter.clone(),
            headed: sink.headed.clone(),
        };
        if self.options.interactive {
            self.greet(&key).await;
        }
        let commands = commands::ConsoleCommands {
            agent: &self.agent,
            key: &key,
            user_id: &user.id,
            os_user: &self.options.user,
            progress: &sink,
        };
        // What was entered during the last turn: the next message.
        let mut ahead: Option<String> = None;
        loop {
            if self.options.interactive {
                say(&self.out, "\n");
            }
            let next = match ahead.take() {
                Some(text) => Next::Typed(Typed::Line(text)),
                None => self.next().await,
            };
            let work = match next {
                Next::Typed(Typed::End) => {
                    if self.options.interactive {
                        say(&self.out, "\n");
                    }
                    break;
                }
                // Ctrl-C at the prompt: the line is gone, nothing else happens.
                Next::Typed(Typed::Interrupted) => continue,
                Next::Outside(work) => work,
                Next::Typed(Typed::Line(line)) => match commands::entry(&line) {
                    commands::Entry::Nothing => continue,
                    commands::Entry::Message(text) => Work::message(&user.id, text),
                    commands::Entry::Command(text) => match commands.run(text).await {
                        commands::Done::Answer(answer) => {
                            sink.show(&answer);
                            continue;
                        }
                        commands::Done::Send(text) => Work::message(&user.id, text),
                        commands::Done::Leave(farewell) => {
                            if let Some(text) = farewell {
                                sink.show(&text);
                            }
                            break;
                        }
                    },
                },
            };
            let cancel = CancellationToken::new();
            self.interrupter.set(Some(cancel.clone()));
            let approver: &dyn Approver = if self.options.auto_approve {
                &ApproveAll
            } else {
                &approver
            };
            self.lines.turn_started();
            let result =
                crate::thread::run_work(&self.agent, &key, work, &sink, approver, cancel).await;
            self.interrupter.set(None);
            ahead = self.lines.turn_ended();
            report.turns += 1;
            // Errors were already shown through the sink; here they are only counted.
            if let Err(e) = result {
                tracing::debug!(workstream = %key, error = %e, "console turn failed");
                report.failed += 1;
            }
        }
        report
    }

    /// The first lines at a terminal: which workstream, and how to get help or leave.
    async fn greet(&self, key: &str) {
        let text = match self.agent.history(key).await {
            Ok(h) if !h.is_empty() => format!(
                "(continuing workstream {key}: {}; /help for commands, Ctrl-D to quit)\n",
                commands::count(h.len(), "message")
            ),
            Ok(_) => format!("(new workstream {key}; /help for commands, Ctrl-D to quit)\n"),
            Err(e) => format!("error: {e}\n"),
        };
        say(&self.out, &text);
    }
}

/// Opens console workstream `key` for the person at the terminal (`user_id`), recording the
/// directory its tools work in ([`Agent::open_console_workstream`]).
async fn open_workstream(
    agent: &Agent,
    key: &str,
    user_id: &str,
) -> Result<(), sandpiper_agent::store::StoreError> {
    let dir = agent.config().tools.workdir.as_ref().map(|dir| {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        dir.display().to_string()
    });
    agent
        .open_console_workstream(key, user_id, dir.as_deref())
        .await
}

/// [`TurnStarter`] for the console's one workstream.
struct ConsoleStarter {
    /// The workstream's key, as stored.
    key: String,
    /// The console session's name.
    name: String,
    queue: mpsc::Sender<Work>,
    /// Holds a token while a turn runs.
    running: Interrupter,
}

impl TurnStarter for ConsoleStarter {
    fn keys(&self) -> KeyPattern {
        KeyPattern::Exact(WorkstreamKey::console(&self.name))
    }

    fn start(&self, turn: OutsideTurn) -> Result<Queued, StartError> {
        if turn.workstream != self.key {
            return Err(StartError::NoChannel(turn.workstream));
        }
        let ahead = crate::turns::MAX_QUEUED - self.queue.capacity()
            + usize::from(self.running.is_running());
        match self.queue.try_send(turn.work) {
            Ok(()) if ahead == 0 => Ok(Queued::Now),
            Ok(()) => Ok(Queued::Behind(ahead)),
            Err(mpsc::error::TrySendError::Full(_)) => Err(QueueFull.into()),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Err(StartError::NoChannel(self.key.clone()))
            }
        }
    }
}

fn say(out: &Output, text: &str) {
    if let Ok(mut w) = out.lock() {
        let _ = w.write_all(text.as_bytes());
        let _ = w.flush();
    }
}
