//! The `man` tool: a manual page as plain text.
//!
//! Runs `man [section] page` 100 columns wide with `cat` as the pager, then strips the
//! overstrike (backspace) and ANSI formatting, as `col -b` would, in Rust.

use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput, truncate_output};
use crate::process::tree::{Containment, ProcessTree};

/// The `man` tool. Auto-approved: it reads the system's manual only. A page name can never
/// be a path (no `/`, so man-db does not open it as a file), which keeps it from reading
/// anything in or out of the working directory (see [`PathPolicy`](super::PathPolicy)).
#[derive(Debug, Default)]
pub(super) struct Man;

/// How long formatting a page may take.
const MAN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest page name accepted.
const MAX_PAGE_LEN: usize = 100;
/// man-db's exit status for "no manual entry".
const NOT_FOUND_STATUS: i32 = 16;

/// The arguments of `tools/man.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    page: String,
    section: Option<String>,
}

/// A validated request.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Request {
    page: String,
    section: Option<String>,
}

fn parse(args: &Args) -> Result<Request, ToolError> {
    let page = args.page.trim().to_owned();
    let valid_char = |c: char| c.is_ascii_alphanumeric() || "_.:+-".contains(c);
    if page.is_empty()
        || page.len() > MAX_PAGE_LEN
        || page.starts_with('-')
        || !page.chars().all(valid_char)
    {
        return Err(ToolError::model(format!(
            "`{page}` is not a man page name; give a name like `grep`, `printf` or \
             `pthread_create` (letters, digits and _ . : + -, not starting with -)"
        )));
    }
    let section = args
        .section
        .as_ref()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    if let Some(s) = &section {
        let mut chars = s.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == 'n' || c == 'l');
        if !first_ok || s.len() > 10 || !chars.all(|c| c.is_ascii_alphanumeric()) {
            return Err(ToolError::model(format!(
                "`{s}` is not a manual section; use a section like 1 (commands), 2 (system \
                 calls), 3 (library functions), 3p, 5 or 8, or leave it out"
            )));
        }
    }
    Ok(Request { page, section })
}

#[async_trait::async_trait]
impl Tool for Man {
    type Args = Args;
    type Call = Request;
    const USAGE: &'static str = "send {\"page\": \"<name>\"} and optionally \"section\"";

    fn name(&self) -> &'static str {
        "man"
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, Request), ToolError> {
        let request = parse(&args)?;
        let header = match &request.section {
            Some(s) => format!("man: {}({s})", request.page),
            None => format!("man: {}", request.page),
        };
        let prepared = Prepared {
            header,
            preview: String::new(),
            ask: false,
        };
        Ok((prepared, request))
    }

    async fn execute(
        &self,
        request: &Request,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        run_man("man", request, ctx).await
    }
}

/// Runs `program` (normally `man`) for `request`; a seam so tests can name a missing program.
async fn run_man(
    program: &str,
    request: &Request,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    // The tools' clean environment (no secrets of the bot), plus what man needs here.
    let mut command = ctx.child_env.command(program);
    command
        .args(request.section.iter())
        .arg(&request.page)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MAN_DISABLE_SECCOMP", "1")
        .env("GROFF_NO_SGR", "1")
        .current_dir(&ctx.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // man's pipeline (groff, the pager) is contained too: a timeout or cancel drops this
    // tree, which kills all of it.
    let mut tree = ProcessTree::prepare(&mut command, Containment::Auto);
    let child = command.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::model(
            "man is not installed on this machine; try `<command> --help` with bash instead",
        ),
        _ => ToolError::model(format!("cannot run man: {e}")),
    })?;
    tree.started(child.id());
    let output = tokio::select! {
        () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        () = tokio::time::sleep(MAN_TIMEOUT) => {
            return Err(ToolError::model(format!(
                "man took longer than {}s and was stopped",
                MAN_TIMEOUT.as_secs()
            )));
        }
        out = child.wait_with_output() => {
            out.map_err(|e| ToolError::model(format!("running man failed: {e}")))?
        }
    };
    tree.release();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let where_ = match &request.section {
        Some(s) => format!("{} in section {s}", request.page),
        None => request.page.clone(),
    };
    if output.status.code() == Some(NOT_FOUND_STATUS) || stderr.contains("No manual entry") {
        return Err(ToolError::model(format!(
            "no manual entry for {where_}; check the name, try another section or none, or run \
             `{} --help` with bash",
            request.page
        )));
    }
    if stdout.contains("has been minimized") {
        return Err(ToolError::model(
            "man pages are not installed on this machine (the system is minimized); try \
             `<command> --help` with bash instead",
        ));
    }
    if !output.status.success() || stdout.trim().is_empty() {
        let code = output
            .status
            .code()
            .map_or_else(|| "killed".to_owned(), |c| format!("exit code {c}"));
        return Err(ToolError::model(format!(
            "man {where_} failed ({code}): {}",
            stderr.trim()
        )));
    }
    let text = strip_formatting(&stdout);
    Ok(ToolOutput::text(truncate_output(
        &text,
        ctx.config.max_output_bytes,
    )))
}

