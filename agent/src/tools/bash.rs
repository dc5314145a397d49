//! The `bash` tool: runs a command in the workstream's working directory, streaming each
//! output line as it arrives, with a timeout, cancellation and a blocklist of catastrophic
//! commands.
//!
//! The command starts from the tools' clean environment ([`crate::process::env`]), confined so it
//! cannot read the bot's environment, memory, config or database ([`crate::process::confine`]), and runs
//! contained ([`crate::process::tree`]): a timeout or `/stop` kills everything it started, not
//! just the shell's process group (a `setsid` job or a daemon too). Output is kept bounded however much the command prints: the
//! first `max_output_bytes` and a rolling tail, counted in full so the note says how much was
//! cut. When the shell exits but a background job still holds the pipes, the tool waits
//! [`DRAIN_GRACE`] and returns; the job keeps running (redirect its output to a file).

mod blocklist;

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{
    OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput, ceil_char_boundary,
    floor_char_boundary, truncate_output,
};
use crate::process::tree::{Containment, Ended, ProcessTree};

/// The `bash` tool. Asks for approval (`auto_approve: false` in its JSON); refuses commands on the blocklist.
#[derive(Debug, Default)]
pub(super) struct Bash;

/// Characters of the command shown in the header.
const HEADER_CHARS: usize = 80;
/// Longest piece of a line sent at once; longer lines reach the sink in several pieces.
const MAX_PIECE_BYTES: usize = 16 * 1024;
/// How long background jobs may keep the pipes open after the shell has exited.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long reaping a killed shell may take before we give up on it.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// The arguments of `tools/bash.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    command: String,
}

pub(crate) fn check_command(command: &str) -> Result<(), ToolError> {
    if command.trim().is_empty() {
        return Err(ToolError::model(
            "`command` is empty; send the bash command to run",
        ));
    }
    match blocklist::blocked_reason(command) {
        Some(reason) => Err(ToolError::model(format!(
            "refused: this command runs {reason}, which can destroy the machine, so sandpiper \
             never runs it. Do the task another way; if it is really intended, ask the user to \
             run it themselves."
        ))),
        None => Ok(()),
    }
}

#[async_trait::async_trait]
impl Tool for Bash {
    type Args = Args;
    type Call = Args;
    const USAGE: &'static str = "send {\"command\": \"<bash command>\"}";

    fn name(&self) -> &'static str {
        "bash"
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, Args), ToolError> {
        check_command(&args.command)?;
        let prepared = Prepared {
            header: format!("bash: {}", header_line(&args.command)),
            preview: args.command.clone(),
            ask: false,
        };
        Ok((prepared, args))
    }

    async fn execute(
        &self,
        args: &Args,
        _prepared: &Prepared,
        ctx: &ToolContext,
        sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        run(&args.command, ctx, sink).await
    }
}

/// The first line of the command, cut to [`HEADER_CHARS`], with `…` when anything is left out.
fn header_line(command: &str) -> String {
    let trimmed = command.trim();
    let first = trimmed.lines().next().unwrap_or_default();
    let mut line: String = first.chars().take(HEADER_CHARS).collect();
    if line.len() < trimmed.len() {
        line.push('…');
    }
    line
}

/// How the wait for the command ended.
enum Outcome {
    Finished(ExitStatus),
    TimedOut,
    Cancelled,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// It ran past `tools.bash_timeout` and was killed, with what of its processes the kill
    /// could find and check.
    TimedOut(Ended),
    /// It ended without a code or a signal.
    Abnormal,
}

impl Exit {
    /// The exit code as a shell reports it: 128 + signal when killed, 124 on a timeout (what
    /// `timeout(1)` returns), -1 otherwise.
    pub(crate) fn code(self) -> i64 {
        match self {
            Exit::Code(c) => i64::from(c),
            Exit::Signal(s) => 128 + i64::from(s),
            Exit::TimedOut(_) => 124,
            Exit::Abnormal => -1,
        }
    }
}

/// What a command printed (bounded, cut in the middle like tool output) and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ran {
    /// stdout and stderr as they came, at most `max_output_bytes` with a note where cut.
    pub(crate) output: String,
    /// How it ended.
    pub(crate) exit: Exit,
}

