//! A fetched HTML page as plain text, bounded: html2text's layout of nested tables is
//! quadratic or worse in their depth (a 136 KB page of nested tables took 22 s), so the
//! parsed page is cut at [`MAX_DEPTH`] levels of elements and [`MAX_TABLE_DEPTH`] tables
//! inside tables before it is laid out. What is cut is dropped and noted in the text.
//!
//! [`convert`] is plain blocking work; [`text_of`] runs it off the async runtime, under a
//! deadline and the turn's cancellation: the tool returns at once when either ends, and the
//! conversion stops at its next stage (parse, cut, lay out, render).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use html2text::{Element, Handle};
use tokio_util::sync::CancellationToken;

/// Deepest nesting of elements kept.
pub(super) const MAX_DEPTH: usize = 48;
/// Deepest nesting of tables inside tables kept.
pub(super) const MAX_TABLE_DEPTH: usize = 3;

/// Deepest nesting of tags passed to the HTML parser: html5ever's tree builder looks through
/// the stack of open elements at every tag, so a page nested 100,000 deep took minutes to
/// parse. Tags deeper than this are dropped before parsing (their text stays).
pub(super) const MAX_SOURCE_DEPTH: usize = 256;

/// Drops the tags of `html` nested deeper than `max` (and their closing tags), keeping all
/// text, in one pass over the bytes. Comments, doctypes and the raw text of `script` and
/// `style` are passed through untouched; void elements and `/>` open nothing. Unclosed
/// elements (`<p>`, `<li>`) count as open, which only flattens a page sooner.
pub(super) fn flatten_deep(html: &[u8], max: usize) -> std::borrow::Cow<'_, [u8]> {
    const VOID: &[&[u8]] = &[
        b"area", b"base", b"br", b"col", b"embed", b"hr", b"img", b"input", b"link", b"meta",
        b"source", b"track", b"wbr",
    ];
    let find = |from: usize, needle: &[u8]| {
        html[from..]
            .windows(needle.len())
            .position(|w| w.eq_ignore_ascii_case(needle))
            .map(|p| from + p)
    };
    let mut out: Option<Vec<u8>> = None;
    let mut depth = 0usize;
    let mut dropped = 0usize;
    let mut copied = 0usize;
    let mut i = 0usize;
    while let Some(p) = html[i..].iter().position(|b| *b == b'<').map(|p| i + p) {
        let rest = &html[p + 1..];
        let closing = rest.first() == Some(&b'/');
        let name_start = p + 1 + usize::from(closing);
        let name_len = html[name_start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        if rest.starts_with(b"!--") {
            i = find(p + 4, b"-->").map_or(html.len(), |e| e + 3);
            continue;
        }
        if name_len == 0 {
            i = p + 1;
            continue;
        }
        let end = html[p..]
            .iter()
            .position(|b| *b == b'>')
            .map_or(html.len(), |e| p + e + 1);
        let name = &html[name_start..name_start + name_len];
        let self_closing = end >= 2 && html[end - 2] == b'/';
        let void = VOID.iter().any(|v| v.eq_ignore_ascii_case(name));
        let keep = if closing {
            if dropped > 0 && depth > max {
                dropped -= 1;
                depth -= 1;
                false
            } else {
                depth = depth.saturating_sub(1);
                true
            }
        } else if void || self_closing {
            true
        } else {
            depth += 1;
            if depth > max {
                dropped += 1;
                false
            } else {
                true
            }
        };
        if !keep {
            let buf = out.get_or_insert_with(|| Vec::with_capacity(html.len()));
            buf.extend_from_slice(&html[copied..p]);
            copied = end;
        }
        i = end;
        // Raw text: nothing inside is a tag.
        if !closing && (name.eq_ignore_ascii_case(b"script") || name.eq_ignore_ascii_case(b"style"))
        {
            let close: &[u8] = if name.eq_ignore_ascii_case(b"script") {
                b"</script"
            } else {
                b"</style"
            };
            i = find(i, close).unwrap_or(html.len());
        }
    }
    match out {
        None => std::borrow::Cow::Borrowed(html),
        Some(mut buf) => {
            buf.extend_from_slice(&html[copied..]);
            std::borrow::Cow::Owned(buf)
        }
    }
}

/// Why a page has no text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum HtmlError {
    /// html2text could not read it.
    #[error("cannot read the HTML of the page: {0}")]
    Unreadable(String),
    /// The deadline passed first.
    #[error("converting the page to text took too long and was stopped")]
    TimedOut,
    /// The turn was stopped.
    #[error("cancelled")]
    Cancelled,
}

