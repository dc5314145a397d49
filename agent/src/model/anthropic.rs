//! Anthropic Messages (stub, replaced by the provider implementation).

use super::{ChatModel, ChatRequest, ModelError, ModelStream};
use crate::config::ModelConfig;

/// An Anthropic Messages endpoint.
#[derive(Debug)]
pub struct AnthropicModel {
    model: String,
}

impl AnthropicModel {
    /// Builds a client from the model configuration.
    pub fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        Ok(Self {
            model: config.model.clone(),
        })
    }
}

#[async_trait::async_trait]
impl ChatModel for AnthropicModel {
    async fn stream(&self, _request: ChatRequest<'_>) -> Result<ModelStream, ModelError> {
        Err(ModelError::Provider("not implemented".into()))
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
