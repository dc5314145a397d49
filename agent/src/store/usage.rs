//! The `model_usage` table (every model call's tokens, with the thread, the person whose
//! message started the turn and the model) and `budget_changes` (what `/budget` set, kept
//! whole as the record of who changed which budget when).
//!
//! A turn's answers are counted in the statement that appends them
//! ([`Store::append_answer`]); the calls that append no message (a compaction's summary, a
//! web page read for a question) go through [`Store::record_usage`]. Budgets are counted
//! here, in the database, so every node sees the same figures and a restart forgets nothing.

use std::borrow::Cow;

use super::{Store, StoreError, now_ms};
use crate::model::Usage;
use crate::workstream::WorkstreamKey;

/// One model call, as counted.
#[derive(Debug, Clone)]
pub struct ModelCall<'a> {
    /// The thread it counts for: a sub-agent's call counts for the thread that started it.
    pub thread: Cow<'a, str>,
    /// Whose message started the turn (a sandpiper user id); `None` for a watch's turn or a
    /// notification reply's.
    pub person: Option<&'a str>,
    /// The model that answered.
    pub model: &'a str,
    /// What the provider reported.
    pub usage: Usage,
}

impl<'a> ModelCall<'a> {
    /// A call made in `workstream` (a thread, or a sub-agent's child of one).
    pub fn new(workstream: &'a str, person: Option<&'a str>, model: &'a str, usage: Usage) -> Self {
        Self {
            thread: thread_of(workstream),
            person,
            model,
            usage,
        }
    }
}

/// The thread a workstream key counts for: a sub-agent's child counts for the thread at the
/// top of it, every other key for itself.
pub fn thread_of(workstream: &str) -> Cow<'_, str> {
    match workstream.parse::<WorkstreamKey>() {
        Ok(key @ WorkstreamKey::Child { .. }) => Cow::Owned(key.root().to_string()),
        _ => Cow::Borrowed(workstream),
    }
}

pub use crate::price::UsageTotals;

/// Whose usage to sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageOf<'a> {
    /// One person's, in every thread.
    Person(&'a str),
    /// One thread's (its sub-agents' included), whoever asked.
    Thread(&'a str),
    /// The threads of one channel.
    Channel(&'a str),
    /// Everything.
    Everyone,
}

/// How `sandpiper usage` groups its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageBy {
    /// Per person (sandpiper user id).
    Person,
    /// Per thread.
    Thread,
    /// Per channel.
    Channel,
    /// Per model.
    Model,
}

/// A row of [`Store::usage_by`]: the group's name (`None`: no person, no known channel) and
/// its totals.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct UsageRow {
    /// The person, thread, channel or model.
    pub name: Option<String>,
    /// What it used.
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// A row of [`Store::usage_per_day`].
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DailyUsage {
    /// The day's start (UTC midnight, unix ms).
    pub day: i64,
    /// The thread (a workstream key).
    pub thread: String,
    /// The person whose turn it was, if any.
    pub person: Option<String>,
    /// Prompt and output tokens.
    pub tokens: i64,
}

pub use super::budget_kinds::{BudgetScope, BudgetUnit};

/// One budget: whose, and in what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetKey {
    /// A person's, a thread's or a channel's.
    pub scope: BudgetScope,
    /// The person's user id, the thread's key or the channel's key.
    pub subject: String,
    /// Tokens or money.
    pub unit: BudgetUnit,
}

/// A budget set in chat (or on the status page), in force until the next change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetChange {
    /// Whose budget.
    pub scope: BudgetScope,
    /// Tokens or money.
    pub unit: BudgetUnit,
    /// The cap per day, in the unit (tokens, or micro-dollars); `None`: no cap.
    pub daily_cap: Option<u64>,
    /// Who set it (a sandpiper user id).
    pub set_by: String,
}

