//! The console channel: a terminal conversation with one workstream.
//!
//! Answers stream as they arrive; each tool call shows its header and preview; approvals are
//! `approve? [y]es / [n]o / [a]lways`, where text after a comma is feedback for the model
//! (`n, use the staging db`). When input is not a terminal every line is one user message and
//! approval answers are read from the next line, so a session can be scripted.

use std::io::Write;
use std::sync::{Arc, Mutex};

use sandpiper_agent::Agent;
use sandpiper_agent::protocol::{
    ApprovalItem, ApprovalKind, ApproveAll, Approver, Decision, SubAgentStatus, TurnEvent,
    TurnSink, Verdict,
};
use sandpiper_agent::store::watches::KeyPattern;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::card::header;
use crate::thread::{OutsideTurn, StartError, TurnStarter, Work};
use crate::turns::{QueueFull, Queued};
use crate::visible::{cut, escape_invisible, thousands};

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
    /// Input is a terminal: show prompts.
    pub interactive: bool,
}

/// The identity platform name of console users (keyed by OS user name).
pub const PLATFORM: &str = "console";

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
    input: Arc<tokio::sync::Mutex<mpsc::Receiver<String>>>,
    out: Output,
    interrupter: Interrupter,
    /// Turns started from outside the terminal ([`Console::starter`]), run between lines.
    outside: mpsc::Sender<Work>,
    outside_rx: tokio::sync::Mutex<mpsc::Receiver<Work>>,
}

/// What the console does next.
enum Next {
    Line(String),
    Outside(Work),
    End,
}

impl Console {
    /// A console reading lines from `input` and writing to `out`.
    pub fn new(
        agent: Agent,
        options: ConsoleOptions,
        input: mpsc::Receiver<String>,
        out: Output,
    ) -> Self {
        let (outside, outside_rx) = mpsc::channel(crate::turns::MAX_QUEUED);
        Self {
            agent,
            options,
            input: Arc::new(tokio::sync::Mutex::new(input)),
            out,
            interrupter: Interrupter::default(),
            outside,
            outside_rx: tokio::sync::Mutex::new(outside_rx),
        }
    }

    /// Starts turns in this console's workstream from outside the terminal (a watch firing);
    /// each runs after the turn in progress, shown like a typed message.
    pub fn starter(&self) -> Arc<dyn TurnStarter> {
        Arc::new(ConsoleStarter {
            key: self.workstream_key(),
            queue: self.outside.clone(),
            running: self.interrupter.clone(),
        })
    }

    /// The next line typed, or the next outside turn, whichever comes first.
    async fn next(&self) -> Next {
        let mut outside = self.outside_rx.lock().await;
        tokio::select! {
            line = async { self.input.lock().await.recv().await } => match line {
                Some(line) => Next::Line(line),
                None => Next::End,
            },
            Some(work) = outside.recv() => Next::Outside(work),
        }
    }

    /// The handle that Ctrl-C uses.
    pub fn interrupter(&self) -> Interrupter {
        self.interrupter.clone()
    }

    /// The workstream key.
    pub fn workstream_key(&self) -> String {
        sandpiper_agent::workstream::WorkstreamKey::console(&self.options.workstream).to_string()
    }

    /// Reads messages until input ends (or `/quit`), answering each; says how many turns
    /// failed.
    pub async fn run(&self) -> SessionReport {
        let mut report = SessionReport::default();
        let key = self.workstream_key();
        // The person at the terminal is a sandpiper user like any platform user.
        let user = match self
            .agent
            .store()
            .user_for_identity(PLATFORM, &self.options.user, &self.options.user)
            .await
        {
            Ok(user) => user,
            Err(e) => {
                say(&self.out, &format!("error: cannot look up user: {e}\n"));
                report.failed += 1;
                return report;
            }
        };
        let sink = ConsoleSink::new(self.out.clone());
        let approver = ConsoleApprover {
            input: self.input.clone(),
            out: self.out.clone(),
            interactive: self.options.interactive,
            user: user.shown_name().to_owned(),
        };
        if self.options.interactive {
            match self.agent.history(&key).await {
                Ok(h) if !h.is_empty() => say(
                    &self.out,
                    &format!("(continuing workstream {key}: {} messages)\n", h.len()),
                ),
                Ok(_) => say(
                    &self.out,
                    &format!("(new workstream {key}; Ctrl-D to quit)\n"),
                ),
                Err(e) => say(&self.out, &format!("error: {e}\n")),
            }
        }
        loop {
            if self.options.interactive {
                say(&self.out, "\n> ");
            }
            let work = match self.next().await {
                Next::End => break,
                Next::Outside(work) => work,
                Next::Line(line) => {
                    let text = line.trim();
                    if text.is_empty() {
                        continue;
                    }
                    if matches!(text, "/quit" | "/exit") {
                        break;
                    }
                    // The person at the terminal owns its workstream.
                    if let Some(answer) = self.command(&key, text).await {
                        say(&self.out, &format!("{answer}\n"));
                        continue;
                    }
                    Work::message(&user.id, text.to_owned())
                }
            };
            let cancel = CancellationToken::new();
            self.interrupter.set(Some(cancel.clone()));
            let approver: &dyn Approver = if self.options.auto_approve {
                &ApproveAll
            } else {
                &approver
            };
            let result =
                crate::thread::run_work(&self.agent, &key, work, &sink, approver, cancel).await;
            self.interrupter.set(None);
            report.turns += 1;
            // Errors were already shown through the sink; here they are only counted.
            if let Err(e) = result {
                tracing::debug!(workstream = %key, error = %e, "console turn failed");
                report.failed += 1;
            }
        }
        report
    }

