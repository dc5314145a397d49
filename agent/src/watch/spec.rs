//! What a watch is asked to do, checked: its name, command, interval, condition and poll
//! budget. The `watch` tool builds one before anyone is asked to approve, so every limit is a
//! clear error at create time; `list` and `/watch list` describe stored watches the same way.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Condition, ConditionError};
use crate::store::watches::{WatchRecord, WatchState};

/// Shortest interval between polls.
pub const MIN_POLL_EVERY: Duration = Duration::from_secs(10);
/// Longest interval between polls.
pub const MAX_POLL_EVERY: Duration = Duration::from_secs(24 * 3600);
/// Interval when none is given.
pub const DEFAULT_POLL_EVERY: Duration = Duration::from_secs(5 * 60);
/// Poll budget when none is given.
pub const DEFAULT_MAX_POLLS: i64 = 100;
/// Largest poll budget.
pub const MAX_MAX_POLLS: i64 = 10_000;
/// Longest name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest command, in bytes.
pub const MAX_COMMAND_BYTES: usize = 8 * 1024;

/// A checked watch, ready to store.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Unique among the workstream's active watches.
    pub name: String,
    /// The shell command polled.
    pub command: String,
    /// Time between polls.
    pub poll_every: Duration,
    /// The stop condition, checked to compile; `None` fires when the output changes.
    pub stop_on: Option<String>,
    /// Polls before it gives up.
    pub max_polls: i64,
}

/// Why a watch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The name is empty, too long, or has characters `/watch cancel` cannot take.
    #[error(
        "`name` must be 1 to {MAX_NAME_CHARS} letters, digits, `-`, `_` or `.` (e.g. \
         `pr-review`), not `{0}`"
    )]
    Name(String),
    /// The command is empty or too long.
    #[error("`command` must be a non-empty shell command of at most {MAX_COMMAND_BYTES} bytes")]
    Command,
    /// The interval is not a duration.
    #[error("`poll_every` must be a duration such as 30s, 5m or 1h, not `{0}`")]
    Interval(String),
    /// The interval is outside 10 s – 24 h.
    #[error("`poll_every` must be between 10s and 24h, not {0}")]
    IntervalRange(String),
    /// The condition is outside the language.
    #[error(transparent)]
    Condition(#[from] ConditionError),
    /// The poll budget is out of range.
    #[error("`max_polls` must be between 1 and {MAX_MAX_POLLS}, not {0}")]
    MaxPolls(i64),
}

impl Spec {
    /// Checks what the model (or a person) asked for.
    pub fn new(
        name: &str,
        command: &str,
        poll_every: Option<&str>,
        stop_on: Option<&str>,
        max_polls: Option<i64>,
    ) -> Result<Self, SpecError> {
        let name = name.trim();
        let name_ok = !name.is_empty()
            && name.chars().count() <= MAX_NAME_CHARS
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return Err(SpecError::Name(name.to_owned()));
        }
        if command.trim().is_empty() || command.len() > MAX_COMMAND_BYTES {
            return Err(SpecError::Command);
        }
        let poll_every = match poll_every.map(str::trim) {
            None | Some("") => DEFAULT_POLL_EVERY,
            Some(text) => {
                let d = crate::config::duration::parse(text)
                    .ok_or_else(|| SpecError::Interval(text.to_owned()))?;
                if !(MIN_POLL_EVERY..=MAX_POLL_EVERY).contains(&d) {
                    return Err(SpecError::IntervalRange(text.to_owned()));
                }
                d
            }
        };
        let stop_on = match stop_on.map(str::trim) {
            None | Some("") => None,
            Some(source) => Some(Condition::compile(source)?.source().to_owned()),
        };
        let max_polls = max_polls.unwrap_or(DEFAULT_MAX_POLLS);
        if !(1..=MAX_MAX_POLLS).contains(&max_polls) {
            return Err(SpecError::MaxPolls(max_polls));
        }
        Ok(Self {
            name: name.to_owned(),
            command: command.to_owned(),
            poll_every,
            stop_on,
            max_polls,
        })
    }

    /// The interval in milliseconds, as stored.
    pub fn poll_every_ms(&self) -> i64 {
        i64::try_from(self.poll_every.as_millis()).unwrap_or(i64::MAX)
    }

    /// One line: name, interval, condition and command.
    pub fn summary(&self) -> String {
        let until = match &self.stop_on {
            Some(c) => format!("until {c}"),
            None => "until the output changes".to_owned(),
        };
        format!(
            "{} every {} {until}, at most {} polls: {}",
            self.name,
            interval(self.poll_every),
            self.max_polls,
            one_line(&self.command, 80)
        )
    }

    /// What the approval card shows: the whole command and condition.
    pub fn preview(&self) -> String {
        let mut text = format!(
            "every {}, at most {} polls\n{}\n",
            interval(self.poll_every),
            self.max_polls,
            self.command
        );
        match &self.stop_on {
            Some(c) => {
                let _ = writeln!(text, "stop_on: {c}");
            }
            None => text.push_str("fires when the output changes\n"),
        }
        text
    }
}

