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

/// Token counts summed over model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct UsageTotals {
    /// Model calls counted.
    pub calls: i64,
    /// Prompt tokens, cached ones included.
    pub input_tokens: i64,
    /// Prompt tokens served from the provider's cache.
    pub cached_tokens: i64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: i64,
    /// Answer tokens.
    pub output_tokens: i64,
}

impl UsageTotals {
    /// What a budget counts: every prompt token (cached or not) and every answer token.
    pub fn tokens(&self) -> u64 {
        u64::try_from(self.input_tokens.saturating_add(self.output_tokens)).unwrap_or(0)
    }

    /// The share of prompt tokens served from the cache, in percent (`None` without prompts).
    pub fn cache_percent(&self) -> Option<u64> {
        let cached = u64::try_from(self.cached_tokens).unwrap_or(0);
        let input = u64::try_from(self.input_tokens).unwrap_or(0);
        (cached * 100).checked_div(input)
    }
}

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

/// What a budget applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetScope {
    /// A person (a sandpiper user id), over every thread.
    Person,
    /// A thread (a workstream key), whoever asks.
    Thread,
}

impl BudgetScope {
    fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Person => "person",
            BudgetScope::Thread => "thread",
        }
    }
}

/// A budget set in chat, in force until the next change.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BudgetChange {
    /// Tokens per day; `None`: no cap.
    pub daily_tokens: Option<i64>,
    /// Who set it (a sandpiper user id).
    pub set_by: String,
    /// When (unix ms).
    pub set_at: i64,
}

// Macros rather than constants, so that `concat!` can join them at compile time.
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

    /// Records a budget change made in chat: `daily_tokens` caps `subject` from now on
    /// (`None` lifts the cap). The earlier changes stay on record.
    pub async fn set_budget(
        &self,
        scope: BudgetScope,
        subject: &str,
        daily_tokens: Option<u64>,
        set_by: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO budget_changes (scope, subject, daily_tokens, set_by, set_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(scope.as_str())
        .bind(subject)
        .bind(daily_tokens.map(count))
        .bind(set_by)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The budget set in chat for `subject` that is in force (the newest change), if any.
    pub async fn budget_change(
        &self,
        scope: BudgetScope,
        subject: &str,
    ) -> Result<Option<BudgetChange>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT daily_tokens, set_by, set_at FROM budget_changes \
             WHERE scope = $1 AND subject = $2 ORDER BY id DESC LIMIT 1",
        )
        .bind(scope.as_str())
        .bind(subject)
        .fetch_optional(self.pool())
        .await?)
    }
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

    #[tokio::test]
    async fn the_newest_budget_change_is_in_force() {
        let store = Store::memory().await.unwrap();
        assert_eq!(
            store
                .budget_change(BudgetScope::Person, "bob")
                .await
                .unwrap(),
            None
        );
        store
            .set_budget(BudgetScope::Person, "bob", Some(1000), "admin")
            .await
            .unwrap();
        store
            .set_budget(BudgetScope::Person, "bob", None, "admin2")
            .await
            .unwrap();
        let change = store
            .budget_change(BudgetScope::Person, "bob")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (change.daily_tokens, change.set_by.as_str()),
            (None, "admin2")
        );
        assert_eq!(
            store
                .budget_change(BudgetScope::Thread, "bob")
                .await
                .unwrap(),
            None
        );
    }
}
