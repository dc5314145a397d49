//! Splitting long answers for platforms with a message size limit (Discord: 2,000
//! characters; Slack: 3,000 per section): at line breaks where possible, never inside a code
//! block — a fence open at a cut is closed at the end of that chunk and reopened, with its
//! language, at the start of the next.

/// Splits `text` into chunks of at most `limit` characters (`limit` is at least 16).
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(16);
    if text.chars().count() <= limit {
        return vec![text.to_owned()];
    }
    let mut chunks = Vec::new();
    let mut current = String::new();
    let mut current_len = 0usize;
    // Whether `current` holds more than a reopened fence line.
    let mut has_content = false;
    // The opening fence line (e.g. "```rust") of the code block we are inside, if any.
    let mut open_fence: Option<String> = None;

    for line in text.split_inclusive('\n') {
        let toggles = line.trim_start().starts_with("```");
        // Room needed to close a block that is open after this line.
        let mut pieces = vec![line.to_owned()];
        // A piece may start a chunk that begins with the reopened fence line.
        let prefix = open_fence.as_ref().map_or(0, |f| f.chars().count() + 1);
        if line.chars().count() + reserve(&open_fence) + prefix > limit {
            let room = limit.saturating_sub(reserve(&open_fence) + prefix + 1);
            pieces = hard_split(line, room.max(1));
        }
        // Room to keep for closing a block that is open once this line is in.
        let reserve_after = match (toggles, &open_fence) {
            (true, Some(_)) => 0,
            (true, None) => 5,
            (false, fence) => reserve(fence),
        };
        for piece in pieces {
            let piece_len = piece.chars().count();
            if current_len + piece_len + reserve_after > limit && has_content {
                flush(&mut chunks, &mut current, &mut current_len, &open_fence);
            }
            current.push_str(&piece);
            current_len += piece_len;
            has_content = true;
        }
        if toggles {
            open_fence = match open_fence {
                Some(_) => None,
                None => Some(line.trim().to_owned()),
            };
        }
    }
    if !current.trim().is_empty() || chunks.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// Characters needed to close an open block at the end of a chunk (`\n```\n`).
fn reserve(open_fence: &Option<String>) -> usize {
    if open_fence.is_some() { 5 } else { 0 }
}

fn flush(chunks: &mut Vec<String>, current: &mut String, len: &mut usize, fence: &Option<String>) {
    let mut chunk = std::mem::take(current);
    if fence.is_some() {
        if !chunk.ends_with('\n') {
            chunk.push('\n');
        }
        chunk.push_str("```\n");
    }
    chunks.push(chunk);
    *len = 0;
    if let Some(f) = fence {
        current.push_str(f);
        current.push('\n');
        *len = f.chars().count() + 1;
    }
}

/// Cuts one over-long line into pieces of at most `size` characters.
fn hard_split(line: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn all_within(chunks: &[String], limit: usize) {
        for c in chunks {
            assert!(
                c.chars().count() <= limit,
                "{} > {limit}: {c:?}",
                c.chars().count()
            );
        }
    }

    #[test]
    fn short_text_is_one_chunk() {
        assert_eq!(split_message("hello", 2000), vec!["hello".to_owned()]);
    }

    #[test]
    fn splits_at_line_breaks() {
        let text = "aaaa\nbbbb\ncccc\ndddd\n";
        let chunks = split_message(text, 16);
        assert_eq!(
            chunks,
            vec!["aaaa\nbbbb\ncccc\n".to_owned(), "dddd\n".to_owned()]
        );
        assert_eq!(chunks.concat(), text);
    }

    #[test]
    fn a_code_block_across_a_cut_is_closed_and_reopened_with_its_language() {
        let mut text = String::from("Here:\n```rust\n");
        for i in 0..30 {
            text.push_str(&format!("let x{i} = {i};\n"));
        }
        text.push_str("```\nDone.\n");
        let chunks = split_message(&text, 120);
        all_within(&chunks, 120);
        assert!(chunks.len() > 2);
        for c in &chunks {
            assert_eq!(
                c.matches("```").count() % 2,
                0,
                "unbalanced fences in {c:?}"
            );
        }
        assert!(chunks[1].starts_with("```rust\n"), "{:?}", chunks[1]);
        // Removing the added fences gives back the original text.
        let rejoined: String = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut c = c.as_str();
                if i > 0 {
                    c = c.strip_prefix("```rust\n").unwrap_or(c);
                }
                if i + 1 < chunks.len() {
                    c = c.strip_suffix("```\n").unwrap_or(c);
                }
                c.to_owned()
            })
            .collect();
        assert_eq!(rejoined, text);
    }

    #[test]
    fn an_over_long_line_is_cut_and_unicode_is_kept_whole() {
        let text = "é".repeat(5000);
        let chunks = split_message(&text, 2000);
        all_within(&chunks, 2000);
        assert_eq!(chunks.concat(), text);
    }

    #[test]
    fn a_long_line_inside_a_block_leaves_room_for_the_fence() {
        let text = format!("```\n{}\n```\n", "x".repeat(300));
        let chunks = split_message(&text, 100);
        all_within(&chunks, 100);
        for c in &chunks {
            assert_eq!(c.matches("```").count() % 2, 0, "{c:?}");
        }
    }

    #[test]
    fn every_chunk_fits_and_keeps_fences_balanced_for_many_shapes() {
        // A small deterministic generator: prose, code blocks, long lines, unicode.
        let mut seed = 0x2545_f491_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for _ in 0..200 {
            let mut text = String::new();
            for _ in 0..(next() % 40) {
                match next() % 5 {
                    0 => text.push_str("```py\n"),
                    1 => text.push_str("```\n"),
                    2 => text.push_str(&"ü".repeat((next() % 300) as usize)),
                    _ => text.push_str(&"word ".repeat((next() % 30) as usize)),
                }
                text.push('\n');
            }
            for limit in [40, 97, 200, 2000] {
                let chunks = split_message(&text, limit);
                all_within(&chunks, limit);
                // Every chunk but the last closes what it opens (the last one mirrors the
                // input, which may leave a block open).
                for c in &chunks[..chunks.len() - 1] {
                    let fences = c
                        .lines()
                        .filter(|l| l.trim_start().starts_with("```"))
                        .count();
                    assert_eq!(fences % 2, 0, "unbalanced chunk {c:?}");
                }
            }
        }
    }
}
