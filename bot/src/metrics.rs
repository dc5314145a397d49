//! `GET /metrics`: the node's counters ([`sandpiper_agent::metrics`]), the HTTP server's
//! requests ([`HttpRequests`]) and gauges read at scrape time (live workstreams, approval
//! requests, active watches, MCP servers by state, platform connections), in the Prometheus
//! text format (0.0.4), written by hand: a few dozen families do not need a metrics crate.
//! Every family is listed in `docs/operations.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sandpiper_agent::Agent;
use sandpiper_agent::mcp::{ServerState, ServerStatus};
use sandpiper_agent::metrics::{Family, MetricsSnapshot};
use sandpiper_agent::store::health::StoredCounts;

use crate::serve::PlatformProbe;

/// Requests the HTTP server answered, by route (the matched pattern, never the raw path, so
/// the label set stays bounded) and status. Cheap to clone; clones count together.
#[derive(Debug, Clone, Default)]
pub struct HttpRequests(Arc<Mutex<BTreeMap<(String, u16), u64>>>);

/// Label for requests that matched no route.
const UNMATCHED: &str = "unmatched";

impl HttpRequests {
    /// Counts one answered request.
    pub fn record(&self, route: &str, status: u16) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((route.to_owned(), status)).or_default() += 1;
    }

    /// Every count now.
    pub fn snapshot(&self) -> BTreeMap<(String, u16), u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `router` with every request counted.
    pub fn layer(&self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(self.clone(), count))
    }
}

async fn count(State(requests): State<HttpRequests>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| UNMATCHED.to_owned());
    let response = next.run(request).await;
    requests.record(&route, response.status().as_u16());
    response
}

/// What `/metrics` reads.
#[derive(Clone)]
pub struct MetricsSource {
    /// The agent (counters, store, MCP).
    pub agent: Agent,
    /// The configured platforms' connections.
    pub platforms: Vec<PlatformProbe>,
    /// The HTTP server's requests.
    pub http: HttpRequests,
}

/// What [`render`] writes besides the agent's counters.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Workstreams in memory.
    pub live: usize,
    /// Stored counts (`None`: the database did not answer).
    pub counts: Option<StoredCounts>,
    /// Every configured MCP server.
    pub mcp: Vec<ServerStatus>,
    /// Each platform and whether it is connected.
    pub platforms: Vec<(&'static str, bool)>,
    /// HTTP requests by route and status.
    pub http: BTreeMap<(String, u16), u64>,
}

/// The `/metrics` route.
pub fn router(source: MetricsSource) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(source)
}

async fn metrics(State(source): State<MetricsSource>) -> Response {
    let agent = &source.agent;
    let counts = match agent.store().stored_counts().await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: the database did not answer");
            None
        }
    };
    let gauges = Gauges {
        live: agent.live_workstreams(),
        counts,
        mcp: agent.mcp().status(),
        platforms: source
            .platforms
            .iter()
            .map(|(name, probe)| (*name, probe().connected))
            .collect(),
        http: source.http.snapshot(),
    };
    let text = render(&agent.metrics().snapshot(), &gauges);
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

/// One two-label family of the agent's counters, each series `name{a="…",b="…"} n` (a
/// label whose value is empty is left out).
fn labelled(
    out: &mut String,
    m: &MetricsSnapshot,
    which: Family,
    name: &str,
    help: &str,
    labels: [&str; 2],
) {
    family(out, name, "counter", help);
    for (values, n) in m.family(which) {
        let pairs: Vec<String> = labels
            .iter()
            .zip(values)
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}=\"{}\"", label(v)))
            .collect();
        let _ = writeln!(out, "{name}{{{}}} {n}", pairs.join(","));
    }
}

