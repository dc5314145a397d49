//! `sandpiper usage`: the model tokens used since a date, one row per person, thread, channel
//! or model, as a table, JSON lines or CSV; with `[usage.prices]` what they cost too. What
//! `/usage` answers in chat, for the operator.

use sandpiper_agent::price::{Bill, Prices, fold_by_group};
use sandpiper_agent::store::usage::UsageBy;
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
    /// What it cost in dollars, when `[usage.prices]` is set (its priced models' calls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<sandpiper_agent::price::Money>,
    /// Models it used that have no price (not in `cost`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unpriced: Vec<String>,
    /// The bill as shown.
    #[serde(skip)]
    pub bill: Option<Bill>,
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
    let prices = &config.usage.prices;
    print!(
        "{}",
        report(&store, prices, args.by, since, args.format).await?
    );
    Ok(())
}

/// Usage since `since` (unix ms) by `by`, priced at `prices`, rendered in `format`.
pub async fn report(
    store: &Store,
    prices: &Prices,
    by: By,
    since: i64,
    format: Format,
) -> Result<String, StoreError> {
    let mut lines = Vec::new();
    let rows = store.usage_split(by.into(), since).await?;
    for (name, totals, bill) in fold_by_group(prices, rows) {
        let (name, user_id) = match (by, name) {
            (By::User, Some(id)) => (Some(store.public_name_or_id(&id).await), Some(id)),
            (_, name) => (name, None),
        };
        lines.push(Line {
            name,
            user_id,
            totals,
            cost: bill.as_ref().filter(|b| b.priced()).map(|b| b.money),
            unpriced: bill
                .iter()
                .flat_map(|b| b.unpriced.iter().cloned())
                .collect(),
            bill,
        });
    }
    Ok(render(&lines, by, format, !prices.is_empty()))
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

/// Renders rows; with `priced`, a cost column too (CSV: dollars, empty for no price; table:
/// `$0.42`, `no price`).
pub fn render(lines: &[Line], by: By, format: Format, priced: bool) -> String {
    let rows = lines.iter().map(|l| columns(l, by));
    match format {
        Format::Jsonl => lines
            .iter()
            .map(|l| format!("{}\n", serde_json::to_value(l).unwrap_or_default()))
            .collect(),
        Format::Csv if priced => {
            let [a, b, c, d, e, f, g, h] = CSV_HEADER;
            let rows = lines.iter().map(|l| {
                let cost = l.cost.map(|m| m.dollars()).unwrap_or_default();
                with_cost(columns(l, by), cost)
            });
            tabular::csv([a, b, c, d, e, f, g, h, "cost"], rows)
        }
        Format::Csv => tabular::csv(CSV_HEADER, rows),
        Format::Table if lines.is_empty() => "No model calls since then.\n".into(),
        Format::Table if priced => {
            let [_, b, c, d, e, f, g, h] = TABLE_HEADER;
            let rows = lines.iter().map(|l| {
                let cost = l.bill.as_ref().map(Bill::to_string).unwrap_or_default();
                with_cost(columns(l, by), cost)
            });
            tabular::table([name_header(by), b, c, d, e, f, g, h, "COST"], rows)
        }
        Format::Table => {
            let [_, rest @ ..] = TABLE_HEADER;
            let [b, c, d, e, f, g, h] = rest;
            tabular::table([name_header(by), b, c, d, e, f, g, h], rows)
        }
    }
}

/// The table's header; the first column is named by [`name_header`].
const TABLE_HEADER: [&str; 8] = [
    "",
    "USER ID",
    "CALLS",
    "INPUT",
    "CACHED",
    "CACHE WRITE",
    "OUTPUT",
    "CACHED %",
];

fn name_header(by: By) -> &'static str {
    match by {
        By::User => "USER",
        By::Workstream => "WORKSTREAM",
        By::Channel => "CHANNEL",
        By::Model => "MODEL",
    }
}

