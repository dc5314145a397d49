//! The `edit_file` tool: replaces one exact occurrence of a string in a file that was read
//! first, showing a small diff for approval.
//!
//! `prepare` finds the match (so a bad edit fails before anyone is asked to approve it) and
//! builds the diff; `execute` reads the file again and repeats the search, because the file
//! may have changed while the call waited for approval, then writes atomically.

use std::borrow::Cow;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde::Deserialize;

use super::write_file::write_atomically;
use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `edit_file` tool. Needs approval; refuses files not read in this workstream.
#[derive(Debug, Default)]
pub(super) struct EditFile;

/// Changed lines shown per side in the preview.
const PREVIEW_LINES: usize = 30;
/// Match line numbers listed in an "ambiguous" error.
const LISTED_MATCHES: usize = 20;

/// The arguments of `tools/edit_file.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    path: String,
    old_string: String,
    new_string: String,
    near_line: Option<i64>,
}

fn check(args: &Args) -> Result<(), ToolError> {
    if args.path.trim().is_empty() {
        return Err(ToolError::model("`path` is empty; give the file to edit"));
    }
    if args.old_string.is_empty() {
        return Err(ToolError::model(
            "old_string is empty; give the exact text to replace (to write a whole file, use \
             write_file)",
        ));
    }
    if args.old_string == args.new_string {
        return Err(ToolError::model(
            "old_string and new_string are the same, so nothing would change",
        ));
    }
    if args.near_line.is_some_and(|n| n < 1) {
        return Err(ToolError::model(
            "near_line is a line number; lines count from 1",
        ));
    }
    Ok(())
}

/// One planned replacement.
#[derive(Debug, Clone, PartialEq)]
struct Edit {
    /// The whole file after the edit.
    content: String,
    /// First and last line of the replaced text (1-based).
    lines: (usize, usize),
    /// The unified-style diff.
    diff: String,
}

#[async_trait::async_trait]
impl Tool for EditFile {
    type Args = Args;
    type Call = Args;
    const USAGE: &'static str = "send path, old_string and new_string as strings and optionally \
                                 near_line as an integer";

    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn prepare(&self, parsed: Args, ctx: &ToolContext) -> Result<(Prepared, Args), ToolError> {
        check(&parsed)?;
        // sandpiper's own config and database are off limits, approved or not.
        ctx.check_path(&parsed.path)?;
        let path = ctx.resolve(&parsed.path);
        check_was_read(ctx, &path, &parsed.path)?;
        // prepare is synchronous; one read of the file the model is editing is acceptable.
        let content = std::fs::read_to_string(&path).map_err(|e| read_error(&parsed.path, e))?;
        let edit = plan(&content, &parsed)?;
        let prepared = Prepared {
            header: format!(
                "edit_file: {} ({})",
                parsed.path,
                line_range("line", edit.lines)
            ),
            preview: edit.diff,
            ask: false,
        };
        Ok((prepared, parsed))
    }

    async fn execute(
        &self,
        args: &Args,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        // Again: a link may have been pointed at a protected file while the call waited.
        ctx.check_path(&args.path)?;
        let path = ctx.resolve(&args.path);
        check_was_read(ctx, &path, &args.path)?;
        let content = tokio::fs::read_to_string(&path)
            .await
            .map_err(|e| read_error(&args.path, e))?;
        let edit = plan(&content, args)?;
        write_atomically(&path, edit.content.into_bytes())
            .await
            .map_err(|e| ToolError::model(format!("cannot write {}: {e}", args.path)))?;
        Ok(ToolOutput::text(format!(
            "edited {}: replaced lines {}-{}",
            args.path, edit.lines.0, edit.lines.1
        )))
    }
}

fn check_was_read(ctx: &ToolContext, path: &Path, shown: &str) -> Result<(), ToolError> {
    match ctx.files_read.contains(path) {
        true => Ok(()),
        false => Err(ToolError::model(format!(
            "{shown} has not been read in this workstream; read it with read_file first, then \
             edit it"
        ))),
    }
}

fn read_error(shown: &str, e: std::io::Error) -> ToolError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::model(format!(
            "no such file: {shown}; to create a file, use write_file"
        )),
        std::io::ErrorKind::InvalidData => ToolError::model(format!(
            "{shown} is not UTF-8 text; edit_file edits text files only"
        )),
        _ => ToolError::model(format!("cannot read {shown}: {e}")),
    }
}

fn line_range(word: &str, (a, b): (usize, usize)) -> String {
    match a == b {
        true => format!("{word} {a}"),
        false => format!("{word}s {a}-{b}"),
    }
}

