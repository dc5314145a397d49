//! Builds a running agent from configuration: the one path both the binary and the tests use.

use std::sync::Arc;

use sandpiper_agent::config::Provider;
use sandpiper_agent::model::{AnthropicModel, ChatModel, OpenAiModel};
use sandpiper_agent::store::{Store, redact_url};
use sandpiper_agent::{Agent, Config};

/// Why start-up failed.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    /// The model client could not be built.
    #[error("cannot set up the model: {0}")]
    Model(#[from] sandpiper_agent::model::ModelError),
    /// The database could not be opened or migrated.
    #[error("cannot open the database {url}: {source}")]
    Store {
        /// The URL, password redacted.
        url: String,
        /// The error.
        source: sandpiper_agent::store::StoreError,
    },
    /// The agent could not be built.
    #[error(transparent)]
    Agent(#[from] sandpiper_agent::AgentError),
}

/// Installs the process-wide TLS provider (ring) once; see CRATES.md "One TLS crypto provider".
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The configured model provider.
pub fn build_model(config: &Config) -> Result<Arc<dyn ChatModel>, WiringError> {
    install_crypto_provider();
    Ok(match config.model.provider {
        Provider::Openai => Arc::new(OpenAiModel::new(&config.model)?),
        Provider::Anthropic => Arc::new(AnthropicModel::new(&config.model)?),
    })
}

/// Opens the configured database (running migrations).
pub async fn open_store(config: &Config) -> Result<Store, WiringError> {
    Store::connect(&config.database.url, config.database.max_connections)
        .await
        .map_err(|source| WiringError::Store {
            url: redact_url(&config.database.url),
            source,
        })
}

/// The whole agent: model, store, tools.
pub async fn build_agent(config: Config) -> Result<Agent, WiringError> {
    let model = build_model(&config)?;
    let store = open_store(&config).await?;
    tracing::info!(
        model = %config.model.model,
        provider = ?config.model.provider,
        database = %redact_url(&config.database.url),
        "sandpiper ready"
    );
    Ok(Agent::new(config, model, store)?)
}
