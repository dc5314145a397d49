//! The line editor at a terminal (rustyline): Emacs keys, history kept per user across runs
//! and searched with Ctrl-R, a pasted block (bracketed paste) as one message, Alt-Enter or a
//! trailing `\` for another line, Tab to complete a command name. Ctrl-C clears the line
//! being typed, or stops the running turn; Ctrl-D leaves.
//!
//! rustyline blocks, so the editor lives on a thread of its own. It reads while the console
//! waits for a line *and while a turn runs*: what is typed or pasted during a turn stays in
//! the editor's line below the output (everything the console prints goes above it, through
//! [`TerminalLines::output`]), and a line entered then is kept and sent as one message when
//! the turn ends ([`LineSource::turn_ended`]) — unless an approval question is waiting, which
//! it answers. Without it a terminal in its normal mode echoes keys into the tool output and
//! splits a paste into one message a line.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::{FileHistory, History as _};
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{
    Cmd, ConditionalEventHandler, Config, Editor, Event, EventContext, EventHandler,
    ExternalPrinter, Helper, KeyCode, KeyEvent, Modifiers, RepeatCount,
};
use tokio::sync::oneshot;

use super::input::{Asking, LineSource, Typed};
use super::sink::locked;
use super::{Interrupter, Output};

/// Most messages kept in the history file.
const HISTORY_SIZE: usize = 2_000;

/// The prompt the editor shows; an approval question is printed above it.
const PROMPT: &str = "> ";

/// What the console and the editor thread share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the editor thread when a line is wanted.
    wanted: Condvar,
}

#[derive(Default)]
struct State {
    /// The reader waiting for the next line, and what it asks for.
    waiter: Option<(Asking, oneshot::Sender<Typed>)>,
    /// Lines entered while nobody waited (the reader went away for an outside turn, or the
    /// console was busy with a command): the next reads take them first.
    unclaimed: VecDeque<Typed>,
    /// A turn runs: keep reading, and keep what is entered for after it.
    in_turn: bool,
    /// Lines entered during the turn, sent as one message when it ends.
    ahead: Vec<String>,
    /// Ctrl-D was pressed or the console went away: no more reading.
    ended: bool,
}

impl State {
    fn wants_a_line(&self) -> bool {
        !self.ended && (self.waiter.is_some() || self.in_turn)
    }
}

/// Lines typed at a terminal, through rustyline on its own thread.
pub struct TerminalLines {
    shared: Arc<Shared>,
    out: Output,
}

impl TerminalLines {
    /// Starts the editor. `history` is this user's history file (created 0600 with its
    /// directory 0700); `None` keeps history for this run only. `commands` are what Tab
    /// completes after a `/`; Ctrl-C during a turn stops it through `interrupter` (the
    /// console's, [`super::Console::with_lines`]).
    pub fn start(
        history: Option<PathBuf>,
        commands: Vec<String>,
        interrupter: Interrupter,
    ) -> Result<Self, ReadlineError> {
        let config = Config::builder()
            .max_history_size(HISTORY_SIZE)?
            .history_ignore_dups(true)?
            .history_ignore_space(true)
            .auto_add_history(false)
            .bracketed_paste(true)
            .build();
        let mut editor: Editor<ConsoleHelper, FileHistory> = Editor::with_config(config)?;
        editor.set_helper(Some(ConsoleHelper { commands }));
        editor.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), Cmd::Newline);
        let shared = Arc::new(Shared::default());
        editor.bind_sequence(
            KeyEvent::ctrl('C'),
            EventHandler::Conditional(Box::new(StopTheTurn {
                shared: shared.clone(),
                interrupter,
            })),
        );
        load_history(&mut editor, history.as_deref());
        // Output not on a terminal (`> log`) cannot be redrawn around the line: written as is.
        let out: Output = match editor.create_external_printer() {
            Ok(printer) => Arc::new(Mutex::new(AboveTheLine {
                printer: Box::new(printer),
                partial: Vec::new(),
            })),
            Err(_) => Arc::new(Mutex::new(std::io::stdout())),
        };
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("console-editor".into())
            .spawn(move || edit(editor, history, &thread_shared))
            .map_err(ReadlineError::Io)?;
        Ok(Self { shared, out })
    }

    /// Where the console writes: above the line being edited.
    pub fn output(&self) -> Output {
        self.out.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        locked(&self.shared.state)
    }
}

