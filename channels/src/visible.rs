//! What an approver sees is what runs: model-written text shown on approval cards, tool lines
//! and console prompts passes through here first.
//!
//! A terminal obeys escape sequences and every platform obeys bidi overrides, so a command
//! like `rm -rf ~ \x1b[2K\recho hello` or one with U+202E in it could show the approver
//! something other than what runs. [`escape_invisible`] spells such characters out
//! (`\x1b`, `\u202e`); [`cut`] shortens a preview and says how much it hid, so a long
//! command cannot push its dangerous part out of sight unnoticed.

use std::borrow::Cow;
use std::fmt::Write;

/// How `c` is shown when it must not act on the display: `\xNN` for ASCII controls and DEL,
/// `\uNNNN` for C1 controls and invisible formatting characters; `None` when shown as is.
/// Newline and tab stay (previews are multi-line).
fn escaped(c: char) -> Option<String> {
    let code = u32::from(c);
    match c {
        '\n' | '\t' => None,
        '\0'..='\x1f' | '\x7f' => Some(format!("\\x{code:02x}")),
        '\u{80}'..='\u{9f}' => Some(format!("\\u{code:04x}")),
        c if acts_unseen(c) => Some(format!("\\u{code:04x}")),
        _ => None,
    }
}

/// Whether `c` is a formatting character that changes what is seen without being seen:
/// bidi embeddings, overrides, isolates and marks, zero-width characters and the byte order
/// mark, and the line and paragraph separators (which break lines where no newline is seen).
/// The one list every place that shows untrusted text uses (previews here, log lines in the
/// binary).
pub fn acts_unseen(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{061c}'
            | '\u{200b}'..='\u{200d}'
            | '\u{2060}'
            | '\u{feff}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// `text` with control characters (C0 except newline and tab, DEL, C1) and bidi or
/// zero-width formatting characters written out as `\x1b` / `\u202e`, so they show instead
/// of acting. Borrowed when nothing needed escaping.
pub fn escape_invisible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| escaped(c).is_some()) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match escaped(c) {
            Some(e) => out.push_str(&e),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `n` with thousands separators (`3,120`).
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// The note under a cut preview: `… 42 more lines (3,120 bytes) not shown`.
pub fn hidden_note(lines: usize, bytes: usize) -> String {
    let plural = if lines == 1 { "" } else { "s" };
    format!(
        "… {} more line{plural} ({} bytes) not shown",
        thousands(lines as u64),
        thousands(bytes as u64)
    )
}

/// At most `max_lines` lines and `max_chars` characters of `text` as they will be shown
/// (escaped, see [`escape_invisible`]), followed by a note of how many lines and bytes of
/// the original were left out. Counts refer to the original text, so the approver learns
/// how much of the real call they did not see.
pub fn cut(text: &str, max_lines: usize, max_chars: usize) -> String {
    let text = text.trim_end();
    let mut shown = String::new();
    let mut chars = 0usize;
    let mut consumed = 0usize;
    'lines: for line in text.split_inclusive('\n').take(max_lines) {
        for c in line.chars() {
            let piece = match escaped(c) {
                Some(e) => e,
                None => c.to_string(),
            };
            let width = piece.chars().count();
            if chars + width > max_chars {
                break 'lines;
            }
            chars += width;
            shown.push_str(&piece);
            consumed += c.len_utf8();
        }
    }
    let hidden = &text[consumed..];
    if hidden.is_empty() {
        return shown;
    }
    if !shown.is_empty() && !shown.ends_with('\n') {
        shown.push('\n');
    }
    let _ = write!(
        shown,
        "{}",
        hidden_note(hidden.lines().count().max(1), hidden.len())
    );
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn controls_and_bidi_overrides_are_spelled_out() {
        assert_eq!(
            escape_invisible("rm -rf ~ \x1b[2K\recho hi"),
            "rm -rf ~ \\x1b[2K\\x0decho hi"
        );
        assert_eq!(
            escape_invisible("echo \u{202e}txt.exe\u{202c}"),
            "echo \\u202etxt.exe\\u202c"
        );
        assert_eq!(
            escape_invisible("a\u{200b}b\u{feff}c\u{2066}d\u{061c}e\u{7f}f\u{85}g\0"),
            "a\\u200bb\\ufeffc\\u2066d\\u061ce\\x7ff\\u0085g\\x00"
        );
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        let text = "ls -la\n\tcat 'naïve – 日本'\n";
        assert!(matches!(escape_invisible(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn a_short_preview_is_shown_whole() {
        assert_eq!(cut("echo hi\nls\n", 10, 100), "echo hi\nls");
    }

    #[test]
    fn a_cut_by_lines_says_how_many_lines_and_bytes_are_hidden() {
        let text: String = (0..50).map(|i| format!("line {i}\n")).collect();
        let hidden_bytes: usize = (8..50).map(|i| format!("line {i}\n").len()).sum();
        assert_eq!(
            cut(&text, 8, 10_000),
            format!(
                "line 0\nline 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\n\
                 … 42 more lines ({} bytes) not shown",
                hidden_bytes - 1
            )
        );
    }

    #[test]
    fn a_cut_by_characters_counts_the_escapes_it_shows_and_the_bytes_it_hides() {
        assert_eq!(
            cut("ab\x1bcdef", 5, 6),
            "ab\\x1b\n… 1 more line (4 bytes) not shown"
        );
        assert_eq!(
            cut(&"x".repeat(5000), 10, 900),
            format!("{}\n… 1 more line (4,100 bytes) not shown", "x".repeat(900))
        );
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(3120), "3,120");
        assert_eq!(thousands(100_000_000), "100,000,000");
    }
}
