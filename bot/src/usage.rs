//! `sandpiper usage`: the model tokens used since a date, one row per person, thread, channel
//! or model, as a table, JSON lines or CSV. What `/usage` answers in chat, for the operator.

use sandpiper_agent::store::usage::{UsageBy, UsageRow};
use sandpiper_agent::store::{Store, StoreError, now_ms};

use crate::tabular::{self, Format};

/// Days counted when `--since` is not given.
const DEFAULT_DAYS: i64 = 30;

/// What one row of `sandpiper usage` stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum By {
    /// The person whose message started the turn (named as records name people).
    #[default]
    #[value(alias = "person")]
    User,
    /// The thread (a sub-agent's calls count for the thread that started it).
    #[value(alias = "thread")]
    Workstream,
    /// The thread's channel.
    Channel,
    /// The model.
    Model,
}

impl From<By> for UsageBy {
    fn from(by: By) -> Self {
        match by {
            By::User => UsageBy::Person,
            By::Workstream => UsageBy::Thread,
            By::Channel => UsageBy::Channel,
            By::Model => UsageBy::Model,
        }
    }
}

/// The flags of `sandpiper usage`.
#[derive(Debug, Clone, clap::Args)]
pub struct UsageArgs {
    /// Since this date (YYYY-MM-DD, UTC) or RFC 3339 time; the last 30 days when not given.
    #[arg(long, value_name = "DATE", value_parser = crate::audit::parse_since)]
    pub since: Option<i64>,
    /// One row per user, workstream, channel or model.
    #[arg(long, value_enum, default_value_t = By::User)]
    pub by: By,
    /// table, jsonl or csv.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// One printed row: the group's name (a person as records name them), the user id for a
/// person, and what it used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Line {
    /// The person, thread, channel or model; `None`: no person (a watch's turn) or no known
    /// channel.
    pub name: Option<String>,
    /// The person's user id (`--by user` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// What it used.
    #[serde(flatten)]
    pub totals: sandpiper_agent::store::usage::UsageTotals,
}

/// `sandpiper usage`: prints what `args` select from the configured database (which it never
/// creates).
pub async fn run(args: UsageArgs, config: &sandpiper_agent::Config) -> anyhow::Result<()> {
    if let Some(none) = crate::defaults::no_database_yet(config) {
        println!("{none}");
        return Ok(());
    }
    let store = crate::wiring::open_existing_store(config).await?;
    let since = args
        .since
        .unwrap_or_else(|| now_ms() - DEFAULT_DAYS * 24 * 60 * 60 * 1000);
    print!("{}", report(&store, args.by, since, args.format).await?);
    Ok(())
}

/// Usage since `since` (unix ms) by `by`, rendered in `format`.
pub async fn report(
    store: &Store,
    by: By,
    since: i64,
    format: Format,
) -> Result<String, StoreError> {
    let mut lines = Vec::new();
    for UsageRow { name, totals } in store.usage_by(by.into(), since).await? {
        let (name, user_id) = match (by, name) {
            (By::User, Some(id)) => (Some(store.public_name_or_id(&id).await), Some(id)),
            (_, name) => (name, None),
        };
        lines.push(Line {
            name,
            user_id,
            totals,
        });
    }
    Ok(render(&lines, by, format))
}

/// The CSV header: the JSON lines' field names.
const CSV_HEADER: [&str; 8] = [
    "name",
    "user_id",
    "calls",
    "input_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cached_percent",
];

/// Renders rows.
pub fn render(lines: &[Line], by: By, format: Format) -> String {
    let rows = lines.iter().map(|l| columns(l, by));
    match format {
        Format::Jsonl => lines
            .iter()
            .map(|l| format!("{}\n", serde_json::to_value(l).unwrap_or_default()))
            .collect(),
        Format::Csv => tabular::csv(CSV_HEADER, rows),
        Format::Table if lines.is_empty() => "No model calls since then.\n".into(),
        Format::Table => {
            let name = match by {
                By::User => "USER",
                By::Workstream => "WORKSTREAM",
                By::Channel => "CHANNEL",
                By::Model => "MODEL",
            };
            let header = [
                name,
                "USER ID",
                "CALLS",
                "INPUT",
                "CACHED",
                "CACHE WRITE",
                "OUTPUT",
                "CACHED %",
            ];
            tabular::table(header, rows)
        }
    }
}

/// name, user id, calls, input, cached, cache write, output, cached %.
fn columns(l: &Line, by: By) -> [String; 8] {
    let t = &l.totals;
    let none = match by {
        By::User => "(no person)",
        _ => "(unknown)",
    };
    [
        tabular::without_controls(l.name.as_deref().unwrap_or(none)),
        l.user_id.clone().unwrap_or_default(),
        t.calls.to_string(),
        t.input_tokens.to_string(),
        t.cached_tokens.to_string(),
        t.cache_write_tokens.to_string(),
        t.output_tokens.to_string(),
        t.cache_percent().map(|p| p.to_string()).unwrap_or_default(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use sandpiper_agent::model::Usage;
    use sandpiper_agent::store::usage::ModelCall;

    #[tokio::test]
    async fn usage_is_printed_per_person_by_the_name_records_give_with_the_id() {
        let store = Store::memory().await.unwrap();
        let alice = store
            .user_for_identity("discord", "2001", "Alice Liddell")
            .await
            .unwrap();
        let usage = |input, cached, output| Usage {
            input_tokens: input,
            cached_tokens: cached,
            output_tokens: output,
            ..Usage::default()
        };
        for (who, u) in [
            (Some(alice.id.as_str()), usage(1000, 900, 50)),
            (Some(alice.id.as_str()), usage(1100, 1000, 40)),
            (None, usage(300, 0, 10)),
        ] {
            let call = ModelCall::new("discord:1", who, "gemma", u);
            store.record_usage(&call).await.unwrap();
        }
        let table = report(&store, By::User, 0, Format::Table).await.unwrap();
        let name = "Alice Liddell (@discord-2001)";
        let w = name.len();
        let id = alice.id.as_str();
        let i = id.len();
        let want = format!(
            "{:<w$}  {:<i$}  CALLS  INPUT  CACHED  CACHE WRITE  OUTPUT  CACHED %\n\
             {name}  {id}  2      2100   1900    0            90      90\n\
             {:<w$}  {:<i$}  1      300    0       0            10      0\n",
            "USER", "USER ID", "(no person)", "",
        );
        assert_eq!(table, want);
        let csv = report(&store, By::Model, 0, Format::Csv).await.unwrap();
        assert_eq!(
            csv,
            "name,user_id,calls,input_tokens,cached_tokens,cache_write_tokens,output_tokens,\
             cached_percent\ngemma,,3,2400,1900,0,100,79\n"
        );
        let json = report(&store, By::User, 0, Format::Jsonl).await.unwrap();
        let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        assert_eq!(first["user_id"], alice.id.as_str());
        assert_eq!(first["cached_tokens"], 1900);
        let later = report(&store, By::User, now_ms() + 60_000, Format::Table)
            .await
            .unwrap();
        assert_eq!(later, "No model calls since then.\n");
    }
}