async fn run(
    command_text: &str,
    ctx: &ToolContext,
    sink: &dyn OutputSink,
) -> Result<ToolOutput, ToolError> {
    let Ran { mut output, exit } =
        run_command(command_text, ctx, sink, ctx.config.max_output_bytes).await?;
    let note = match exit {
        Exit::TimedOut(ended) => Some(format!(
            "[timed out after {}; {}]",
            format_duration(ctx.config.bash_timeout),
            match ended {
                Ended::All => "the command and everything it started were killed".to_owned(),
                Ended::Found => "the command and every process still carrying its call id were \
                                 killed (no cgroup here: a process that dropped the id and left \
                                 the process group is not tracked)"
                    .to_owned(),
                Ended::Left(n) => {
                    format!("the command was killed, but {n} of its processes were still running")
                }
            }
        )),
        Exit::Code(0) => None,
        Exit::Code(code) => Some(format!("[exit code {code}]")),
        Exit::Signal(signal) => Some(format!("[killed by signal {signal}]")),
        Exit::Abnormal => Some("[exited abnormally]".to_owned()),
    };
    let is_error = note.is_some();
    if let Some(note) = note {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&note);
    }
    if output.is_empty() {
        output.push_str("[no output]");
    }
    Ok(ToolOutput {
        text: output,
        images: Vec::new(),
        is_error,
    })
}

/// Runs `command_text` as the bash tool does (the working directory and clean environment of
/// `ctx`, its timeout and cancellation, the whole process tree killed at the end), streaming
/// lines to `sink` and keeping at most `max_bytes` of output. The blocklist is the caller's
/// (checked when the call or the watch is prepared). Watches poll through this too.
pub(crate) async fn run_command(
    command_text: &str,
    ctx: &ToolContext,
    sink: &dyn OutputSink,
    max_bytes: usize,
) -> Result<Ran, ToolError> {
    // stdin /dev/null, stdout and stderr piped, killed if dropped before it ends.
    let mut command = ctx.child_env.tool_command("bash");
    command.current_dir(&ctx.workdir);
    // Adds `-c` and the command; kills everything it started if this future is dropped
    // half-way.
    let mut tree = ProcessTree::prepare_shell(&mut command, Containment::Auto, command_text);
    let mut child = command.spawn().await.map_err(|e| {
        ToolError::model(format!(
            "cannot start bash in {}: {e}",
            ctx.workdir.display()
        ))
    })?;
    tree.started(child.id());

    let (tx, mut rx) = mpsc::channel::<String>(16);
    let mut readers = JoinSet::new();
    if let Some(out) = child.take_stdout() {
        readers.spawn(forward_pieces(out, tx.clone()));
    }
    if let Some(err) = child.take_stderr() {
        readers.spawn(forward_pieces(err, tx.clone()));
    }
    drop(tx);

    let timeout = ctx.config.bash_timeout;
    let deadline = tokio::time::sleep(timeout);
    let drain = tokio::time::sleep(timeout);
    tokio::pin!(deadline, drain);
    let mut collected = Collected::new(max_bytes);
    let mut pipes_open = true;
    let mut status = None;
    let outcome = loop {
        if let (false, Some(st)) = (pipes_open, status) {
            break Outcome::Finished(st);
        }
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => break Outcome::Cancelled,
            () = &mut deadline => break Outcome::TimedOut,
            piece = rx.recv(), if pipes_open => match piece {
                Some(piece) => {
                    send_lines(sink, &piece);
                    collected.push(&piece);
                }
                None => pipes_open = false,
            },
            st = child.wait(), if status.is_none() => {
                let st = st.map_err(|e| ToolError::model(format!("waiting for bash failed: {e}")))?;
                status = Some(st);
                drain.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
            }
            () = &mut drain, if status.is_some() => {
                if let Some(st) = status {
                    break Outcome::Finished(st);
                }
            }
        }
    };

    // `None`: cancelled.
    let exit = match outcome {
        Outcome::Finished(st) => {
            tree.release();
            Some(match (st.code(), st.signal()) {
                (Some(code), _) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal(signal),
                (None, None) => Exit::Abnormal,
            })
        }
        Outcome::TimedOut | Outcome::Cancelled => {
            let ended = tree.kill().await;
            if status.is_none() {
                // Reap the shell; the tree reaped the rest that became ours.
                let _ = tokio::time::timeout(REAP_TIMEOUT, child.wait()).await;
            }
            matches!(outcome, Outcome::TimedOut).then_some(Exit::TimedOut(ended))
        }
    };
    drop(readers);
    while let Ok(piece) = rx.try_recv() {
        send_lines(sink, &piece);
        collected.push(&piece);
    }
    let exit = exit.ok_or(ToolError::Cancelled)?;
    Ok(Ran {
        output: collected.finish(),
        exit,
    })
}

