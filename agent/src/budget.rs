//! Token budgets: how many tokens one person's turns, and one thread, may use per day (UTC).
//!
//! `[budgets]` sets the caps (none by default); an admin changes one person's or one thread's
//! in chat (`/budget`), which the store keeps as a change on record and which is in force
//! until the next. Usage is counted in the database ([`crate::store::usage`]), so every node
//! sees the same figures and a restart forgets nothing.
//!
//! A turn that would start over a budget is not started ([`BudgetRefusal`] says which budget,
//! how much was used, when it resets and who may raise it). A running turn is never cut off:
//! a turn that crosses the cap ends, and the next one is refused. The turn that crosses
//! [`WARN_PERCENT`] of a budget says so once, at its end.

use std::fmt;

use crate::config::BudgetsConfig;
use crate::store::usage::{BudgetScope, UsageOf};
use crate::store::{Store, StoreError};

/// The share of a budget at which the thread is told.
pub const WARN_PERCENT: u64 = 80;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The day a budget counts: from UTC midnight to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Day {
    /// Its start (unix ms).
    pub start: i64,
    /// The next day's start, when budgets reset (unix ms).
    pub end: i64,
}

impl Day {
    /// The day `now` (unix ms) falls in.
    pub fn of(now: i64) -> Self {
        let start = now - now.rem_euclid(DAY_MS);
        Self {
            start,
            end: start + DAY_MS,
        }
    }
}

/// Where a cap comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapSource {
    /// `[budgets]` in the configuration.
    Config,
    /// `/budget`, by this person (a sandpiper user id).
    Chat {
        /// Who set it.
        by: String,
    },
}

/// One budget as it stands today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// A person's or a thread's.
    pub scope: BudgetScope,
    /// Tokens per day; `None`: no cap.
    pub cap: Option<u64>,
    /// Where the cap comes from.
    pub source: CapSource,
    /// Tokens used today.
    pub used: u64,
}

impl Standing {
    /// Whether a turn may start under it.
    pub fn allows_a_turn(&self) -> bool {
        self.cap.is_none_or(|cap| self.used < cap)
    }

    /// Used, in percent of the cap (`None` without a cap).
    pub fn percent(&self) -> Option<u64> {
        self.cap.map(|cap| {
            (self.used.saturating_mul(100))
                .checked_div(cap)
                .unwrap_or(100)
        })
    }
}

/// Why a turn was not started: the one wording every platform shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} daily budget of {cap} tokens is used up ({used} tokens used today), so this message \
     was not answered. It resets at 00:00 UTC, in {}; an admin can raise or lift it with \
     /budget.",
    owner(*scope),
    until(*resets_in_ms)
)]
pub struct BudgetRefusal {
    /// Whose budget.
    pub scope: BudgetScope,
    /// The cap.
    pub cap: u64,
    /// What was used today.
    pub used: u64,
    /// How long until it resets (ms).
    pub resets_in_ms: i64,
}

fn owner(scope: BudgetScope) -> &'static str {
    match scope {
        BudgetScope::Person => "Your",
        BudgetScope::Thread => "This thread's",
    }
}

/// `3h 12m`.
fn until(ms: i64) -> impl fmt::Display {
    let minutes = (ms.max(0) + 59_999) / 60_000;
    let (h, m) = (minutes / 60, minutes % 60);
    fmt::from_fn(move |f| match h {
        0 => write!(f, "{m}m"),
        h => write!(f, "{h}h {m}m"),
    })
}

/// The first budget that refuses a turn now, if any.
pub fn refusal(standings: &[Standing], now: i64) -> Option<BudgetRefusal> {
    let over = standings.iter().find(|s| !s.allows_a_turn())?;
    Some(BudgetRefusal {
        scope: over.scope,
        cap: over.cap.unwrap_or_default(),
        used: over.used,
        resets_in_ms: Day::of(now).end - now,
    })
}

/// The line a turn ends with when it took a budget past [`WARN_PERCENT`] (from `before`,
/// the standing when it started, to `after`).
pub fn warning(before: &Standing, after: &Standing) -> Option<String> {
    let cap = after.cap?;
    let crossed = before.percent().is_some_and(|p| p < WARN_PERCENT)
        && after.percent().is_some_and(|p| p >= WARN_PERCENT);
    crossed.then(|| {
        format!(
            "⚠️ {} daily budget is {}% used ({} of {cap} tokens); it resets at 00:00 UTC.",
            owner(after.scope),
            after.percent().unwrap_or(100).min(100),
            after.used
        )
    })
}

