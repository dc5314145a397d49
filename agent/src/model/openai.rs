//! OpenAI-compatible chat completions (stub, replaced by the provider implementation).

use super::{ChatModel, ChatRequest, ModelError, ModelStream};
use crate::config::ModelConfig;

/// An OpenAI-compatible chat completions endpoint.
#[derive(Debug)]
pub struct OpenAiModel {
    model: String,
}

impl OpenAiModel {
    /// Builds a client from the model configuration.
    pub fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        Ok(Self {
            model: config.model.clone(),
        })
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiModel {
    async fn stream(&self, _request: ChatRequest<'_>) -> Result<ModelStream, ModelError> {
        Err(ModelError::Provider("not implemented".into()))
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
