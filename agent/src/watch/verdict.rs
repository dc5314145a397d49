//! What one poll means for its watch, decided without I/O: wait for the next poll, fire (the
//! condition held, the output changed, or this was the last poll), or stop because the
//! condition raised. Also the message a firing watch writes into its workstream.

use std::time::{Duration, Instant};

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

/// Longest a condition's evaluation may take on the clock, besides its step budget.
pub const EVAL_TIME_CAP: Duration = Duration::from_secs(2);

/// Judges poll number `polls` (1-based) of a watch with `max_polls`, whose condition is
/// `stop_on` (the stored source; `None` fires on a changed output).
pub fn judge(stop_on: Option<&str>, poll: &Poll<'_>, polls: i64, max_polls: i64) -> Verdict {
    judge_until(stop_on, poll, polls, max_polls, None)
}

/// What [`judge_off_runtime`] judges: one poll of one watch, owned so it can cross threads.
#[derive(Debug, Clone)]
pub struct PollJudged {
    /// The condition's source (`None` fires on a changed output).
    pub stop_on: Option<String>,
    /// The poll's output.
    pub output: String,
    /// The poll's exit code.
    pub exit_code: i64,
    /// The previous poll's output.
    pub prev_output: Option<String>,
    /// This poll's number (1-based).
    pub polls: i64,
    /// The watch's `max_polls`.
    pub max_polls: i64,
}

/// [`judge`] on a blocking thread, off the async runtime, capped at `cap` on the clock: a
/// heavy condition never stalls the node's other tasks. A condition that runs out of time,
/// and an evaluation that panics, fail the watch like a condition that raises.
pub async fn judge_off_runtime(job: PollJudged, cap: Duration) -> Verdict {
    let deadline = Instant::now() + cap;
    let task = tokio::task::spawn_blocking(move || {
        let poll = Poll {
            output: &job.output,
            exit_code: job.exit_code,
            prev_output: job.prev_output.as_deref(),
        };
        judge_until(
            job.stop_on.as_deref(),
            &poll,
            job.polls,
            job.max_polls,
            Some(deadline),
        )
    });
    // The evaluator looks at the deadline itself; the extra second covers a thread that
    // starts late on a busy machine.
    match tokio::time::timeout(cap + Duration::from_secs(1), task).await {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "a watch condition's evaluation panicked");
            Verdict::Fail("the condition could not be evaluated (an internal error)".into())
        }
        Err(_) => Verdict::Fail(format!(
            "the condition did not finish within {} s",
            cap.as_secs()
        )),
    }
}

fn judge_until(
    stop_on: Option<&str>,
    poll: &Poll<'_>,
    polls: i64,
    max_polls: i64,
    deadline: Option<Instant>,
) -> Verdict {
    let last = polls >= max_polls;
    let fired = match stop_on {
        Some(source) => {
            let holds = Condition::compile(source)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    match deadline {
                        Some(d) => c.holds_until(poll, d),
                        None => c.holds(poll),
                    }
                    .map_err(|e| e.to_string())
                });
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

    fn heavy(cap_output_keys: usize) -> PollJudged {
        let fields: Vec<String> = (0..cap_output_keys)
            .map(|i| format!("\"k{i}\": {i}"))
            .collect();
        PollJudged {
            stop_on: Some("data == data".into()),
            output: format!("{{{}}}", fields.join(", ")),
            exit_code: 0,
            prev_output: None,
            polls: 1,
            max_polls: 100,
        }
    }

    /// On a runtime with one thread, a task spawned before a heavy condition runs while the
    /// condition is evaluated: evaluation happens elsewhere. (Inline, the task could only run
    /// after `judge_off_runtime` returned.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_heavy_condition_does_not_block_other_tasks_and_fails_its_watch() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let ran = Arc::new(AtomicBool::new(false));
        let other = tokio::spawn({
            let ran = ran.clone();
            async move { ran.store(true, Ordering::SeqCst) }
        });
        let verdict = judge_off_runtime(heavy(6_000), EVAL_TIME_CAP).await;
        assert!(
            ran.load(Ordering::SeqCst),
            "another task ran while the condition was evaluated"
        );
        let Verdict::Fail(e) = verdict else {
            panic!("a condition over its budget fails the watch: {verdict:?}");
        };
        assert!(e.contains("too much work"), "{e}");
        other.await.unwrap();
    }

    #[tokio::test]
    async fn the_wall_clock_cap_ends_an_evaluation() {
        let verdict = judge_off_runtime(heavy(6_000), Duration::ZERO).await;
        assert!(
            matches!(&verdict, Verdict::Fail(e) if e.contains("ran out of time") || e.contains("did not finish")),
            "{verdict:?}"
        );
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
