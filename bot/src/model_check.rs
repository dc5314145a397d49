//! Whether the model endpoint works, checked without spending tokens: the key is set where
//! the provider needs one, and `GET {base}/models` (OpenAI-compatible) or `GET
//! {base}/v1/models` (Anthropic) answers within a timeout. `serve` checks at start and while
//! the answer is bad, logs the result and reports it in `/ready` as `ok` or `degraded` (an
//! unreachable model never stops the node: its threads, approvals and watches still work);
//! `sandpiper doctor` prints it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandpiper_agent::config::{ModelConfig, Provider};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// How long the check may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How often `serve` checks again while the model is degraded.
pub const RECHECK_EVERY: Duration = Duration::from_secs(30);

/// The model endpoint as `/ready` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelState {
    /// `ok`, `degraded`, or `checking` before the first answer.
    pub state: &'static str,
    /// The endpoint checked (no credentials in it).
    pub endpoint: String,
    /// What went wrong and what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Whether `model` needs a key: the providers' own endpoints do; a configured base URL (a
/// local or self-hosted server) may not.
pub fn needs_key(model: &ModelConfig) -> bool {
    model.base_url.is_none()
}

/// The URL the check asks, as `doctor`, `/ready` and logs show it: userinfo and query values
/// redacted.
pub fn shown_models_url(model: &ModelConfig) -> String {
    sandpiper_agent::config::redact_url(&models_url(model))
}

/// The URL the check asks.
fn models_url(model: &ModelConfig) -> String {
    let base = model.effective_base_url();
    match model.provider {
        Provider::Openai => format!("{base}/models"),
        Provider::Anthropic => format!("{base}/v1/models"),
    }
}

/// One check: `Ok(())` or what is wrong, in words for an operator.
pub async fn check(model: &ModelConfig) -> Result<(), String> {
    let key_env = model.effective_api_key_env();
    if model.api_key.is_none() && needs_key(model) {
        return Err(format!(
            "no API key: set {key_env} (or [model] api_key_env to the variable that holds it)"
        ));
    }
    crate::wiring::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(CHECK_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let mut request = client.get(models_url(model));
    let url = shown_models_url(model);
    if let Some(key) = &model.api_key {
        request = match model.provider {
            Provider::Openai => request.bearer_auth(key.expose()),
            Provider::Anthropic => request
                .header("x-api-key", key.expose())
                .header("anthropic-version", "2023-06-01"),
        };
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            format!("{url} did not answer within {} s", CHECK_TIMEOUT.as_secs())
        } else {
            // The cause without reqwest's copy of the URL, which would carry its secrets.
            format!("{url} is unreachable: {}", error_chain(&e.without_url()))
        }
    })?;
    match response.status().as_u16() {
        200..=299 => Ok(()),
        401 | 403 => Err(format!(
            "{url} refused the key ({}): check {key_env}",
            response.status()
        )),
        _ => Err(format!("{url} answered {}", response.status())),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The last check's result, shared with `/ready`.
#[derive(Debug, Clone)]
pub struct ModelHealth(Arc<Mutex<ModelState>>);

impl ModelHealth {
    /// Checks `model` now and then every [`RECHECK_EVERY`] while degraded, until `shutdown`;
    /// each change is logged.
    pub fn start(model: ModelConfig, shutdown: CancellationToken) -> Self {
        let health = Self(Arc::new(Mutex::new(ModelState {
            state: "checking",
            endpoint: shown_models_url(&model),
            error: None,
        })));
        let shared = health.clone();
        tokio::spawn(async move {
            loop {
                let result = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    r = check(&model) => r,
                };
                let ok = result.is_ok();
                shared.record(result, &model);
                if ok {
                    return;
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(RECHECK_EVERY) => {}
                }
            }
        });
        health
    }

    /// A fixed state (tests, and nodes built without a check).
    pub fn fixed(state: ModelState) -> Self {
        Self(Arc::new(Mutex::new(state)))
    }

    fn record(&self, result: Result<(), String>, model: &ModelConfig) {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let next = match result {
            Ok(()) => ModelState {
                state: "ok",
                endpoint: shown_models_url(model),
                error: None,
            },
            Err(error) => ModelState {
                state: "degraded",
                endpoint: shown_models_url(model),
                error: Some(error),
            },
        };
        if *state != next {
            match &next.error {
                None => {
                    crate::startup!(model = %model.model, endpoint = %next.endpoint, "model endpoint: ok")
                }
                Some(error) => {
                    tracing::warn!(model = %model.model, endpoint = %next.endpoint, error = %error,
                    "model endpoint: degraded (turns will fail until it answers; retrying every 30 s)")
                }
            }
        }
        *state = next;
    }

    /// The last result.
    pub fn state(&self) -> ModelState {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandpiper_agent::config::Secret;

    #[tokio::test]
    async fn a_missing_key_and_a_closed_port_are_named_a_fake_server_passes() {
        let mut model = ModelConfig::default();
        let err = check(&model).await.unwrap_err();
        assert_eq!(
            err,
            "no API key: set OPENAI_API_KEY (or [model] api_key_env to the variable that holds it)"
        );
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        model.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
        let err = check(&model).await.unwrap_err();
        assert!(
            err.starts_with(&format!("http://127.0.0.1:{port}/v1/models is unreachable")),
            "{err}"
        );
        let llm = sandpiper_tests::fake_llm::FakeLlm::start(vec![]).await;
        model.base_url = Some(llm.openai_base_url());
        model.api_key = Some(Secret::new("sk-check"));
        assert_eq!(check(&model).await, Ok(()));
    }
}
