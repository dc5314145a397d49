//! What model calls cost in money: `[usage.prices]` (per model, per million prompt, cached and
//! answer tokens) and the one rule that turns tokens into money.
//!
//! Money is counted in whole micro-dollars ([`Money`]); a price is held in micro-dollars per
//! million tokens ([`Rate`]), so the cost of a sum of calls is the sum of integer products,
//! divided once: no float drift however many calls a figure adds up. A model without a price
//! has none: its calls are shown as "no price", never as $0.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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

    /// These and `other` together.
    pub fn plus(&self, other: &UsageTotals) -> UsageTotals {
        UsageTotals {
            calls: self.calls + other.calls,
            input_tokens: self.input_tokens + other.input_tokens,
            cached_tokens: self.cached_tokens + other.cached_tokens,
            cache_write_tokens: self.cache_write_tokens + other.cache_write_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
        }
    }

    /// The share of prompt tokens served from the cache, in percent (`None` without prompts).
    pub fn cache_percent(&self) -> Option<u64> {
        let cached = u64::try_from(self.cached_tokens).unwrap_or(0);
        let input = u64::try_from(self.input_tokens).unwrap_or(0);
        (cached * 100).checked_div(input)
    }
}

/// Micro-dollars in a dollar.
const MICROS: u64 = 1_000_000;
/// Tokens a [`Rate`] is the price of.
const PER_TOKENS: u128 = 1_000_000;

/// An amount of money in micro-dollars (currency-less, shown with `$`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(pub u64);

impl Money {
    /// `dollars` (as a configuration file writes them), to the nearest micro-dollar; `None`
    /// for a negative, infinite or absurdly large amount.
    pub fn from_dollars(dollars: f64) -> Option<Self> {
        let micros = (dollars * MICROS as f64).round();
        (micros.is_finite() && micros >= 0.0 && micros < u64::MAX as f64)
            .then_some(Self(micros as u64))
    }

    /// `$5`, `5.25`, `$0.5`, `1_000` as a person types dollars; exact (no float), at most
    /// six decimals.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim().trim_start_matches('$').replace(['_', ','], "");
        let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
        let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty()
            || !digits(whole)
            || !digits(fraction)
            || fraction.len() > 6
        {
            return None;
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let fraction: u64 = format!("{fraction:0<6}").parse().ok()?;
        whole.checked_mul(MICROS)?.checked_add(fraction).map(Self)
    }

    /// `0.420000`: exact dollars, for a CSV.
    pub fn dollars(&self) -> String {
        format!("{}.{:06}", self.0 / MICROS, self.0 % MICROS)
    }
}

/// `$1.23`; an amount under a cent with four decimals (`$0.0042`), so a small bill is not
/// shown as nothing.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let places: u32 = if self.0 > 0 && self.0 < MICROS / 100 {
            4
        } else {
            2
        };
        let unit = 10u64.pow(6 - places);
        // Half up, in integers.
        let rounded = (self.0 + unit / 2) / unit;
        let scale = 10u64.pow(places);
        write!(
            f,
            "${}.{:0width$}",
            rounded / scale,
            rounded % scale,
            width = places as usize
        )
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0 as f64 / MICROS as f64)
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let dollars = f64::deserialize(d)?;
        Self::from_dollars(dollars).ok_or_else(|| {
            serde::de::Error::custom(format!("{dollars} is not an amount of dollars (>= 0)"))
        })
    }
}

/// A price per million tokens, in micro-dollars (`3.0` dollars is `3_000_000`).
pub type Rate = Money;

/// `[usage.prices."model"]`: dollars per million prompt tokens not served from a cache,
/// per million served from one, and per million answer tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens (those not served from the cache).
    pub input: Rate,
    /// Per million prompt tokens served from the provider's cache; the input price when not
    /// given.
    #[serde(default)]
    pub cached: Option<Rate>,
    /// Per million answer tokens.
    pub output: Rate,
}