/// The text of `body` at `width` columns, off the runtime, until `deadline` or `cancel`.
pub(super) async fn text_of(
    body: Vec<u8>,
    width: usize,
    deadline: tokio::time::Instant,
    cancel: &CancellationToken,
) -> Result<String, HtmlError> {
    let stop = Arc::new(AtomicBool::new(false));
    // Set however this future ends (returned, timed out, dropped by a stop): the blocking
    // conversion gives up at its next stage.
    let _guard = StopOnDrop(stop.clone());
    let task = tokio::task::spawn_blocking(move || convert(&body, width, &stop));
    tokio::select! {
        () = cancel.cancelled() => Err(HtmlError::Cancelled),
        done = tokio::time::timeout_at(deadline, task) => match done {
            Err(_) => Err(HtmlError::TimedOut),
            Ok(Err(e)) => Err(HtmlError::Unreadable(format!("the converter failed ({e})"))),
            Ok(Ok(text)) => text,
        },
    }
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Converts `body`, cut at the depth limits; gives up between stages once `stop` is set.
pub(super) fn convert(body: &[u8], width: usize, stop: &AtomicBool) -> Result<String, HtmlError> {
    let stopped = || {
        if stop.load(Ordering::SeqCst) {
            Err(HtmlError::Cancelled)
        } else {
            Ok(())
        }
    };
    let unreadable = |e: html2text::Error| HtmlError::Unreadable(e.to_string());
    let config = html2text::config::plain_no_decorate();
    let flat = flatten_deep(body, MAX_SOURCE_DEPTH);
    let dom = config.parse_html(&flat[..]).map_err(unreadable)?;
    stopped()?;
    let cut = cut_deep(&dom.document);
    stopped()?;
    let tree = config.dom_to_render_tree(&dom).map_err(unreadable)?;
    stopped()?;
    let mut text = config.render_to_string(tree, width).map_err(unreadable)?;
    if cut > 0 {
        text.push_str(&format!(
            "\n[{cut} part(s) of the page nested deeper than {MAX_DEPTH} elements or \
             {MAX_TABLE_DEPTH} tables were left out]\n"
        ));
    }
    Ok(text)
}

/// Drops every element nested deeper than the limits (without recursion, so a deep page
/// cannot exhaust the stack). How many were dropped.
pub(super) fn cut_deep(root: &Handle) -> usize {
    let mut cut = 0;
    let mut stack: Vec<(Handle, usize, usize)> = vec![(root.clone(), 0, 0)];
    while let Some((node, depth, tables)) = stack.pop() {
        let mut children = node.children.borrow_mut();
        let before = children.len();
        children.retain(|child| {
            let table = matches!(&child.data, Element { name, .. } if &*name.local == "table");
            let element = matches!(child.data, Element { .. });
            let deep = element && depth + 1 > MAX_DEPTH;
            let nested = table && tables + 1 > MAX_TABLE_DEPTH;
            !(deep || nested)
        });
        cut += before - children.len();
        for child in children.iter() {
            let table = matches!(&child.data, Element { name, .. } if &*name.local == "table");
            stack.push((child.clone(), depth + 1, tables + usize::from(table)));
        }
    }
    cut
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// `levels` tables, each inside the cell of the one before, with some text in each.
    fn nested_tables(levels: usize) -> Vec<u8> {
        let open = "<table><tr><td>cell text".repeat(levels);
        let close = "</td></tr></table>".repeat(levels);
        format!("<html><body>{open}{close}</body></html>").into_bytes()
    }

    #[test]
    fn a_page_of_deeply_nested_tables_is_cut_at_the_depth_limit() {
        // About 240 KB, more than the page that took 22 s before the limit.
        let page = nested_tables(6_000);
        let started = Instant::now();
        let text = convert(&page, 120, &AtomicBool::new(false)).unwrap();
        assert!(text.contains("cell text"), "{text}");
        assert!(
            text.contains("tables were left out"),
            "the cut is noted: {text}"
        );
        // The bound is the depth limit; the clock is only printed, loaded machines vary.
        eprintln!("nested tables converted in {:?}", started.elapsed());
        let dom = html2text::config::plain()
            .parse_html(page.as_slice())
            .unwrap();
        assert_eq!(
            cut_deep(&dom.document),
            1,
            "one subtree below the third table"
        );
    }

    #[test]
    fn a_hundred_thousand_nested_elements_neither_overflow_the_stack_nor_stall() {
        let page = format!(
            "{}deep{}",
            "<div>".repeat(100_000),
            "</div>".repeat(100_000)
        );
        let text = convert(page.as_bytes(), 120, &AtomicBool::new(false)).unwrap();
        assert!(text.contains("left out"), "{text}");
        // Shallow pages are not touched.
        let text = convert(b"<p>hello <b>world</b></p>", 120, &AtomicBool::new(false)).unwrap();
        assert_eq!(text.trim(), "hello world");
    }

    #[test]
    fn tags_nested_too_deep_are_dropped_before_parsing_and_their_text_stays() {
        let page = format!(
            "<p>{}deep<br/>text{}</p>",
            "<div>".repeat(10),
            "</div>".repeat(10)
        );
        let flat = flatten_deep(page.as_bytes(), 4);
        assert_eq!(
            String::from_utf8_lossy(&flat),
            "<p><div><div><div>deep<br/>text</div></div></div></p>"
        );
        let script = b"<div><script>if (a<b) {}</script><!-- <div> -->x</div>";
        assert!(matches!(
            flatten_deep(script, 5),
            std::borrow::Cow::Borrowed(_)
        ));
        let page = format!("{}{}", "<span>".repeat(200_000), "end");
        let flat = flatten_deep(page.as_bytes(), MAX_SOURCE_DEPTH);
        assert_eq!(flat.len(), "<span>".len() * MAX_SOURCE_DEPTH + 3);
    }

    #[test]
    fn a_stopped_conversion_gives_up_at_its_next_stage() {
        let stop = AtomicBool::new(true);
        assert_eq!(
            convert(&nested_tables(10), 120, &stop),
            Err(HtmlError::Cancelled)
        );
    }

    #[tokio::test]
    async fn stop_and_the_deadline_end_it_at_once() {
        let far = tokio::time::Instant::now() + Duration::from_secs(600);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let started = Instant::now();
        let got = text_of(nested_tables(6_000), 120, far, &cancel).await;
        assert_eq!(got, Err(HtmlError::Cancelled));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let got = text_of(
            nested_tables(6_000),
            120,
            tokio::time::Instant::now(),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(got, Err(HtmlError::TimedOut));
        // Neither: the text.
        let got = text_of(b"<p>hi</p>".to_vec(), 120, far, &CancellationToken::new()).await;
        assert_eq!(got.unwrap().trim(), "hi");
    }
}