    /// The answer to `/status` or `/compact`, which never reach the model.
    async fn command(&self, key: &str, text: &str) -> Option<String> {
        match text {
            "/status" => Some(crate::answers::status(&self.agent, key).await),
            "/compact" => Some(crate::answers::compact_now(&self.agent, key).await),
            _ => None,
        }
    }
}

/// [`TurnStarter`] for the console's one workstream.
struct ConsoleStarter {
    key: String,
    queue: mpsc::Sender<Work>,
    /// Holds a token while a turn runs.
    running: Interrupter,
}

impl TurnStarter for ConsoleStarter {
    fn keys(&self) -> KeyPattern {
        KeyPattern::Exact(self.key.clone())
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

/// Most bytes of one tool call's streamed output printed live; the rest is counted and
/// named when the call ends (the model gets its own cut of the output either way).
const LIVE_OUTPUT_BYTES: usize = 256 * 1024;

/// Prints turn events.
#[derive(Default)]
struct ConsoleSink {
    out: Option<Output>,
    /// Bytes of streamed output per running call: (printed, not printed).
    streamed: Mutex<std::collections::HashMap<String, (usize, usize)>>,
    /// The status line last printed per sub-agent call.
    statuses: Mutex<std::collections::HashMap<String, String>>,
}

impl ConsoleSink {
    fn new(out: Output) -> Self {
        Self {
            out: Some(out),
            streamed: Mutex::default(),
            statuses: Mutex::default(),
        }
    }

    /// What to print for an output chunk: everything up to [`LIVE_OUTPUT_BYTES`] per call
    /// (escaped: a command's output must not steer the terminal that shows the next
    /// approval prompt), then one line saying the rest is not shown live.
    fn output_chunk(&self, call_id: String, chunk: &str) -> String {
        let mut streamed = self.streamed.lock().unwrap_or_else(|e| e.into_inner());
        let (printed, skipped) = streamed.entry(call_id).or_default();
        if *printed >= LIVE_OUTPUT_BYTES {
            *skipped += chunk.len();
            return String::new();
        }
        *printed += chunk.len();
        let mut text = indent(&escape_invisible(chunk), "  │ ");
        if *printed >= LIVE_OUTPUT_BYTES {
            text.push_str("  │ … (more output follows; not shown live)\n");
        }
        text
    }

    /// The note on a finished call whose streamed output was not all printed.
    fn skipped_note(&self, call_id: &str) -> String {
        let mut streamed = self.streamed.lock().unwrap_or_else(|e| e.into_inner());
        match streamed.remove(call_id) {
            Some((_, skipped)) if skipped > 0 => format!(
                " ({} more bytes of output not shown)",
                thousands(skipped as u64)
            ),
            _ => String::new(),
        }
    }

    /// A sub-agent's status line, printed when it changes (a terminal scrolls; it cannot
    /// edit a line above a prompt).
    fn status_line(&self, status: SubAgentStatus) -> String {
        let line = status.to_string();
        let mut shown = self.statuses.lock().unwrap_or_else(|e| e.into_inner());
        if shown.get(&status.call_id) == Some(&line) {
            return String::new();
        }
        shown.insert(status.call_id, line.clone());
        format!("  ⋯ {}\n", escape_invisible(&line))
    }

    fn render(&self, event: TurnEvent) -> String {
        match event {
            TurnEvent::TextDelta(t) => t,
            TurnEvent::ToolPending(v) => {
                let mut s = format!("\n▸ {}\n", header(&v.header));
                if !v.preview.is_empty() && v.preview != v.header {
                    s.push_str(&indent(&cut(&v.preview, 20, 4000), "  │ "));
                }
                if let Some(e) = v.error {
                    s.push_str(&format!("  ✗ {}\n", escape_invisible(&e)));
                }
                s
            }
            TurnEvent::ToolOutputChunk { call_id, chunk } => self.output_chunk(call_id, &chunk),
            TurnEvent::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => {
                let note = self.skipped_note(&call_id);
                self.statuses
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&call_id);
                let first = output
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(160)
                    .collect::<String>();
                if is_error {
                    format!("  ✗ {name}: {}{note}\n", escape_invisible(&first))
                } else {
                    format!("  ✓ {name}{note}\n")
                }
            }
            TurnEvent::SubAgent(status) => self.status_line(status),
            TurnEvent::Attachment {
                filename, comment, ..
            } => format!(
                "  📎 {}: {}\n",
                escape_invisible(&comment),
                escape_invisible(&filename)
            ),
            TurnEvent::Waiting(wait) => format!("\n(⏳ {wait})\n"),
            TurnEvent::Notice(n) => format!("\n({n})\n"),
            TurnEvent::Error(e) => format!("\nerror: {e}\n"),
            TurnEvent::TurnComplete { cancelled, .. } => {
                if cancelled {
                    "\n(turn cancelled)\n".into()
                } else {
                    "\n".into()
                }
            }
        }
    }
}

impl TurnSink for ConsoleSink {
    fn event(&self, event: TurnEvent) {
        let text = self.render(event);
        if let Some(out) = &self.out
            && !text.is_empty()
        {
            say(out, &text);
        }
    }
}

fn indent(text: &str, prefix: &str) -> String {
    let mut s = String::with_capacity(text.len() + 8);
    for line in text.lines() {
        s.push_str(prefix);
        s.push_str(line);
        s.push('\n');
    }
    s
}

/// Asks `approve? [y]es / [n]o / [a]lways` for each item, reading the next input line.
struct ConsoleApprover {
    input: Arc<tokio::sync::Mutex<mpsc::Receiver<String>>>,
    out: Output,
    interactive: bool,
    user: String,
}

#[async_trait::async_trait]
impl Approver for ConsoleApprover {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        let mut decisions = Vec::with_capacity(items.len());
        let mut input = self.input.lock().await;
        for item in items {
            let review = item.kind == ApprovalKind::Review;
            if review {
                say(
                    &self.out,
                    &format!("\n{}\n", cut(&item.preview, 200, 20_000)),
                );
            }
            loop {
                let question = if review {
                    format!(
                        "review {}: [a]ccept / [r]eject / a[n]notate, <note>: ",
                        header(&item.header)
                    )
                } else {
                    format!(
                        "approve {}? [y]es / [n]o / [a]lways: ",
                        header(&item.header)
                    )
                };
                say(&self.out, &question);
                let Some(line) = input.recv().await else {
                    say(&self.out, "\n(no more input: denied)\n");
                    return decisions;
                };
                if !self.interactive {
                    say(&self.out, &format!("{line}\n"));
                }
                let answer = if review {
                    parse_review(&line)
                } else {
                    parse_answer(&line)
                };
                match answer {
                    Some(d) => {
                        decisions.push(d.by(self.user.clone()));
                        break;
                    }
                    None if review => say(
                        &self.out,
                        "please answer a, r, or n followed by a comma and your note\n",
                    ),
                    None => say(
                        &self.out,
                        "please answer y, n or a (text after a comma is feedback)\n",
                    ),
                }
            }
        }
        decisions
    }
}