impl Drop for TerminalLines {
    fn drop(&mut self) {
        self.state().ended = true;
        self.shared.wanted.notify_all();
    }
}

#[async_trait::async_trait]
impl LineSource for TerminalLines {
    async fn read(&self, prompt: &str, asking: Asking) -> Typed {
        if asking == Asking::Answer {
            // The question goes above the line; the answer is typed at the editor's prompt.
            super::say(&self.out, &format!("{}\n", prompt.trim_end()));
        }
        let line = {
            let mut state = self.state();
            if asking == Asking::Message
                && let Some(typed) = state.unclaimed.pop_front()
            {
                return typed;
            }
            if state.ended {
                return state.unclaimed.pop_front().unwrap_or(Typed::End);
            }
            let (reply, line) = oneshot::channel();
            state.waiter = Some((asking, reply));
            line
        };
        self.shared.wanted.notify_all();
        line.await.unwrap_or(Typed::End)
    }

    fn turn_started(&self) {
        self.state().in_turn = true;
        self.shared.wanted.notify_all();
    }

    fn turn_ended(&self) -> Option<String> {
        let mut state = self.state();
        state.in_turn = false;
        let ahead = std::mem::take(&mut state.ahead);
        (!ahead.is_empty()).then(|| ahead.join("\n"))
    }

    fn keep(&self, line: &str) -> bool {
        let mut state = self.state();
        if !state.in_turn {
            return false;
        }
        state.ahead.push(line.to_owned());
        true
    }
}

/// Ctrl-C while a turn runs stops the turn and keeps what is being typed (an unanswered
/// approval question is answered `Interrupted`); at the prompt it clears the line.
struct StopTheTurn {
    shared: Arc<Shared>,
    interrupter: Interrupter,
}

impl ConditionalEventHandler for StopTheTurn {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, _: &EventContext) -> Option<Cmd> {
        let mut state = locked(&self.shared.state);
        if !state.in_turn {
            return None;
        }
        if matches!(state.waiter, Some((Asking::Answer, _)))
            && let Some((_, reply)) = state.waiter.take()
        {
            let _ = reply.send(Typed::Interrupted);
        }
        drop(state);
        self.interrupter.interrupt();
        Some(Cmd::Noop)
    }
}

/// Console output printed above the line being edited, a whole line at a time (rustyline
/// redraws the prompt after each print, so half a line would be cut by it).
struct AboveTheLine {
    printer: Box<dyn ExternalPrinter + Send>,
    partial: Vec<u8>,
}

impl Write for AboveTheLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(buf);
        if let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') {
            let lines: Vec<u8> = self.partial.drain(..=end).collect();
            self.printer
                .print(String::from_utf8_lossy(&lines).into_owned())
                .map_err(std::io::Error::other)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn load_history(editor: &mut Editor<ConsoleHelper, FileHistory>, path: Option<&Path>) {
    let Some(path) = path else { return };
    // It holds what was typed, secrets pasted by mistake included: the owner's only.
    match sandpiper_agent::private_file::open_append(path) {
        Ok(_) => {
            if let Err(e) = editor.load_history(path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the console history");
            }
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot create the console history file")
        }
    }
}

/// The editor thread: reads a line whenever one is wanted, until the console goes away.
fn edit(mut editor: Editor<ConsoleHelper, FileHistory>, history: Option<PathBuf>, shared: &Shared) {
    loop {
        {
            let mut state = locked(&shared.state);
            while !state.wants_a_line() {
                if state.ended {
                    return;
                }
                state = shared.wanted.wait(state).unwrap_or_else(|e| e.into_inner());
            }
        }
        let typed = match editor.readline(PROMPT) {
            Ok(line) => Typed::Line(join_continued(&line)),
            Err(ReadlineError::Interrupted) => Typed::Interrupted,
            Err(ReadlineError::Eof) => Typed::End,
            Err(e) => {
                tracing::warn!(error = %e, "the terminal cannot be read");
                Typed::End
            }
        };
        let mut state = locked(&shared.state);
        let answering = matches!(state.waiter, Some((Asking::Answer, _)));
        if let Typed::Line(line) = &typed
            && !answering
            && !line.trim().is_empty()
        {
            remember(&mut editor, history.as_deref(), line);
        }
        let kept = deliver(&mut state, typed);
        drop(state);
        if kept {
            // Straight to the terminal: this thread must never wait for the console's output,
            // which may be waiting for this thread to take a line it prints.
            let mut stdout = std::io::stdout();
            let _ = stdout.write_all(KEPT.as_bytes());
            let _ = stdout.flush();
        }
    }
}

