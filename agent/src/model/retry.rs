//! Retry policy for model calls (stub).

use std::time::Duration;

/// How model calls are retried on connection errors, 429 and 5xx.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff.
    pub base_delay: Duration,
    /// Longest backoff (and longest `Retry-After` honoured).
    pub max_delay: Duration,
}