fn with_cost(columns: [String; 8], cost: String) -> [String; 9] {
    let [a, b, c, d, e, f, g, h] = columns;
    [a, b, c, d, e, f, g, h, cost]
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
        let none = Prices::new();
        let table = report(&store, &none, By::User, 0, Format::Table)
            .await
            .unwrap();
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
        let csv = report(&store, &none, By::Model, 0, Format::Csv)
            .await
            .unwrap();
        assert_eq!(
            csv,
            "name,user_id,calls,input_tokens,cached_tokens,cache_write_tokens,output_tokens,\
             cached_percent\ngemma,,3,2400,1900,0,100,79\n"
        );
        let json = report(&store, &none, By::User, 0, Format::Jsonl)
            .await
            .unwrap();
        let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        assert_eq!(first["user_id"], alice.id.as_str());
        assert_eq!(first["cached_tokens"], 1900);
        let later = report(&store, &none, By::User, now_ms() + 60_000, Format::Table)
            .await
            .unwrap();
        assert_eq!(later, "No model calls since then.\n");
    }

    #[tokio::test]
    async fn with_prices_each_format_shows_the_cost_and_the_models_without_a_price() {
        let config = sandpiper_agent::Config::from_toml(
            "[usage.prices.gemma]\ninput = 3.0\ncached = 0.30\noutput = 15.0\n",
            std::path::Path::new("sandpiper.toml"),
        )
        .expect("config");
        let prices = &config.usage.prices;
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
        let id = alice.id.as_str();
        for (who, model, u) in [
            // $0.30 fresh + $0.03 cached + $0.15 answer.
            (Some(id), "gemma", usage(200_000, 100_000, 10_000)),
            (Some(id), "mystery", usage(1_000, 0, 100)),
            // A watch's turn: $0.03 + $0.015.
            (None, "gemma", usage(10_000, 0, 1_000)),
        ] {
            let call = ModelCall::new("discord:1", who, model, u);
            store.record_usage(&call).await.unwrap();
        }
        let table = report(&store, prices, By::User, 0, Format::Table)
            .await
            .unwrap();
        let name = "Alice Liddell (@discord-2001)";
        let w = name.len();
        let i = id.len().max("USER ID".len());
        let want = format!(
            "{:<w$}  {:<i$}  CALLS  INPUT   CACHED  CACHE WRITE  OUTPUT  CACHED %  COST\n\
             {name}  {id:<i$}  2      201000  100000  0            10100   49        $0.48 (no price for mystery)\n\
             {:<w$}  {:<i$}  1      10000   0       0            1000    0         $0.05\n",
            "USER", "USER ID", "(no person)", "",
        );
        assert_eq!(table, want);
        let csv = report(&store, prices, By::Model, 0, Format::Csv)
            .await
            .unwrap();
        assert_eq!(
            csv,
            "name,user_id,calls,input_tokens,cached_tokens,cache_write_tokens,output_tokens,\
             cached_percent,cost\n\
             gemma,,2,210000,100000,0,11000,47,0.525000\n\
             mystery,,1,1000,0,0,100,0,\n"
        );
        let json = report(&store, prices, By::User, 0, Format::Jsonl)
            .await
            .unwrap();
        let lines: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let money =
            |l: &serde_json::Value| (l["name"].clone(), l["cost"].clone(), l["unpriced"].clone());
        assert_eq!(
            lines.iter().map(money).collect::<Vec<_>>(),
            vec![
                (
                    serde_json::json!(name),
                    serde_json::json!(0.48),
                    serde_json::json!(["mystery"])
                ),
                (
                    serde_json::Value::Null,
                    serde_json::json!(0.045),
                    serde_json::Value::Null
                ),
            ]
        );
        // Only unpriced calls: no money to show, and which model has no price.
        let only_unpriced = report(&store, prices, By::Model, 0, Format::Table)
            .await
            .unwrap();
        let last = only_unpriced.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("mystery ") && last.ends_with("  no price"),
            "{only_unpriced}"
        );
    }
}
