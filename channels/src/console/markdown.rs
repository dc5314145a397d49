//! The model's text for a terminal. Everything is escaped first ([`escape_invisible`]: an
//! `ESC[31m`, a BEL or a U+202E in an answer shows as text and steers nothing), exactly as
//! tool output and approval prompts are. Where stdout is a terminal, Markdown is then drawn
//! with the terminal's own attributes — headings and `**bold**` bold, `` `code` `` and code
//! blocks in colour, list markers as bullets — line by line as the answer streams; where it
//! is not (a pipe, a file), the text stays as the model wrote it.

use crate::visible::escape_invisible;

const BOLD: &str = "\x1b[1m";
const NOT_BOLD: &str = "\x1b[22m";
const DIM: &str = "\x1b[2m";
const CODE: &str = "\x1b[36m";
const NOT_CODE: &str = "\x1b[39m";

/// Streams one answer's text to the terminal.
#[derive(Debug, Default)]
pub(super) struct Markdown {
    /// Draw Markdown (stdout is a terminal); else only escape.
    styled: bool,
    /// The line not finished yet (styled only: a line is drawn when it is whole).
    partial: String,
    /// Inside a ``` block.
    in_code: bool,
}

impl Markdown {
    /// A renderer that draws Markdown when `styled`.
    pub(super) fn new(styled: bool) -> Self {
        Self {
            styled,
            ..Self::default()
        }
    }

    /// What to print for the next piece of the answer.
    pub(super) fn push(&mut self, delta: &str) -> String {
        if !self.styled {
            return escape_invisible(delta).into_owned();
        }
        self.partial.push_str(delta);
        let Some(end) = self.partial.rfind('\n') else {
            return String::new();
        };
        let whole: String = self.partial.drain(..=end).collect();
        let mut out = String::with_capacity(whole.len() + 16);
        for line in whole.split_inclusive('\n') {
            out.push_str(&self.line(line.trim_end_matches('\n')));
            out.push('\n');
        }
        out
    }

    /// The unfinished line, before something else is printed (a tool call, the turn's end).
    pub(super) fn flush(&mut self) -> String {
        if self.partial.is_empty() {
            return String::new();
        }
        let rest = std::mem::take(&mut self.partial);
        self.line(&rest)
    }

    /// The end of an answer: an open code block does not colour the next one.
    pub(super) fn finish(&mut self) -> String {
        let out = self.flush();
        self.in_code = false;
        out
    }

    fn line(&mut self, raw: &str) -> String {
        let text = escape_invisible(raw);
        let trimmed = text.trim_start();
        if trimmed.starts_with("```") {
            self.in_code = !self.in_code;
            return format!("{DIM}{text}{NOT_BOLD}");
        }
        if self.in_code {
            return format!("{CODE}{text}{NOT_CODE}");
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            return format!("{BOLD}{}{NOT_BOLD}", inline(trimmed[hashes..].trim_start()));
        }
        let indent = &text[..text.len() - trimmed.len()];
        for marker in ["- ", "* ", "+ "] {
            if let Some(item) = trimmed.strip_prefix(marker) {
                return format!("{indent}• {}", inline(item));
            }
        }
        if let Some(quote) = trimmed.strip_prefix('>') {
            return format!("{indent}{DIM}│{}{NOT_BOLD}", inline(quote));
        }
        inline(&text)
    }
}

/// `**bold**` and `` `code` `` within a line; an unmatched marker stays as typed.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(at) = rest.find(['`', '*']) {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if let Some(code) = after.strip_prefix('`')
            && let Some(end) = code.find('`')
            && end > 0
        {
            out.push_str(&format!("{CODE}{}{NOT_CODE}", &code[..end]));
            rest = &code[end + 1..];
        } else if let Some(bold) = after.strip_prefix("**")
            && let Some(end) = bold.find("**")
            && end > 0
        {
            out.push_str(&format!("{BOLD}{}{NOT_BOLD}", &bold[..end]));
            rest = &bold[end + 2..];
        } else {
            let marker = if after.starts_with("**") { 2 } else { 1 };
            out.push_str(&after[..marker]);
            rest = &after[marker..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn plain_output_is_escaped_and_streams_as_it_comes() {
        let mut md = Markdown::new(false);
        assert_eq!(md.push("**red** \x1b[31mtext"), "**red** \\x1b[31mtext");
        assert_eq!(md.push(" \u{202e}gnp.exe\x07"), " \\u202egnp.exe\\x07");
        assert_eq!(md.finish(), "");
    }

    #[test]
    fn a_terminal_gets_markdown_drawn_line_by_line() {
        let mut md = Markdown::new(true);
        assert_eq!(md.push("# Fix"), "");
        assert_eq!(
            md.push("es\nThe **build** fails in `mai"),
            "\x1b[1mFixes\x1b[22m\n"
        );
        assert_eq!(
            md.push("n.rs`:\n- one\n  * two\n"),
            "The \x1b[1mbuild\x1b[22m fails in \x1b[36mmain.rs\x1b[39m:\n• one\n  • two\n"
        );
        assert_eq!(
            md.push("```rust\nlet x = *p * 2;\n```\n"),
            "\x1b[2m```rust\x1b[22m\n\x1b[36mlet x = *p * 2;\x1b[39m\n\x1b[2m```\x1b[22m\n"
        );
        assert_eq!(md.push("a * b and 2**3"), "");
        assert_eq!(md.finish(), "a * b and 2**3");
    }

    #[test]
    fn the_models_own_escapes_never_reach_a_terminal() {
        let mut md = Markdown::new(true);
        let out = md.push("**\x1b[2J** `\x1b]0;title\x07`\n");
        assert_eq!(
            out,
            "\x1b[1m\\x1b[2J\x1b[22m \x1b[36m\\x1b]0;title\\x07\x1b[39m\n"
        );
    }
}
