//! Load benchmark of a gateway's `POST /v1/api/notify` (issue 12): the real route
//! ([`sandpiper::notify_api`]) on the real HTTP server ([`sandpiper::http_server`]), every
//! request's service JWT verified (HS256, issuer, audience, lifetime), the body parsed and
//! checked, and the notification handed to a platform with no latency (it answers at once).
//! Clients are keep-alive HTTP/1 connections on loopback in the same process, so client and
//! server share the machine's cores.
//!
//! `notify_load [--seconds N] [--concurrency C] [--fresh-tokens] [--to-user]`; prints one
//! summary line per run. `--fresh-tokens` signs a new token for every request, as the notify
//! tool does (the default reuses one token per client: the server verifies it on every
//! request either way). By default each notification goes to a channel (no database work);
//! `--to-user` sends it to a user with a linked identity instead, from a workstream, on a
//! SQLite file: two reads (the user, their identities) and one write (the notification →
//! workstream map) per notification, as in production.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sandpiper_agent::config::ServerConfig;
use sandpiper_agent::metrics::Metrics;
use sandpiper_agent::notify::{ChannelType, Ledger};
use sandpiper_agent::people::People;
use sandpiper_agent::service_jwt::{CHANNEL_AUDIENCE, ServiceKey};
use sandpiper_agent::store::Store;
use sandpiper_channels::notify::{Notifier, NotifyPlatform, PostError};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "load-benchmark-secret-0123456789abcdef";

/// A platform that posts instantly.
#[derive(Default)]
struct NoLatency(AtomicU64);

#[async_trait::async_trait]
impl NotifyPlatform for NoLatency {
    fn platform(&self) -> ChannelType {
        ChannelType::Slack
    }

    fn listens_in(&self, _channel: &str) -> bool {
        true
    }

    async fn open_dm(&self, user: &str) -> Result<String, PostError> {
        Ok(format!("D{user}"))
    }

    async fn post(
        &self,
        _channel: &str,
        _title: Option<&str>,
        _message: &str,
    ) -> Result<String, PostError> {
        Ok(self.0.fetch_add(1, Ordering::Relaxed).to_string())
    }
}

struct Options {
    seconds: u64,
    concurrency: usize,
    fresh_tokens: bool,
    to_user: bool,
}

fn options() -> anyhow::Result<Options> {
    let mut o = Options {
        seconds: 10,
        concurrency: 32,
        fresh_tokens: false,
        to_user: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => o.seconds = args.next().context("--seconds N")?.parse()?,
            "--concurrency" => o.concurrency = args.next().context("--concurrency C")?.parse()?,
            "--fresh-tokens" => o.fresh_tokens = true,
            "--to-user" => o.to_user = true,
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    Ok(o)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = options()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir()?;
    let store = Store::connect(
        &format!("sqlite://{}", dir.path().join("load.db").display()),
        8,
    )
    .await?;
    store
        .user_for_identity("slack", "U0LOAD", "loaduser")
        .await?;
    let platform = Arc::new(NoLatency::default());
    let notifier = Notifier::new(
        People::new(store.clone()),
        Ledger::new(store),
        vec![platform.clone()],
    );
    let key = ServiceKey::new(SECRET)?;
    let router = sandpiper::notify_api::router(notifier, key.clone(), Metrics::default());
    let limits = ServerConfig {
        listen: "127.0.0.1:0".parse()?,
        max_connections: 4096,
        ..ServerConfig::default()
    };
    let shutdown = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        sandpiper::http_server::run(limits.listen, router, &limits, stop, tx).await
    });
    let addr = rx.await.context("the server did not start")?;
    let url = format!("http://{addr}/v1/api/notify");
    let message = "a notification of ordinary length, about as long as a deploy note";
    let body = if o.to_user {
        serde_json::json!({
            "username": "loaduser",
            "title": "load",
            "message": message,
            "workstream": "slack:T0:C0:1.0",
        })
    } else {
        serde_json::json!({
            "channel_type": "slack",
            "channel_id": "C0LOAD",
            "title": "load",
            "message": message,
        })
    }
    .to_string();

    // Clients are built before the clock starts (each loads its TLS roots).
    let clients = (0..o.concurrency)
        .map(|_| reqwest::Client::builder().no_proxy().build())
        .collect::<Result<Vec<_>, _>>()?;
    let began = Instant::now();
    let deadline = began + Duration::from_secs(o.seconds);
    let mut workers = Vec::new();
    for client in clients {
        let (url, body, key) = (url.clone(), body.clone(), key.clone());
        let fresh = o.fresh_tokens;
        workers.push(tokio::spawn(async move {
            let mut token = key.sign(CHANNEL_AUDIENCE, "bench", Duration::from_secs(300))?;
            let mut latencies = Vec::new();
            let mut failures = 0u64;
            while Instant::now() < deadline {
                if fresh {
                    token = key.sign(CHANNEL_AUDIENCE, "bench", Duration::from_secs(60))?;
                }
                let started = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                match response {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.bytes().await;
                        latencies.push(started.elapsed());
                    }
                    _ => failures += 1,
                }
            }
            anyhow::Ok((latencies, failures))
        }));
    }
    let mut latencies = Vec::new();
    let mut failures = 0;
    for w in workers {
        let (l, f) = w.await??;
        latencies.extend(l);
        failures += f;
    }
    let elapsed = began.elapsed().as_secs_f64();
    shutdown.cancel();
    let _ = server.await;
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "notify_load: {} notifications in {elapsed:.1} s = {:.0}/s (concurrency {}, {} tokens, \
         to a {}), p50 {:.2} ms, p99 {:.2} ms, {} failed, {} posted",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        o.concurrency,
        if o.fresh_tokens { "fresh" } else { "reused" },
        if o.to_user { "user" } else { "channel" },
        pct(0.50),
        pct(0.99),
        failures,
        platform.0.load(Ordering::Relaxed),
    );
    Ok(())
}
