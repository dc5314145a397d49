//! OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama, NIM, ...).
//!
//! `POST {base_url}/chat/completions` with `stream: true`; the answer is an event stream of
//! `chat.completion.chunk` objects ending with `data: [DONE]`. See [`wire`] for the request
//! body and [`decode`] for the tolerant chunk decoder.

mod decode;
mod slots;
mod window;
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
    /// llama.cpp's `/props` (its window and slots), asked once: `None` inside when the server
    /// answered without it (not llama.cpp); asked again while the server cannot be reached.
    props: tokio::sync::OnceCell<Option<serde_json::Value>>,
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
            props: tokio::sync::OnceCell::new(),
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
        let llama_slots = self.llama_props().await.and_then(slots::total_slots);
        let body = wire::request_body(
            &self.model,
            self.temperature,
            self.native_web_search,
            self.limit_field,
            &request,
            llama_slots,
        );
        self.endpoint
            .stream(&body, decode::ChunkDecoder::default())
            .await
    }

    fn model_name(&self) -> &str {
        &self.model
    }

    /// The window where the server says it, asked in this order: llama.cpp's `/props`, the
    /// model's entry in `/models`, LM Studio's `/api/v0/models`, Ollama's `/api/show` (see
    /// [`window`]). `None` when none says.
    async fn server_context_window(&self) -> Option<(u64, &'static str)> {
        let root = self.base_url.strip_suffix("/v1").unwrap_or(&self.base_url);
        if let Some(n) = self.llama_props().await.and_then(window::llama_props) {
            return Some((n, "/props n_ctx"));
        }
        let listing = self.get_json(&format!("{}/models", self.base_url)).await;
        if let Some(found) = listing
            .as_ref()
            .and_then(|l| window::models_listing(l, &self.model))
        {
            return Some(found);
        }
        let lm_studio = self.get_json(&format!("{root}/api/v0/models")).await;
        if let Some(found) = lm_studio
            .as_ref()
            .and_then(|l| window::lm_studio(l, &self.model))
        {
            return Some(found);
        }
        let show = serde_json::json!({ "model": self.model });
        let ollama = self.post_json(&format!("{root}/api/show"), &show).await?;
        window::ollama_show(&ollama)
    }
}

impl OpenAiModel {
    /// llama.cpp's `/props`, asked on the first call and kept; `None` from a server that
    /// answers without it. A server that cannot be reached yet is asked again next time.
    async fn llama_props(&self) -> Option<&serde_json::Value> {
        let root = self.base_url.strip_suffix("/v1").unwrap_or(&self.base_url);
        let url = format!("{root}/props");
        self.props
            .get_or_try_init(|| self.answer(self.endpoint.client.get(&url)))
            .await
            .ok()?
            .as_ref()
    }

    /// GETs `url` as JSON with a short timeout; `None` on any failure (the server does not
    /// have the endpoint, or is not up yet).
    async fn get_json(&self, url: &str) -> Option<serde_json::Value> {
        self.discover(self.endpoint.client.get(url)).await
    }

    /// POSTs `body` to `url` and reads the answer as [`OpenAiModel::get_json`] does.
    async fn post_json(&self, url: &str, body: &serde_json::Value) -> Option<serde_json::Value> {
        self.discover(self.endpoint.client.post(url).json(body))
            .await
    }

    /// Sends a discovery request with the key and a short timeout; `None` on any failure.
    async fn discover(&self, request: reqwest::RequestBuilder) -> Option<serde_json::Value> {
        self.answer(request).await.ok().flatten()
    }

    /// What a discovery request answered: `Ok(None)` when the server answered without the
    /// endpoint (an error status, or not JSON), an error when it could not be asked.
    async fn answer(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Option<serde_json::Value>, reqwest::Error> {
        let mut request = request.timeout(DISCOVERY_TIMEOUT);
        if let Some((name, value)) = &self.endpoint.secret {
            request = request.header(name, value.clone());
        }
        let response = request.send().await?;
        if !response.status().is_success() {
            return Ok(None);
        }
        let bytes = response.bytes().await?;
        Ok(serde_json::from_slice(&bytes).ok())
    }
}

/// How long asking a server for its window or slots may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);
