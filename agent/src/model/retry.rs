//! Sending a model request: the HTTP client, retries with backoff, and the call deadline.
//!
//! One model call has one deadline, `config.timeout` after it starts: it bounds the attempts
//! up to the response headers (retries and their waits included) and then the whole stream.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Response, StatusCode};
use tokio::time::Instant;

use super::sse::{error_chain, truncate_chars};
use super::{ModelError, ModelStream};
use crate::config::ModelConfig;

/// How much of an error body is kept in [`ModelError::Http`].
const ERROR_BODY_CHARS: usize = 500;
/// How many bytes of an error body are read at most.
const ERROR_BODY_BYTES: usize = 8 * 1024;
/// Longest connect timeout (shorter when the call timeout is shorter).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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

impl RetryPolicy {
    /// The policy for `config`: `max_retries` from it, backoff from 500 ms up to 30 s.
    pub fn from_config(config: &ModelConfig) -> Self {
        Self {
            max_retries: config.max_retries,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }

    /// The wait before retry number `attempt + 1` (`attempt` counts from 0): `base_delay`
    /// doubled per attempt, capped at `max_delay`, with random jitter over its upper half.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.min(31));
        let full = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let half = full / 2;
        let jitter_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = match jitter_nanos {
            0 => 0,
            n => random_u64() % (n + 1),
        };
        half + Duration::from_nanos(jitter)
    }

    /// The wait a `Retry-After` header asks for (delay in seconds), capped at `max_delay`.
    /// HTTP dates are not understood and give `None` (the backoff applies then).
    pub(crate) fn retry_after(&self, headers: &HeaderMap) -> Option<Duration> {
        let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
        let secs: f64 = value.parse().ok()?;
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        Some(Duration::from_secs_f64(
            secs.min(self.max_delay.as_secs_f64()),
        ))
    }
}

fn random_u64() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// A header value carrying a secret (an API key), marked sensitive so that it is never
/// printed by `Debug` or logged by the HTTP stack.
pub(crate) fn secret_header(
    value: &str,
    url: &str,
) -> Result<reqwest::header::HeaderValue, ModelError> {
    let mut header =
        reqwest::header::HeaderValue::from_str(value).map_err(|_| ModelError::Connect {
            url: url.to_owned(),
            message: "the API key contains characters not allowed in an HTTP header".into(),
        })?;
    header.set_sensitive(true);
    Ok(header)
}

/// The HTTP client for a provider: ring TLS, a connect timeout, the environment's proxy.
pub(crate) fn http_client(config: &ModelConfig) -> Result<reqwest::Client, ModelError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let connect_timeout = CONNECT_TIMEOUT.min(config.timeout.max(Duration::from_millis(1)));
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("sandpiper/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ModelError::Connect {
            url: config.shown_base_url(),
            message: format!("cannot build the HTTP client: {}", error_chain(&e)),
        })
}

/// Whether a status is worth another attempt.
fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// Sends the request built by `make` (called once per attempt) until it answers with a
/// success status, retrying per `policy`; `url` is the endpoint as logs and errors name it
/// (redacted). Non-retryable statuses fail at once with
/// [`ModelError::Http`]; the last error is returned when retries are exhausted or the next
/// wait would pass `deadline`; reaching `deadline` gives [`ModelError::Timeout`]`(timeout)`.
pub(crate) async fn send(
    policy: &RetryPolicy,
    url: &str,
    deadline: Instant,
    timeout: Duration,
    make: impl Fn() -> reqwest::RequestBuilder,
) -> Result<Response, ModelError> {
    match tokio::time::timeout_at(deadline, attempts(policy, url, deadline, &make)).await {
        Ok(result) => result,
        Err(_) => Err(ModelError::Timeout(timeout)),
    }
}

async fn attempts(
    policy: &RetryPolicy,
    url: &str,
    deadline: Instant,
    make: &impl Fn() -> reqwest::RequestBuilder,
) -> Result<Response, ModelError> {
    let mut attempt: u32 = 0;
    loop {
        let (error, status, retry_after) = match make().send().await {
            Ok(response) if response.status().is_success() => return Ok(response),
            Ok(response) => {
                let status = response.status();
                let retry_after = policy.retry_after(response.headers());
                let body = error_body(response).await;
                // A 500 that names the conversation ("Failed to parse tool call arguments")
                // would fail the same way every time: it goes to the turn at once.
                let refused = crate::turn::context::overflow::classify_http(status.as_u16(), &body);
                let error = ModelError::Http {
                    status: status.as_u16(),
                    body,
                };
                if !is_retryable(status) || refused.is_some() {
                    return Err(error);
                }
                (error, Some(status.as_u16()), retry_after)
            }
            Err(e) => {
                let is_builder = e.is_builder();
                let error = ModelError::Connect {
                    url: url.to_owned(),
                    message: error_chain(&e.without_url()),
                };
                if is_builder {
                    return Err(error);
                }
                (error, None, None)
            }
        };
        let delay = retry_after.unwrap_or_else(|| policy.backoff(attempt));
        let retrying = attempt < policy.max_retries && Instant::now() + delay < deadline;
        log_failed_attempt(
            url,
            attempt,
            policy,
            status,
            &error,
            retrying.then_some(delay),
        );
        if !retrying {
            return Err(error);
        }
        attempt += 1;
        tokio::time::sleep(delay).await;
    }
}

