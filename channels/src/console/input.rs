//! Where the console's lines come from: a line editor at a terminal
//! ([`super::editor::TerminalLines`]), or piped lines ([`PipedLines`]) for scripts, where every
//! line is one message and an approval is answered by the next line.

use tokio::sync::mpsc;

use super::{Output, say};

/// What the person typed in answer to one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Typed {
    /// A finished line (several lines for a paste or Alt-Enter).
    Line(String),
    /// Ctrl-C at the prompt: the line was cleared.
    Interrupted,
    /// Ctrl-D, or the end of piped input.
    End,
}

/// What a prompt asks for; history keeps messages, not approval answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asking {
    /// A message for the agent, or a command.
    Message,
    /// An answer to an approval or review question.
    Answer,
}

/// A source of typed lines.
#[async_trait::async_trait]
pub trait LineSource: Send + Sync {
    /// The next line typed after `prompt` is shown. May be dropped before it finishes (an
    /// outside turn came first); the line typed meanwhile is the answer to the next call.
    async fn read(&self, prompt: &str, asking: Asking) -> Typed;

    /// A turn starts. A terminal keeps reading while it runs, so nothing typed is lost.
    fn turn_started(&self) {}

    /// The turn ended: the lines entered meanwhile, as one message to send next.
    fn turn_ended(&self) -> Option<String> {
        None
    }

    /// Keeps `line`, entered as an approval answer but not one, to send when the turn ends
    /// (a message typed just as the question came). False when this source cannot.
    fn keep(&self, _line: &str) -> bool {
        false
    }
}

/// Piped input: one line a message. A message is echoed with the prompt once it arrived
/// (`> list the files`); an approval question is printed before its answer is read (a script
/// may wait for it) and the answer after it, so the transcript shows which line answered what.
pub struct PipedLines {
    lines: tokio::sync::Mutex<mpsc::Receiver<String>>,
    out: Output,
}

impl PipedLines {
    /// Lines from `lines`, echoed to `out`.
    pub fn new(lines: mpsc::Receiver<String>, out: Output) -> Self {
        Self {
            lines: tokio::sync::Mutex::new(lines),
            out,
        }
    }
}

#[async_trait::async_trait]
impl LineSource for PipedLines {
    async fn read(&self, prompt: &str, asking: Asking) -> Typed {
        if asking == Asking::Answer {
            say(&self.out, prompt);
        }
        let line = self.lines.lock().await.recv().await;
        match (line, asking) {
            (Some(line), Asking::Answer) => {
                say(&self.out, &format!("{line}\n"));
                Typed::Line(line)
            }
            (Some(line), Asking::Message) => {
                // Blank lines send nothing; they are not echoed either.
                if !line.trim().is_empty() {
                    say(&self.out, &format!("{prompt}{line}\n"));
                }
                Typed::Line(line)
            }
            (None, _) => Typed::End,
        }
    }
}
