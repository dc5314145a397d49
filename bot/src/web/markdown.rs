//! The transcript's Markdown, rendered on the server into a small, safe subset of HTML:
//! fenced code blocks, inline code, lists (`-`, `*`, `+`, `1.`), headings, quotes, emphasis
//! (`**strong**`, `*em*`, `_em_`) and links. Everything else is text: every character a
//! message holds is escaped before it reaches the page, so a message's `<script>`, `<img
//! onerror>` or `" onclick="` is shown, never run. A link becomes `<a>` only when its target
//! parses as an `http` or `https` URL (`javascript:`, `data:` and relative targets stay
//! text), and opens apart from the page (`rel="noopener noreferrer"`).
//!
//! Nothing here is a full CommonMark parser: what it does not know is shown as written.

use maud::{Markup, PreEscaped};

/// `text` rendered.
pub(super) fn render(text: &str) -> Markup {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(fence) = fence_of(trimmed) {
            out.push_str("<pre class=\"md-code\"><code>");
            let mut first = true;
            for inner in lines.by_ref() {
                if inner.trim_start().starts_with(fence) {
                    break;
                }
                if !first {
                    out.push('\n');
                }
                first = false;
                escape_into(&mut out, inner);
            }
            out.push_str("</code></pre>");
        } else if trimmed.is_empty() {
            continue;
        } else if let Some((kind, first)) = list_item(trimmed) {
            out.push_str(kind.open());
            item_into(&mut out, first);
            while let Some(item) = lines.peek().and_then(|l| same_list(l, kind)) {
                item_into(&mut out, item);
                lines.next();
            }
            out.push_str(kind.close());
        } else if let Some((level, heading)) = heading(trimmed) {
            out.push_str(&format!("<h{level} class=\"md-h\">"));
            inline_into(&mut out, heading);
            out.push_str(&format!("</h{level}>"));
        } else if let Some(quoted) = trimmed.strip_prefix('>') {
            out.push_str("<blockquote>");
            inline_into(&mut out, quoted.trim_start());
            while let Some(more) = lines.peek().and_then(|l| l.trim_start().strip_prefix('>')) {
                out.push_str("<br>");
                inline_into(&mut out, more.trim_start());
                lines.next();
            }
            out.push_str("</blockquote>");
        } else {
            out.push_str("<p>");
            inline_into(&mut out, line.trim());
            while let Some(more) = lines.peek().filter(|l| continues_paragraph(l)) {
                out.push_str("<br>");
                inline_into(&mut out, more.trim());
                lines.next();
            }
            out.push_str("</p>");
        }
    }
    PreEscaped(out)
}

/// The text of `line` when it is another item of a list of `kind`.
fn same_list(line: &str, kind: ListKind) -> Option<&str> {
    list_item(line.trim_start())
        .filter(|(k, _)| *k == kind)
        .map(|(_, item)| item)
}

fn item_into(out: &mut String, item: &str) {
    out.push_str("<li>");
    inline_into(out, item);
    out.push_str("</li>");
}

/// Whether `line` goes on the paragraph above it (it starts no block of its own).
fn continues_paragraph(line: &str) -> bool {
    let t = line.trim_start();
    !t.is_empty()
        && fence_of(t).is_none()
        && list_item(t).is_none()
        && heading(t).is_none()
        && !t.starts_with('>')
}

/// The fence a code block opens with (three or more backticks or tildes), if `line` is one.
fn fence_of(line: &str) -> Option<&'static str> {
    if line.starts_with("```") {
        Some("```")
    } else if line.starts_with("~~~") {
        Some("~~~")
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Bullets,
    Numbers,
}

impl ListKind {
    fn open(self) -> &'static str {
        match self {
            ListKind::Bullets => "<ul>",
            ListKind::Numbers => "<ol>",
        }
    }

    fn close(self) -> &'static str {
        match self {
            ListKind::Bullets => "</ul>",
            ListKind::Numbers => "</ol>",
        }
    }
}