/// Logs a failed attempt with the (redacted) endpoint `url`: the thread is told only that the
/// model cannot be reached, so this is where an operator learns which endpoint failed. `retry`
/// is the wait before the next attempt, `None` when this was the last.
fn log_failed_attempt(
    url: &str,
    attempt: u32,
    policy: &RetryPolicy,
    status: Option<u16>,
    error: &ModelError,
    retry: Option<Duration>,
) {
    let delay_ms = retry.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let max_retries = policy.max_retries;
    match (status, retry) {
        (Some(status), Some(_)) => tracing::warn!(
            attempt = attempt + 1,
            max_retries,
            status,
            delay_ms,
            endpoint = url,
            "model provider answered with a retryable status, retrying"
        ),
        (None, Some(_)) => tracing::warn!(attempt = attempt + 1, max_retries, delay_ms,
            endpoint = url, error = %error, "cannot reach the model provider, retrying"),
        (_, None) => tracing::warn!(attempts = attempt + 1, endpoint = url, error = %error,
            "the model provider failed; giving up"),
    }
}

/// The start of an error response's body, lossy UTF-8, trimmed and cut to ~500 characters.
async fn error_body(mut response: Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    truncate_chars(String::from_utf8_lossy(&bytes).trim(), ERROR_BODY_CHARS)
}

/// Ends `stream` with [`ModelError::Timeout`]`(timeout)` when `deadline` passes first.
pub(crate) fn with_deadline(
    stream: ModelStream,
    deadline: Instant,
    timeout: Duration,
) -> ModelStream {
    let sleep = Box::pin(tokio::time::sleep_until(deadline));
    Box::pin(futures::stream::unfold(
        Some((stream, sleep)),
        move |state| async move {
            let (mut stream, mut sleep) = state?;
            tokio::select! {
                biased;
                item = stream.next() => item.map(|item| (item, Some((stream, sleep)))),
                () = &mut sleep => Some((Err(ModelError::Timeout(timeout)), None)),
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelEvent;
    use crate::model::sse::testing::{collect, fast_retry, install_crypto};
    use reqwest::header::HeaderValue;
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        let p = policy();
        for _ in 0..50 {
            let d0 = p.backoff(0);
            assert!(
                d0 >= Duration::from_millis(250) && d0 <= Duration::from_millis(500),
                "{d0:?}"
            );
            let d2 = p.backoff(2);
            assert!(
                d2 >= Duration::from_millis(1000) && d2 <= Duration::from_millis(2000),
                "{d2:?}"
            );
            let big = p.backoff(40);
            assert!(
                big >= Duration::from_secs(15) && big <= Duration::from_secs(30),
                "{big:?}"
            );
        }
    }

    #[test]
    fn retry_after_seconds_are_capped_and_dates_ignored() {
        let p = policy();
        let mut h = HeaderMap::new();
        assert_eq!(p.retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(p.retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("3600"));
        assert_eq!(p.retry_after(&h), Some(Duration::from_secs(30)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(p.retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("-1"));
        assert_eq!(p.retry_after(&h), None);
    }

    #[test]
    fn from_config_uses_max_retries() {
        let config = ModelConfig {
            max_retries: 7,
            ..ModelConfig::default()
        };
        let p = RetryPolicy::from_config(&config);
        assert_eq!(p.max_retries, 7);
        assert_eq!(p.base_delay, Duration::from_millis(500));
        assert_eq!(p.max_delay, Duration::from_secs(30));
    }

    #[tokio::test]
    async fn error_body_is_truncated() {
        install_crypto();
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(401).set_body_string("x".repeat(5000)))
            .expect(1)
            .mount(&server)
            .await;
        let client = reqwest::Client::new();
        let url = server.uri();
        let deadline = Instant::now() + Duration::from_secs(5);
        let err = send(
            &fast_retry(3),
            &url,
            deadline,
            Duration::from_secs(5),
            || client.post(&url),
        )
        .await
        .expect_err("401 fails");
        match err {
            ModelError::Http { status, body } => {
                assert_eq!(status, 401);
                assert_eq!(body.chars().count(), ERROR_BODY_CHARS + 1);
            }
            other => panic!("expected Http, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn connection_refused_is_retried_then_connect_error() {
        install_crypto();
        // Bind and drop a listener to get a port nobody listens on.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let err = send(
            &fast_retry(2),
            &url,
            deadline,
            Duration::from_secs(5),
            || client.post(&url),
        )
        .await
        .expect_err("nobody listens");
        assert!(
            matches!(&err, ModelError::Connect { url: u, .. } if *u == url),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_wait_past_the_deadline_returns_the_last_error() {
        install_crypto();
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(503).insert_header("Retry-After", "20"))
            .expect(1)
            .mount(&server)
            .await;
        let client = reqwest::Client::new();
        let url = server.uri();
        let deadline = Instant::now() + Duration::from_secs(2);
        let err = send(&policy(), &url, deadline, Duration::from_secs(2), || {
            client.post(&url)
        })
        .await
        .expect_err("503");
        assert!(
            matches!(err, ModelError::Http { status: 503, .. }),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn deadline_ends_a_stalled_stream() {
        let stalled: ModelStream = Box::pin(
            futures::stream::iter([Ok(ModelEvent::TextDelta("a".into()))])
                .chain(futures::stream::pending()),
        );
        let timeout = Duration::from_millis(100);
        let (events, err) =
            collect(with_deadline(stalled, Instant::now() + timeout, timeout)).await;
        assert_eq!(events, vec![ModelEvent::TextDelta("a".into())]);
        assert!(matches!(err, Some(ModelError::Timeout(t)) if t == timeout));
    }
}