/// Usage of one model today, for each budget of a turn (zero for a budget not asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetUsage {
    /// The model.
    pub model: String,
    /// The person's calls.
    pub person: UsageTotals,
    /// The thread's.
    pub thread: UsageTotals,
    /// The thread's channel's.
    pub channel: UsageTotals,
}

/// Which budgets' usage [`Store::budget_usage`] counts: `None` skips one.
#[derive(Debug, Clone, Copy, Default)]
pub struct BudgetSubjects<'a> {
    /// The person (a user id).
    pub person: Option<&'a str>,
    /// The thread (a workstream key).
    pub thread: Option<&'a str>,
    /// A thread whose channel is counted (its key: the channel is the one recorded for it,
    /// or for a thread not stored yet the one its key names).
    pub channel_of: Option<&'a str>,
}

// Macros rather than constants, so that `concat!` can join them at compile time.
macro_rules! per_model {
    ($where:literal) => {
        concat!(
            "SELECT u.model AS model, COUNT(*) AS calls, \
             CAST(COALESCE(SUM(u.input_tokens), 0) AS BIGINT) AS input_tokens, \
             CAST(COALESCE(SUM(u.cached_tokens), 0) AS BIGINT) AS cached_tokens, \
             CAST(COALESCE(SUM(u.cache_write_tokens), 0) AS BIGINT) AS cache_write_tokens, \
             CAST(COALESCE(SUM(u.output_tokens), 0) AS BIGINT) AS output_tokens \
             FROM model_usage u ",
            $where,
            " GROUP BY u.model"
        )
    };
}
macro_rules! split {
    ($name:literal, $group:literal) => {
        concat!(
            "SELECT ",
            $name,
            " AS name, u.model AS model, COUNT(*) AS calls, \
             CAST(COALESCE(SUM(u.input_tokens), 0) AS BIGINT) AS input_tokens, \
             CAST(COALESCE(SUM(u.cached_tokens), 0) AS BIGINT) AS cached_tokens, \
             CAST(COALESCE(SUM(u.cache_write_tokens), 0) AS BIGINT) AS cache_write_tokens, \
             CAST(COALESCE(SUM(u.output_tokens), 0) AS BIGINT) AS output_tokens \
             FROM model_usage u LEFT JOIN workstreams w ON w.key = u.workstream \
             WHERE u.created_at >= $1 GROUP BY ",
            $group,
            ", u.model"
        )
    };
}
macro_rules! totals {
    () => {
        "SELECT COUNT(*) AS calls, \
         CAST(COALESCE(SUM(u.input_tokens), 0) AS BIGINT) AS input_tokens, \
         CAST(COALESCE(SUM(u.cached_tokens), 0) AS BIGINT) AS cached_tokens, \
         CAST(COALESCE(SUM(u.cache_write_tokens), 0) AS BIGINT) AS cache_write_tokens, \
         CAST(COALESCE(SUM(u.output_tokens), 0) AS BIGINT) AS output_tokens \
         FROM model_usage u "
    };
}
macro_rules! grouped {
    ($name:literal, $group:literal) => {
        concat!(
            "SELECT ",
            $name,
            " AS name, COUNT(*) AS calls, \
             CAST(COALESCE(SUM(u.input_tokens), 0) AS BIGINT) AS input_tokens, \
             CAST(COALESCE(SUM(u.cached_tokens), 0) AS BIGINT) AS cached_tokens, \
             CAST(COALESCE(SUM(u.cache_write_tokens), 0) AS BIGINT) AS cache_write_tokens, \
             CAST(COALESCE(SUM(u.output_tokens), 0) AS BIGINT) AS output_tokens \
             FROM model_usage u LEFT JOIN workstreams w ON w.key = u.workstream \
             WHERE u.created_at >= $1 GROUP BY ",
            $group,
            " ORDER BY input_tokens + output_tokens DESC"
        )
    };
}

