//! Turn events as the person at the terminal sees them: the answer as it streams (escaped,
//! Markdown drawn on a terminal: [`super::markdown`]), each tool call's header once, a
//! preview when it says more than the header, streamed output, and one line per result.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use sandpiper_agent::protocol::{Compacting, SubAgentStatus, ToolCallView, TurnEvent, TurnSink};

use super::markdown::Markdown;
use super::{Output, say};
use crate::card::header;
use crate::visible::{cut, escape_invisible, thousands};

/// Most bytes of one tool call's streamed output printed live; the rest is counted and
/// named when the call ends (the model gets its own cut of the output either way).
const LIVE_OUTPUT_BYTES: usize = 256 * 1024;

/// Prints turn events.
pub(super) struct ConsoleSink {
    out: Output,
    /// The answer being streamed.
    text: Mutex<Markdown>,
    /// Bytes of streamed output per running call: (printed, not printed).
    streamed: Mutex<HashMap<String, (usize, usize)>>,
    /// The status line last printed per sub-agent call.
    statuses: Mutex<HashMap<String, String>>,
    /// Calls refused before they ran: their error is on screen already.
    refused: Mutex<HashSet<String>>,
    /// Calls whose header is on screen (an approval question then names only the tool).
    pub(super) headed: Headed,
}

/// The calls whose header the sink printed, shared with the approval questions.
pub(super) type Headed = std::sync::Arc<Mutex<HashSet<String>>>;

pub(super) fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ConsoleSink {
    /// A sink printing to `out`, drawing Markdown when `styled`.
    pub(super) fn new(out: Output, styled: bool) -> Self {
        Self {
            out,
            text: Mutex::new(Markdown::new(styled)),
            streamed: Mutex::default(),
            statuses: Mutex::default(),
            refused: Mutex::default(),
            headed: Headed::default(),
        }
    }

    /// What to print for an output chunk: everything up to [`LIVE_OUTPUT_BYTES`] per call
    /// (escaped: a command's output must not steer the terminal that shows the next
    /// approval prompt), then one line saying the rest is not shown live.
    fn output_chunk(&self, call_id: String, chunk: &str) -> String {
        let mut streamed = locked(&self.streamed);
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
        match locked(&self.streamed).remove(call_id) {
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
        let mut shown = locked(&self.statuses);
        if shown.get(&status.call_id) == Some(&line) {
            return String::new();
        }
        shown.insert(status.call_id, line.clone());
        format!("  ⋯ {}\n", escape_invisible(&line))
    }

    /// A prepared call: its header, then the preview only when it adds to the header (a
    /// one-line command is in the header already), or the reason it was refused (which names
    /// the path itself, so the header names only the tool).
    fn pending(&self, v: ToolCallView) -> String {
        let head = header(&v.header);
        if let Some(e) = v.error {
            locked(&self.refused).insert(v.call_id);
            let argument = head.split_once(": ").map(|(_, a)| a.trim()).unwrap_or("");
            let error = escape_invisible(&e);
            let head = if !argument.is_empty() && error.contains(argument) {
                escape_invisible(&v.name).into_owned()
            } else {
                head
            };
            return format!("\n▸ {head}\n  ✗ {error}\n");
        }
        locked(&self.headed).insert(v.call_id);
        let mut s = format!("\n▸ {head}\n");
        let preview = v.preview.trim_end();
        let said = preview.is_empty()
            || (!preview.contains('\n') && head.ends_with(&*escape_invisible(preview.trim())));
        if !said {
            s.push_str(&indent(&cut(preview, 20, 4000), "  │ "));
        }
        s
    }

    fn render(&self, event: TurnEvent) -> String {
        if let TurnEvent::TextDelta(t) = &event {
            return locked(&self.text).push(t);
        }
        let mut s = locked(&self.text).flush();
        s.push_str(&match event {
            TurnEvent::TextDelta(_) => String::new(),
            TurnEvent::ToolPending(v) => self.pending(v),
            TurnEvent::ToolOutputChunk { call_id, chunk } => self.output_chunk(call_id, &chunk),
            TurnEvent::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => {
                let note = self.skipped_note(&call_id);
                locked(&self.statuses).remove(&call_id);
                locked(&self.headed).remove(&call_id);
                let name = escape_invisible(&name);
                if locked(&self.refused).remove(&call_id) {
                    // Its reason is under its header already.
                    String::new()
                } else if is_error {
                    let first: String = output
                        .lines()
                        .next()
                        .unwrap_or("")
                        .chars()
                        .take(160)
                        .collect();
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
            TurnEvent::Waiting(wait) => format!("\n(⏳ {})\n", escape_invisible(&wait.to_string())),
            // One line when it starts; how it ended is the notice that follows, or the turn's
            // cancellation.
            TurnEvent::Compacting(step @ Compacting::Started) => format!("\n({step})\n"),
            TurnEvent::Compacting(Compacting::Ended { .. }) => String::new(),
            TurnEvent::Notice(n) => format!("\n({})\n", escape_invisible(&n)),
            TurnEvent::Error(e) => format!("\nerror: {}\n", escape_invisible(&e)),
            TurnEvent::TurnComplete { cancelled, .. } => {
                let mut end = locked(&self.text).finish();
                end.push_str(if cancelled {
                    "\n(turn cancelled)\n"
                } else {
                    "\n"
                });
                end
            }
        });
        s
    }

    /// Prints text that is not a turn's (a command's answer), drawn like the model's.
    pub(super) fn show(&self, text: &str) {
        let mut md = locked(&self.text);
        let mut s = md.flush();
        s.push_str(&md.push(text));
        s.push_str(&md.finish());
        drop(md);
        if !s.ends_with('\n') {
            s.push('\n');
        }
        say(&self.out, &s);
    }
}

impl TurnSink for ConsoleSink {
    fn event(&self, event: TurnEvent) {
        let text = self.render(event);
        if !text.is_empty() {
            say(&self.out, &text);
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
