//! Slack's `mrkdwn`: escaping people's text, decoding what Slack sends, and converting the
//! agent's Markdown (`**bold**`, `` `code` ``, fenced blocks, `[text](url)`, headings,
//! bullets) into it.

/// Escapes `&`, `<` and `>`, the characters Slack reads as control sequences; anything a
/// person or the model wrote goes through this before it is shown.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Undoes Slack's escaping of a message's text, so the agent sees what the person typed.
pub fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The agent's Markdown as mrkdwn. Code (inline and fenced) is only escaped; fences lose
/// their language tag, which Slack would show as text.
pub fn from_markdown(markdown: &str) -> String {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in markdown.split('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            if in_fence {
                out.push("```".to_owned());
            } else {
                // "```rust" opens a block; "```code```" on one line is inline code.
                if rest.contains("```") {
                    out.push(inline(line));
                    continue;
                }
                let tag_only = rest
                    .chars()
                    .all(|c| c.is_alphanumeric() || "+-_#.".contains(c));
                out.push(if tag_only {
                    "```".to_owned()
                } else {
                    format!("```{}", escape(rest))
                });
            }
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            out.push(escape(line));
        } else {
            out.push(block_line(line));
        }
    }
    out.join("\n")
}

/// One line outside code blocks: headings become bold, bullets become `•`.
fn block_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    let hashes = trimmed.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
        let title = trimmed[hashes..].trim();
        let title = title.trim_matches('*');
        return format!("{indent}*{}*", inline(title));
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = trimmed.strip_prefix(bullet) {
            return format!("{indent}• {}", inline(rest));
        }
    }
    inline(line)
}

/// Inline Markdown to mrkdwn.
fn inline(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let rest = &chars[i..];
        if c == '`'
            && let Some(end) = find(&chars, i + 1, &['`'])
        {
            let code: String = chars[i + 1..end].iter().collect();
            out.push('`');
            out.push_str(&escape(&code));
            out.push('`');
            i = end + 1;
            continue;
        }
        let mut matched = false;
        for (marker, slack) in [(['*', '*'], '*'), (['_', '_'], '*'), (['~', '~'], '~')] {
            if rest.starts_with(&marker)
                && let Some(end) = find(&chars, i + 2, &marker)
                && end > i + 2
            {
                let inner: String = chars[i + 2..end].iter().collect();
                out.push(slack);
                out.push_str(&inline(&inner));
                out.push(slack);
                i = end + 2;
                matched = true;
                break;
            }
        }
        if matched {
            continue;
        }
        if c == '['
            && let Some(close) = find(&chars, i + 1, &[']', '('])
            && let Some(end) = find(&chars, close + 2, &[')'])
        {
            let label: String = chars[i + 1..close].iter().collect();
            let url: String = chars[close + 2..end].iter().collect();
            if !url.is_empty() && !url.contains(char::is_whitespace) {
                out.push('<');
                out.push_str(&escape(&url).replace('|', "%7C"));
                out.push('|');
                out.push_str(&escape(&label).replace('|', "¦"));
                out.push('>');
                i = end + 1;
                continue;
            }
        }
        if c == '*'
            && chars
                .get(i + 1)
                .is_some_and(|n| !n.is_whitespace() && *n != '*')
            && let Some(end) = find(&chars, i + 1, &['*'])
            && !chars[end - 1].is_whitespace()
        {
            let inner: String = chars[i + 1..end].iter().collect();
            out.push('_');
            out.push_str(&inline(&inner));
            out.push('_');
            i = end + 1;
            continue;
        }
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// The index where `pattern` next starts at or after `from`.
fn find(chars: &[char], from: usize, pattern: &[char]) -> Option<usize> {
    if from > chars.len() {
        return None;
    }
    (from..=chars.len().saturating_sub(pattern.len())).find(|&j| chars[j..].starts_with(pattern))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn markdown_becomes_mrkdwn() {
        assert_eq!(
            from_markdown("**Done**: see [the docs](https://x.io/a?b=1&c=2) and `a<b`"),
            "*Done*: see <https://x.io/a?b=1&amp;c=2|the docs> and `a&lt;b`"
        );
        assert_eq!(
            from_markdown("## Plan\n- one\n* two"),
            "*Plan*\n• one\n• two"
        );
        assert_eq!(from_markdown("*it* and ~~gone~~"), "_it_ and ~gone~");
        assert_eq!(from_markdown("2 * 3 * 4 < 30"), "2 * 3 * 4 &lt; 30");
    }

    #[test]
    fn code_blocks_keep_their_content_and_lose_the_language_tag() {
        assert_eq!(
            from_markdown("Run:\n```bash\necho **hi** <x> && [a](b)\n```\nok"),
            "Run:\n```\necho **hi** &lt;x&gt; &amp;&amp; [a](b)\n```\nok"
        );
    }

    #[test]
    fn people_text_is_escaped_and_unescaped() {
        assert_eq!(
            escape("<!channel> & <@U1>"),
            "&lt;!channel&gt; &amp; &lt;@U1&gt;"
        );
        assert_eq!(unescape("a &lt;b&gt; &amp;amp;"), "a <b> &amp;");
    }
}
