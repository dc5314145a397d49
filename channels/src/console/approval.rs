//! Approval questions at the console. A tool call is `[y]es / [n]o / [a]lways`, and where a
//! card offers a narrower Always allow beside the whole tool (a bash command's pattern such
//! as `git status`, an MCP tool's server: [`CardButton::always_allow_pattern`]) the console
//! offers it too, as `[p]`. A plan review is `[y]es, accept / [n]o, reject / [c]hange,
//! <note>` — `y` and `n` mean the same on both, and no key means one thing on a tool call and
//! another on a review (`a` and `p` are only *always*, `c` only *change*). Text after a comma
//! is feedback for the model (`n, use the staging db`). A bad answer is asked again; `/stop`
//! or Ctrl-C stops the turn.

use std::sync::Arc;

use sandpiper_agent::protocol::{
    ApprovalItem, ApprovalKind, Approver, Decision, DecisionPath, Verdict,
};

use super::input::{Asking, LineSource, Typed};
use super::sink::{Headed, locked};
use super::{Interrupter, Output, say};
use crate::button::CardButton;
use crate::card::header;
use crate::visible::{cut, escape_invisible};

/// Asks the person at the terminal about each item.
pub(super) struct ConsoleApprover {
    pub(super) lines: Arc<dyn LineSource>,
    pub(super) out: Output,
    /// Who decides: their sandpiper user id.
    pub(super) user_id: String,
    /// Their name as records give it.
    pub(super) user: String,
    /// Stops the turn on `/stop` or Ctrl-C.
    pub(super) interrupter: Interrupter,
    /// The calls whose header is on screen.
    pub(super) headed: Headed,
}

/// The question for item `index` of `count`: only the tool's name when its header is on
/// screen just above (`headed`), the header when it is not (a sub-agent's call, a review)
/// or when several calls wait at once.
fn question(item: &ApprovalItem, index: usize, count: usize, headed: bool) -> String {
    let what = match (count, headed) {
        (1, true) => header(&item.name),
        (1, false) => header(&item.header),
        _ => format!("{} ({} of {count})", header(&item.header), index + 1),
    };
    match (item.kind, narrower(item)) {
        (ApprovalKind::Review, _) => {
            format!("review {what}: [y]es, accept / [n]o, reject / [c]hange, <note>: ")
        }
        (_, None) => format!("approve {what}? [y]es / [n]o / [a]lways: "),
        (_, Some(label)) => format!(
            "approve {what}? [y]es / [n]o / [a]lways allow {} / [p] {}: ",
            escape_invisible(&item.name),
            lowercase_first(&label)
        ),
    }
}

/// The narrower Always allow a card offers for `item`, as its button's label (`Always allow
/// `git status``).
fn narrower(item: &ApprovalItem) -> Option<String> {
    CardButton::always_allow_pattern(&item.request_id, &item.name, &item.preview)
        .map(|(_, label)| label)
}

/// `Always allow …` as the rest of a sentence.
fn lowercase_first(label: &str) -> String {
    let mut chars = label.chars();
    chars
        .next()
        .map(|c| c.to_lowercase().chain(chars).collect())
        .unwrap_or_default()
}

#[async_trait::async_trait]
impl Approver for ConsoleApprover {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        let mut decisions = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let review = item.kind == ApprovalKind::Review;
            if review {
                say(
                    &self.out,
                    &format!("\n{}\n", cut(&item.preview, 200, 20_000)),
                );
            }
            let headed = locked(&self.headed).contains(&item.call_id);
            let question = question(item, index, items.len(), headed && !review);
            loop {
                let line = match self.lines.read(&question, Asking::Answer).await {
                    Typed::Line(line) => line,
                    Typed::End => {
                        say(&self.out, "\n(no more input: denied)\n");
                        return decisions;
                    }
                    Typed::Interrupted => {
                        self.interrupter.interrupt();
                        return decisions;
                    }
                };
                if line.trim() == "/stop" {
                    self.interrupter.interrupt();
                    return decisions;
                }
                let answer = if review {
                    parse_review(&line)
                } else {
                    parse_answer(&line, narrower(item).is_some())
                };
                match answer {
                    Ok(d) => {
                        decisions.push(
                            d.by_person(self.user_id.clone(), self.user.clone())
                                .via(DecisionPath::Console),
                        );
                        break;
                    }
                    Err(hint) if !line.trim().is_empty() && self.lines.keep(&line) => say(
                        &self.out,
                        &format!("(not an answer: kept, sent when this turn ends) {hint}\n"),
                    ),
                    Err(hint) => say(&self.out, &format!("{hint}\n")),
                }
            }
        }
        decisions
    }
}

/// The word and the feedback after the first comma.
fn split(line: &str) -> (String, Option<String>) {
    let (word, feedback) = match line.split_once(',') {
        Some((w, f)) => (w, Some(f.trim().to_owned()).filter(|f| !f.is_empty())),
        None => (line, None),
    };
    (word.trim().to_ascii_lowercase(), feedback)
}