/// Streams a piece to the sink line by line.
fn send_lines(sink: &dyn OutputSink, piece: &str) {
    for line in piece.split_inclusive('\n') {
        sink.chunk(line);
    }
}

fn format_duration(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{}s", d.as_secs()),
        _ => format!("{}ms", d.as_millis()),
    }
}

/// Reads `reader` and sends it on as pieces of whole lines (with their newlines), cutting
/// lines longer than [`MAX_PIECE_BYTES`] so memory stays bounded.
async fn forward_pieces<R: AsyncRead + Unpin>(reader: R, tx: mpsc::Sender<String>) {
    // A piece at most per read: each call in flight holds two of these buffers, and a
    // bigger one only meant fewer reads of a command that prints megabytes.
    let mut reader = BufReader::with_capacity(MAX_PIECE_BYTES, reader);
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => buf,
            _ => break,
        };
        let room = MAX_PIECE_BYTES.saturating_sub(pending.len()).max(1);
        let window = &buf[..buf.len().min(room)];
        // Everything up to the last newline: whole lines travel together, the sink still
        // gets them one by one.
        let (take, line_end) = match window.iter().rposition(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (window.len(), false),
        };
        pending.extend_from_slice(&window[..take]);
        reader.consume(take);
        if line_end || pending.len() >= MAX_PIECE_BYTES {
            let piece = take_text(&mut pending, line_end);
            if tx.send(piece).await.is_err() {
                return;
            }
        }
    }
    if !pending.is_empty() {
        let _ = tx
            .send(String::from_utf8_lossy(&pending).into_owned())
            .await;
    }
}

/// Takes the text out of `pending`; a piece cut mid-line keeps an incomplete UTF-8 sequence
/// at its end for the next piece.
fn take_text(pending: &mut Vec<u8>, line_end: bool) -> String {
    let split = match std::str::from_utf8(pending) {
        Err(e) if !line_end && e.error_len().is_none() => e.valid_up_to(),
        _ => pending.len(),
    };
    let rest = pending.split_off(split);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = rest;
    text
}

/// Output kept for the model: the first `max` bytes and a rolling tail of up to `max` bytes,
/// with the total counted, so a command printing gigabytes costs ~2×`max` of memory.
struct Collected {
    max: usize,
    head: String,
    tail: String,
    total: usize,
}

impl Collected {
    fn new(max: usize) -> Self {
        Self {
            max,
            head: String::new(),
            tail: String::new(),
            total: 0,
        }
    }

    fn push(&mut self, text: &str) {
        self.total += text.len();
        let mut rest = text;
        if self.tail.is_empty() && self.head.len() < self.max {
            let cut = floor_char_boundary(text, self.max - self.head.len());
            self.head.push_str(&text[..cut]);
            rest = &text[cut..];
        }
        self.tail.push_str(rest);
        if self.tail.len() > self.max {
            // Drop down to half so the copying is amortized over many pushes.
            let start = ceil_char_boundary(&self.tail, self.tail.len() - self.max / 2);
            self.tail.drain(..start);
        }
    }

    /// The kept output, cut like [`truncate_output`] with the true total in the note.
    fn finish(self) -> String {
        if self.head.len() + self.tail.len() == self.total {
            return truncate_output(&(self.head + &self.tail), self.max);
        }
        let keep = self.max.saturating_sub(120);
        let head_len = floor_char_boundary(&self.head, keep * 3 / 4);
        let tail_len = keep.saturating_sub(head_len);
        let tail_start = ceil_char_boundary(&self.tail, self.tail.len().saturating_sub(tail_len));
        let cut = self.total - head_len - (self.tail.len() - tail_start);
        format!(
            "{}\n[... {cut} bytes of output cut ({} bytes in all) ...]\n{}",
            &self.head[..head_len],
            self.total,
            &self.tail[tail_start..]
        )
    }
}

#[cfg(test)]
mod tests;
