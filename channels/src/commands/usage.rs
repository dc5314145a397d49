//! `/usage` (the tokens the model used, and with `[usage.prices]` what they cost: yours, this
//! thread's, this channel's, for today, 7 days, 30 days or this month) and `/budget` (the
//! daily budgets here; an admin raises, lowers or lifts a person's, this thread's or this
//! channel's, in tokens or money) — the same text and the same rules on every platform.
//!
//! Who sees what: your own usage, anyone; a thread's, its owner, an approver, an admin, or
//! someone who wrote in it (a stranger to the thread is refused); a
//! channel's, an approver or an admin. Who changes a budget: an admin only.

use std::fmt::Write as _;

use sandpiper_agent::Agent;
use sandpiper_agent::budget::{self as budgets, BudgetOf, CapSource, NewCap, Standing};
use sandpiper_agent::price::{Bill, Money};
use sandpiper_agent::store::usage::{BudgetScope, UsageOf, UsageTotals};

use super::account::{self, Person};
use super::{CommandError, Where};

/// Whose usage `/usage` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageScope {
    /// The person who asks, in every thread.
    Me,
    /// This thread, whoever asked.
    Thread,
    /// Every thread of this channel.
    Channel,
}

/// Since when `/usage` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// Since 00:00 UTC (what budgets count).
    Today,
    /// The last 7 days.
    Week,
    /// The last 30 days.
    Days30,
    /// Since the first of this month, 00:00 UTC.
    Month,
}

impl Period {
    /// The start of the period (unix ms) at `now`.
    fn since(self, now: i64) -> i64 {
        const DAY: i64 = 24 * 60 * 60 * 1000;
        match self {
            Period::Today => sandpiper_agent::budget::Day::of(now).start,
            Period::Week => now - 7 * DAY,
            Period::Days30 => now - 30 * DAY,
            Period::Month => {
                use chrono::{Datelike, TimeZone};
                let today = chrono::Utc.timestamp_millis_opt(now).single();
                today
                    .and_then(|t| t.with_day(1))
                    .map_or(now - 30 * DAY, |first| {
                        sandpiper_agent::budget::Day::of(first.timestamp_millis()).start
                    })
            }
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Period::Today => "today (since 00:00 UTC)",
            Period::Week => "in the last 7 days",
            Period::Days30 => "in the last 30 days",
            Period::Month => "this month (UTC)",
        }
    }
}

/// `usage [me|thread|channel] [today|7d|30d|month]`, in either order on Slack.
pub fn parse_usage(
    scope: Option<&str>,
    period: Option<&str>,
) -> Result<super::Command, CommandError> {
    let mut chosen = (UsageScope::Me, Period::Today);
    for word in [scope, period]
        .into_iter()
        .flatten()
        .flat_map(str::split_whitespace)
    {
        match word.to_ascii_lowercase().as_str() {
            "me" | "mine" => chosen.0 = UsageScope::Me,
            "thread" => chosen.0 = UsageScope::Thread,
            "channel" => chosen.0 = UsageScope::Channel,
            "today" | "day" => chosen.1 = Period::Today,
            "7d" | "week" => chosen.1 = Period::Week,
            "30d" => chosen.1 = Period::Days30,
            "month" => chosen.1 = Period::Month,
            other => {
                return Err(CommandError::Usage(format!(
                    "usage: `{other}` is neither me, thread or channel nor today, 7d, 30d or month"
                )));
            }
        }
    }
    Ok(super::Command::Usage {
        scope: chosen.0,
        period: chosen.1,
    })
}

/// What `/budget` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetAction {
    /// The budgets that apply to the person here, and how much of each is used.
    Show,
    /// Set (or lift) a budget: admins only.
    Set {
        /// `thread`, `channel`, or a person's sandpiper username.
        target: BudgetTarget,
        /// Tokens or dollars per day, or no cap.
        cap: NewCap,
    },
}

