//! OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama, NIM, ...).
//!
//! `POST {base_url}/chat/completions` with `stream: true`; the answer is an event stream of
//! `chat.completion.chunk` objects ending with `data: [DONE]`. See [`wire`] for the request
//! body and [`decode`] for the tolerant chunk decoder.

mod decode;
mod wire;

#[cfg(test)]
mod tests;

use std::time::Duration;

use reqwest::header::AUTHORIZATION;

use super::endpoint::Endpoint;
use super::retry::RetryPolicy;
use super::{ChatModel, ChatRequest, ModelError, ModelStream};
use crate::config::{ModelConfig, OutputLimitField};

/// An OpenAI-compatible chat completions endpoint.
#[derive(Debug)]
pub struct OpenAiModel {
    /// `{base_url}/chat/completions`, with the key as `Authorization: Bearer …` (none for a
    /// local server without a key).
    endpoint: Endpoint,
    model: String,
    temperature: Option<f32>,
    /// Replace `web_search` with `web_search_options` (OpenAI search models).
    native_web_search: bool,
    /// The request field of the output limit.
    limit_field: OutputLimitField,
    /// `{base_url}` without `/chat/completions`, for `/models` and llama.cpp's `/props`.
    base_url: String,
}

impl OpenAiModel {
    /// Builds a client from the model configuration (`{base_url}/chat/completions`).
    pub fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        let endpoint = Endpoint::new(config, "/chat/completions", &[], |key| {
            (AUTHORIZATION, format!("Bearer {key}"))
        })?;
        Ok(Self {
            endpoint,
            model: config.model.clone(),
            temperature: config.temperature,
            native_web_search: config.capabilities.native_web_search,
            limit_field: config.effective_output_limit_field(),
            base_url: config.effective_base_url(),
        })
    }

    /// Replaces the retry policy (the default comes from [`RetryPolicy::from_config`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.endpoint.retry = policy;
        self
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiModel {
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ModelStream, ModelError> {
        let body = wire::request_body(
            &self.model,
            self.temperature,
            self.native_web_search,
            self.limit_field,
            &request,
        );
        self.endpoint
            .stream(&body, decode::ChunkDecoder::default())
            .await
    }

    fn model_name(&self) -> &str {
        &self.model
    }

    /// llama.cpp's `/props` (the slot's `n_ctx`, which is what a request may fill), else the
    /// model's entry in `/models` (`max_model_len` from vLLM, `context_length` or
    /// `context_window` from others).
    async fn server_context_window(&self) -> Option<(u64, &'static str)> {
        let root = self.base_url.strip_suffix("/v1").unwrap_or(&self.base_url);
        if let Some(props) = self.get_json(&format!("{root}/props")).await {
            let n_ctx = props
                .pointer("/default_generation_settings/n_ctx")
                .or_else(|| props.get("n_ctx"))
                .and_then(serde_json::Value::as_u64);
            if let Some(n) = n_ctx.filter(|n| *n > 0) {
                return Some((n, "/props n_ctx"));
            }
        }
        let models = self.get_json(&format!("{}/models", self.base_url)).await?;
        let entries = models.get("data")?.as_array()?;
        let entry = entries
            .iter()
            .find(|m| m.get("id").and_then(|v| v.as_str()) == Some(self.model.as_str()))
            .or_else(|| entries.first().filter(|_| entries.len() == 1))?;
        [
            ("max_model_len", "/models max_model_len"),
            ("context_length", "/models context_length"),
            ("context_window", "/models context_window"),
        ]
        .into_iter()
        .find_map(|(field, what)| {
            entry
                .get(field)
                .and_then(serde_json::Value::as_u64)
                .filter(|n| *n > 0)
                .map(|n| (n, what))
        })
    }
}

impl OpenAiModel {
    /// GETs `url` as JSON with a short timeout; `None` on any failure (the server does not
    /// have the endpoint, or is not up yet).
    async fn get_json(&self, url: &str) -> Option<serde_json::Value> {
        let mut request = self.endpoint.client.get(url).timeout(DISCOVERY_TIMEOUT);
        if let Some((name, value)) = &self.endpoint.secret {
            request = request.header(name, value.clone());
        }
        let response = request.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let bytes = response.bytes().await.ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// How long asking a server for its window may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);
