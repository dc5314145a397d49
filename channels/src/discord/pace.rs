//! The bot's outgoing request budget, shared by every thread: requests are spaced so that
//! many busy threads together stay under `requests_per_second`, and a request refused with
//! 429 (rate limited) or a 5xx is retried with back-off instead of losing the output.
//!
//! In production serenity's own rate limiter also honours Discord's `retry_after`; it cannot
//! run behind an API override (it would call the real Discord), so this layer is what keeps a
//! test double's injected 429s from losing messages.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Attempts per request before giving up.
const ATTEMPTS: u32 = 6;

/// Spaces and retries requests.
#[derive(Debug)]
pub struct Pacer {
    next: Mutex<Instant>,
    gap: Duration,
    /// Counts retries for `/metrics`.
    metrics: sandpiper_agent::metrics::Metrics,
}

impl Pacer {
    /// A budget of `per_second` requests per second in all.
    pub fn new(per_second: u32) -> Self {
        Self {
            next: Mutex::new(Instant::now()),
            gap: Duration::from_secs(1) / per_second.max(1),
            metrics: Default::default(),
        }
    }

    /// Counts its retries in `metrics`.
    pub fn counting(mut self, metrics: sandpiper_agent::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Waits for a slot in the budget.
    async fn slot(&self) {
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let at = (*next).max(Instant::now());
            *next = at + self.gap;
            at
        };
        tokio::time::sleep_until(at).await;
    }

    /// Runs `request` in the budget, retrying 429s and 5xx errors with back-off.
    pub async fn send<T, F, Fut>(&self, what: &str, request: F) -> Result<T, serenity::Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, serenity::Error>>,
    {
        let mut attempt = 0;
        loop {
            self.slot().await;
            match request().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    attempt += 1;
                    let Some(wait) = retry_after(&e, attempt) else {
                        return Err(e);
                    };
                    if attempt >= ATTEMPTS {
                        tracing::warn!(request = what, attempts = attempt, error = %e, "giving up on a Discord request");
                        return Err(e);
                    }
                    self.metrics.api_retry("discord");
                    tracing::info!(request = what, attempt, wait_ms = wait.as_millis() as u64, error = %e, "Discord request refused; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// How long to wait before retrying, or `None` when retrying cannot help.
fn retry_after(e: &serenity::Error, attempt: u32) -> Option<Duration> {
    let serenity::Error::Http(http) = e else {
        return None;
    };
    let status = http.status_code()?;
    let backoff = Duration::from_millis(250) * 2u32.saturating_pow(attempt - 1);
    if status.as_u16() == 429 || status.is_server_error() {
        Some(backoff.min(Duration::from_secs(8)))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_are_spaced_by_the_global_budget() {
        let pacer = Pacer::new(10);
        let start = Instant::now();
        for _ in 0..5 {
            pacer
                .send("t", || async { Ok::<_, serenity::Error>(()) })
                .await
                .unwrap();
        }
        assert!(start.elapsed() >= Duration::from_millis(400));
    }

    #[tokio::test]
    async fn other_errors_are_not_retried() {
        let pacer = Pacer::new(1000);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let r = pacer
            .send("t", || async {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err::<(), _>(serenity::Error::Other("nope"))
            })
            .await;
        assert!(r.is_err());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