/// Whose budget `/budget` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetTarget {
    /// This thread's.
    Thread,
    /// This thread's channel's.
    Channel,
    /// The person with this sandpiper username.
    Person(String),
}

/// `budget`, or `budget <thread|channel|username> <tokens|$dollars|off>`.
pub fn parse_budget(
    target: Option<&str>,
    amount: Option<&str>,
) -> Result<super::Command, CommandError> {
    let usage = || {
        CommandError::Usage(
            "budget: `budget` shows the budgets here; an admin sets one with \
             `budget <thread|channel|username> <tokens per day|$ per day|off>` \
             (e.g. `budget thread 500000`, `budget channel $20`, `budget alice off`)"
                .into(),
        )
    };
    let action = match (target, amount) {
        (None, None) => BudgetAction::Show,
        (Some(target), Some(amount)) => {
            let cap = match amount.trim().to_ascii_lowercase().as_str() {
                "off" | "none" | "unlimited" => NewCap::Lift,
                dollars if dollars.starts_with('$') => {
                    NewCap::Cost(Money::parse(dollars).ok_or_else(usage)?)
                }
                n => NewCap::Tokens(
                    n.replace(['_', ','], "")
                        .parse::<u64>()
                        .map_err(|_| usage())?,
                ),
            };
            let target = match target.trim() {
                t if t.eq_ignore_ascii_case("thread") => BudgetTarget::Thread,
                t if t.eq_ignore_ascii_case("channel") => BudgetTarget::Channel,
                t => BudgetTarget::Person(t.trim_start_matches('@').to_owned()),
            };
            BudgetAction::Set { target, cap }
        }
        _ => return Err(usage()),
    };
    Ok(super::Command::Budget { action })
}

/// Why `/usage` or `/budget` refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UsageRefusal {
    /// A thread's usage, asked by someone who has no part in it.
    #[error(
        "only this thread's owner, an approver, an admin or someone who wrote in it can see its usage"
    )]
    NotInThread,
    /// A channel's usage, asked by someone who is neither approver nor admin.
    #[error("only an approver or an admin can see a channel's usage")]
    NotApprover,
    /// A budget change by someone who is not an admin.
    #[error("only an admin can change a budget")]
    NotAdmin,
}

/// What the rules look at about the person asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Viewer {
    /// They started the thread.
    pub owner: bool,
    /// The thread answered at least one of their turns.
    pub spoke: bool,
}

/// Whether the person may see `scope`'s usage.
pub fn may_see(scope: UsageScope, viewer: Viewer, at: Where<'_>) -> Result<(), UsageRefusal> {
    match scope {
        UsageScope::Me => Ok(()),
        UsageScope::Thread if viewer.owner || viewer.spoke || at.approver || at.admin => Ok(()),
        UsageScope::Thread => Err(UsageRefusal::NotInThread),
        UsageScope::Channel if at.approver || at.admin => Ok(()),
        UsageScope::Channel => Err(UsageRefusal::NotApprover),
    }
}

/// Whether the person may change a budget.
pub fn may_set_budget(at: Where<'_>) -> Result<(), UsageRefusal> {
    if at.admin {
        Ok(())
    } else {
        Err(UsageRefusal::NotAdmin)
    }
}

/// The answer to `/usage`.
pub async fn usage(
    agent: &Agent,
    who: Person<'_>,
    at: Where<'_>,
    scope: UsageScope,
    period: Period,
) -> String {
    let now = sandpiper_agent::store::now_ms();
    let since = period.since(now);
    match usage_text(agent, who, at, scope, since).await {
        Ok(Ok((whose, (totals, bill)))) => describe(&whose, period, &totals, bill.as_ref()),
        Ok(Err(refusal)) => format!("🚫 {refusal}"),
        Err(e) => format!("usage failed: {e}"),
    }
}

type Answer = Result<Result<(String, (UsageTotals, Option<Bill>)), UsageRefusal>, String>;