/// Finds the one match `args` mean in `content` and builds the edited file and its diff.
fn plan(content: &str, args: &Args) -> Result<Edit, ToolError> {
    let (mut old, mut new) = (Cow::from(&args.old_string), Cow::from(&args.new_string));
    let mut starts: Vec<usize> = content
        .match_indices(old.as_ref())
        .map(|(i, _)| i)
        .collect();
    if starts.is_empty() && content.contains("\r\n") && old.contains('\n') && !old.contains('\r') {
        // The model sends LF; the file has CRLF. Match and write in the file's convention.
        let crlf = old.replace('\n', "\r\n");
        starts = content.match_indices(&crlf).map(|(i, _)| i).collect();
        if !starts.is_empty() {
            old = Cow::Owned(crlf);
            new = Cow::Owned(new.replace("\r\n", "\n").replace('\n', "\r\n"));
        }
    }
    let start = pick(content, &starts, args)?;
    let end = start + old.len();
    let mut edited = String::with_capacity(content.len() + new.len());
    edited.push_str(&content[..start]);
    edited.push_str(&new);
    edited.push_str(&content[end..]);

    let first = line_of(content, start);
    let last = first + old.trim_end_matches('\n').matches('\n').count();
    // Whole lines around the match; the text after it is the same in both versions, so both
    // regions end at the same distance from the end of the file.
    let region_start = content[..start].rfind('\n').map_or(0, |i| i + 1);
    let old_region = &content[region_start..line_end(content, end)];
    let new_region = &edited[region_start..line_end(&edited, start + new.len())];
    Ok(Edit {
        diff: diff(first, &split_lines(old_region), &split_lines(new_region)),
        content: edited,
        lines: (first, last),
    })
}

/// The position of the newline ending the line that byte `at` is in (or the end of `text`).
fn line_end(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |i| at + i)
}

fn split_lines(region: &str) -> Vec<&str> {
    region
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// 1-based line number of byte `at`.
fn line_of(content: &str, at: usize) -> usize {
    1 + content.as_bytes()[..at]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// Chooses among the match positions: the only one, or the one nearest `near_line`.
fn pick(content: &str, starts: &[usize], args: &Args) -> Result<usize, ToolError> {
    let shown = &args.path;
    match starts {
        [] => Err(not_found(content, &args.old_string, shown)),
        [only] => Ok(*only),
        _ => {
            let lines: Vec<usize> = starts.iter().map(|&s| line_of(content, s)).collect();
            let mut listed: Vec<String> = lines
                .iter()
                .take(LISTED_MATCHES)
                .map(usize::to_string)
                .collect();
            if lines.len() > LISTED_MATCHES {
                listed.push("…".into());
            }
            let listed = listed.join(", ");
            let Some(near) = args.near_line.and_then(|n| usize::try_from(n).ok()) else {
                return Err(ToolError::model(format!(
                    "old_string matches {} places in {shown} (lines {listed}); include more of \
                     the surrounding text to make it unique, or give near_line to pick one",
                    starts.len()
                )));
            };
            let best = lines.iter().map(|l| l.abs_diff(near)).min().unwrap_or(0);
            let nearest: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].abs_diff(near) == best)
                .collect();
            match nearest.as_slice() {
                [i] => Ok(starts[*i]),
                _ => Err(ToolError::model(format!(
                    "old_string matches {shown} at lines {listed}, and more than one is equally \
                     near line {near}; give a near_line closer to the one you mean"
                ))),
            }
        }
    }
}

fn not_found(content: &str, old: &str, shown: &str) -> ToolError {
    static NUMBERED: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?m)^\s*\d+\t").ok());
    let trimmed = old.trim();
    let hint = if NUMBERED
        .as_ref()
        .is_some_and(|re| old.lines().all(|l| re.is_match(l)))
    {
        " It seems to include the line numbers read_file shows; leave them out.".to_owned()
    } else if let Some(at) = (!trimmed.is_empty() && trimmed != old)
        .then(|| content.find(trimmed))
        .flatten()
    {
        format!(
            " It matches at line {} when leading/trailing whitespace is ignored; copy the exact \
             text, including indentation and newlines.",
            line_of(content, at)
        )
    } else if let Some(line) = match_ignoring_indentation(content, old) {
        format!(
            " It matches at line {line} when indentation is ignored; copy the exact indentation."
        )
    } else {
        String::new()
    };
    ToolError::model(format!(
        "old_string was not found in {shown}.{hint} Copy the text exactly from read_file output \
         (read the file again if it may have changed)."
    ))
}

/// The line where `old`'s lines match consecutive lines of `content` with each line trimmed.
fn match_ignoring_indentation(content: &str, old: &str) -> Option<usize> {
    let wanted: Vec<&str> = old.trim_matches('\n').lines().map(str::trim).collect();
    if wanted.iter().all(|l| l.is_empty()) {
        return None;
    }
    let lines: Vec<&str> = content.lines().map(str::trim).collect();
    lines
        .windows(wanted.len())
        .position(|w| w == wanted.as_slice())
        .map(|i| i + 1)
}

/// A unified-style diff of a replaced region starting at line `first`: unchanged lines at
/// either end as context, changed lines as `-`/`+` with their line numbers.
fn diff(first: usize, old: &[&str], new: &[&str]) -> String {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = String::new();
    for (i, line) in old[..prefix].iter().enumerate() {
        diff_line(&mut out, ' ', first + i, line);
    }
    for (lines, sign) in [(old, '-'), (new, '+')] {
        let changed = &lines[prefix..lines.len() - suffix];
        for (i, line) in changed.iter().take(PREVIEW_LINES).enumerate() {
            diff_line(&mut out, sign, first + prefix + i, line);
        }
        if changed.len() > PREVIEW_LINES {
            let more = changed.len() - PREVIEW_LINES;
            out.push_str(&format!("{sign}      [... {more} more lines]\n"));
        }
    }
    let after = first + new.len() - suffix;
    for (i, line) in old[old.len() - suffix..].iter().enumerate() {
        diff_line(&mut out, ' ', after + i, line);
    }
    out
}

fn diff_line(out: &mut String, sign: char, number: usize, text: &str) {
    out.push_str(&format!("{sign}{number:>5} {text}\n"));
}

#[cfg(test)]
mod tests;
