//! Counters an operator scrapes from `GET /metrics`: turns (started, and ended by outcome),
//! model calls by model and outcome with their latency and tokens, tool calls by tool and
//! outcome, approvals by path and outcome, watch polls by outcome, notify deliveries by
//! status, and platform API retries.
//! Plain atomics and small maps behind one [`Metrics`] handle the agent owns and every part
//! of a node shares (no global registry); the binary renders them as Prometheus text.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds (seconds) of the model latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolOutcome {
    /// It ran and reported success.
    Ok,
    /// It failed, was refused or denied.
    Error,
}

impl ToolOutcome {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolOutcome::Ok => "ok",
            ToolOutcome::Error => "error",
        }
    }
}

/// A cumulative histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// A histogram as read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in seconds, observations at or below it)`, cumulative.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum: f64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: LATENCY_BUCKETS
                .iter()
                .zip(&self.buckets)
                .map(|(b, n)| (*b, n.load(Ordering::Relaxed)))
                .collect(),
            count: self.count.load(Ordering::Relaxed),
            sum: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// A counter family with two labels, counted by [`Metrics::count`]. The label values are
/// bounded: outcomes are fixed words and the model is the configured one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Turns by how they ended: `(outcome, "")`.
    TurnsEnded,
    /// Model calls: `(model, outcome)`.
    ModelCalls,
    /// Model tokens: `(model, "input" | "cached" | "cache_write" | "output")`; `cached` and
    /// `cache_write` are part of `input`.
    ModelTokens,
    /// Approvals: `(path, outcome)`.
    Approvals,
    /// Watch polls: `(outcome, "")`.
    WatchPolls,
}

/// How a turn ended, for [`Family::TurnsEnded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// It answered.
    Completed,
    /// Someone stopped it.
    Stopped,
    /// It stopped at `agent.max_rounds`.
    Interrupted,
    /// The model or the store failed.
    Failed,
}

impl TurnEnd {
    /// The `outcome` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            TurnEnd::Completed => "completed",
            TurnEnd::Stopped => "stopped",
            TurnEnd::Interrupted => "interrupted",
            TurnEnd::Failed => "failed",
        }
    }
}

/// How an asked approval ended, for [`Family::Approvals`].
pub fn approval_outcome(answer: &crate::approvals::Answer) -> &'static str {
    use crate::approvals::Answer;
    use crate::protocol::Verdict;
    match answer {
        Answer::Decided(d) => match d.verdict {
            Verdict::Approve => "approved",
            Verdict::Deny => "denied",
            Verdict::AlwaysAllow => "always_allowed",
            Verdict::Annotate => "annotated",
        },
        Answer::TimedOut => "timed_out",
        Answer::Cancelled => "cancelled",
    }
}

#[derive(Debug, Default)]
struct Inner {
    turns: AtomicU64,
    model_calls: AtomicU64,
    model_latency: Histogram,
    tool_calls: Mutex<BTreeMap<(String, ToolOutcome), u64>>,
    notify_sent: AtomicU64,
    notify_failed: AtomicU64,
    api_retries: Mutex<BTreeMap<&'static str, u64>>,
    compactions: AtomicU64,
    labelled: Mutex<BTreeMap<(Family, [String; 2]), u64>>,
}

/// The counters of one node. Cheap to clone; clones count together.
#[derive(Debug, Clone, Default)]
pub struct Metrics(Arc<Inner>);

/// Every counter as read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// Turns started.
    pub turns: u64,
    /// Model calls made.
    pub model_calls: u64,
    /// How long model calls took (request to the end of the stream).
    pub model_latency: HistogramSnapshot,
    /// Tool calls by tool name and outcome.
    pub tool_calls: BTreeMap<(String, ToolOutcome), u64>,
    /// Notification targets delivered by this gateway.
    pub notify_sent: u64,
    /// Notification targets this gateway failed to deliver.
    pub notify_failed: u64,
    /// Chat platform API calls retried (429, 5xx), by platform.
    pub api_retries: BTreeMap<&'static str, u64>,
    /// Workstreams compacted to fit the model's context window.
    pub compactions: u64,
    /// The two-label families.
    pub labelled: BTreeMap<(Family, [String; 2]), u64>,
}

