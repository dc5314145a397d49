//! The console channel: a terminal conversation with one workstream.
//!
//! Answers stream as they arrive; each tool call shows its header and preview; approvals are
//! `approve? [y]es / [n]o / [a]lways`, where text after a comma is feedback for the model
//! (`n, use the staging db`). When input is not a terminal every line is one user message and
//! approval answers are read from the next line, so a session can be scripted.

use std::io::Write;
use std::sync::{Arc, Mutex};

use sandpiper_agent::Agent;
use sandpiper_agent::agent::TurnRequest;
use sandpiper_agent::protocol::{
    ApprovalItem, ApproveAll, Approver, Decision, TurnEvent, TurnSink, Verdict,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::card::header;
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
}

impl Console {
    /// A console reading lines from `input` and writing to `out`.
    pub fn new(
        agent: Agent,
        options: ConsoleOptions,
        input: mpsc::Receiver<String>,
        out: Output,
    ) -> Self {
        Self {
            agent,
            options,
            input: Arc::new(tokio::sync::Mutex::new(input)),
            out,
            interrupter: Interrupter::default(),
        }
    }

    /// The handle that Ctrl-C uses.
    pub fn interrupter(&self) -> Interrupter {
        self.interrupter.clone()
    }

    /// The workstream key.
    pub fn workstream_key(&self) -> String {
        format!("console:{}", self.options.workstream)
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
            user: user.username.clone(),
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
            let Some(line) = self.input.lock().await.recv().await else {
                break;
            };
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            if matches!(text, "/quit" | "/exit") {
                break;
            }
            let cancel = CancellationToken::new();
            self.interrupter.set(Some(cancel.clone()));
            let approver: &dyn Approver = if self.options.auto_approve {
                &ApproveAll
            } else {
                &approver
            };
            let result = self
                .agent
                .run_turn(TurnRequest {
                    workstream: &key,
                    author: Some(&user.id),
                    text: text.to_owned(),
                    sink: &sink,
                    approver,
                    cancel,
                })
                .await;
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
}

impl ConsoleSink {
    fn new(out: Output) -> Self {
        Self {
            out: Some(out),
            streamed: Mutex::default(),
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
            } => {
                let note = self.skipped_note(&call_id);
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
            loop {
                say(
                    &self.out,
                    &format!(
                        "approve {}? [y]es / [n]o / [a]lways: ",
                        header(&item.header)
                    ),
                );
                let Some(line) = input.recv().await else {
                    say(&self.out, "\n(no more input: denied)\n");
                    return decisions;
                };
                if !self.interactive {
                    say(&self.out, &format!("{line}\n"));
                }
                match parse_answer(&line) {
                    Some(d) => {
                        decisions.push(d.by(self.user.clone()));
                        break;
                    }
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
    Some(Decision {
        verdict,
        feedback,
        decided_by: None,
    })
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
}
