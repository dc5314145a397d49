//! Daily budgets: how many tokens, or how much money, one person's turns, one thread and one
//! channel may use per day (UTC).
//!
//! `[budgets]` sets the caps (none by default); an admin changes one person's, one thread's or
//! one channel's in chat (`/budget`) or on the status page, through [`change`]: the store keeps
//! it as a change on record, in force until the next, and the audit trail gets an event. Usage
//! is counted in the database ([`crate::store::usage`]), so every node sees the same figures and
//! a restart forgets nothing. Money is counted at `[usage.prices]` ([`crate::price`]).
//!
//! A turn that would start over a budget is not started ([`BudgetRefusal`] says which budget,
//! how much was used, when it resets and who may raise it). A running turn is never cut off:
//! a turn that crosses the cap ends, and the next one is refused. The turn that crosses
//! [`WARN_PERCENT`] of a budget says so once, at its end.

use std::fmt;

use crate::config::BudgetsConfig;
use crate::price::{Bill, Money, Prices};
use crate::store::audit::{AuditEvent, AuditKind};
use crate::store::usage::{
    BudgetChange, BudgetKey, BudgetScope, BudgetSubjects, BudgetUnit, BudgetUsage, UsageTotals,
};
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
    /// A person's, a thread's or a channel's.
    pub scope: BudgetScope,
    /// Tokens or money.
    pub unit: BudgetUnit,
    /// The cap per day in the unit (tokens, or micro-dollars); `None`: no cap.
    pub cap: Option<u64>,
    /// Where the cap comes from.
    pub source: CapSource,
    /// Used today, in the unit (counted only under a cap).
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
    "{} daily budget of {} is used up ({} used today), so this message was not answered. It \
     resets at 00:00 UTC, in {}; an admin can raise or lift it with /budget.",
    owner(*scope),
    amount(*unit, *cap),
    amount(*unit, *used),
    until(*resets_in_ms)
)]
pub struct BudgetRefusal {
    /// Whose budget.
    pub scope: BudgetScope,
    /// Tokens or money.
    pub unit: BudgetUnit,
    /// The cap (tokens or micro-dollars).
    pub cap: u64,
    /// What was used today (in the same unit).
    pub used: u64,
    /// How long until it resets (ms).
    pub resets_in_ms: i64,
}

fn owner(scope: BudgetScope) -> &'static str {
    match scope {
        BudgetScope::Person => "Your",
        BudgetScope::Thread => "This thread's",
        BudgetScope::Channel => "This channel's",
    }
}

/// `1000 tokens`, `$5.00`.
pub fn amount(unit: BudgetUnit, n: u64) -> String {
    match unit {
        BudgetUnit::Tokens => format!("{n} tokens"),
        BudgetUnit::Cost => Money(n).to_string(),
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
        unit: over.unit,
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
    let of = match after.unit {
        BudgetUnit::Tokens => format!("{} of {cap} tokens", after.used),
        BudgetUnit::Cost => format!("{} of {}", Money(after.used), Money(cap)),
    };
    crossed.then(|| {
        format!(
            "⚠️ {} daily {}budget is {}% used ({of}); it resets at 00:00 UTC.",
            owner(after.scope),
            match after.unit {
                BudgetUnit::Tokens => "",
                BudgetUnit::Cost => "money ",
            },
            after.percent().unwrap_or(100).min(100),
        )
    })
}

/// The scopes and units a turn's budgets come in, in the order they are judged.
const BUDGETS: [(BudgetScope, BudgetUnit); 6] = [
    (BudgetScope::Person, BudgetUnit::Tokens),
    (BudgetScope::Person, BudgetUnit::Cost),
    (BudgetScope::Thread, BudgetUnit::Tokens),
    (BudgetScope::Thread, BudgetUnit::Cost),
    (BudgetScope::Channel, BudgetUnit::Tokens),
    (BudgetScope::Channel, BudgetUnit::Cost),
];

impl BudgetsConfig {
    /// The cap `[budgets]` sets for `scope` in `unit` (tokens, or micro-dollars).
    pub fn cap(&self, scope: BudgetScope, unit: BudgetUnit) -> Option<u64> {
        let cost = |m: Option<Money>| m.map(|m| m.0);
        match (scope, unit) {
            (BudgetScope::Person, BudgetUnit::Tokens) => self.person_daily_tokens,
            (BudgetScope::Thread, BudgetUnit::Tokens) => self.thread_daily_tokens,
            (BudgetScope::Channel, BudgetUnit::Tokens) => self.channel_daily_tokens,
            (BudgetScope::Person, BudgetUnit::Cost) => cost(self.person_daily_cost),
            (BudgetScope::Thread, BudgetUnit::Cost) => cost(self.thread_daily_cost),
            (BudgetScope::Channel, BudgetUnit::Cost) => cost(self.channel_daily_cost),
        }
    }
}

/// The cap of `scope` in `unit` and where it comes from: the change in force, else `config`.
fn cap_of(
    changes: &[BudgetChange],
    config: &BudgetsConfig,
    scope: BudgetScope,
    unit: BudgetUnit,
) -> (Option<u64>, CapSource) {
    match changes.iter().find(|c| c.scope == scope && c.unit == unit) {
        Some(change) => (
            change.daily_cap,
            CapSource::Chat {
                by: change.set_by.clone(),
            },
        ),
        None => (config.cap(scope, unit), CapSource::Config),
    }
}

/// What the rules of budgets read: the configuration and the prices.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    /// `[budgets]`.
    pub config: &'a BudgetsConfig,
    /// `[usage.prices]`.
    pub prices: &'a Prices,
}

