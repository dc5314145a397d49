//! The models a workstream may answer with: `[model] model`, and each of `[model] choices` a
//! thread was switched to with `/model NAME`. Each has its own client (the same provider and
//! endpoint, another model name) and its own context window, found on first use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::{ModelConfig, Provider};
use crate::model::{AnthropicModel, ChatModel, ModelError, OpenAiModel};
use crate::turn::context::ContextWindow;

/// One model: its client and what was learned of its window.
pub(crate) struct ModelChoice {
    pub(super) client: Arc<dyn ChatModel>,
    /// The window as configured, said by the server or known for the family (found once).
    pub(super) window: tokio::sync::OnceCell<ContextWindow>,
    /// A smaller window a server's context error showed (0: none).
    pub(super) learned: AtomicU64,
}

impl ModelChoice {
    fn new(client: Arc<dyn ChatModel>) -> Arc<Self> {
        Arc::new(Self {
            client,
            window: tokio::sync::OnceCell::new(),
            learned: AtomicU64::new(0),
        })
    }

    /// The name sent to the provider.
    pub(crate) fn name(&self) -> &str {
        self.client.model_name()
    }

    /// Lowers the window to `tokens` (a server's context error).
    pub(super) fn learn(&self, tokens: u64) {
        self.learned.store(tokens, Ordering::Relaxed);
    }

    /// The window a server's context error showed, if any.
    pub(super) fn learned(&self) -> Option<u64> {
        Some(self.learned.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }
}

/// Why a thread cannot switch to a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAChoice {
    /// `[model] choices` does not name it.
    #[error("`{asked}` is not one of the models this sandpiper offers ({offered})")]
    NotOffered {
        /// What was asked for.
        asked: String,
        /// The models that may be chosen, comma-separated.
        offered: String,
    },
}

/// The configured model and the chosen ones, built on first use.
pub(crate) struct Models {
    config: ModelConfig,
    default: Arc<ModelChoice>,
    chosen: Mutex<HashMap<String, Arc<ModelChoice>>>,
}

impl Models {
    /// `default` answers unless a workstream chose another of `config.choices`.
    pub(super) fn new(config: &ModelConfig, default: Arc<dyn ChatModel>) -> Self {
        Self {
            config: config.clone(),
            default: ModelChoice::new(default),
            chosen: Mutex::default(),
        }
    }

    /// The configured model.
    pub(super) fn default(&self) -> &Arc<ModelChoice> {
        &self.default
    }

    /// The configured model's name.
    pub(crate) fn default_name(&self) -> &str {
        &self.config.model
    }

    /// Every model a thread may answer with, the configured one first.
    pub(crate) fn offered(&self) -> Vec<&str> {
        let mut names = vec![self.config.model.as_str()];
        for choice in &self.config.choices {
            if !names.contains(&choice.as_str()) {
                names.push(choice);
            }
        }
        names
    }

    /// Whether `name` may be chosen; the name as configured.
    pub(crate) fn check(&self, name: &str) -> Result<(), NotAChoice> {
        if self.offered().contains(&name) {
            return Ok(());
        }
        Err(NotAChoice::NotOffered {
            asked: name.to_owned(),
            offered: self.offered().join(", "),
        })
    }

    /// The model a workstream that chose `name` answers with: the configured one when it
    /// chose none, or one that is no longer offered (the configuration changed since). A
    /// client that cannot be built is logged, and the configured model answers.
    pub(super) fn of(&self, name: Option<&str>) -> Arc<ModelChoice> {
        let chosen_and_offered = |n: &&str| self.config.choices.iter().any(|c| c == n);
        let Some(name) = name.filter(|n| *n != self.config.model && chosen_and_offered(n)) else {
            return self.default.clone();
        };
        let mut chosen = match self.chosen.lock() {
            Ok(chosen) => chosen,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(choice) = chosen.get(name) {
            return choice.clone();
        }
        match self.client(name) {
            Ok(client) => {
                let choice = ModelChoice::new(client);
                chosen.insert(name.to_owned(), choice.clone());
                choice
            }
            Err(e) => {
                tracing::error!(model = name, error = %e, "the chosen model's client could not be built; the configured model answers");
                self.default.clone()
            }
        }
    }

    fn client(&self, name: &str) -> Result<Arc<dyn ChatModel>, ModelError> {
        let config = ModelConfig {
            model: name.to_owned(),
            ..self.config.clone()
        };
        client(&config)
    }
}

/// The provider client `config` describes: [`OpenAiModel`] or [`AnthropicModel`]. The
/// process-wide TLS provider must be installed first (the binary does at start).
pub fn client(config: &ModelConfig) -> Result<Arc<dyn ChatModel>, ModelError> {
    Ok(match config.provider {
        Provider::Openai => Arc::new(OpenAiModel::new(config)?),
        Provider::Anthropic => Arc::new(AnthropicModel::new(config)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ScriptedModel;

    fn models(choices: &[&str]) -> Models {
        let config = ModelConfig {
            model: "small".into(),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            choices: choices.iter().map(|c| (*c).to_owned()).collect(),
            ..ModelConfig::default()
        };
        Models::new(&config, Arc::new(ScriptedModel::new(Vec::new())))
    }

    #[test]
    fn the_configured_model_comes_first_and_is_offered_once() {
        let models = models(&["large", "small", "large"]);
        assert_eq!(models.offered(), ["small", "large"]);
        assert!(models.check("large").is_ok());
        let refused = models.check("huge").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "`huge` is not one of the models this sandpiper offers (small, large)"
        );
    }

    #[test]
    fn a_choice_is_built_once_and_a_stale_one_falls_back_to_the_default() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let models = models(&["large"]);
        let large = models.of(Some("large"));
        assert_eq!(large.name(), "large");
        assert!(Arc::ptr_eq(&large, &models.of(Some("large"))));
        assert!(Arc::ptr_eq(models.default(), &models.of(None)));
        assert!(Arc::ptr_eq(models.default(), &models.of(Some("gone"))));
        assert!(Arc::ptr_eq(models.default(), &models.of(Some("small"))));
    }
}
