//! Anthropic Messages.
//!
//! `POST {base_url}/v1/messages` with `stream: true`; the answer is an event stream of
//! `message_start`, `content_block_*`, `message_delta` and `message_stop` events. See [`wire`]
//! for the history conversion and [`decode`] for the event decoder.

mod decode;
mod wire;

#[cfg(test)]
mod tests;

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use tokio::time::Instant;

use super::retry::{self, RetryPolicy};
use super::sse;
use super::{ChatModel, ChatRequest, ModelError, ModelStream};
use crate::config::ModelConfig;

/// The API version sent in `anthropic-version`.
const API_VERSION: &str = "2023-06-01";

/// An Anthropic Messages endpoint.
#[derive(Debug)]
pub struct AnthropicModel {
    client: reqwest::Client,
    url: String,
    model: String,
    /// The `x-api-key` value, marked sensitive.
    api_key: Option<HeaderValue>,
    max_tokens: u32,
    temperature: Option<f32>,
    /// Replace `web_search` with Anthropic's server-side search.
    native_web_search: bool,
    timeout: Duration,
    retry: RetryPolicy,
}

impl AnthropicModel {
    /// Builds a client from the model configuration (`{base_url}/v1/messages`).
    pub fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        let client = retry::http_client(config)?;
        let url = format!("{}/v1/messages", config.effective_base_url());
        let api_key = config
            .api_key
            .as_ref()
            .map(|key| retry::secret_header(key.expose(), &url))
            .transpose()?;
        Ok(Self {
            client,
            url,
            model: config.model.clone(),
            api_key,
            max_tokens: config.max_tokens,
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
impl ChatModel for AnthropicModel {
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ModelStream, ModelError> {
        let body = wire::request_body(
            &self.model,
            request.max_tokens.unwrap_or(self.max_tokens),
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
                .header("anthropic-version", API_VERSION)
                .body(body.clone());
            match &self.api_key {
                Some(value) => builder.header("x-api-key", value.clone()),
                None => builder,
            }
        })
        .await?;
        let events = sse::decode(
            sse::json_events(response, &self.url),
            decode::EventDecoder::default(),
        );
        Ok(retry::with_deadline(events, deadline, self.timeout))
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