/// A list item's kind and text: `- x`, `* x`, `+ x`, `12. x`.
fn list_item(line: &str) -> Option<(ListKind, &str)> {
    for bullet in ["- ", "* ", "+ "] {
        if let Some(item) = line.strip_prefix(bullet) {
            return Some((ListKind::Bullets, item));
        }
    }
    let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let item = line[digits..].strip_prefix(". ")?;
    (1..=9)
        .contains(&digits)
        .then_some((ListKind::Numbers, item))
}

/// A heading's level (1–6, shown from 3 down: the page's own headings are above) and text.
fn heading(line: &str) -> Option<(usize, &str)> {
    let hashes = line.len() - line.trim_start_matches('#').len();
    let text = line[hashes..].strip_prefix(' ')?;
    (1..=6)
        .contains(&hashes)
        .then_some(((hashes + 2).min(6), text))
}

/// One line's inline Markdown, appended to `out`.
fn inline_into(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let taken = match c {
            '`' => code_span(out, rest),
            '*' if rest.starts_with("**") => emphasis(out, rest, "**", "strong"),
            '*' if !after_word(text, rest) => emphasis(out, rest, "*", "em"),
            '_' if !after_word(text, rest) => emphasis(out, rest, "_", "em"),
            '[' => link(out, rest),
            'h' if !after_word(text, rest) => bare_url(out, rest),
            _ => None,
        };
        let used = taken.unwrap_or_else(|| {
            escape_into(out, &rest[..c.len_utf8()]);
            c.len_utf8()
        });
        rest = &rest[used..];
    }
}

/// Whether `rest` (a tail of `text`) starts right after a letter or digit: `snake_case`,
/// `2*3*4` and `xhttp://` are words, not emphasis or links.
fn after_word(text: &str, rest: &str) -> bool {
    text[..text.len() - rest.len()]
        .chars()
        .next_back()
        .is_some_and(char::is_alphanumeric)
}

/// `` `code` `` at the start of `rest`; how many bytes it took.
fn code_span(out: &mut String, rest: &str) -> Option<usize> {
    let end = rest[1..].find('`')? + 1;
    out.push_str("<code>");
    escape_into(out, &rest[1..end]);
    out.push_str("</code>");
    Some(end + 1)
}

/// `mark`text`mark` at the start of `rest`, as `<tag>`.
fn emphasis(out: &mut String, rest: &str, mark: &str, tag: &str) -> Option<usize> {
    let inner = &rest[mark.len()..];
    let end = inner.find(mark)?;
    let text = &inner[..end];
    if text.is_empty() || text.starts_with(' ') || text.ends_with(' ') {
        return None;
    }
    out.push_str(&format!("<{tag}>"));
    inline_into(out, text);
    out.push_str(&format!("</{tag}>"));
    Some(mark.len() * 2 + end)
}

/// `[text](target)` at the start of `rest`: a link when the target is an http(s) URL, else
/// its text alone.
fn link(out: &mut String, rest: &str) -> Option<usize> {
    let close = rest.find("](")?;
    let end = close + 2 + rest[close + 2..].find(')')?;
    let (text, target) = (&rest[1..close], rest[close + 2..end].trim());
    if text.contains('[') {
        return None;
    }
    match web_url(target) {
        Some(url) => {
            anchor(out, &url, |out| inline_into(out, text));
            Some(end + 1)
        }
        None => None,
    }
}

/// A bare `http(s)://…` at the start of `rest`, up to the next space, as a link.
fn bare_url(out: &mut String, rest: &str) -> Option<usize> {
    if !(rest.starts_with("http://") || rest.starts_with("https://")) {
        return None;
    }
    let word = rest.split(char::is_whitespace).next().unwrap_or_default();
    let word = word.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', '\'', '"']);
    let url = web_url(word)?;
    anchor(out, &url, |out| escape_into(out, word));
    Some(word.len())
}

/// `target` as a link may carry it: only `http` and `https` with a host.
fn web_url(target: &str) -> Option<String> {
    let url = url::Url::parse(target).ok()?;
    (matches!(url.scheme(), "http" | "https") && url.host().is_some()).then(|| url.to_string())
}