async fn usage_text(
    agent: &Agent,
    who: Person<'_>,
    at: Where<'_>,
    scope: UsageScope,
    since: i64,
) -> Answer {
    let user = account::user_id(&agent.people(), who)
        .await
        .map_err(|e| e.to_string())?;
    let thread = at.workstream;
    let viewer = match (scope, thread) {
        (UsageScope::Me, _) => Viewer {
            owner: false,
            spoke: false,
        },
        (_, None) => {
            return Err(format!(
                "use {}usage thread or {}usage channel inside a thread I answer in",
                at.prefix, at.prefix
            ));
        }
        (_, Some(ws)) => viewer(agent, ws, &user).await?,
    };
    if let Err(refusal) = may_see(scope, viewer, at) {
        return Ok(Err(refusal));
    }
    let (whose, of) = match (scope, thread) {
        (UsageScope::Me, _) => ("You".to_owned(), UsageOf::Person(&user)),
        (UsageScope::Thread, Some(ws)) => (format!("This thread (`{ws}`)"), UsageOf::Thread(ws)),
        (_, _) => {
            let channel = channel_of(agent, thread.unwrap_or_default()).await?;
            let Some(channel) = channel else {
                return Err("this thread's channel is not known".into());
            };
            let totals = agent
                .usage_priced(UsageOf::Channel(&channel), since)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(Ok((format!("This channel (`{channel}`)"), totals)));
        }
    };
    let totals = agent
        .usage_priced(of, since)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Ok((whose, totals)))
}

/// Whether `user` owns the thread or wrote in it.
async fn viewer(agent: &Agent, workstream: &str, user: &str) -> Result<Viewer, String> {
    let owner = agent
        .workstream(workstream)
        .await
        .map_err(|e| e.to_string())?
        .and_then(|w| w.owner)
        .is_some_and(|owner| owner == user);
    let spoke = agent
        .wrote_in(workstream, user)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Viewer { owner, spoke })
}

/// The channel a thread lives in, as recorded when it was opened.
async fn channel_of(agent: &Agent, workstream: &str) -> Result<Option<String>, String> {
    Ok(agent
        .workstream_connectors(workstream)
        .await
        .map_err(|e| e.to_string())?
        .channel)
}

fn describe(whose: &str, period: Period, t: &UsageTotals, bill: Option<&Bill>) -> String {
    let mut out = format!(
        "{whose} used {} tokens {}: {} prompt ({} from the cache{}), {} answer, in {} model call{}.",
        t.tokens(),
        period.describe(),
        t.input_tokens,
        t.cached_tokens,
        t.cache_percent()
            .map(|p| format!(", {p}%"))
            .unwrap_or_default(),
        t.output_tokens,
        t.calls,
        if t.calls == 1 { "" } else { "s" }
    );
    if t.cache_write_tokens > 0 {
        let _ = write!(
            out,
            " {} prompt tokens were written to the cache.",
            t.cache_write_tokens
        );
    }
    if let Some(bill) = bill.filter(|_| t.calls > 0) {
        let _ = write!(out, " Cost: {bill}.");
    }
    out
}

/// The answer to `/budget`.
pub async fn budget(
    agent: &Agent,
    who: Person<'_>,
    at: Where<'_>,
    action: &BudgetAction,
) -> String {
    let user = match account::user_id(&agent.people(), who).await {
        Ok(id) => id,
        Err(e) => return format!("budget: {e}"),
    };
    match action {
        BudgetAction::Show => show_budgets(agent, &user, at).await,
        BudgetAction::Set { target, cap } => set_budget(agent, &user, at, target, *cap).await,
    }
}

async fn show_budgets(agent: &Agent, user: &str, at: Where<'_>) -> String {
    let now = sandpiper_agent::store::now_ms();
    let thread = at.workstream.unwrap_or_default();
    let standings = match agent.budgets(thread, Some(user), now).await {
        Ok(s) => s,
        Err(e) => return format!("budget failed: {e}"),
    };
    let lines: Vec<String> = standings
        .iter()
        .filter(|s| at.workstream.is_some() || s.scope == BudgetScope::Person)
        .filter(|s| s.cap.is_some() || s.source != CapSource::Config)
        .map(standing_line)
        .collect();
    match lines.is_empty() {
        true => "No daily budget applies to you here.".to_owned(),
        false => lines.join("\n"),
    }
}