impl Price {
    /// What `t` cost at this price, in micro-dollars times a million (exact).
    fn cost(&self, t: &UsageTotals) -> u128 {
        let n = |v: i64| u128::try_from(v.max(0)).unwrap_or(0);
        let cached = n(t.cached_tokens).min(n(t.input_tokens));
        let fresh = n(t.input_tokens) - cached;
        fresh * u128::from(self.input.0)
            + cached * u128::from(self.cached.unwrap_or(self.input).0)
            + n(t.output_tokens) * u128::from(self.output.0)
    }
}

/// The prices of `[usage.prices]`, by model name.
pub type Prices = BTreeMap<String, Price>;

/// What some calls cost: the money of the priced ones, and the models that have no price.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bill {
    /// The priced calls' cost.
    pub money: Money,
    /// Models that were used but have no price (their calls are not in `money`).
    pub unpriced: BTreeSet<String>,
    /// Whether any used model has a price.
    priced: bool,
}

impl Bill {
    /// Whether any model used has a price (else there is no money to show).
    pub fn priced(&self) -> bool {
        self.priced
    }

    /// The bill of `calls` (model, what it used) under `prices`: summed exactly, rounded
    /// down to a micro-dollar once, at the end.
    pub fn of<'a>(
        prices: &Prices,
        calls: impl IntoIterator<Item = (&'a str, &'a UsageTotals)>,
    ) -> Self {
        let mut exact = 0u128;
        let mut bill = Bill::default();
        for (model, totals) in calls {
            match prices.get(model) {
                Some(price) => {
                    exact += price.cost(totals);
                    bill.priced = true;
                }
                None if totals.calls > 0 || totals.input_tokens + totals.output_tokens > 0 => {
                    bill.unpriced.insert(model.to_owned());
                }
                None => {}
            }
        }
        bill.money = Money(u64::try_from(exact / PER_TOKENS).unwrap_or(u64::MAX));
        bill
    }
}

/// `$0.42`; `no price` when no used model has one; `$0.42 (no price for m2)` when some do.
impl fmt::Display for Bill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unpriced = self.unpriced.iter().cloned().collect::<Vec<_>>().join(", ");
        match (self.priced, self.unpriced.is_empty()) {
            (false, false) => f.write_str("no price"),
            (true, false) => write!(f, "{} (no price for {unpriced})", self.money),
            _ => write!(f, "{}", self.money),
        }
    }
}

