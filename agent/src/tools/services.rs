//! What the web and math tools need beyond the workstream: their settings and, for
//! web_fetch, a model to ask about the fetched page.

use std::sync::Arc;

use crate::config::{MathConfig, WebConfig};
use crate::model::ChatModel;

/// Shared by every call of every turn; built once with the agent.
#[derive(Clone, Default)]
pub struct ToolServices {
    /// `[web]`: private-address allowance, fetch caps, the Tavily endpoint and key.
    pub web: WebConfig,
    /// `[math]`: the Python sandbox limits.
    pub math: MathConfig,
    /// The model web_fetch asks to answer the question from the page. `None` in unit tests
    /// of other tools; web_fetch then says it cannot answer.
    pub model: Option<Arc<dyn ChatModel>>,
}

impl std::fmt::Debug for ToolServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolServices")
            .field("web", &self.web)
            .field("math", &self.math)
            .field("model", &self.model.as_ref().map(|m| m.model_name()))
            .finish()
    }
}