fn whose(scope: BudgetScope) -> &'static str {
    match scope {
        BudgetScope::Person => "Your",
        BudgetScope::Thread => "This thread's",
        BudgetScope::Channel => "This channel's",
    }
}

fn standing_line(s: &Standing) -> String {
    let whose = whose(s.scope);
    let kind = match s.unit {
        sandpiper_agent::store::usage::BudgetUnit::Tokens => "daily budget",
        sandpiper_agent::store::usage::BudgetUnit::Cost => "daily money budget",
    };
    let source = match &s.source {
        CapSource::Config => "from [budgets]".to_owned(),
        CapSource::Chat { by } => format!("set with /budget by {by}"),
    };
    match s.cap {
        None => format!("{whose} {kind}: no cap ({source})."),
        Some(cap) => format!(
            "{whose} {kind}: {} ({source}); {} used today ({}%). It resets at 00:00 UTC.",
            budgets::amount(s.unit, cap),
            match s.unit {
                sandpiper_agent::store::usage::BudgetUnit::Tokens => s.used.to_string(),
                sandpiper_agent::store::usage::BudgetUnit::Cost => Money(s.used).to_string(),
            },
            s.percent().unwrap_or(0)
        ),
    }
}

async fn set_budget(
    agent: &Agent,
    user: &str,
    at: Where<'_>,
    target: &BudgetTarget,
    cap: NewCap,
) -> String {
    if let Err(refusal) = may_set_budget(at) {
        return format!("🚫 {refusal}");
    }
    let (of, named) = match budget_of(agent, at, target).await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    let changed = match agent.change_budget(&of, cap, user).await {
        Ok(changed) => changed,
        Err(e) => return format!("budget failed: {e}"),
    };
    match cap {
        NewCap::Tokens(n) => format!("💰 The daily budget of {named} is now {n} tokens."),
        NewCap::Cost(m) => format!("💰 The daily money budget of {named} is now {m}."),
        NewCap::Lift if changed.is_empty() => {
            format!("💰 The daily budget of {named} had no cap; nothing changed.")
        }
        NewCap::Lift => format!("💰 The daily budget of {named} is lifted: no cap."),
    }
}