/// Removes overstrike (`X\bX` bold, `_\bX` underline) and ANSI escape sequences, like
/// `col -b` plus an SGR filter.
fn strip_formatting(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{8}' => {
                if !out.ends_with('\n') {
                    out.pop();
                }
            }
            '\u{1b}' => {
                if chars.next_if_eq(&'[').is_some() {
                    // CSI: parameters and intermediates up to a final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{NoOutput, prepare_json, typed};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn request(page: &str, section: Option<&str>) -> Request {
        Request {
            page: page.into(),
            section: section.map(Into::into),
        }
    }

    fn man_installed() -> bool {
        std::process::Command::new("sh")
            .env_clear()
            .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
            .args(["-c", "command -v man"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    #[test]
    fn names_and_sections_are_validated() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let p = prepare_json(Man, json!({"page": "printf", "section": "3"}), &ctx).unwrap();
        assert_eq!(
            p.prepared,
            Prepared {
                header: "man: printf(3)".into(),
                preview: String::new(),
                ask: false,
            }
        );
        assert_eq!(
            parse(&typed(json!({"page": " std::vector ", "section": ""}))).unwrap(),
            request("std::vector", None)
        );
        for ok in ["ls", "git-commit", "Sys.stat", "g++", "x_y.1"] {
            assert!(parse(&typed(json!({"page": ok}))).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-k",
            "a b",
            "../etc/passwd",
            "/etc/shadow",
            "./sandpiper.toml",
            "ls;rm",
            "$(id)",
        ] {
            assert!(parse(&typed(json!({"page": bad}))).is_err(), "{bad:?}");
        }
        for ok in ["1", "3p", "8", "3ssl", "n"] {
            assert!(
                parse(&typed(json!({"page": "x", "section": ok}))).is_ok(),
                "{ok}"
            );
        }
        for bad in ["-1", "x", "3 p", "12345678901"] {
            assert!(
                parse(&typed(json!({"page": "x", "section": bad}))).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn formatting_is_stripped() {
        assert_eq!(strip_formatting("N\u{8}NA\u{8}AM\u{8}ME\u{8}E"), "NAME");
        assert_eq!(strip_formatting("_\u{8}f_\u{8}i_\u{8}l_\u{8}e"), "file");
        assert_eq!(
            strip_formatting("\u{1b}[1mbold\u{1b}[0m and \u{1b}[4mul\u{1b}[24m"),
            "bold and ul"
        );
        assert_eq!(strip_formatting("\n\u{8}x"), "\nx");
    }

    #[tokio::test]
    async fn a_missing_man_program_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let err = run_man("sandpiper-no-such-man-program", &request("ls", None), &ctx)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::Model(m) if m.starts_with("man is not installed on this machine")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn real_pages_or_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let prepared = prepare_json(Man, json!({"page": "ls"}), &ctx).unwrap();
        let result = prepared.execute(&ctx, &NoOutput).await;
        if !man_installed() {
            let err = result.unwrap_err().to_string();
            assert!(
                err.starts_with("man is not installed on this machine"),
                "{err}"
            );
            return;
        }
        match result {
            Ok(out) => {
                assert!(out.text.contains("NAME"), "{}", out.text);
                assert!(!out.text.contains('\u{8}') && !out.text.contains('\u{1b}'));
                assert!(
                    out.text.lines().all(|l| l.chars().count() <= 110),
                    "MANWIDTH ignored"
                );
            }
            // man is there but its pages may not be (minimized images).
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.starts_with("no manual entry for ls")
                        || e.starts_with("man pages are not installed"),
                    "{e}"
                );
            }
        }
        let missing = request("sandpiper-no-such-page", Some("3"));
        let err = run_man("man", &missing, &ctx)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("no manual entry for sandpiper-no-such-page in section 3")
                || err.starts_with("man pages are not installed"),
            "{err}"
        );
    }
}
