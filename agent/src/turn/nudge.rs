//! Metacognitive nudges: short, ephemeral hints added to the system message of one model call
//! (never stored in history) when a moment suggests that something is worth remembering —
//! after the user corrects the agent, after a tool call is denied, when a workstream resumes
//! after a restart or a long pause, and after a task looks complete.
//!
//! Each kind has a cooldown of [`COOLDOWN`] per workstream, measured on the monotonic clock;
//! "never fired" is its own state, so a fresh machine whose uptime is under the cooldown still
//! fires the first nudge.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Minimum time between two nudges of one kind in one workstream.
pub const COOLDOWN: Duration = Duration::from_secs(300);

/// A pause after which a workstream counts as resumed.
pub const LONG_PAUSE: Duration = Duration::from_secs(60 * 60);

/// Why a nudge fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NudgeKind {
    /// The user's message corrects the agent.
    Correction,
    /// A tool call was just denied.
    Denial,
    /// The workstream resumed after a restart or a long pause.
    Resume,
    /// The previous answer looks like a finished task.
    TaskComplete,
    /// The conversation is about to be compacted, or just was.
    Compaction,
}

impl NudgeKind {
    /// The hint shown to the model.
    pub fn hint(self) -> &'static str {
        match self {
            NudgeKind::Correction => {
                "The user just corrected you. If the correction reflects a lasting preference \
                 or fact (not a one-off slip), save it with the memory tool (type feedback, or \
                 scope user for a personal preference) so it is not repeated."
            }
            NudgeKind::Denial => {
                "A tool call was just denied. If the reason given is a rule that will hold \
                 next time (\"never touch prod\", \"use staging\"), save it as a feedback memory."
            }
            NudgeKind::Resume => {
                "This workstream is resuming after a restart or a long pause. Before acting, \
                 check the relevant memories shown here, and use recall if earlier context is \
                 needed."
            }
            NudgeKind::TaskComplete => {
                "Your last answer finished a task. If anything learned along the way will \
                 matter again (a command that worked, a pitfall, where something lives), save \
                 it with the memory tool; otherwise carry on."
            }
            NudgeKind::Compaction => {
                "This conversation is being compacted to fit your context window: older \
                 messages become a short checkpoint. If something from them will matter in \
                 later threads (a decision, a command that worked, where something lives), \
                 save it with the memory tool now."
            }
        }
    }
}

/// Per-workstream cooldown state. Lives in memory only.
#[derive(Debug, Clone, Default)]
pub struct Nudges {
    last_fired: HashMap<NudgeKind, Instant>,
}

impl Nudges {
    /// Fires `kind` at `now` unless it fired less than [`COOLDOWN`] ago. Returns whether it
    /// fired.
    pub fn fire(&mut self, kind: NudgeKind, now: Instant) -> bool {
        match self.last_fired.get(&kind) {
            Some(at) if now.saturating_duration_since(*at) < COOLDOWN => false,
            _ => {
                self.last_fired.insert(kind, now);
                true
            }
        }
    }
}

/// What the turn loop knows before a model call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signals<'a> {
    /// The user message of this turn, on the turn's first model call; `None` afterwards.
    pub new_user_message: Option<&'a str>,
    /// The previous tool batch of this turn had a denial.
    pub denied: bool,
    /// First turn since the workstream was loaded with history, or after [`LONG_PAUSE`].
    pub resumed: bool,
    /// The final answer of the previous turn, on the turn's first model call.
    pub previous_answer: Option<&'a str>,
}

/// The nudges that apply, after cooldowns.
pub fn due(state: &mut Nudges, signals: &Signals<'_>, now: Instant) -> Vec<NudgeKind> {
    let mut kinds = Vec::new();
    if signals.new_user_message.is_some_and(is_correction) {
        kinds.push(NudgeKind::Correction);
    }
    if signals.denied {
        kinds.push(NudgeKind::Denial);
    }
    if signals.resumed {
        kinds.push(NudgeKind::Resume);
    }
    if signals.previous_answer.is_some_and(looks_complete) {
        kinds.push(NudgeKind::TaskComplete);
    }
    kinds.retain(|k| state.fire(*k, now));
    kinds
}

/// The `<nudges>` block for the system message, or an empty string.
pub fn render(kinds: &[NudgeKind]) -> String {
    if kinds.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n<nudges>\n");
    for k in kinds {
        s.push_str("- ");
        s.push_str(k.hint());
        s.push('\n');
    }
    s.push_str("</nudges>\n");
    s
}

/// "no, that's wrong", "actually, ...", "that's not what I asked", ...
pub fn is_correction(message: &str) -> bool {
    let m = message.trim().to_lowercase();
    let starts = [
        "no,",
        "no.",
        "no ",
        "nope",
        "actually",
        "wrong",
        "incorrect",
        "not quite",
    ];
    let contains = [
        "that's wrong",
        "that is wrong",
        "that's not right",
        "that is not right",
        "that's incorrect",
        "not what i asked",
        "not what i meant",
        "you're wrong",
        "you are wrong",
        "i said",
        "i told you",
    ];
    m == "no" || starts.iter().any(|s| m.starts_with(s)) || contains.iter().any(|c| m.contains(c))
}

/// "Done.", "All tests pass", "I've finished ...", "deployed successfully", ...
pub fn looks_complete(answer: &str) -> bool {
    let a = answer.to_lowercase();
    let phrases = [
        "done.",
        "all done",
        "is done",
        "completed",
        "finished",
        "all tests pass",
        "tests pass",
        "successfully",
        "is fixed",
        "has been fixed",
        "now works",
        "is now working",
    ];
    phrases.iter().any(|p| a.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn first_fire_needs_no_elapsed_time_and_cooldown_holds() {
        // A monotonic clock may be close to its origin on a fresh machine: "never fired" must
        // not be confused with "fired at time zero".
        let t0 = Instant::now();
        let mut n = Nudges::default();
        assert!(n.fire(NudgeKind::Denial, t0));
        assert!(!n.fire(NudgeKind::Denial, t0 + Duration::from_secs(299)));
        assert!(n.fire(NudgeKind::Correction, t0 + Duration::from_secs(1)));
        assert!(n.fire(NudgeKind::Denial, t0 + Duration::from_secs(300)));
    }

    #[test]
    fn detection() {
        for c in [
            "no, that's wrong",
            "Actually, use port 8080",
            "that is not right",
            "No",
        ] {
            assert!(is_correction(c), "{c}");
        }
        for c in ["now run the tests", "notify the team", "nothing else"] {
            assert!(!is_correction(c), "{c}");
        }
        assert!(looks_complete("Done. The build passes and all tests pass."));
        assert!(!looks_complete("Which database should I use?"));
    }

    #[test]
    fn due_applies_cooldowns_per_kind() {
        let mut n = Nudges::default();
        let t0 = Instant::now();
        let s = Signals {
            new_user_message: Some("no, use staging"),
            denied: true,
            resumed: true,
            previous_answer: Some("All done."),
        };
        assert_eq!(
            due(&mut n, &s, t0),
            [
                NudgeKind::Correction,
                NudgeKind::Denial,
                NudgeKind::Resume,
                NudgeKind::TaskComplete
            ]
        );
        assert_eq!(due(&mut n, &s, t0 + Duration::from_secs(10)), []);
        let block = render(&[NudgeKind::Denial]);
        assert!(block.starts_with("\n<nudges>\n- A tool call was just denied."));
    }
}