/// The first characters of a watch id, enough to name it in `cancel`.
pub fn short_id(id: &str) -> &str {
    let end = id.char_indices().nth(10).map_or(id.len(), |(i, _)| i);
    &id[..end]
}

/// An interval as people write it: `30s`, `5m`, `1h`, `90s`.
pub fn interval(d: Duration) -> String {
    let secs = d.as_secs();
    if secs != 0 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs != 0 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// How long until `at`, from `now` (unix ms): `now`, `in 4m`, `in 2h`.
fn due_in(at: i64, now: i64) -> String {
    let ms = at.saturating_sub(now);
    if ms <= 0 {
        return "now".into();
    }
    let secs = u64::try_from(ms.saturating_add(999) / 1000).unwrap_or(0);
    let text = if secs < 120 {
        format!("{secs}s")
    } else if secs < 2 * 3600 {
        format!("{}m", secs / 60)
    } else {
        format!("{}h", secs / 3600)
    };
    format!("in {text}")
}

/// The first line of `text`, cut to `max` characters with `…`.
fn one_line(text: &str, max: usize) -> String {
    let first = text.trim().lines().next().unwrap_or_default();
    let mut line: String = first.chars().take(max).collect();
    if line.len() < text.trim().len() {
        line.push('…');
    }
    line
}

/// This thread's watches as `list` and `/watch list` show them: name, id, command, interval,
/// polls so far, next poll and condition.
pub fn list_text(watches: &[WatchRecord], now: i64) -> String {
    if watches.is_empty() {
        return "no watches in this thread".into();
    }
    let mut text = String::new();
    for w in watches {
        let every = Duration::from_millis(u64::try_from(w.watch.poll_every_ms).unwrap_or(0));
        let next = match w.state {
            WatchState::Active => format!("next poll {}", due_in(w.next_poll_at, now)),
            other => other.to_string(),
        };
        let until = w
            .watch
            .stop_on
            .as_deref()
            .map_or_else(|| "output changes".to_owned(), str::to_owned);
        let _ = writeln!(
            text,
            "• {} ({}) every {}, {}/{} polls, {next}; until {until}\n  {}",
            w.watch.name,
            short_id(&w.id),
            interval(every),
            w.polls,
            w.watch.max_polls,
            one_line(&w.watch.command, 100),
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_limits() {
        let s = Spec::new("pr-review", "gh pr view 1", None, None, None).expect("valid");
        assert_eq!((s.poll_every, s.max_polls), (DEFAULT_POLL_EVERY, 100));
        assert!(s.stop_on.is_none());
        let s = Spec::new("ci", "true", Some("30s"), Some("exit_code != 0"), Some(5)).expect("ok");
        assert_eq!(s.poll_every, Duration::from_secs(30));
        assert_eq!(
            Spec::new("ci", "true", Some("9s"), None, None).unwrap_err(),
            SpecError::IntervalRange("9s".into())
        );
        assert_eq!(
            Spec::new("ci", "true", Some("25h"), None, None).unwrap_err(),
            SpecError::IntervalRange("25h".into())
        );
        assert_eq!(
            Spec::new("ci", "true", Some("soon"), None, None).unwrap_err(),
            SpecError::Interval("soon".into())
        );
        assert!(Spec::new("ci", "true", Some("10s"), None, None).is_ok());
        assert!(Spec::new("ci", "true", Some("24h"), None, None).is_ok());
        assert_eq!(
            Spec::new("ci", "true", None, None, Some(0)).unwrap_err(),
            SpecError::MaxPolls(0)
        );
        assert_eq!(
            Spec::new("my watch", "true", None, None, None).unwrap_err(),
            SpecError::Name("my watch".into())
        );
        assert_eq!(
            Spec::new("ci", "  ", None, None, None).unwrap_err(),
            SpecError::Command
        );
        let Err(SpecError::Condition(e)) =
            Spec::new("ci", "true", None, Some("__import__('os')"), None)
        else {
            panic!("an import is refused");
        };
        assert_eq!((e.line, e.column), (1, 1));
    }

    #[test]
    fn summary_and_ids() {
        let s = Spec::new("ci", "gh run list", Some("90s"), Some("changed"), Some(3)).expect("ok");
        assert_eq!(
            s.summary(),
            "ci every 90s until changed, at most 3 polls: gh run list"
        );
        assert_eq!(short_id("w_0123456789abcdef"), "w_01234567");
        assert_eq!(due_in(1_000, 2_000), "now");
        assert_eq!(due_in(61_000, 1_000), "in 60s");
        assert_eq!(due_in(1_000 + 300_000, 1_000), "in 5m");
    }
}