/// The text exposition of `m` and `g` (stored counts left out when the database did not
/// answer).
pub fn render(m: &MetricsSnapshot, g: &Gauges) -> String {
    let mut out = String::new();
    let (live, counts) = (g.live, g.counts.as_ref());
    family(
        &mut out,
        "sandpiper_turns_total",
        "counter",
        "Turns started.",
    );
    let _ = writeln!(out, "sandpiper_turns_total {}", m.turns);
    labelled(
        &mut out,
        m,
        Family::TurnsEnded,
        "sandpiper_turns_ended_total",
        "Turns ended, by outcome: completed, failed, stopped (/stop or shutdown), interrupted (cut off at agent.max_rounds).",
        ["outcome", ""],
    );
    family(
        &mut out,
        "sandpiper_model_calls_total",
        "counter",
        "Model calls made, by model and outcome (ok, error, stopped).",
    );
    for (values, n) in m.family(Family::ModelCalls) {
        let _ = writeln!(
            out,
            "sandpiper_model_calls_total{{model=\"{}\",outcome=\"{}\"}} {n}",
            label(&values[0]),
            label(&values[1])
        );
    }
    labelled(
        &mut out,
        m,
        Family::ModelTokens,
        "sandpiper_model_tokens_total",
        "Tokens the model reported, by model and kind (input, output).",
        ["model", "kind"],
    );
    labelled(
        &mut out,
        m,
        Family::Approvals,
        "sandpiper_approvals_total",
        "Approvals, by path (asked, auto_approve, grant) and outcome (approved, denied, always_allowed, annotated, timed_out, cancelled).",
        ["path", "outcome"],
    );
    labelled(
        &mut out,
        m,
        Family::WatchPolls,
        "sandpiper_watch_polls_total",
        "Watch polls, by outcome (waiting, fired, failed).",
        ["outcome", ""],
    );
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
        family(
            &mut out,
            "sandpiper_watches_active",
            "gauge",
            "Watches still polling.",
        );
        let _ = writeln!(out, "sandpiper_watches_active {}", c.watches_active);
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
    if !g.mcp.is_empty() {
        let name = "sandpiper_mcp_servers";
        family(&mut out, name, "gauge", "Configured MCP servers, by state.");
        for state in ServerState::ALL {
            let n = g.mcp.iter().filter(|s| s.state == state).count();
            let _ = writeln!(out, "{name}{{state=\"{}\"}} {n}", state.as_str());
        }
    }
    let name = "sandpiper_platform_connected";
    family(
        &mut out,
        name,
        "gauge",
        "Whether each configured chat platform is connected (1) or not (0).",
    );
    for (platform, connected) in &g.platforms {
        let _ = writeln!(
            out,
            "{name}{{platform=\"{platform}\"}} {}",
            u8::from(*connected)
        );
    }
    let name = "sandpiper_http_requests_total";
    family(
        &mut out,
        name,
        "counter",
        "HTTP requests answered, by route and status.",
    );
    for ((route, status), n) in &g.http {
        let _ = writeln!(
            out,
            "{name}{{route=\"{}\",status=\"{status}\"}} {n}",
            label(route)
        );
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
        m.tool_call("we\"ird", ToolOutcome::Error);
        m.notify_delivery(true);
        m.api_retry("slack");
        m.model_call_ended("gpt-x", Some(true), Duration::from_millis(200));
        m.tokens(
            "gpt-x",
            &sandpiper_agent::model::Usage {
                input_tokens: 12,
                output_tokens: 3,
                cached_tokens: 9,
                cache_write_tokens: 0,
            },
        );
        m.approval("asked", "timed_out");
        m.watch_poll("fired");
        m.turn_ended(sandpiper_agent::metrics::TurnEnd::Failed);
        let counts = StoredCounts {
            workstreams: 3,
            approvals_pending: 1,
            approvals_decided: 2,
            watches_active: 4,
        };
        let status = |name: &str, state| ServerStatus {
            name: name.into(),
            state,
            connected: state == ServerState::Connected,
            stderr_tail: Vec::new(),
            tools: 0,
            resources: 0,
            prompts: 0,
            error: None,
            cooling_off_until: None,
        };
        let http = HttpRequests::default();
        http.record("/health", 200);
        http.record("/health", 200);
        http.record(UNMATCHED, 404);
        let gauges = Gauges {
            live: 2,
            counts: Some(counts),
            mcp: vec![
                status("a", ServerState::Connected),
                status("b", ServerState::Failed),
            ],
            platforms: vec![("discord", true), ("slack", false)],
            http: http.snapshot(),
        };
        let text = render(&m.snapshot(), &gauges);
        for line in [
            "sandpiper_turns_total 1",
            "sandpiper_turns_ended_total{outcome=\"failed\"} 1",
            "sandpiper_model_calls_total{model=\"gpt-x\",outcome=\"ok\"} 1",
            "sandpiper_model_tokens_total{model=\"gpt-x\",kind=\"input\"} 12",
            "sandpiper_model_tokens_total{model=\"gpt-x\",kind=\"output\"} 3",
            "sandpiper_model_tokens_total{model=\"gpt-x\",kind=\"cached\"} 9",
            "sandpiper_approvals_total{path=\"asked\",outcome=\"timed_out\"} 1",
            "sandpiper_watch_polls_total{outcome=\"fired\"} 1",
            "sandpiper_watches_active 4",
            "sandpiper_mcp_servers{state=\"connected\"} 1",
            "sandpiper_mcp_servers{state=\"failed\"} 1",
            "sandpiper_mcp_servers{state=\"connecting\"} 0",
            "sandpiper_platform_connected{platform=\"discord\"} 1",
            "sandpiper_platform_connected{platform=\"slack\"} 0",
            "sandpiper_http_requests_total{route=\"/health\",status=\"200\"} 2",
            "sandpiper_http_requests_total{route=\"unmatched\",status=\"404\"} 1",
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