/// The budgets that apply to a turn of `person` in `thread` today, counted in `store`: one
/// query when no cap applies (the changes in force: another node may have set one), two
/// when one does.
pub async fn standings(
    store: &Store,
    rules: Rules<'_>,
    thread: &str,
    person: Option<&str>,
    day: Day,
) -> Result<Vec<Standing>, StoreError> {
    let changes = store.budgets_in_force(person, thread).await?;
    let mut out: Vec<Standing> = BUDGETS
        .iter()
        .filter(|(scope, _)| person.is_some() || *scope != BudgetScope::Person)
        .map(|&(scope, unit)| {
            let (cap, source) = cap_of(&changes, rules.config, scope, unit);
            Standing {
                scope,
                unit,
                cap,
                source,
                used: 0,
            }
        })
        .collect();
    let capped = |scope| out.iter().any(|s| s.scope == scope && s.cap.is_some());
    let subjects = BudgetSubjects {
        person: person.filter(|_| capped(BudgetScope::Person)),
        thread: Some(thread).filter(|_| capped(BudgetScope::Thread)),
        channel_of: Some(thread).filter(|_| capped(BudgetScope::Channel)),
    };
    // Nobody is told about a budget that does not exist: no usage query.
    if subjects.person.is_none() && subjects.thread.is_none() && subjects.channel_of.is_none() {
        return Ok(out);
    }
    let usage = store.budget_usage(day.start, subjects).await?;
    for standing in out.iter_mut().filter(|s| s.cap.is_some()) {
        standing.used = used(&usage, standing.scope, standing.unit, rules.prices);
    }
    Ok(out)
}

/// What `usage` adds up to for one budget.
fn used(usage: &[BudgetUsage], scope: BudgetScope, unit: BudgetUnit, prices: &Prices) -> u64 {
    let of = |u: &BudgetUsage| -> UsageTotals {
        match scope {
            BudgetScope::Person => u.person,
            BudgetScope::Thread => u.thread,
            BudgetScope::Channel => u.channel,
        }
    };
    match unit {
        BudgetUnit::Tokens => usage.iter().map(|u| of(u).tokens()).sum(),
        BudgetUnit::Cost => {
            let totals: Vec<(&str, UsageTotals)> =
                usage.iter().map(|u| (u.model.as_str(), of(u))).collect();
            Bill::of(prices, totals.iter().map(|(m, t)| (*m, t)))
                .money
                .0
        }
    }
}

/// Whose budget an admin changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetOf {
    /// A person's (a sandpiper user id).
    Person(String),
    /// A thread's (a workstream key).
    Thread(String),
    /// A channel's (`discord:<id>`, `slack:<team>:<channel>`).
    Channel(String),
}

impl BudgetOf {
    fn scope(&self) -> (BudgetScope, &str) {
        match self {
            BudgetOf::Person(id) => (BudgetScope::Person, id),
            BudgetOf::Thread(key) => (BudgetScope::Thread, key),
            BudgetOf::Channel(key) => (BudgetScope::Channel, key),
        }
    }
}