impl Store {
    /// Counts a model call that appends no message (a compaction's summary, a page read for
    /// a question). A turn's answers are counted by [`Store::append_answer`].
    pub async fn record_usage(&self, call: &ModelCall<'_>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO model_usage (workstream, person, model, input_tokens, cached_tokens, \
             cache_write_tokens, output_tokens, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(call.thread.as_ref())
        .bind(call.person)
        .bind(call.model)
        .bind(count(call.usage.input_tokens))
        .bind(count(call.usage.cached_tokens))
        .bind(count(call.usage.cache_write_tokens))
        .bind(count(call.usage.output_tokens))
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// What `of` used since `since` (unix ms).
    pub async fn usage(&self, of: UsageOf<'_>, since: i64) -> Result<UsageTotals, StoreError> {
        let (sql, subject) = match of {
            UsageOf::Person(id) => (
                concat!(totals!(), "WHERE u.created_at >= $1 AND u.person = $2"),
                Some(id),
            ),
            UsageOf::Thread(key) => (
                concat!(totals!(), "WHERE u.created_at >= $1 AND u.workstream = $2"),
                Some(key),
            ),
            UsageOf::Channel(channel) => (
                concat!(
                    totals!(),
                    "JOIN workstreams w ON w.key = u.workstream \
                     WHERE u.created_at >= $1 AND w.channel = $2"
                ),
                Some(channel),
            ),
            UsageOf::Everyone => (concat!(totals!(), "WHERE u.created_at >= $1"), None),
        };
        let mut query = sqlx::query_as(sql).bind(since);
        if let Some(subject) = subject {
            query = query.bind(subject);
        }
        Ok(query.fetch_one(self.pool()).await?)
    }

    /// Usage since `since` (unix ms), one row per person, thread, channel or model, the
    /// largest first.
    pub async fn usage_by(&self, by: UsageBy, since: i64) -> Result<Vec<UsageRow>, StoreError> {
        let sql = match by {
            UsageBy::Person => grouped!("u.person", "u.person"),
            UsageBy::Thread => grouped!("u.workstream", "u.workstream"),
            UsageBy::Channel => grouped!("w.channel", "w.channel"),
            UsageBy::Model => grouped!("u.model", "u.model"),
        };
        Ok(sqlx::query_as(sql)
            .bind(since)
            .fetch_all(self.pool())
            .await?)
    }

    /// Tokens (prompt and output) per UTC day since `since` (unix ms), one row per day,
    /// thread and person, oldest day first: the status page sums what its reader may see.
    pub async fn usage_per_day(&self, since: i64) -> Result<Vec<DailyUsage>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT CAST((u.created_at / 86400000) * 86400000 AS BIGINT) AS day, \
             u.workstream AS thread, u.person AS person, \
             CAST(COALESCE(SUM(u.input_tokens + u.output_tokens), 0) AS BIGINT) AS tokens \
             FROM model_usage u WHERE u.created_at >= $1 \
             GROUP BY day, u.workstream, u.person ORDER BY day, thread, person",
        )
        .bind(since)
        .fetch_all(self.pool())
        .await?)
    }

    /// Usage since `since` (unix ms), one row per person, thread, channel or model and
    /// model: what [`crate::price::fold_by_group`] turns into rows with their cost.
    pub async fn usage_split(
        &self,
        by: UsageBy,
        since: i64,
    ) -> Result<Vec<(Option<String>, String, UsageTotals)>, StoreError> {
        let sql = match by {
            UsageBy::Person => split!("u.person", "u.person"),
            UsageBy::Thread => split!("u.workstream", "u.workstream"),
            UsageBy::Channel => split!("w.channel", "w.channel"),
            UsageBy::Model => split!("u.model", "u.model"),
        };
        let rows: Vec<SplitRow> = sqlx::query_as(sql)
            .bind(since)
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.name, r.model, r.totals))
            .collect())
    }

    /// What `of` used since `since` (unix ms), per model: what a bill is made of.
    pub async fn usage_per_model(
        &self,
        of: UsageOf<'_>,
        since: i64,
    ) -> Result<Vec<(String, UsageTotals)>, StoreError> {
        let (sql, subject) = match of {
            UsageOf::Person(id) => (
                per_model!("WHERE u.created_at >= $1 AND u.person = $2"),
                Some(id),
            ),
            UsageOf::Thread(key) => (
                per_model!("WHERE u.created_at >= $1 AND u.workstream = $2"),
                Some(key),
            ),
            UsageOf::Channel(channel) => (
                per_model!(
                    "JOIN workstreams w ON w.key = u.workstream \
                     WHERE u.created_at >= $1 AND w.channel = $2"
                ),
                Some(channel),
            ),
            UsageOf::Everyone => (per_model!("WHERE u.created_at >= $1"), None),
        };
        let mut query = sqlx::query_as::<_, SplitRow>(sql).bind(since);
        if let Some(subject) = subject {
            query = query.bind(subject);
        }
        let rows = query.fetch_all(self.pool()).await?;
        Ok(rows.into_iter().map(|r| (r.model, r.totals)).collect())
    }

    /// The changes in force for one budget's subject (one per unit at most).
    pub async fn budget_of(
        &self,
        scope: BudgetScope,
        subject: &str,
    ) -> Result<Vec<BudgetChange>, StoreError> {
        let rows: Vec<ChangeRow> = sqlx::query_as(
            "SELECT b.scope, b.unit, b.daily_cap, b.set_by FROM budget_changes b \
             WHERE b.id IN (SELECT MAX(c.id) FROM budget_changes c \
             WHERE c.scope = $1 AND c.subject = $2 GROUP BY c.unit)",
        )
        .bind(scope.as_str())
        .bind(subject)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(ChangeRow::parse).collect()
    }

    /// The budgets set in chat that are in force for a turn of `person` in `thread` (the
    /// newest change of each budget of the person, the thread and the thread's channel): one
    /// query, asked before every turn, since another node may have changed one.
    pub async fn budgets_in_force(
        &self,
        person: Option<&str>,
        thread: &str,
    ) -> Result<Vec<BudgetChange>, StoreError> {
        let rows: Vec<ChangeRow> = sqlx::query_as(
            "SELECT b.scope, b.unit, b.daily_cap, b.set_by FROM budget_changes b \
             WHERE b.id IN (SELECT MAX(c.id) FROM budget_changes c \
             WHERE (c.scope = 'person' AND c.subject = $1) \
             OR (c.scope = 'thread' AND c.subject = $2) \
             OR (c.scope = 'channel' AND c.subject = COALESCE( \
                 (SELECT w.channel FROM workstreams w WHERE w.key = $2), $3)) \
             GROUP BY c.scope, c.unit)",
        )
        .bind(person)
        .bind(thread)
        // A thread not stored yet (its first turn) is in the channel its key names, if any.
        .bind(crate::connectors::channel_from_key(thread))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(ChangeRow::parse).collect()
    }

    /// Today's usage (since `since`) of the budgets `of` names, per model: one query for the
    /// person's, the thread's and the channel's together.
    pub async fn budget_usage(
        &self,
        since: i64,
        of: BudgetSubjects<'_>,
    ) -> Result<Vec<BudgetUsage>, StoreError> {
        macro_rules! sums {
            ($when:literal) => {
                concat!(
                    "CAST(COALESCE(SUM(CASE WHEN ",
                    $when,
                    " THEN u.input_tokens END), 0) AS BIGINT), ",
                    "CAST(COALESCE(SUM(CASE WHEN ",
                    $when,
                    " THEN u.cached_tokens END), 0) AS BIGINT), ",
                    "CAST(COALESCE(SUM(CASE WHEN ",
                    $when,
                    " THEN u.output_tokens END), 0) AS BIGINT), ",
                    "CAST(COALESCE(SUM(CASE WHEN ",
                    $when,
                    " THEN 1 END), 0) AS BIGINT)"
                )
            };
        }
        type Sums = (i64, i64, i64, i64);
        let sql = concat!(
            "SELECT u.model, ",
            sums!("u.person = $2"),
            ", ",
            sums!("u.workstream = $3"),
            ", ",
            sums!("w.channel = c.channel"),
            " FROM model_usage u LEFT JOIN workstreams w ON w.key = u.workstream \
             LEFT JOIN (SELECT COALESCE((SELECT channel FROM workstreams WHERE key = $4), $5) \
             AS channel) c ON 1 = 1 \
             WHERE u.created_at >= $1 \
             AND (u.person = $2 OR u.workstream = $3 OR w.channel = c.channel) \
             GROUP BY u.model"
        );
        let rows: Vec<BudgetRow> = sqlx::query_as(sql)
            .bind(since)
            .bind(of.person)
            .bind(of.thread)
            .bind(of.channel_of)
            .bind(of.channel_of.and_then(crate::connectors::channel_from_key))
            .fetch_all(self.pool())
            .await?;
        let totals = |(input_tokens, cached_tokens, output_tokens, calls): Sums| UsageTotals {
            calls,
            input_tokens,
            cached_tokens,
            cache_write_tokens: 0,
            output_tokens,
        };
        Ok(rows
            .into_iter()
            .map(|(model, a, b, c, d, e, f, g, h, i, j, k, l)| BudgetUsage {
                model,
                person: totals((a, b, c, d)),
                thread: totals((e, f, g, h)),
                channel: totals((i, j, k, l)),
            })
            .collect())
    }

    /// Records a budget change: `key` is capped at `daily_cap` from now on (`None` lifts
    /// it), set by `by`; `audit` (the change as the audit trail tells it) is written in the
    /// same transaction. The earlier changes stay on record.
    pub async fn change_budget(
        &self,
        key: &BudgetKey,
        daily_cap: Option<u64>,
        by: &str,
        audit: &super::audit::AuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO budget_changes (scope, subject, unit, daily_cap, set_by, set_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(key.scope.as_str())
        .bind(&key.subject)
        .bind(key.unit.as_str())
        .bind(daily_cap.map(count))
        .bind(by)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        Self::insert_audits(&mut *tx, std::slice::from_ref(audit)).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// A row of [`Store::budget_usage`]: the model, then calls' prompt, cached and answer tokens
/// and count for the person, the thread and the channel.
type BudgetRow = (
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
);

/// A `budget_changes` row as read.
#[derive(sqlx::FromRow)]
struct ChangeRow {
    scope: String,
    unit: String,
    daily_cap: Option<i64>,
    set_by: String,
}

impl ChangeRow {
    fn parse(self) -> Result<BudgetChange, StoreError> {
        let corrupt = || StoreError::Corrupt {
            table: "budget_changes",
            message: format!("scope `{}`, unit `{}`", self.scope, self.unit),
        };
        Ok(BudgetChange {
            scope: BudgetScope::parse(&self.scope).ok_or_else(corrupt)?,
            unit: BudgetUnit::parse(&self.unit).ok_or_else(corrupt)?,
            daily_cap: self.daily_cap.map(|n| u64::try_from(n).unwrap_or(0)),
            set_by: self.set_by,
        })
    }
}

/// A row of usage per group and model.
#[derive(sqlx::FromRow)]
struct SplitRow {
    #[sqlx(default)]
    name: Option<String>,
    model: String,
    #[sqlx(flatten)]
    totals: UsageTotals,
}

/// A token count as the database stores it.
pub(super) fn count(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use pretty_assertions::assert_eq;

    fn usage(input: u64, cached: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cached_tokens: cached,
            cache_write_tokens: 0,
        }
    }

    #[tokio::test]
    async fn calls_are_summed_per_person_thread_channel_and_model() {
        let store = Store::memory().await.unwrap();
        store
            .ensure_workstream("slack:T:C1:1.0", Some("alice"))
            .await
            .unwrap();
        store.ensure_workstream("console:x", None).await.unwrap();
        let answer = |seq: i64, person, u| {
            let store = store.clone();
            async move {
                let call = ModelCall::new("slack:T:C1:1.0", person, "m1", u);
                store
                    .append_answer("slack:T:C1:1.0", seq, &Message::assistant("a"), &call)
                    .await
                    .unwrap();
            }
        };
        answer(0, Some("alice"), usage(100, 80, 10)).await;
        answer(1, Some("bob"), usage(50, 0, 5)).await;
        // A sub-agent's call counts for its thread; a summary appends no message.
        store
            .record_usage(&ModelCall::new(
                "slack:T:C1:1.0/task:c1",
                Some("alice"),
                "m2",
                usage(30, 0, 3),
            ))
            .await
            .unwrap();
        store
            .record_usage(&ModelCall::new("console:x", None, "m1", usage(7, 0, 1)))
            .await
            .unwrap();
        let alice = store.usage(UsageOf::Person("alice"), 0).await.unwrap();
        assert_eq!(
            alice,
            UsageTotals {
                calls: 2,
                input_tokens: 130,
                cached_tokens: 80,
                cache_write_tokens: 0,
                output_tokens: 13,
            }
        );
        assert_eq!(alice.tokens(), 143);
        assert_eq!(alice.cache_percent(), Some(61));
        let thread = store
            .usage(UsageOf::Thread("slack:T:C1:1.0"), 0)
            .await
            .unwrap();
        assert_eq!((thread.calls, thread.tokens()), (3, 198));
        let channel = store
            .usage(UsageOf::Channel("slack:T:C1"), 0)
            .await
            .unwrap();
        assert_eq!(channel, thread);
        assert_eq!(store.usage(UsageOf::Everyone, 0).await.unwrap().calls, 4);
        assert_eq!(
            store
                .usage(UsageOf::Person("alice"), now_ms() + 1000)
                .await
                .unwrap(),
            UsageTotals::default()
        );
        let by_model: Vec<(Option<String>, i64)> = store
            .usage_by(UsageBy::Model, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.name, r.totals.calls))
            .collect();
        assert_eq!(
            by_model,
            vec![(Some("m1".into()), 3), (Some("m2".into()), 1)]
        );
        let by_person: Vec<Option<String>> = store
            .usage_by(UsageBy::Person, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(
            by_person,
            vec![Some("alice".into()), Some("bob".into()), None]
        );
        let by_channel = store.usage_by(UsageBy::Channel, 0).await.unwrap();
        assert_eq!(by_channel[0].name.as_deref(), Some("slack:T:C1"));
    }

    fn event() -> crate::store::audit::AuditEvent {
        crate::store::audit::AuditEvent {
            at: now_ms(),
            workstream: "*".into(),
            request: None,
            call_id: None,
            tool: None,
            actor: None,
            actor_id: Some("admin".into()),
            kind: crate::store::audit::AuditKind::TimedOut,
        }
    }

    fn key(scope: BudgetScope, subject: &str, unit: BudgetUnit) -> BudgetKey {
        BudgetKey {
            scope,
            subject: subject.into(),
            unit,
        }
    }

    #[tokio::test]
    async fn the_newest_change_of_each_budget_is_in_force_for_a_turn() {
        let store = Store::memory().await.unwrap();
        store
            .ensure_workstream("slack:T:C1:1.0", Some("bob"))
            .await
            .unwrap();
        let thread = "slack:T:C1:1.0";
        assert_eq!(
            store.budgets_in_force(Some("bob"), thread).await.unwrap(),
            vec![]
        );
        let person = key(BudgetScope::Person, "bob", BudgetUnit::Tokens);
        store
            .change_budget(&person, Some(1000), "admin", &event())
            .await
            .unwrap();
        store
            .change_budget(&person, None, "admin2", &event())
            .await
            .unwrap();
        let channel = key(BudgetScope::Channel, "slack:T:C1", BudgetUnit::Cost);
        store
            .change_budget(&channel, Some(5_000_000), "admin", &event())
            .await
            .unwrap();
        // Another thread's and another person's changes are not this turn's.
        let other = key(BudgetScope::Thread, "slack:T:C1:2.0", BudgetUnit::Tokens);
        store
            .change_budget(&other, Some(1), "admin", &event())
            .await
            .unwrap();
        let mut in_force = store.budgets_in_force(Some("bob"), thread).await.unwrap();
        in_force.sort_by_key(|c| (c.scope, c.unit));
        assert_eq!(
            in_force,
            vec![
                BudgetChange {
                    scope: BudgetScope::Person,
                    unit: BudgetUnit::Tokens,
                    daily_cap: None,
                    set_by: "admin2".into()
                },
                BudgetChange {
                    scope: BudgetScope::Channel,
                    unit: BudgetUnit::Cost,
                    daily_cap: Some(5_000_000),
                    set_by: "admin".into()
                },
            ]
        );
        // Without a person, only the thread's and the channel's.
        assert_eq!(store.budgets_in_force(None, thread).await.unwrap().len(), 1);
        assert_eq!(
            store
                .budget_of(BudgetScope::Person, "bob")
                .await
                .unwrap()
                .len(),
            1
        );
        // Each change wrote its audit event in the same transaction.
        let audit = store.audit(&Default::default()).await.unwrap();
        assert_eq!(audit.len(), 4);
    }

    #[tokio::test]
    async fn one_query_counts_a_turns_budgets_per_model() {
        let store = Store::memory().await.unwrap();
        store
            .ensure_workstream("slack:T:C1:1.0", Some("bob"))
            .await
            .unwrap();
        store
            .ensure_workstream("slack:T:C1:2.0", Some("ann"))
            .await
            .unwrap();
        store
            .ensure_workstream("slack:T:C2:1.0", Some("bob"))
            .await
            .unwrap();
        for (thread, person, model, u) in [
            ("slack:T:C1:1.0", Some("bob"), "m1", usage(100, 10, 1)),
            ("slack:T:C1:2.0", Some("ann"), "m1", usage(200, 0, 2)),
            ("slack:T:C2:1.0", Some("bob"), "m2", usage(400, 0, 4)),
            ("slack:T:C1:1.0", None, "m2", usage(800, 0, 8)),
        ] {
            store
                .record_usage(&ModelCall::new(thread, person, model, u))
                .await
                .unwrap();
        }
        let all = BudgetSubjects {
            person: Some("bob"),
            thread: Some("slack:T:C1:1.0"),
            channel_of: Some("slack:T:C1:1.0"),
        };
        let mut rows = store.budget_usage(0, all).await.unwrap();
        rows.sort_by(|a, b| a.model.cmp(&b.model));
        let tokens = |r: &BudgetUsage| (r.person.tokens(), r.thread.tokens(), r.channel.tokens());
        let got: Vec<_> = rows.iter().map(|r| (r.model.as_str(), tokens(r))).collect();
        assert_eq!(got, vec![("m1", (101, 101, 303)), ("m2", (404, 808, 808))]);
        assert_eq!(rows[0].person.cached_tokens, 10);
        // A budget not asked for is not counted.
        let thread_only = BudgetSubjects {
            thread: Some("slack:T:C1:1.0"),
            ..BudgetSubjects::default()
        };
        let rows = store.budget_usage(0, thread_only).await.unwrap();
        let total: u64 = rows
            .iter()
            .map(|r| r.thread.tokens() + r.person.tokens() + r.channel.tokens())
            .sum();
        assert_eq!(total, 909);
    }
}
