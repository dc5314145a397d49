//! Log lines that a request cannot forge. Fields logged from what a client sent (a path, an
//! error quoting a JWT header, a Slack payload) may hold a newline; written as they are, the
//! text after it reads as a log line of its own (`… INFO admin granted`). tracing-subscriber
//! escapes ANSI sequences but not line breaks, so the text format's fields go through
//! [`escape_controls`]: line breaks, other control characters, and the Unicode line separators
//! and bidi overrides are spelled out (`\n`, `\u{2028}`). One event stays one line. (The JSON
//! format escapes them by itself.)

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};

/// `DefaultFields` with [`escape_controls`] applied to what it writes.
#[derive(Debug, Default)]
pub struct EscapedFields {
    inner: DefaultFields,
}

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut raw = String::new();
        self.inner.format_fields(Writer::new(&mut raw), fields)?;
        writer.write_str(&escape_controls(&raw))
    }
}

/// Whether `c` would break a line, or hide or reorder text, in a log viewer.
fn needs_escape(c: char) -> bool {
    c.is_control() || sandpiper_channels::visible::acts_unseen(c)
}

/// `text` with line breaks (`\n`, `\r`, `\t`) and other control, line-separator and bidi
/// characters spelled out; borrowed when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn line_breaks_and_invisible_controls_are_spelled_out() {
        for (raw, shown) in [
            ("plain text, ünïcode ✓", "plain text, ünïcode ✓"),
            ("a\nb", "a\\nb"),
            ("a\r\nb\tc", "a\\r\\nb\\tc"),
            ("nul\0bel\x07", "nul\\u{0}bel\\u{7}"),
            ("esc\x1b[31m", "esc\\u{1b}[31m"),
            ("nel\u{85}", "nel\\u{85}"),
            ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"),
            ("rlo\u{202e}gnp.exe", "rlo\\u{202e}gnp.exe"),
            ("back\\slash", "back\\slash"),
        ] {
            assert_eq!(escape_controls(raw), shown, "{raw:?}");
        }
        assert!(matches!(escape_controls("clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn an_event_with_a_forged_line_in_a_field_stays_one_line() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(EscapedFields::default())
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let path = "/x\n2026-01-01T00:00:00Z  INFO sandpiper: forged";
            let span = tracing::info_span!("request", path = %path);
            let _entered = span.enter();
            tracing::info!(error = %path, "refused {path}");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("/x\\n2026-01-01T00:00:00Z"), "{text}");
    }
}