impl MetricsSnapshot {
    /// The counts of `family`, by its two label values.
    pub fn family(&self, family: Family) -> impl Iterator<Item = (&[String; 2], u64)> {
        self.labelled
            .iter()
            .filter(move |((f, _), _)| *f == family)
            .map(|((_, labels), n)| (labels, *n))
    }
}

/// Tool names are the model's choice for unknown tools: cap the label set.
const MAX_TOOL_LABELS: usize = 512;

impl Metrics {
    /// Adds `n` to `family` at `labels`.
    pub fn count(&self, family: Family, labels: [&str; 2], n: u64) {
        let mut map = self.0.labelled.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((family, labels.map(str::to_owned))).or_default() += n;
    }

    /// A turn ended.
    pub fn turn_ended(&self, end: TurnEnd) {
        self.count(Family::TurnsEnded, [end.as_str(), ""], 1);
    }

    /// A model call of `model` ended: `Some(ok)`, or `None` when stopped; with its latency.
    pub fn model_call_ended(&self, model: &str, ended: Option<bool>, latency: Duration) {
        let outcome = match ended {
            Some(true) => "ok",
            Some(false) => "error",
            None => "stopped",
        };
        self.count(Family::ModelCalls, [model, outcome], 1);
        self.model_call(latency);
    }

    /// Tokens a model call of `model` used.
    pub fn tokens(&self, model: &str, usage: &crate::model::Usage) {
        self.count(Family::ModelTokens, [model, "input"], usage.input_tokens);
        self.count(Family::ModelTokens, [model, "cached"], usage.cached_tokens);
        self.count(
            Family::ModelTokens,
            [model, "cache_write"],
            usage.cache_write_tokens,
        );
        self.count(Family::ModelTokens, [model, "output"], usage.output_tokens);
    }

    /// An approval ended: `path` is `asked` (a person decided or not), `auto_approve`
    /// (`[approval] auto_approve` / `--yes`) or `grant` (an always-allow grant).
    pub fn approval(&self, path: &str, outcome: &str) {
        self.count(Family::Approvals, [path, outcome], 1);
    }

    /// A call that asks for approval ran without asking (`unasked`): by `[approval]
    /// auto_approve` / `--yes` (`auto_approve`), else by an always-allow grant (`grant`).
    pub fn approval_unasked(&self, unasked: bool, auto_approve: bool) {
        if unasked {
            let path = if auto_approve {
                "auto_approve"
            } else {
                "grant"
            };
            self.approval(path, "approved");
        }
    }

    /// A watch poll ended: `fired`, `waiting`, `failed`.
    pub fn watch_poll(&self, outcome: &str) {
        self.count(Family::WatchPolls, [outcome, ""], 1);
    }

    /// A turn started.
    pub fn turn(&self) {
        self.0.turns.fetch_add(1, Ordering::Relaxed);
    }

    /// A model call took `latency`.
    pub fn model_call(&self, latency: Duration) {
        self.0.model_calls.fetch_add(1, Ordering::Relaxed);
        self.0.model_latency.observe(latency);
    }

    /// A tool call ended.
    pub fn tool_call(&self, tool: &str, outcome: ToolOutcome) {
        let mut map = self.0.tool_calls.lock().unwrap_or_else(|e| e.into_inner());
        let key = (tool.to_owned(), outcome);
        if let Some(n) = map.get_mut(&key) {
            *n += 1;
        } else if map.len() < MAX_TOOL_LABELS {
            map.insert(key, 1);
        } else {
            *map.entry(("other".to_owned(), outcome)).or_default() += 1;
        }
    }

