//! The `math` tool: Python for computation, in a sandbox ([`sandbox`]): no network, its own
//! PID namespace, CPU-time, memory and file-size limits, a wall-clock timeout, a fresh
//! temporary directory and a clean environment. Output is what the code prints (stdout and
//! stderr in order), capped. Needs approval although sandboxed, as the reference says: the
//! sandbox does not hide the file system.

mod sandbox;

#[cfg(test)]
mod tests;

use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput, truncate_output};

/// The `math` tool.
#[derive(Debug, Default)]
pub(super) struct Math;

/// Characters of the code shown in the header.
const HEADER_CHARS: usize = 80;
/// Longest code accepted.
const MAX_CODE_BYTES: usize = 256 * 1024;
/// `SIGXCPU`: the CPU-time soft limit was reached.
const SIGXCPU: i32 = 24;
/// `SIGKILL`: a hard limit was reached (or the kernel's OOM killer).
const SIGKILL: i32 = 9;

/// The arguments of `tools/math.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    code: String,
}

fn parse(args: &Args) -> Result<&str, ToolError> {
    if args.code.trim().is_empty() {
        return Err(ToolError::model(
            "`code` is empty; send Python code that prints its results",
        ));
    }
    if args.code.len() > MAX_CODE_BYTES {
        return Err(ToolError::model(format!(
            "`code` is {} bytes; keep it under {MAX_CODE_BYTES}",
            args.code.len()
        )));
    }
    Ok(&args.code)
}

#[async_trait::async_trait]
impl Tool for Math {
    type Args = Args;
    type Call = Args;
    const USAGE: &'static str = "send {\"code\": \"print(2**100)\"}";

    fn name(&self) -> &'static str {
        "math"
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, Args), ToolError> {
        let code = parse(&args)?;
        let first = code.trim().lines().next().unwrap_or_default();
        let mut header: String = first.chars().take(HEADER_CHARS).collect();
        if header.len() < code.trim().len() {
            header.push('…');
        }
        let prepared = Prepared {
            header: format!("math: {header}"),
            preview: code.to_owned(),
            ask: false,
        };
        Ok((prepared, args))
    }

    async fn execute(
        &self,
        args: &Args,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let isolation = sandbox::isolation(&ctx.child_env).await;
        run(&args.code, isolation, ctx).await
    }
}

/// How the run ended.
enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut,
    OutputLimit,
}

async fn run(
    code: &str,
    isolation: sandbox::Isolation,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let config = &ctx.services.math;
    let dir = tempfile::Builder::new()
        .prefix("sandpiper-math-")
        .tempdir()
        .map_err(|e| {
            ToolError::model(format!("math cannot create its temporary directory: {e}"))
        })?;
    let main_py = dir.path().join("main.py");
    let written = std::fs::write(&main_py, sandbox::MAIN_PY)
        .and_then(|()| std::fs::write(dir.path().join("code.py"), code));
    written.map_err(|e| ToolError::model(format!("math cannot write its script: {e}")))?;
    let argv = sandbox::command_line(isolation, config, &main_py)
        .map_err(|e| ToolError::model(e.to_string()))?;
    let Some((program, rest)) = argv.split_first() else {
        return Err(ToolError::model("math has no sandbox command"));
    };
    // The clean tool environment (allow-list, `[tools] env`, `pass_env`), as bash gets it.
    let mut child = ctx
        .child_env
        .command_as(program, crate::process::confine::Profile::Math)
        .args(rest)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::model(format!("math cannot start the sandbox: {e}")))?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| ToolError::model("math lost the sandbox's output"))?;
    let cap = ctx.config.max_output_bytes;
    let mut output = Vec::new();
    let read_all = async {
        let mut buf = [0u8; 8192];
        loop {
            match stdout.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    output.extend_from_slice(&buf[..n]);
                    if output.len() > cap {
                        return true;
                    }
                }
            }
        }
    };
    let ending = tokio::select! {
        () = ctx.cancel.cancelled() => {
            let _ = child.kill().await;
            return Err(ToolError::Cancelled);
        }
        () = tokio::time::sleep(config.timeout) => Ending::TimedOut,
        over = read_all => match over {
            true => Ending::OutputLimit,
            false => match child.wait().await {
                Ok(status) => Ending::Exited(status),
                Err(e) => return Err(ToolError::model(format!("math lost the sandbox: {e}"))),
            },
        },
    };
    if !matches!(ending, Ending::Exited(_)) {
        // Killing `unshare` kills the namespace's init and with it everything inside.
        let _ = child.kill().await;
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ =
            tokio::time::timeout(Duration::from_secs(1), pipe.read_to_string(&mut stderr)).await;
    }
    let text = String::from_utf8_lossy(&output).into_owned();
    Ok(report(text, stderr.trim(), &ending, config, cap))
}

/// The model's view of a run: the output, then a note when it did not end normally.
fn report(
    text: String,
    stderr: &str,
    ending: &Ending,
    config: &crate::config::MathConfig,
    cap: usize,
) -> ToolOutput {
    let mut text = truncate_output(&text, cap);
    let note = match ending {
        Ending::TimedOut => Some(format!(
            "[stopped: the run took longer than {}s (wall clock) and the sandbox was killed]",
            config.timeout.as_secs()
        )),
        Ending::OutputLimit => Some(format!(
            "[stopped: the output passed {cap} bytes and the sandbox was killed]"
        )),
        Ending::Exited(status) => match status.code() {
            Some(0) => None,
            Some(code) if code == 128 + SIGXCPU => Some(format!(
                "[stopped: the CPU time limit of {}s was reached]",
                config.cpu_seconds
            )),
            Some(code) if code == 128 + SIGKILL => Some(format!(
                "[killed: a resource limit was reached (CPU time {}s or memory {} MiB)]",
                config.cpu_seconds, config.memory_mb
            )),
            Some(code) => Some(format!("[exit code {code}]")),
            None => Some("[the sandbox was killed by a signal]".to_owned()),
        },
    };
    if !stderr.is_empty() {
        text.push_str(&format!("\n[sandbox] {stderr}"));
    }
    let is_error = note.is_some();
    if let Some(note) = note {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&note);
    } else if text.trim().is_empty() {
        text = "(no output; use print() to show results)".to_owned();
    }
    ToolOutput {
        text,
        images: Vec::new(),
        is_error,
    }
}
