//! The line editor at a terminal (rustyline): Emacs keys, history kept per user across runs
//! and searched with Ctrl-R, a pasted block (bracketed paste) as one message, Alt-Enter or a
//! trailing `\` for another line, Tab to complete a command name. Ctrl-C clears the line
//! being typed; Ctrl-D leaves.
//!
//! rustyline blocks, so the editor lives on a thread of its own and reads one line each time
//! the console asks ([`TerminalLines::read`]); between prompts the terminal is in its normal
//! mode, so Ctrl-C during a turn is a signal that stops the turn.

use std::path::{Path, PathBuf};

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::{FileHistory, History as _};
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Cmd, Config, Editor, Helper, KeyCode, KeyEvent, Modifiers};
use tokio::sync::oneshot;

use super::input::{Asking, LineSource, Typed};

/// Most messages kept in the history file.
const HISTORY_SIZE: usize = 2_000;

/// One prompt to show and where its line goes.
struct Request {
    prompt: String,
    asking: Asking,
    reply: oneshot::Sender<Typed>,
}

/// Lines typed at a terminal, through rustyline on its own thread.
pub struct TerminalLines {
    requests: std::sync::mpsc::Sender<Request>,
    /// The line being typed for a prompt whose reader went away (an outside turn came first):
    /// the next read takes it instead of asking again.
    pending: tokio::sync::Mutex<Option<oneshot::Receiver<Typed>>>,
}

impl TerminalLines {
    /// Starts the editor. `history` is this user's history file (created 0600 with its
    /// directory 0700); `None` keeps history for this run only. `commands` are what Tab
    /// completes after a `/`.
    pub fn start(history: Option<PathBuf>, commands: Vec<String>) -> Result<Self, ReadlineError> {
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
        if let Some(path) = &history {
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
        let (requests, incoming) = std::sync::mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("console-editor".into())
            .spawn(move || edit(editor, history, incoming))
            .map_err(ReadlineError::Io)?;
        Ok(Self {
            requests,
            pending: tokio::sync::Mutex::new(None),
        })
    }
}

#[async_trait::async_trait]
impl LineSource for TerminalLines {
    async fn read(&self, prompt: &str, asking: Asking) -> Typed {
        let mut pending = self.pending.lock().await;
        if pending.is_none() {
            let (reply, line) = oneshot::channel();
            let request = Request {
                prompt: prompt.to_owned(),
                asking,
                reply,
            };
            if self.requests.send(request).is_err() {
                return Typed::End;
            }
            *pending = Some(line);
        }
        let Some(line) = pending.as_mut() else {
            return Typed::End;
        };
        let typed = line.await.unwrap_or(Typed::End);
        *pending = None;
        typed
    }
}

/// The editor thread: one readline per request, until the console goes away.
fn edit(
    mut editor: Editor<ConsoleHelper, FileHistory>,
    history: Option<PathBuf>,
    requests: std::sync::mpsc::Receiver<Request>,
) {
    for request in requests {
        let typed = match editor.readline(&request.prompt) {
            Ok(line) => {
                let line = join_continued(&line);
                if request.asking == Asking::Message && !line.trim().is_empty() {
                    remember(&mut editor, history.as_deref(), &line);
                }
                Typed::Line(line)
            }
            Err(ReadlineError::Interrupted) => Typed::Interrupted,
            Err(ReadlineError::Eof) => Typed::End,
            Err(e) => {
                tracing::warn!(error = %e, "the terminal cannot be read");
                Typed::End
            }
        };
        if request.reply.send(typed).is_err() {
            break;
        }
    }
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
