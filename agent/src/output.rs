//! Cutting long output (tool results, MCP contents) to what the model may read, keeping the
//! head and the tail. Below both the built-in tools and the MCP client, which cut alike.

/// Cuts `text` to at most `max` bytes (on a char boundary), keeping head and tail, with a note
/// of how much was cut.
pub fn truncate_output(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let keep = max.saturating_sub(120);
    let head_len = floor_char_boundary(text, keep * 3 / 4);
    let tail_start = ceil_char_boundary(text, text.len() - (keep - head_len));
    let cut = tail_start - head_len;
    format!(
        "{}\n[... {cut} bytes of output cut ({} bytes in all) ...]\n{}",
        &text[..head_len],
        text.len(),
        &text[tail_start..]
    )
}

pub(crate) fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub(crate) fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_head_and_tail_and_says_how_much() {
        let text = "é".repeat(5000);
        let out = truncate_output(&text, 2000);
        assert!(out.len() <= 2000 + 100, "{}", out.len());
        assert!(out.contains("bytes of output cut (10000 bytes in all)"));
        assert!(out.starts_with('é') && out.ends_with('é'));
        assert_eq!(truncate_output("short", 2000), "short");
    }
}
