//! The end of a tool's streamed output, in bounded memory.
//!
//! A platform shows a few lines under a running tool, so that is all the renderer keeps:
//! the last [`TAIL_BYTES`] of the stream plus counts of everything that went by. A command
//! printing 100 MB costs a few KiB here, and the line can still say how much scrolled off.
//! The model's view of the output is cut separately by the tool itself.

use crate::visible::thousands;

/// Bytes of streamed output kept per call (and per queued batch of chunks).
pub const TAIL_BYTES: usize = 8 * 1024;
/// Most bytes of output shown under a running tool: the note of what is above them must fit
/// in one platform message with the header (Discord: 2,000 characters).
const SHOWN_BYTES: usize = 1200;

/// The last [`TAIL_BYTES`] of a stream, and how much passed through.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OutputTail {
    /// At most 2×[`TAIL_BYTES`]; trimmed back to [`TAIL_BYTES`] when it grows past that, so
    /// the copying is amortised over many chunks.
    text: String,
    /// Bytes seen in all.
    bytes: u64,
    /// Newlines seen in all.
    newlines: u64,
}

impl OutputTail {
    /// Takes in one chunk of output.
    pub fn push(&mut self, chunk: &str) {
        self.bytes += chunk.len() as u64;
        self.newlines += bytecount(chunk);
        self.keep(chunk);
    }

    /// Takes in a tail that was gathered separately (later output of the same call).
    pub fn append(&mut self, later: OutputTail) {
        self.bytes += later.bytes;
        self.newlines += later.newlines;
        self.keep(&later.text);
    }

    /// Bytes seen in all.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes held in memory (at most 2×[`TAIL_BYTES`]).
    pub fn held(&self) -> usize {
        self.text.len()
    }

    fn keep(&mut self, text: &str) {
        if text.len() >= TAIL_BYTES {
            self.text.clear();
            let start = text.ceil_char_boundary(text.len() - TAIL_BYTES);
            self.text.push_str(&text[start..]);
            return;
        }
        self.text.push_str(text);
        if self.text.len() > 2 * TAIL_BYTES {
            let start = self.text.ceil_char_boundary(self.text.len() - TAIL_BYTES);
            self.text.drain(..start);
        }
    }

    /// The last `lines` lines (at most [`SHOWN_BYTES`]), after a note of what came before
    /// them: `… 1,204 earlier lines (99,876,543 bytes) not shown`.
    pub fn shown(&self, lines: usize) -> String {
        let body = self.text.trim_end();
        let mut start = body.len();
        for _ in 0..lines {
            match body[..start].rfind('\n') {
                Some(i) => start = i,
                None => {
                    start = 0;
                    break;
                }
            }
        }
        if body.as_bytes().get(start) == Some(&b'\n') {
            start += 1;
        }
        start = start.max(body.ceil_char_boundary(body.len().saturating_sub(SHOWN_BYTES)));
        let shown = &body[start..];
        let hidden_bytes = self.bytes - (self.text.len() - start) as u64;
        if hidden_bytes == 0 {
            return shown.to_owned();
        }
        let hidden_lines = self.newlines - bytecount(&self.text[start..]);
        let note = match hidden_lines {
            0 => format!("… {} earlier bytes not shown", thousands(hidden_bytes)),
            n => format!(
                "… {} earlier line{} ({} bytes) not shown",
                thousands(n),
                if n == 1 { "" } else { "s" },
                thousands(hidden_bytes)
            ),
        };
        format!("{note}\n{shown}")
    }
}

/// Newlines in `text`.
fn bytecount(text: &str) -> u64 {
    text.bytes().filter(|&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn short_output_is_shown_whole() {
        let mut tail = OutputTail::default();
        tail.push("a\n");
        tail.push("b\n");
        assert_eq!(tail.shown(8), "a\nb");
    }

    #[test]
    fn the_last_lines_come_after_a_note_of_what_scrolled_off() {
        let mut tail = OutputTail::default();
        for i in 1..=100 {
            tail.push(&format!("{i}\n"));
        }
        let hidden: usize = (1..=97).map(|i| format!("{i}\n").len()).sum();
        assert_eq!(
            tail.shown(3),
            format!("… 97 earlier lines ({hidden} bytes) not shown\n98\n99\n100")
        );
    }

    #[test]
    fn a_hundred_megabytes_without_newlines_is_held_in_a_few_kib() {
        let mut tail = OutputTail::default();
        let piece = "x".repeat(16 * 1024);
        for _ in 0..6400 {
            tail.push(&piece);
        }
        assert!(tail.held() <= 2 * TAIL_BYTES, "{}", tail.held());
        assert_eq!(tail.bytes(), 104_857_600);
        assert_eq!(
            tail.shown(8),
            format!(
                "… 104,856,400 earlier bytes not shown\n{}",
                "x".repeat(SHOWN_BYTES)
            )
        );
    }

    #[test]
    fn appending_a_separately_gathered_tail_adds_its_counts() {
        let mut first = OutputTail::default();
        first.push("one\ntwo\n");
        let mut later = OutputTail::default();
        later.push("three\n");
        later.push(&"é".repeat(TAIL_BYTES));
        first.append(later);
        assert_eq!(first.bytes(), 8 + 6 + 2 * TAIL_BYTES as u64);
        assert!(first.held() <= TAIL_BYTES);
        assert!(first.shown(1).starts_with("… 3 earlier lines ("));
    }
}