/// Parses `y`, `n`, `a` (or `yes`, `no`, `always`), and `p` (`pattern`) where a narrower
/// Always allow is `offered`, with optional `, feedback`; the error is what to tell the
/// person.
pub fn parse_answer(line: &str, offered: bool) -> Result<Decision, &'static str> {
    let (word, feedback) = split(line);
    let verdict = match word.as_str() {
        "y" | "yes" => Verdict::Approve,
        "n" | "no" => Verdict::Deny,
        "a" | "always" => Verdict::AlwaysAllow,
        "p" | "pattern" if offered => return Ok(Decision::always_narrower(feedback)),
        "p" | "pattern" => {
            return Err(
                "nothing narrower than the whole tool is offered for this call; answer \
                        y, n or a",
            );
        }
        "c" | "change" => {
            return Err(
                "`c` (change) is for plan reviews; answer y, n or a (text after a comma \
                        is feedback), or /stop to stop the turn",
            );
        }
        _ => {
            return Err(
                "please answer y, n or a (text after a comma is feedback), or /stop to \
                        stop the turn",
            );
        }
    };
    Ok(Decision::new(verdict, feedback))
}

/// Parses a review answer: `y` (accept), `n` (reject) or `c, <note>` (change: annotate the
/// plan; the note is required), the words spelled out too; text after a comma is the note.
pub fn parse_review(line: &str) -> Result<Decision, &'static str> {
    let (word, note) = split(line);
    let verdict = match word.as_str() {
        "y" | "yes" | "accept" => Verdict::Approve,
        "n" | "no" | "reject" => Verdict::Deny,
        "c" | "change" | "annotate" | "note" if note.is_some() => Verdict::Annotate,
        "c" | "change" | "annotate" | "note" => {
            return Err("a change needs its note after a comma: c, do step 2 first");
        }
        "a" | "always" | "p" | "pattern" => {
            return Err(
                "`a` and `p` (always) are for tool calls; a review takes y (accept), n (reject) \
                        or c, <note> (change)",
            );
        }
        _ => return Err("please answer y (accept), n (reject) or c, <note> (change)"),
    };
    Ok(Decision::new(verdict, note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn answers_parse_with_feedback() {
        assert_eq!(parse_answer("y", false), Ok(Decision::approve()));
        assert_eq!(
            parse_answer("n, use the staging db", false),
            Ok(Decision::deny(Some("use the staging db".into())))
        );
        assert_eq!(
            parse_answer(" Always ", true),
            Ok(Decision::new(Verdict::AlwaysAllow, None))
        );
        assert_eq!(
            parse_answer("p, fine", true),
            Ok(Decision::always_narrower(Some("fine".into())))
        );
        assert!(
            parse_answer("p", false)
                .unwrap_err()
                .contains("nothing narrower")
        );
        assert!(parse_answer("maybe", false).is_err());
        assert!(
            parse_answer("c, later", false)
                .unwrap_err()
                .contains("plan reviews")
        );
        assert_eq!(parse_answer("yes,", false).map(|d| d.feedback), Ok(None));
    }

    #[test]
    fn review_answers_parse_and_a_change_needs_its_note() {
        assert_eq!(parse_review("y"), Ok(Decision::approve()));
        assert_eq!(parse_review("accept"), Ok(Decision::approve()));
        assert_eq!(
            parse_review("n, too risky"),
            Ok(Decision::deny(Some("too risky".into())))
        );
        assert_eq!(
            parse_review("c, do step 2 first"),
            Ok(Decision::new(
                Verdict::Annotate,
                Some("do step 2 first".into())
            ))
        );
        assert!(parse_review("c").unwrap_err().contains("needs its note"));
        assert!(parse_review("a").unwrap_err().contains("for tool calls"));
        assert!(parse_review("p").unwrap_err().contains("for tool calls"));
    }

    #[test]
    fn a_call_on_screen_is_asked_by_name_others_by_header() {
        let item = |header: &str| ApprovalItem {
            request_id: "r".into(),
            kind: ApprovalKind::ToolCall,
            call_id: "c".into(),
            name: "bash".into(),
            header: header.into(),
            preview: String::new(),
        };
        assert_eq!(
            question(&item("bash: ls"), 0, 1, true),
            "approve bash? [y]es / [n]o / [a]lways: "
        );
        assert_eq!(
            question(&item("task: x › bash: ls"), 0, 1, false),
            "approve task: x › bash: ls? [y]es / [n]o / [a]lways: "
        );
        assert_eq!(
            question(&item("bash: ls"), 1, 2, true),
            "approve bash: ls (2 of 2)? [y]es / [n]o / [a]lways: "
        );
    }

    #[test]
    fn a_command_offers_its_pattern_beside_the_whole_tool_as_the_card_does() {
        let item = ApprovalItem {
            request_id: "ap_1".into(),
            kind: ApprovalKind::ToolCall,
            call_id: "c".into(),
            name: "bash".into(),
            header: "bash: git status --short".into(),
            preview: "git status --short".into(),
        };
        assert_eq!(
            question(&item, 0, 1, true),
            "approve bash? [y]es / [n]o / [a]lways allow bash / [p] always allow `git status`: "
        );
    }
}
