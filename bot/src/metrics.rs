//! `GET /metrics`: the node's counters ([`sandpiper_agent::metrics`]) and a few gauges read at
//! scrape time (live workstreams, approval requests), in the Prometheus text format (0.0.4),
//! written by hand: a dozen families do not need a metrics crate.

use std::fmt::Write as _;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sandpiper_agent::Agent;
use sandpiper_agent::metrics::MetricsSnapshot;
use sandpiper_agent::store::health::StoredCounts;

/// The `/metrics` route.
pub fn router(agent: Agent) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(agent)
}

async fn metrics(State(agent): State<Agent>) -> Response {
    let counts = match agent.store().stored_counts().await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: the database did not answer");
            None
        }
    };
    let text = render(
        &agent.metrics().snapshot(),
        agent.live_workstreams(),
        counts.as_ref(),
    );
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// A label value with `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The text exposition of `m`, the live workstreams and the stored counts (left out when
/// the database did not answer).
pub fn render(m: &MetricsSnapshot, live: usize, counts: Option<&StoredCounts>) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "sandpiper_turns_total",
        "counter",
        "Turns started.",
    );
    let _ = writeln!(out, "sandpiper_turns_total {}", m.turns);
    family(
        &mut out,
        "sandpiper_model_calls_total",
        "counter",
        "Model calls made.",
    );
    let _ = writeln!(out, "sandpiper_model_calls_total {}", m.model_calls);
    family(
        &mut out,
        "sandpiper_compactions_total",
        "counter",
        "Workstreams compacted to fit the model's context window.",
    );
    let _ = writeln!(out, "sandpiper_compactions_total {}", m.compactions);
    let name = "sandpiper_model_call_duration_seconds";
    family(
        &mut out,
        name,
        "histogram",
        "How long model calls took, to the end of the stream.",
    );
    for (bound, n) in &m.model_latency.buckets {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{le=\"+Inf\"}} {}",
        m.model_latency.count
    );
    let _ = writeln!(out, "{name}_sum {}", m.model_latency.sum);
    let _ = writeln!(out, "{name}_count {}", m.model_latency.count);
    family(
        &mut out,
        "sandpiper_tool_calls_total",
        "counter",
        "Tool calls by tool and outcome.",
    );
    for ((tool, outcome), n) in &m.tool_calls {
        let _ = writeln!(
            out,
            "sandpiper_tool_calls_total{{tool=\"{}\",outcome=\"{}\"}} {n}",
            label(tool),
            outcome.as_str()
        );
    }
    if let Some(c) = counts {
        family(
            &mut out,
            "sandpiper_approvals_pending",
            "gauge",
            "Approval requests waiting for a decision.",
        );
        let _ = writeln!(out, "sandpiper_approvals_pending {}", c.approvals_pending);
        family(
            &mut out,
            "sandpiper_approvals_decided",
            "gauge",
            "Approval requests decided, stored.",
        );
        let _ = writeln!(out, "sandpiper_approvals_decided {}", c.approvals_decided);
        family(
            &mut out,
            "sandpiper_workstreams_stored",
            "gauge",
            "Workstreams in the database.",
        );
        let _ = writeln!(out, "sandpiper_workstreams_stored {}", c.workstreams);
    }
    family(
        &mut out,
        "sandpiper_workstreams_live",
        "gauge",
        "Workstreams held in memory on this node.",
    );
    let _ = writeln!(out, "sandpiper_workstreams_live {live}");
    let name = "sandpiper_notify_deliveries_total";
    family(
        &mut out,
        name,
        "counter",
        "Notification targets this gateway delivered, by status.",
    );
    let _ = writeln!(out, "{name}{{status=\"sent\"}} {}", m.notify_sent);
    let _ = writeln!(out, "{name}{{status=\"failed\"}} {}", m.notify_failed);
    let name = "sandpiper_platform_api_retries_total";
    family(
        &mut out,
        name,
        "counter",
        "Chat platform API calls retried after 429 or 5xx, by platform.",
    );
    for platform in ["discord", "slack"] {
        let n = m.api_retries.get(platform).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}{{platform=\"{platform}\"}} {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandpiper_agent::metrics::{Metrics, ToolOutcome};
    use std::time::Duration;

    #[test]
    fn the_text_format_has_every_family() {
        let m = Metrics::default();
        m.turn();
        m.model_call(Duration::from_millis(200));
        m.tool_call("we\"ird", ToolOutcome::Error);
        m.notify_delivery(true);
        m.api_retry("slack");
        let counts = StoredCounts {
            workstreams: 3,
            approvals_pending: 1,
            approvals_decided: 2,
        };
        let text = render(&m.snapshot(), 2, Some(&counts));
        for line in [
            "sandpiper_turns_total 1",
            "sandpiper_model_calls_total 1",
            "sandpiper_model_call_duration_seconds_bucket{le=\"0.1\"} 0",
            "sandpiper_model_call_duration_seconds_bucket{le=\"0.25\"} 1",
            "sandpiper_model_call_duration_seconds_bucket{le=\"+Inf\"} 1",
            "sandpiper_model_call_duration_seconds_count 1",
            "sandpiper_tool_calls_total{tool=\"we\\\"ird\",outcome=\"error\"} 1",
            "sandpiper_approvals_pending 1",
            "sandpiper_approvals_decided 2",
            "sandpiper_workstreams_live 2",
            "sandpiper_notify_deliveries_total{status=\"sent\"} 1",
            "sandpiper_notify_deliveries_total{status=\"failed\"} 0",
            "sandpiper_platform_api_retries_total{platform=\"slack\"} 1",
            "# TYPE sandpiper_model_call_duration_seconds histogram",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