/// Whose budget `target` names here, and how the answer names it; or the answer when it
/// names nothing.
async fn budget_of(
    agent: &Agent,
    at: Where<'_>,
    target: &BudgetTarget,
) -> Result<(BudgetOf, String), String> {
    let outside = |what: &str| {
        format!(
            "Use {}budget {what} … inside a thread I answer in.",
            at.prefix
        )
    };
    match target {
        BudgetTarget::Thread => match at.workstream {
            Some(ws) => Ok((BudgetOf::Thread(ws.to_owned()), "this thread".to_owned())),
            None => Err(outside("thread")),
        },
        BudgetTarget::Channel => {
            let Some(ws) = at.workstream else {
                return Err(outside("channel"));
            };
            match channel_of(agent, ws).await {
                Ok(Some(channel)) => Ok((
                    BudgetOf::Channel(channel.clone()),
                    format!("this channel (`{channel}`)"),
                )),
                Ok(None) => Err("budget: this thread's channel is not known".to_owned()),
                Err(e) => Err(format!("budget failed: {e}")),
            }
        }
        BudgetTarget::Person(name) => match agent.people().one_named(name).await {
            Ok(Ok(person)) => Ok((BudgetOf::Person(person.id.clone()), person.username.clone())),
            Ok(Err(refusal)) => Err(format!("budget: {refusal}")),
            Err(e) => Err(format!("budget failed: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::Command;
    use pretty_assertions::assert_eq;

    fn at(approver: bool, admin: bool) -> Where<'static> {
        Where {
            workstream: Some("discord:1"),
            prefix: "/",
            admin,
            approver,
        }
    }

    #[test]
    fn who_sees_whose_usage_and_who_sets_budgets() {
        let owner = Viewer {
            owner: true,
            spoke: true,
        };
        let participant = Viewer {
            owner: false,
            spoke: true,
        };
        let stranger = Viewer {
            owner: false,
            spoke: false,
        };
        let plain = at(false, false);
        for viewer in [owner, participant, stranger] {
            assert_eq!(may_see(UsageScope::Me, viewer, plain), Ok(()));
            assert_eq!(
                may_see(UsageScope::Channel, viewer, plain),
                Err(UsageRefusal::NotApprover)
            );
            assert_eq!(may_set_budget(plain), Err(UsageRefusal::NotAdmin));
        }
        assert_eq!(may_see(UsageScope::Thread, owner, plain), Ok(()));
        assert_eq!(may_see(UsageScope::Thread, participant, plain), Ok(()));
        assert_eq!(
            may_see(UsageScope::Thread, stranger, plain),
            Err(UsageRefusal::NotInThread)
        );
        let approver = at(true, false);
        assert_eq!(may_see(UsageScope::Thread, stranger, approver), Ok(()));
        assert_eq!(may_see(UsageScope::Channel, stranger, approver), Ok(()));
        assert_eq!(may_set_budget(approver), Err(UsageRefusal::NotAdmin));
        let admin = at(false, true);
        assert_eq!(may_see(UsageScope::Channel, stranger, admin), Ok(()));
        assert_eq!(may_set_budget(admin), Ok(()));
    }

    #[test]
    fn usage_and_budget_parse_the_same_on_both_platforms() {
        assert_eq!(
            Command::from_text("usage").unwrap(),
            Command::Usage {
                scope: UsageScope::Me,
                period: Period::Today
            }
        );
        assert_eq!(
            Command::from_text("usage 30d thread").unwrap(),
            Command::from_options(
                "usage",
                &[
                    ("scope".into(), "thread".into()),
                    ("period".into(), "30d".into())
                ]
            )
            .unwrap()
        );
        assert!(matches!(
            Command::from_text("usage forever"),
            Err(CommandError::Usage(_))
        ));
        assert_eq!(
            Command::from_text("budget").unwrap(),
            Command::Budget {
                action: BudgetAction::Show
            }
        );
        assert_eq!(
            Command::from_text("budget @alice 200_000").unwrap(),
            Command::Budget {
                action: BudgetAction::Set {
                    target: BudgetTarget::Person("alice".into()),
                    cap: NewCap::Tokens(200_000)
                }
            }
        );
        assert_eq!(
            Command::from_options(
                "budget",
                &[
                    ("target".into(), "thread".into()),
                    ("cap".into(), "off".into())
                ]
            )
            .unwrap(),
            Command::Budget {
                action: BudgetAction::Set {
                    target: BudgetTarget::Thread,
                    cap: NewCap::Lift
                }
            }
        );
        assert_eq!(
            Command::from_text("budget channel $12.50").unwrap(),
            Command::Budget {
                action: BudgetAction::Set {
                    target: BudgetTarget::Channel,
                    cap: NewCap::Cost(Money(12_500_000))
                }
            }
        );
        assert!(matches!(
            Command::from_text("budget channel $12.5.0"),
            Err(CommandError::Usage(_))
        ));
        assert!(matches!(
            Command::from_text("budget thread"),
            Err(CommandError::Usage(_))
        ));
        assert!(matches!(
            Command::from_text("budget thread lots"),
            Err(CommandError::Usage(_))
        ));
    }

    #[test]
    fn a_month_starts_on_the_first_at_midnight_utc() {
        use chrono::TimeZone;
        let now = chrono::Utc.with_ymd_and_hms(2026, 3, 17, 15, 4, 5).unwrap();
        let first = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        assert_eq!(
            Period::Month.since(now.timestamp_millis()),
            first.timestamp_millis()
        );
    }
}
