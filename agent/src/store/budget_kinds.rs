//! What a budget applies to and what it counts: the words the usage tables and the audit
//! trail share.

/// What a budget applies to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// A person (a sandpiper user id), over every thread.
    Person,
    /// A thread (a workstream key), whoever asks.
    Thread,
    /// A channel (`discord:<id>`, `slack:<team>:<channel>`): all its threads together.
    Channel,
}

impl BudgetScope {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Person => "person",
            BudgetScope::Thread => "thread",
            BudgetScope::Channel => "channel",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        [Self::Person, Self::Thread, Self::Channel]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// What a budget counts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum BudgetUnit {
    /// Tokens: every prompt token (cached or not) and every answer token.
    Tokens,
    /// Money, in micro-dollars, at `[usage.prices]` (calls of a model without a price cost
    /// nothing here).
    Cost,
}

impl BudgetUnit {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            BudgetUnit::Tokens => "tokens",
            BudgetUnit::Cost => "cost",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        [Self::Tokens, Self::Cost]
            .into_iter()
            .find(|u| u.as_str() == text)
    }
}
