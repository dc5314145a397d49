//! What a server last wrote to stderr: kept per server so `mcp list`, `/ready` and the logs
//! can say why it failed.

use std::collections::VecDeque;
use std::sync::Mutex;

/// The last [`StderrTail::LINES`] lines a server wrote to stderr, each cut to
/// [`StderrTail::LINE_BYTES`]: what an operator needs to see why it failed, bounded whatever
/// the server writes.
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    /// Lines kept.
    pub(crate) const LINES: usize = 20;
    /// Longest line kept (longer ones are cut at a character boundary).
    pub(crate) const LINE_BYTES: usize = 500;

    /// Records one line.
    pub(crate) fn push(&self, line: &str) {
        let mut end = line.len().min(Self::LINE_BYTES);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == Self::LINES {
            lines.pop_front();
        }
        lines.push_back(line[..end].to_owned());
    }

    /// The lines kept, oldest first.
    pub(crate) fn lines(&self) -> Vec<String> {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stderr_tail_keeps_the_last_lines_each_bounded() {
        let tail = StderrTail::default();
        for n in 0..30 {
            tail.push(&format!("line {n}"));
        }
        tail.push(&"é".repeat(StderrTail::LINE_BYTES));
        let lines = tail.lines();
        assert_eq!(lines.len(), StderrTail::LINES);
        assert_eq!(lines[0], "line 11");
        assert_eq!(lines[18], "line 29");
        let last = &lines[19];
        assert!(last.len() <= StderrTail::LINE_BYTES && last.chars().all(|c| c == 'é'));
    }
}
