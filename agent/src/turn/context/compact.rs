//! Compaction as pure steps over a workstream's history. What is sent to the model becomes
//! a checkpoint (a summary of the older turns, in the system message) plus the recent turns
//! verbatim; old large tool outputs are shortened to their head and tail before anything
//! else. Nothing here touches the store: the full history stays there, and `recall` finds it.
//!
//! Every cut falls where the APIs accept a conversation to start: at a user message, or,
//! inside one long turn, at an assistant message, so that every tool result sent still
//! follows the call it answers.

use crate::model::{Message, Role};
use crate::output::{ceil_char_boundary, floor_char_boundary};

use super::estimate::message_bytes;

/// A tool output longer than this, older than the recent turns, is shortened first.
pub const OLD_OUTPUT_BYTES: usize = 2_000;
/// What a shortened old output keeps of its start.
const OLD_OUTPUT_HEAD: usize = 1_200;
/// What a shortened old output keeps of its end.
const OLD_OUTPUT_TAIL: usize = 400;
/// What the summariser sees of one message at most.
const TRANSCRIPT_ENTRY_HEAD: usize = 900;
const TRANSCRIPT_ENTRY_TAIL: usize = 300;

/// What the summariser is asked.
pub const SUMMARY_INSTRUCTIONS: &str = "You are compacting a long conversation between a team \
and their chat-ops agent so that it fits the agent's context window. Write the checkpoint the \
agent will read instead of the older messages below. Keep, as short bullet points: what the \
team asked for and decided; the task in progress and the open next steps; files, paths, \
commands and services touched and what came of them; which tool calls were approved, denied or \
always allowed, and by whom, with any notes; facts learned about the environment. Leave out \
greetings and anything already finished that will not matter again. Write at most 300 words, \
no preamble.";