/// Rows of (group, model, usage) folded into one row per group, its usage summed and, when
/// prices are set, its bill; the largest users of tokens first.
pub fn fold_by_group(
    prices: &Prices,
    rows: Vec<(Option<String>, String, UsageTotals)>,
) -> Vec<(Option<String>, UsageTotals, Option<Bill>)> {
    let mut groups: BTreeMap<Option<String>, Vec<(String, UsageTotals)>> = BTreeMap::new();
    for (group, model, totals) in rows {
        groups.entry(group).or_default().push((model, totals));
    }
    let mut out: Vec<_> = groups
        .into_iter()
        .map(|(group, calls)| {
            let sum = calls
                .iter()
                .fold(UsageTotals::default(), |a, (_, t)| a.plus(t));
            let bill = (!prices.is_empty())
                .then(|| Bill::of(prices, calls.iter().map(|(m, t)| (m.as_str(), t))));
            (group, sum, bill)
        })
        .collect();
    out.sort_by(|a, b| b.1.tokens().cmp(&a.1.tokens()).then_with(|| a.0.cmp(&b.0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn used(input: i64, cached: i64, output: i64) -> UsageTotals {
        UsageTotals {
            calls: 1,
            input_tokens: input,
            cached_tokens: cached,
            cache_write_tokens: 0,
            output_tokens: output,
        }
    }

    fn sonnet() -> Prices {
        let price = Price {
            input: Money::from_dollars(3.0).unwrap(),
            cached: Some(Money::from_dollars(0.3).unwrap()),
            output: Money::from_dollars(15.0).unwrap(),
        };
        Prices::from([("sonnet".to_owned(), price)])
    }

    #[test]
    fn cached_tokens_cost_the_cached_price_and_the_rest_the_input_price() {
        // 1M prompt of which 800k cached, 100k answer: 0.2×3 + 0.8×0.3 + 0.1×15 = $2.34.
        let t = used(1_000_000, 800_000, 100_000);
        let bill = Bill::of(&sonnet(), [("sonnet", &t)]);
        assert_eq!(bill.money, Money(2_340_000));
        assert_eq!(bill.to_string(), "$2.34");
        // Without a cached price, cached tokens cost the input price.
        let mut prices = sonnet();
        prices.get_mut("sonnet").unwrap().cached = None;
        assert_eq!(Bill::of(&prices, [("sonnet", &t)]).money, Money(4_500_000));
    }

    #[test]
    fn a_million_tiny_calls_sum_exactly() {
        // One call of 1 prompt token costs $0.000003: below a micro-dollar per part of the
        // rule; a million of them are $3 exactly, not a rounded sum.
        let one = used(1, 0, 0);
        let calls: Vec<UsageTotals> = vec![one; 1_000_000];
        let bill = Bill::of(&sonnet(), calls.iter().map(|t| ("sonnet", t)));
        assert_eq!(bill.money, Money(3_000_000));
        // 0.1 + 0.2 in dollars is 0.3 here, as on paper.
        let a = Money::from_dollars(0.1).unwrap();
        let b = Money::from_dollars(0.2).unwrap();
        assert_eq!(Money(a.0 + b.0), Money::from_dollars(0.3).unwrap());
    }

    #[test]
    fn a_model_without_a_price_says_so_rather_than_zero() {
        let t = used(1000, 0, 10);
        assert_eq!(Bill::of(&sonnet(), [("gemma", &t)]).to_string(), "no price");
        let s = used(1_000_000, 0, 0);
        assert_eq!(
            Bill::of(&sonnet(), [("sonnet", &s), ("gemma", &t)]).to_string(),
            "$3.00 (no price for gemma)"
        );
        assert_eq!(
            Bill::of(&sonnet(), [("sonnet", &used(0, 0, 0))]).to_string(),
            "$0.00"
        );
    }

    #[test]
    fn money_is_shown_to_the_cent_and_small_amounts_to_a_hundredth_of_one() {
        assert_eq!(Money(0).to_string(), "$0.00");
        assert_eq!(Money(4_200).to_string(), "$0.0042");
        assert_eq!(Money(12_345_678).to_string(), "$12.35");
        assert_eq!(Money(10_000).to_string(), "$0.01");
        assert_eq!(Money(1_999_999).to_string(), "$2.00");
    }

    #[test]
    fn dollars_are_parsed_exactly() {
        assert_eq!(Money::parse("$5"), Some(Money(5_000_000)));
        assert_eq!(Money::parse("0.25"), Some(Money(250_000)));
        assert_eq!(Money::parse("$.5"), Some(Money(500_000)));
        assert_eq!(Money::parse("1_000.000001"), Some(Money(1_000_000_001)));
        for bad in ["", "$", "-1", "1.2.3", "1.0000001", "five", "1e3"] {
            assert_eq!(Money::parse(bad), None, "{bad}");
        }
        assert_eq!(Money::from_dollars(-1.0), None);
        assert_eq!(Money::from_dollars(f64::NAN), None);
    }

    #[test]
    fn groups_fold_their_models_and_the_largest_comes_first() {
        let rows = vec![
            (Some("bob".into()), "sonnet".into(), used(100, 0, 0)),
            (Some("alice".into()), "sonnet".into(), used(1_000_000, 0, 0)),
            (Some("alice".into()), "gemma".into(), used(10, 0, 0)),
        ];
        let folded = fold_by_group(&sonnet(), rows);
        let shown: Vec<(Option<String>, u64, String)> = folded
            .iter()
            .map(|(g, t, b)| (g.clone(), t.tokens(), b.as_ref().unwrap().to_string()))
            .collect();
        assert_eq!(
            shown,
            vec![
                (
                    Some("alice".into()),
                    1_000_010,
                    "$3.00 (no price for gemma)".into()
                ),
                (Some("bob".into()), 100, "$0.0003".into()),
            ]
        );
        assert!(
            fold_by_group(&Prices::new(), vec![(None, "m".into(), used(1, 0, 0))])[0]
                .2
                .is_none()
        );
    }
}
