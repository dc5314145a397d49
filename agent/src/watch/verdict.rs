//! What one poll means for its watch, decided without I/O: wait for the next poll, fire (the
//! condition held, the output changed, or this was the last poll), or stop because the
//! condition raised. Also the message a firing watch writes into its workstream.

use super::{Condition, Poll};
use crate::output::truncate_output;
use crate::store::watches::{WATCH_MESSAGE_PREFIX, WatchRecord, WatchState};

/// Most bytes of a poll's output quoted in the message a firing watch writes.
pub const QUOTED_OUTPUT_BYTES: usize = 16 * 1024;

/// Why a watch fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fired {
    /// Its `stop_on` held.
    Condition,
    /// It has no `stop_on` and the output differs from the previous poll's.
    Changed,
    /// It reached `max_polls` without firing; the last poll is reported anyway.
    LastPoll,
}

impl Fired {
    /// The state the watch ends in.
    pub fn state(self) -> WatchState {
        match self {
            Fired::Condition | Fired::Changed => WatchState::Fired,
            Fired::LastPoll => WatchState::Exhausted,
        }
    }
}

/// What to do after a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Poll again later.
    Wait,
    /// Tell the workstream, and end the watch.
    Fire(Fired),
    /// The condition raised (or no longer compiles): say so once and end the watch.
    Fail(String),
}

/// Judges poll number `polls` (1-based) of a watch with `max_polls`, whose condition is
/// `stop_on` (the stored source; `None` fires on a changed output).
pub fn judge(stop_on: Option<&str>, poll: &Poll<'_>, polls: i64, max_polls: i64) -> Verdict {
    let last = polls >= max_polls;
    let fired = match stop_on {
        Some(source) => {
            let holds = Condition::compile(source)
                .map_err(|e| e.to_string())
                .and_then(|c| c.holds(poll).map_err(|e| e.to_string()));
            match holds {
                Ok(true) => Some(Fired::Condition),
                Ok(false) => None,
                Err(e) => return Verdict::Fail(e),
            }
        }
        // The first poll only records what the output is.
        None => poll
            .prev_output
            .is_some_and(|prev| prev != poll.output)
            .then_some(Fired::Changed),
    };
    match fired {
        Some(why) => Verdict::Fire(why),
        None if last => Verdict::Fire(Fired::LastPoll),
        None => Verdict::Wait,
    }
}

/// The synthetic user message a firing watch writes into its workstream (what the model
/// reads), and the one line the thread shows before the turn starts.
pub fn message(watch: &WatchRecord, why: Fired, polls: i64, poll: &Poll<'_>) -> (String, String) {
    let name = &watch.watch.name;
    let (head, reason) = match why {
        Fired::Condition => (
            format!("fired after {polls} poll(s)"),
            format!(
                "its condition held: {}",
                watch.watch.stop_on.as_deref().unwrap_or_default()
            ),
        ),
        Fired::Changed => (
            format!("fired after {polls} poll(s)"),
            "its output changed".to_owned(),
        ),
        Fired::LastPoll => (
            format!(
                "ended after its last poll ({polls} of {})",
                watch.watch.max_polls
            ),
            match &watch.watch.stop_on {
                Some(c) => format!("its condition never held: {c}"),
                None => "its output never changed".to_owned(),
            },
        ),
    };
    let output = if poll.output.is_empty() {
        "[no output]".to_owned()
    } else {
        truncate_output(poll.output, QUOTED_OUTPUT_BYTES)
    };
    let text = format!(
        "{WATCH_MESSAGE_PREFIX}{name} {head}] {reason}.\ncommand: {}\nexit code: {}\noutput:\n{output}",
        watch.watch.command, poll.exit_code
    );
    let shown = format!("⏰ watch `{name}` {head}: {reason}");
    (text, shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll<'a>(output: &'a str, prev: Option<&'a str>) -> Poll<'a> {
        Poll {
            output,
            exit_code: 0,
            prev_output: prev,
        }
    }

    #[test]
    fn a_condition_fires_waits_or_fails() {
        let merged = r#"data["state"] == "MERGED""#;
        assert_eq!(
            judge(Some(merged), &poll(r#"{"state":"MERGED"}"#, None), 1, 100),
            Verdict::Fire(Fired::Condition)
        );
        assert_eq!(
            judge(Some(merged), &poll(r#"{"state":"OPEN"}"#, None), 1, 100),
            Verdict::Wait
        );
        assert_eq!(
            judge(Some(merged), &poll(r#"{"state":"OPEN"}"#, None), 100, 100),
            Verdict::Fire(Fired::LastPoll)
        );
        // Not JSON: data is None, and None["state"] raises.
        let Verdict::Fail(e) = judge(Some(merged), &poll("gh: not found", None), 1, 100) else {
            panic!("a condition that raises fails the watch");
        };
        assert!(e.contains("None"), "{e}");
    }

    #[test]
    fn without_a_condition_a_changed_output_fires() {
        assert_eq!(judge(None, &poll("a", None), 1, 100), Verdict::Wait);
        assert_eq!(judge(None, &poll("a", Some("a")), 2, 100), Verdict::Wait);
        assert_eq!(
            judge(None, &poll("b", Some("a")), 3, 100),
            Verdict::Fire(Fired::Changed)
        );
        assert_eq!(
            judge(None, &poll("a", Some("a")), 3, 3),
            Verdict::Fire(Fired::LastPoll)
        );
        assert_eq!(
            judge(None, &poll("a", None), 1, 1),
            Verdict::Fire(Fired::LastPoll)
        );
    }
}