/// Cuts `text` to its first `head` and last `tail` bytes (on character boundaries) with a
/// marker saying how much was left out; `None` when it is not longer than both together
/// and the marker.
pub fn head_and_tail(text: &str, head: usize, tail: usize) -> Option<String> {
    const MARKER_ROOM: usize = 120;
    if text.len() <= head + tail + MARKER_ROOM {
        return None;
    }
    let head_end = floor_char_boundary(text, head);
    let tail_start = ceil_char_boundary(text, text.len() - tail);
    let cut = tail_start - head_end;
    Some(format!(
        "{}\n[… {cut} bytes cut here to fit the model's context window; recall finds the full text …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    ))
}

/// Shortens the tool results in `messages[..before]` that are longer than
/// [`OLD_OUTPUT_BYTES`]. Returns the bytes saved. Running it again saves nothing more.
pub fn shorten_old_outputs(messages: &mut [Message], before: usize) -> u64 {
    let end = before.min(messages.len());
    let mut saved = 0;
    for m in &mut messages[..end] {
        if m.role != Role::Tool || m.content.len() <= OLD_OUTPUT_BYTES {
            continue;
        }
        if let Some(short) = head_and_tail(&m.content, OLD_OUTPUT_HEAD, OLD_OUTPUT_TAIL) {
            saved += (m.content.len() - short.len()) as u64;
            m.content = short;
        }
    }
    saved
}

/// Index of the first message of the last `turns` turns (a user message starts a turn);
/// 0 when there are no more turns than that.
pub fn recent_turns_start(messages: &[Message], turns: usize) -> usize {
    if turns == 0 {
        return messages.len();
    }
    messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| m.role == Role::User)
        .nth(turns - 1)
        .map_or(0, |(i, _)| i)
}

/// Where the verbatim part should start so that it holds at most `keep_bytes`: the earliest
/// turn start that leaves no more than that, else (the last turn alone is larger) the
/// earliest assistant message of the last turn that does, else the last place a cut is
/// possible. `None` when nothing before the last message could be cut away.
pub fn split_point(messages: &[Message], keep_bytes: u64) -> Option<usize> {
    let mut suffix = vec![0u64; messages.len() + 1];
    for (i, m) in messages.iter().enumerate().rev() {
        suffix[i] = suffix[i + 1] + message_bytes(m);
    }
    let turn_starts = || {
        messages
            .iter()
            .enumerate()
            .filter(|(i, m)| *i > 0 && m.role == Role::User)
            .map(|(i, _)| i)
    };
    if let Some(i) = turn_starts().find(|i| suffix[*i] <= keep_bytes) {
        return Some(i);
    }
    let last_turn = turn_starts().next_back().unwrap_or(0);
    let inside = || {
        messages
            .iter()
            .enumerate()
            .skip(last_turn + 1)
            .filter(|(_, m)| m.role == Role::Assistant)
            .map(|(i, _)| i)
    };
    inside()
        .find(|i| suffix[*i] <= keep_bytes)
        .or_else(|| inside().next_back())
        .or((last_turn > 0).then_some(last_turn))
}

/// The older part of a conversation as text for the summariser: the previous checkpoint
/// first, then each message (long ones cut to head and tail), at most `max_bytes`; when it
/// must be cut, the oldest messages go first.
pub fn transcript(previous: Option<&str>, messages: &[Message], max_bytes: usize) -> String {
    let entries: Vec<String> = messages.iter().map(entry).collect();
    let mut budget = max_bytes.saturating_sub(previous.map_or(0, str::len) + 64);
    let mut kept = 0;
    for e in entries.iter().rev() {
        if e.len() + 1 > budget {
            break;
        }
        budget -= e.len() + 1;
        kept += 1;
    }
    let mut out = String::new();
    if let Some(previous) = previous {
        out.push_str("[checkpoint of what came before]\n");
        out.push_str(previous);
        out.push('\n');
    }
    let left_out = entries.len() - kept;
    if left_out > 0 {
        out.push_str(&format!("[… {left_out} older messages left out …]\n"));
    }
    for e in &entries[left_out..] {
        out.push_str(e);
        out.push('\n');
    }
    out
}

fn entry(m: &Message) -> String {
    let mut text = match m.role {
        Role::User => match &m.name {
            Some(who) => format!("[user {who}] {}", m.content),
            None => format!("[user] {}", m.content),
        },
        Role::Assistant => format!("[assistant] {}", m.content),
        Role::Tool => format!(
            "[result of {}] {}",
            m.name.as_deref().unwrap_or("a tool"),
            m.content
        ),
    };
    for call in &m.tool_calls {
        text.push_str(&format!(
            "\n[assistant called {}] {}",
            call.name, call.arguments
        ));
    }
    head_and_tail(&text, TRANSCRIPT_ENTRY_HEAD, TRANSCRIPT_ENTRY_TAIL).unwrap_or(text)
}

/// A checkpoint written without the model (it failed or answered nothing): the previous
/// checkpoint and what each person asked, newest last, within `max_bytes`.
pub fn mechanical_summary(
    previous: Option<&str>,
    messages: &[Message],
    max_bytes: usize,
) -> String {
    let asked: Vec<String> = messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| {
            let line = m.content.lines().next().unwrap_or_default();
            let line = &line[..floor_char_boundary(line, 200)];
            let who = m.name.as_deref().unwrap_or("someone");
            format!("- {who} asked: {line:?}")
        })
        .collect();
    let tools: usize = messages.iter().map(|m| m.tool_calls.len()).sum();
    let mut out = String::from(
        "(The model could not summarise this part; these are the requests it held.)\n",
    );
    if let Some(previous) = previous {
        out.push_str(previous);
        out.push('\n');
    }
    let mut lines = asked
        .iter()
        .rev()
        .scan(max_bytes.saturating_sub(out.len() + 80), |room, l| {
            (*room > l.len()).then(|| {
                *room -= l.len() + 1;
                l.as_str()
            })
        })
        .collect::<Vec<_>>();
    lines.reverse();
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(&format!("- {tools} tool calls were made in that part.\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use pretty_assertions::assert_eq;

    fn call(id: &str) -> Message {
        let mut m = Message::assistant("");
        m.tool_calls.push(ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{\"command\":\"ls\"}".into(),
        });
        m
    }

    /// u a(call) t a | u a(call) t a | u a
    fn history() -> Vec<Message> {
        let mut h = Vec::new();
        for turn in 0..3 {
            h.push(Message::user(format!("question {turn}")));
            if turn < 2 {
                h.push(call(&format!("c{turn}")));
                h.push(Message::tool_result(
                    format!("c{turn}"),
                    "bash",
                    "x".repeat(5000),
                ));
            }
            h.push(Message::assistant(format!("answer {turn}")));
        }
        h
    }

    #[test]
    fn old_outputs_keep_head_and_tail_and_shortening_twice_changes_nothing() {
        let mut h = history();
        let recent = recent_turns_start(&h, 1);
        assert_eq!(recent, 8);
        let saved = shorten_old_outputs(&mut h, recent);
        assert!(saved > 2 * 3000, "{saved}");
        assert!(h[2].content.starts_with(&"x".repeat(1200)));
        assert!(h[2].content.contains("bytes cut here"));
        assert_eq!(shorten_old_outputs(&mut h, recent), 0);
        // Only tool results, only before `recent`.
        assert_eq!(h[0].content, "question 0");
    }

    #[test]
    fn cuts_fall_where_a_conversation_may_start() {
        let h = history();
        let total: u64 = h.iter().map(message_bytes).sum();
        // Everything fits: the earliest turn start after the first message.
        assert_eq!(split_point(&h, total), Some(4));
        // Only the last turn fits.
        assert_eq!(split_point(&h, 200), Some(8));
        // Not even the last turn: its last assistant message.
        assert_eq!(split_point(&h, 10), Some(9));
        // One long turn: cut at an assistant message, never before a tool result.
        let mut long = vec![Message::user("do it")];
        for i in 0..4 {
            long.push(call(&format!("c{i}")));
            long.push(Message::tool_result(
                format!("c{i}"),
                "bash",
                "y".repeat(3000),
            ));
        }
        let at = split_point(&long, 7000).expect("a cut inside the turn");
        assert_eq!(long[at].role, Role::Assistant);
        assert_eq!(at, 5);
        assert_eq!(split_point(&[Message::user("hi")], 0), None);
    }

    #[test]
    fn the_transcript_keeps_the_newest_and_says_what_it_left_out() {
        let h = history();
        let t = transcript(Some("- earlier: set up CI"), &h, 2500);
        assert!(
            t.starts_with("[checkpoint of what came before]\n- earlier: set up CI\n"),
            "{t}"
        );
        assert!(t.contains("older messages left out"), "{t}");
        assert!(t.trim_end().ends_with("[assistant] answer 2"), "{t}");
        assert!(t.len() <= 2500 + 200, "{}", t.len());
        let whole = transcript(None, &h[..4], 100_000);
        assert_eq!(whole.lines().next(), Some("[user] question 0"));
        assert!(whole.contains("[assistant called bash] {\"command\":\"ls\"}"));
        assert!(
            whole.contains("bytes cut here"),
            "a long result is cut in the transcript"
        );
    }

    #[test]
    fn a_mechanical_summary_lists_the_requests() {
        let s = mechanical_summary(None, &history(), 10_000);
        assert!(
            s.contains(
                "- someone asked: \"question 0\"\n- someone asked: \"question 1\"\n- someone asked: \"question 2\"\n"
            ),
            "{s}"
        );
        assert!(s.contains("- 2 tool calls"), "{s}");
    }

    #[test]
    fn head_and_tail_respects_character_boundaries() {
        let text = "é".repeat(2000);
        let short = head_and_tail(&text, 101, 101).expect("long enough to cut");
        assert!(short.starts_with(&"é".repeat(50)));
        assert!(head_and_tail("short", 10, 10).is_none());
    }
}
