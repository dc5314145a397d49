//! Anthropic Messages.
//!
//! `POST {base_url}/v1/messages` with `stream: true`; the answer is an event stream of
//! `message_start`, `content_block_*`, `message_delta` and `message_stop` events. See [`wire`]
//! for the history conversion and [`decode`] for the event decoder.

mod decode;
mod wire;

#[cfg(test)]
mod tests;

use reqwest::header::HeaderName;

use super::endpoint::Endpoint;
use super::retry::RetryPolicy;
use super::{ChatModel, ChatRequest, ModelError, ModelStream};
use crate::config::ModelConfig;

/// The API version sent in `anthropic-version`.
const API_VERSION: &str = "2023-06-01";

/// An Anthropic Messages endpoint.
#[derive(Debug)]
pub struct AnthropicModel {
    /// `{base_url}/v1/messages`, with the key as `x-api-key`.
    endpoint: Endpoint,
    model: String,
    max_tokens: u32,
    temperature: Option<f32>,
    /// Replace `web_search` with Anthropic's server-side search.
    native_web_search: bool,
}

impl AnthropicModel {
    /// Builds a client from the model configuration (`{base_url}/v1/messages`).
    pub fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        let endpoint = Endpoint::new(
            config,
            "/v1/messages",
            &[("anthropic-version", API_VERSION)],
            |key| (HeaderName::from_static("x-api-key"), key.to_owned()),
        )?;
        Ok(Self {
            endpoint,
            model: config.model.clone(),
            max_tokens: config
                .max_tokens
                .unwrap_or(crate::config::DEFAULT_MAX_TOKENS),
            temperature: config.temperature,
            native_web_search: config.capabilities.native_web_search,
        })
    }

    /// Replaces the retry policy (the default comes from [`RetryPolicy::from_config`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.endpoint.retry = policy;
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
        self.endpoint
            .stream(&body, decode::EventDecoder::default())
            .await
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
