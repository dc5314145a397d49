//! The snippet shown for a hit: a window of about 300 characters around the first match.
//!
//! Made here rather than with FTS5 `snippet()` or `ts_headline`, so both databases show the
//! same text (and PostgreSQL does not re-parse whole documents to highlight them).

use crate::model::ToolCall;

/// Characters of context kept before the first match.
const CONTEXT_BEFORE: usize = 100;
/// Characters a snippet holds at most (not counting the `…` marks).
const SNIPPET_CHARS: usize = 300;

/// Tool calls as `name(arguments)`, or the raw JSON if it does not parse.
pub(super) fn render_calls(json: &str) -> String {
    match serde_json::from_str::<Vec<ToolCall>>(json) {
        Ok(calls) => calls
            .iter()
            .map(|c| format!("{}({})", c.name, c.arguments))
            .collect::<Vec<_>>()
            .join("; "),
        Err(_) => json.to_owned(),
    }
}

/// A window around the first match of any query word in the first field that has one (the
/// index also matches `café` for `cafe`, which this does not: then the start of the first
/// non-empty field).
pub(super) fn snippet(words: &[String], fields: &[&str]) -> String {
    let words: Vec<String> = words.iter().map(|w| regex::escape(w)).collect();
    let matcher = regex::RegexBuilder::new(&words.join("|"))
        .case_insensitive(true)
        .build()
        .ok();
    let fields: Vec<String> = fields
        .iter()
        .map(|f| f.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|f| !f.is_empty())
        .collect();
    for field in &fields {
        if let Some(m) = matcher.as_ref().and_then(|r| r.find(field)) {
            return window(field, m.start());
        }
    }
    fields.first().map(|f| window(f, 0)).unwrap_or_default()
}

/// Up to [`SNIPPET_CHARS`] characters of `text` from [`CONTEXT_BEFORE`] characters before
/// byte `at`, with `…` where text was cut.
fn window(text: &str, at: usize) -> String {
    let start = text[..at]
        .char_indices()
        .rev()
        .nth(CONTEXT_BEFORE - 1)
        .map_or(0, |(i, _)| i);
    let rest = &text[start..];
    let end = rest
        .char_indices()
        .nth(SNIPPET_CHARS)
        .map_or(rest.len(), |(i, _)| i);
    let mut out = String::with_capacity(end + 8);
    if start > 0 {
        out.push('…');
    }
    out.push_str(&rest[..end]);
    if end < rest.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn terms(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn a_snippet_is_a_window_around_the_first_match() {
        let text = format!(
            "{} found a NEEDLE\n\nhere {}",
            "é".repeat(400),
            "z".repeat(400)
        );
        let s = snippet(&terms(&["needle"]), &["", &text]);
        let head = format!("…{} found a NEEDLE here z", "é".repeat(91));
        assert!(s.starts_with(&head), "{s}");
        assert_eq!(s.chars().count(), SNIPPET_CHARS + 2);
        assert!(s.ends_with("z…"), "{s}");
        // The first field with a match wins.
        assert_eq!(snippet(&terms(&["b", "zz"]), &["a", "zz b", "b"]), "zz b");
        // No visible match (the index folds diacritics, the snippet does not): the start.
        assert_eq!(
            snippet(&terms(&["naive"]), &["", "naïve  text"]),
            "naïve text"
        );
        assert_eq!(snippet(&terms(&["x"]), &["", ""]), "");
    }

    #[test]
    fn tool_calls_are_shown_as_calls() {
        let calls = vec![
            ToolCall {
                id: "1".into(),
                name: "bash".into(),
                arguments: "{\"command\":\"ls\"}".into(),
            },
            ToolCall {
                id: "2".into(),
                name: "man".into(),
                arguments: "{}".into(),
            },
        ];
        let json = serde_json::to_string(&calls).unwrap();
        assert_eq!(render_calls(&json), "bash({\"command\":\"ls\"}); man({})");
        assert_eq!(render_calls("not json"), "not json");
    }
}