/// Parses `y`, `n`, `a` (or `yes`, `no`, `always`), with optional `, feedback`.
pub fn parse_answer(line: &str) -> Option<Decision> {
    let (word, feedback) = match line.split_once(',') {
        Some((w, f)) => (w, Some(f.trim().to_owned()).filter(|f| !f.is_empty())),
        None => (line, None),
    };
    let verdict = match word.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Verdict::Approve,
        "n" | "no" => Verdict::Deny,
        "a" | "always" => Verdict::AlwaysAllow,
        _ => return None,
    };
    Some(Decision::new(verdict, feedback))
}

/// Parses a review answer: `a` (accept), `r` (reject) or `n, <note>` (annotate; the note is
/// required), the words spelled out too; text after a comma is the note.
pub fn parse_review(line: &str) -> Option<Decision> {
    let (word, note) = match line.split_once(',') {
        Some((w, f)) => (w, Some(f.trim().to_owned()).filter(|f| !f.is_empty())),
        None => (line, None),
    };
    let verdict = match word.trim().to_ascii_lowercase().as_str() {
        "a" | "accept" | "y" | "yes" => Verdict::Approve,
        "r" | "reject" => Verdict::Deny,
        "n" | "annotate" | "note" if note.is_some() => Verdict::Annotate,
        _ => return None,
    };
    Some(Decision::new(verdict, note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn answers_parse_with_feedback() {
        assert_eq!(parse_answer("y"), Some(Decision::approve()));
        assert_eq!(
            parse_answer("n, use the staging db"),
            Some(Decision::deny(Some("use the staging db".into())))
        );
        assert_eq!(
            parse_answer(" Always ").map(|d| d.verdict),
            Some(Verdict::AlwaysAllow)
        );
        assert_eq!(parse_answer("maybe"), None);
        assert_eq!(parse_answer("yes,").map(|d| d.feedback), Some(None));
    }

    #[test]
    fn review_answers_parse_and_an_annotation_needs_its_note() {
        assert_eq!(parse_review("a"), Some(Decision::approve()));
        assert_eq!(
            parse_review("reject, too risky"),
            Some(Decision::deny(Some("too risky".into())))
        );
        assert_eq!(
            parse_review("n, do step 2 first"),
            Some(Decision::new(
                Verdict::Annotate,
                Some("do step 2 first".into())
            ))
        );
        assert_eq!(parse_review("n"), None);
        assert_eq!(parse_review("always"), None);
    }
}