/// What an admin sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewCap {
    /// A daily cap in tokens.
    Tokens(u64),
    /// A daily cap in money.
    Cost(Money),
    /// No cap any more, in tokens or in money.
    Lift,
}

/// One budget changed: from `old` to `new` (tokens or micro-dollars; `None`: no cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// Which budget.
    pub key: BudgetKey,
    /// The cap in force before.
    pub old: Option<u64>,
    /// The cap from now on.
    pub new: Option<u64>,
}

impl fmt::Display for Changed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&old_to_new(self.key.unit, self.old, self.new))
    }
}

/// `1000 tokens → no cap`, `$5.00 → $10.00`: a change as the audit trail shows it.
pub fn old_to_new(unit: BudgetUnit, old: Option<u64>, new: Option<u64>) -> String {
    let cap = |c: Option<u64>| c.map_or("no cap".to_owned(), |n| amount(unit, n));
    format!("{} → {}", cap(old), cap(new))
}

/// Changes the budget of `of` as `by` (a sandpiper user id: the caller checked that they
/// may) asked: a new cap in tokens or money, or every cap lifted. Each change is stored with
/// its audit event (who, whose budget, old → new). What changed (nothing when a lift finds
/// no cap).
pub async fn change(
    store: &Store,
    config: &BudgetsConfig,
    of: &BudgetOf,
    cap: NewCap,
    by: &str,
) -> Result<Vec<Changed>, StoreError> {
    let (scope, subject) = of.scope();
    let changes = store.budget_of(scope, subject).await?;
    let wanted: Vec<(BudgetUnit, Option<u64>)> = match cap {
        NewCap::Tokens(n) => vec![(BudgetUnit::Tokens, Some(n))],
        NewCap::Cost(m) => vec![(BudgetUnit::Cost, Some(m.0))],
        NewCap::Lift => vec![(BudgetUnit::Tokens, None), (BudgetUnit::Cost, None)],
    };
    let actor = crate::approvals::ledger::name_of(store, Some(by), None).await;
    let subject_name = match scope {
        BudgetScope::Person => Some(store.public_name_or_id(subject).await),
        _ => None,
    };
    let mut done = Vec::new();
    for (unit, new) in wanted {
        let (old, _) = cap_of(&changes, config, scope, unit);
        if cap == NewCap::Lift && old.is_none() {
            continue;
        }
        let key = BudgetKey {
            scope,
            subject: subject.to_owned(),
            unit,
        };
        let event = AuditEvent {
            at: crate::store::now_ms(),
            workstream: match scope {
                BudgetScope::Person => "*".to_owned(),
                _ => subject.to_owned(),
            },
            request: None,
            call_id: None,
            tool: None,
            actor: actor.clone(),
            actor_id: Some(by.to_owned()),
            kind: AuditKind::BudgetChanged {
                scope,
                subject: subject.to_owned(),
                subject_name: subject_name.clone(),
                unit,
                old,
                new,
            },
        };
        store.change_budget(&key, new, by, &event).await?;
        event.log();
        done.push(Changed { key, old, new });
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn standing(scope: BudgetScope, cap: Option<u64>, used: u64) -> Standing {
        Standing {
            scope,
            unit: BudgetUnit::Tokens,
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

    #[test]
    fn a_money_budget_speaks_in_dollars_and_a_channels_names_the_channel() {
        let day = Day::of(1_700_000_000_000);
        let now = day.end - 60 * 60_000;
        let over = Standing {
            scope: BudgetScope::Channel,
            unit: BudgetUnit::Cost,
            cap: Some(5_000_000),
            source: CapSource::Config,
            used: 5_120_000,
        };
        assert_eq!(
            refusal(std::slice::from_ref(&over), now)
                .expect("refused")
                .to_string(),
            "This channel's daily budget of $5.00 is used up ($5.12 used today), so this \
             message was not answered. It resets at 00:00 UTC, in 1h 0m; an admin can raise \
             or lift it with /budget."
        );
        let before = Standing {
            used: 1_000_000,
            ..over.clone()
        };
        let after = Standing {
            used: 4_250_000,
            ..over
        };
        assert_eq!(
            warning(&before, &after).as_deref(),
            Some(
                "⚠️ This channel's daily money budget is 85% used ($4.25 of $5.00); it resets at 00:00 UTC."
            )
        );
    }
}
