//! What the web, math and notify tools need beyond the workstream: their settings, for
//! web_fetch a model to ask about the fetched page, and for notify the service key and an
//! HTTP client for gateway nodes.

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
    /// The key notify signs its service JWTs with (`SANDPIPER_JWT_SECRET` or
    /// `[auth] jwt_secret_env`); `None`: notify says notifications are not set up.
    pub service_key: Option<crate::service_jwt::ServiceKey>,
    /// notify's HTTP client for gateway nodes.
    pub gateways: super::notify::GatewayClient,
}

impl std::fmt::Debug for ToolServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolServices")
            .field("web", &self.web)
            .field("math", &self.math)
            .field("model", &self.model.as_ref().map(|m| m.model_name()))
            .field("service_key", &self.service_key.is_some())
            .finish()
    }
}
