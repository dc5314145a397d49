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

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use tokio::time::Instant;

use super::retry::{self, RetryPolicy};
use super::sse;
use super::{ChatModel, ChatRequest, ModelError, ModelStream};
use crate::config::ModelConfig;

/// An OpenAI-compatible chat completions endpoint.
#[derive(Debug)]
pub struct OpenAiModel {
    client: reqwest::Client,
    url: String,
    model: String,
    /// `Bearer <key>`, marked sensitive; `None` for local servers without a key.
    authorization: Option<HeaderValue>,
    temperature: Option<f32>,
    /// Replace `web_search` with `web_search_options` (OpenAI search models).
    native_web_search: bool,
    timeout: Duration,
    retry: RetryPolicy,
}

impl OpenAiModel {
    /// Builds a client from the model configuration (`{base_url}/chat/completions`).
    pub fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        let client = retry::http_client(config)?;
        let url = format!("{}/chat/completions", config.effective_base_url());
        let authorization = config
            .api_key
            .as_ref()
            .map(|key| retry::secret_header(&format!("Bearer {}", key.expose()), &url))
            .transpose()?;
        Ok(Self {
            client,
            url,
            model: config.model.clone(),
            authorization,
            temperature: config.temperature,
            native_web_search: config.capabilities.native_web_search,
            timeout: config.timeout,
            retry: RetryPolicy::from_config(config),
        })
    }

    /// Replaces the retry policy (the default comes from [`RetryPolicy::from_config`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
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
            &request,
        );
        let body = serde_json::to_vec(&body)
            .map_err(|e| ModelError::Protocol(format!("cannot encode the request: {e}")))?;
        let deadline = Instant::now() + self.timeout;
        let response = retry::send(&self.retry, &self.url, deadline, self.timeout, || {
            let builder = self
                .client
                .post(&self.url)
                .header(CONTENT_TYPE, "application/json")
                .header(ACCEPT, "text/event-stream")
                .body(body.clone());
            match &self.authorization {
                Some(value) => builder.header(AUTHORIZATION, value.clone()),
                None => builder,
            }
        })
        .await?;
        let events = sse::decode(
            sse::json_events(response, &self.url),
            decode::ChunkDecoder::default(),
        );
        Ok(retry::with_deadline(events, deadline, self.timeout))
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