/// The budgets that apply to a turn of `person` in `thread` today, counted in `store`.
pub async fn standings(
    store: &Store,
    config: &BudgetsConfig,
    thread: &str,
    person: Option<&str>,
    day: Day,
) -> Result<Vec<Standing>, StoreError> {
    let mut out = Vec::with_capacity(2);
    if let Some(person) = person {
        let standing = standing(
            store,
            BudgetScope::Person,
            person,
            config.person_daily_tokens,
            day,
        )
        .await?;
        out.push(standing);
    }
    out.push(
        standing(
            store,
            BudgetScope::Thread,
            thread,
            config.thread_daily_tokens,
            day,
        )
        .await?,
    );
    Ok(out)
}

async fn standing(
    store: &Store,
    scope: BudgetScope,
    subject: &str,
    configured: Option<u64>,
    day: Day,
) -> Result<Standing, StoreError> {
    let (cap, source) = match store.budget_change(scope, subject).await? {
        Some(change) => (
            change.daily_tokens.map(|n| u64::try_from(n).unwrap_or(0)),
            CapSource::Chat { by: change.set_by },
        ),
        None => (configured, CapSource::Config),
    };
    let used = match cap {
        // Nobody is told about a budget that does not exist: no query.
        None => 0,
        Some(_) => {
            let of = match scope {
                BudgetScope::Person => UsageOf::Person(subject),
                BudgetScope::Thread => UsageOf::Thread(subject),
            };
            store.usage(of, day.start).await?.tokens()
        }
    };
    Ok(Standing {
        scope,
        cap,
        source,
        used,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn standing(scope: BudgetScope, cap: Option<u64>, used: u64) -> Standing {
        Standing {
            scope,
            cap,
            source: CapSource::Config,
            used,
        }
    }

    #[test]
    fn a_day_runs_from_utc_midnight_to_the_next() {
        let noon = 1_700_000_000_000 - 1_700_000_000_000 % DAY_MS + DAY_MS / 2;
        let day = Day::of(noon);
        assert_eq!((day.start, day.end), (noon - DAY_MS / 2, noon + DAY_MS / 2));
        assert_eq!(Day::of(day.start), day);
        assert_eq!(Day::of(day.end).start, day.end);
    }

    #[test]
    fn the_first_budget_used_up_refuses_and_says_when_it_resets() {
        let day = Day::of(1_700_000_000_000);
        let now = day.end - (3 * 60 + 12) * 60_000;
        let within = [
            standing(BudgetScope::Person, Some(1000), 999),
            standing(BudgetScope::Thread, None, 5000),
        ];
        assert_eq!(refusal(&within, now), None);
        let over = [
            standing(BudgetScope::Person, Some(1000), 400),
            standing(BudgetScope::Thread, Some(2000), 2000),
        ];
        let refused = refusal(&over, now).expect("refused");
        assert_eq!(
            refused.to_string(),
            "This thread's daily budget of 2000 tokens is used up (2000 tokens used today), so \
             this message was not answered. It resets at 00:00 UTC, in 3h 12m; an admin can \
             raise or lift it with /budget."
        );
        let mine = [standing(BudgetScope::Person, Some(10), 11)];
        assert!(
            refusal(&mine, day.end - 30_000)
                .expect("refused")
                .to_string()
                .starts_with("Your daily budget")
        );
        assert!(
            refusal(&mine, day.end - 30_000)
                .expect("refused")
                .to_string()
                .contains("in 1m;")
        );
    }

    #[test]
    fn the_turn_that_crosses_eighty_percent_says_so_once() {
        let s = |used| standing(BudgetScope::Person, Some(1000), used);
        assert_eq!(
            warning(&s(700), &s(850)).as_deref(),
            Some("⚠️ Your daily budget is 85% used (850 of 1000 tokens); it resets at 00:00 UTC.")
        );
        assert_eq!(warning(&s(810), &s(900)), None);
        assert_eq!(warning(&s(100), &s(200)), None);
        let none = standing(BudgetScope::Thread, None, 10_000);
        assert_eq!(warning(&none, &none), None);
        assert_eq!(
            warning(&s(0), &s(1500)).as_deref(),
            Some(
                "⚠️ Your daily budget is 100% used (1500 of 1000 tokens); it resets at 00:00 UTC."
            )
        );
    }
}