    /// A notification target was delivered (`sent`) or not.
    pub fn notify_delivery(&self, sent: bool) {
        let counter = if sent {
            &self.0.notify_sent
        } else {
            &self.0.notify_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A workstream was compacted to fit the context window.
    pub fn compaction(&self) {
        self.0.compactions.fetch_add(1, Ordering::Relaxed);
    }

    /// A call to `platform`'s API is retried.
    pub fn api_retry(&self, platform: &'static str) {
        let mut map = self.0.api_retries.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(platform).or_default() += 1;
    }

    /// Every counter now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let i = &self.0;
        MetricsSnapshot {
            turns: i.turns.load(Ordering::Relaxed),
            model_calls: i.model_calls.load(Ordering::Relaxed),
            model_latency: i.model_latency.snapshot(),
            tool_calls: i
                .tool_calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            notify_sent: i.notify_sent.load(Ordering::Relaxed),
            notify_failed: i.notify_failed.load(Ordering::Relaxed),
            api_retries: i
                .api_retries
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            compactions: i.compactions.load(Ordering::Relaxed),
            labelled: i.labelled.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn counters_and_the_histogram_add_up() {
        let m = Metrics::default();
        let clone = m.clone();
        m.turn();
        clone.model_call(Duration::from_millis(300));
        m.model_call(Duration::from_secs(3));
        m.tool_call("bash", ToolOutcome::Ok);
        m.tool_call("bash", ToolOutcome::Ok);
        m.tool_call("bash", ToolOutcome::Error);
        m.notify_delivery(true);
        m.api_retry("discord");
        let s = m.snapshot();
        assert_eq!((s.turns, s.model_calls), (1, 2));
        assert_eq!(s.model_latency.count, 2);
        assert!((s.model_latency.sum - 3.3).abs() < 1e-6);
        assert_eq!(s.model_latency.buckets[1], (0.25, 0));
        assert_eq!(s.model_latency.buckets[2], (0.5, 1));
        assert_eq!(s.model_latency.buckets[5], (5.0, 2));
        assert_eq!(
            s.tool_calls,
            BTreeMap::from([
                (("bash".to_owned(), ToolOutcome::Ok), 2),
                (("bash".to_owned(), ToolOutcome::Error), 1)
            ])
        );
        assert_eq!((s.notify_sent, s.notify_failed), (1, 0));
        assert_eq!(s.api_retries, BTreeMap::from([("discord", 1)]));
    }

    #[test]
    fn labelled_families_count_by_their_labels() {
        let m = Metrics::default();
        m.model_call_ended("gpt", Some(true), Duration::from_millis(5));
        m.model_call_ended("gpt", Some(false), Duration::from_millis(5));
        m.model_call_ended("gpt", None, Duration::from_millis(5));
        let usage = crate::model::Usage {
            input_tokens: 100,
            output_tokens: 7,
            cached_tokens: 60,
            cache_write_tokens: 30,
        };
        m.tokens("gpt", &usage);
        m.tokens("gpt", &usage);
        m.turn_ended(TurnEnd::Completed);
        m.turn_ended(TurnEnd::Failed);
        m.approval("asked", "denied");
        let s = m.snapshot();
        let family = |f| {
            s.family(f)
                .map(|(l, n)| (l[0].as_str(), l[1].as_str(), n))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            family(Family::ModelCalls),
            [("gpt", "error", 1), ("gpt", "ok", 1), ("gpt", "stopped", 1)]
        );
        assert_eq!(s.model_calls, 3);
        assert_eq!(
            family(Family::ModelTokens),
            [
                ("gpt", "cache_write", 60),
                ("gpt", "cached", 120),
                ("gpt", "input", 200),
                ("gpt", "output", 14)
            ]
        );
        assert_eq!(
            family(Family::TurnsEnded),
            [("completed", "", 1), ("failed", "", 1)]
        );
        assert_eq!(family(Family::Approvals), [("asked", "denied", 1)]);
    }
}