fn anchor(out: &mut String, url: &str, text: impl FnOnce(&mut String)) {
    out.push_str("<a href=\"");
    escape_into(out, url);
    out.push_str("\" target=\"_blank\" rel=\"noopener noreferrer\">");
    text(out);
    out.push_str("</a>");
}

/// `text` escaped for HTML text and for a double- or single-quoted attribute.
fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn html(text: &str) -> String {
        render(text).into_string()
    }

    #[test]
    fn the_usual_markdown_becomes_its_html() {
        assert_eq!(
            html(
                "Run **this** now, *carefully*:\n\n```sh\ncargo test\n```\n- one `a<b`\n- two\n\n1. first\n2. second"
            ),
            "<p>Run <strong>this</strong> now, <em>carefully</em>:</p>\
             <pre class=\"md-code\"><code>cargo test</code></pre>\
             <ul><li>one <code>a&lt;b</code></li><li>two</li></ul>\
             <ol><li>first</li><li>second</li></ol>"
        );
        assert_eq!(
            html("## Plan\n> quoted\n> more\nline one\nline two"),
            "<h4 class=\"md-h\">Plan</h4><blockquote>quoted<br>more</blockquote>\
             <p>line one<br>line two</p>"
        );
        assert_eq!(
            html("see [the docs](https://docs.example/a?b=1) or https://x.example/p."),
            "<p>see <a href=\"https://docs.example/a?b=1\" target=\"_blank\" \
             rel=\"noopener noreferrer\">the docs</a> or <a href=\"https://x.example/p\" \
             target=\"_blank\" rel=\"noopener noreferrer\">https://x.example/p</a>.</p>"
        );
        assert_eq!(
            html("snake_case_name and 2*3*4"),
            "<p>snake_case_name and 2*3*4</p>"
        );
    }

    #[test]
    fn markup_in_a_message_is_text() {
        assert_eq!(
            html("<script>alert(1)</script> <img src=x onerror=alert(1)>"),
            "<p>&lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=alert(1)&gt;</p>"
        );
        assert_eq!(
            html("```\n</code></pre><script>x()</script>\n```"),
            "<pre class=\"md-code\"><code>&lt;/code&gt;&lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;</code></pre>"
        );
        assert_eq!(
            html("**<b>x</b>** `<i>`"),
            "<p><strong>&lt;b&gt;x&lt;/b&gt;</strong> <code>&lt;i&gt;</code></p>"
        );
    }

    #[test]
    fn only_http_links_become_links_and_their_targets_cannot_break_out() {
        for hostile in [
            "[x](javascript:alert(1))",
            "[x](JaVaScRiPt:alert(1))",
            "[x](data:text/html;base64,PHNjcmlwdD4=)",
            "[x](/relative)",
            "[x](vbscript:msgbox)",
        ] {
            let out = html(hostile);
            assert!(!out.contains("<a"), "{hostile}: {out}");
        }
        let out = html("[x](https://a.example/\"onmouseover=\"alert(1))");
        assert!(!out.contains("\"onmouseover"), "{out}");
        assert!(
            out.contains("href=\"https://a.example/%22onmouseover=%22alert(1\""),
            "{out}"
        );
        let out = html("[<img src=x onerror=alert(1)>](https://a.example/)");
        assert!(
            out.contains(">&lt;img src=x onerror=alert(1)&gt;</a>"),
            "{out}"
        );
        let out = html("https://a.example/'><script>x</script>");
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("'>"), "{out}");
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end_and_odd_input_stays_text() {
        assert_eq!(
            html("```\nx < y"),
            "<pre class=\"md-code\"><code>x &lt; y</code></pre>"
        );
        for odd in ["*", "**", "`", "[", "[a](", "_", "#", "1.", "- ", "\u{0}"] {
            let out = html(odd);
            assert!(
                !out.contains("<a") && !out.contains("<script"),
                "{odd}: {out}"
            );
        }
        assert_eq!(html("- "), "<ul><li></li></ul>");
    }
}