/// Said when a line entered during a turn is kept for after it.
const KEPT: &str = "  (kept: sent when this turn ends; Ctrl-C stops the turn)\n";

/// Where a finished line goes: the question waiting for an answer; during a turn, the
/// message kept for after it (true); else the reader waiting, or the next one.
fn deliver(state: &mut State, typed: Typed) -> bool {
    if typed == Typed::End {
        state.ended = true;
    }
    if state.in_turn && !matches!(state.waiter, Some((Asking::Answer, _))) {
        match typed {
            Typed::Line(line) if !line.trim().is_empty() => {
                state.ahead.push(line);
                return true;
            }
            Typed::End => state.unclaimed.push_back(Typed::End),
            // Ctrl-C during a turn is the turn's (`StopTheTurn`); a blank line is nothing.
            _ => {}
        }
        return false;
    }
    match state.waiter.take() {
        Some((_, reply)) => {
            if let Err(typed) = reply.send(typed) {
                state.unclaimed.push_back(typed);
            }
        }
        None => state.unclaimed.push_back(typed),
    }
    false
}

/// Adds a message to the history and to the file at once, so a crash loses none.
fn remember(editor: &mut Editor<ConsoleHelper, FileHistory>, file: Option<&Path>, line: &str) {
    match editor.add_history_entry(line) {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "cannot add to the console history");
            return;
        }
    }
    if let Some(path) = file
        && let Err(e) = editor.history_mut().append(path)
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot save the console history");
    }
}

/// The message typed: a line ending in `\` went on to the next one, and the `\` is not part
/// of the message.
pub fn join_continued(text: &str) -> String {
    text.replace("\\\n", "\n")
}

/// Completion of command names and the trailing-`\` continuation.
struct ConsoleHelper {
    commands: Vec<String>,
}

impl Completer for ConsoleHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok((0, complete_command(&self.commands, &line[..pos])))
    }
}

/// The commands `typed` (the line up to the cursor) may complete to: only while the first
/// word, a `/` and a prefix of a command name, is typed.
pub fn complete_command(commands: &[String], typed: &str) -> Vec<String> {
    let Some(prefix) = typed.strip_prefix('/') else {
        return Vec::new();
    };
    if prefix.contains(char::is_whitespace) || prefix.starts_with('/') {
        return Vec::new();
    }
    commands
        .iter()
        .filter(|c| c.starts_with(prefix))
        .map(|c| format!("/{c} "))
        .collect()
}

impl Hinter for ConsoleHelper {
    type Hint = String;
}

impl Highlighter for ConsoleHelper {}

impl Validator for ConsoleHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ConsoleHelper {}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn tab_completes_the_command_word_only() {
        let commands: Vec<String> = ["status", "stop", "help"].map(String::from).into();
        assert_eq!(
            complete_command(&commands, "/st"),
            vec!["/status ".to_owned(), "/stop ".to_owned()]
        );
        assert_eq!(complete_command(&commands, "/h"), vec!["/help ".to_owned()]);
        assert_eq!(
            complete_command(&commands, "/status x"),
            Vec::<String>::new()
        );
        assert_eq!(complete_command(&commands, "st"), Vec::<String>::new());
        assert_eq!(complete_command(&commands, "//st"), Vec::<String>::new());
    }

    #[test]
    fn a_trailing_backslash_continues_the_message() {
        assert_eq!(join_continued("one \\\ntwo"), "one \ntwo");
        assert_eq!(join_continued("path\\to"), "path\\to");
    }
}
