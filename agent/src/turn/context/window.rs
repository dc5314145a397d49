//! The context window in force, and where that number came from.

use std::fmt;

use crate::config::Provider;

/// Where the window size came from, for `config check`, `/status` and the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSource {
    /// `[model] context_window` (or `SANDPIPER_MODEL_CONTEXT_WINDOW`).
    Config,
    /// The server said so: which endpoint and field.
    Server(&'static str),
    /// A known default for the provider and model family.
    Default(&'static str),
    /// Nothing says: a small guess that compacts a conversation early but never refuses a
    /// request (the server's refusal teaches the real window).
    Guess(&'static str),
    /// A server refused a request as too long and named its window (or showed it was smaller
    /// than believed).
    Learned,
}

impl fmt::Display for WindowSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowSource::Config => f.write_str("model.context_window"),
            WindowSource::Server(what) => write!(f, "the server's {what}"),
            WindowSource::Default(family) => write!(f, "the default for {family}"),
            WindowSource::Guess(what) => write!(f, "a guess for {what}"),
            WindowSource::Learned => f.write_str("the server's context error"),
        }
    }
}

/// A context window: its size in tokens and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextWindow {
    /// Tokens of prompt and answer together.
    pub tokens: u64,
    /// Where the number came from.
    pub source: WindowSource,
}

impl ContextWindow {
    /// Whether the size is only a guess: it never blocks a request.
    pub fn is_guess(&self) -> bool {
        matches!(self.source, WindowSource::Guess(_))
    }
}

impl fmt::Display for ContextWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} tokens (from {})", self.tokens, self.source)
    }
}

/// The window for an unknown model on an OpenAI-compatible server that does not say: small
/// enough for what local servers start with by default (Ollama, llama.cpp without `-c`), so a
/// conversation is compacted too early rather than refused.
pub const UNKNOWN_OPENAI_COMPATIBLE: u64 = 8192;

/// The known default window for `model` on `provider`: hosted families publish theirs;
/// anything else on an OpenAI-compatible server gets [`UNKNOWN_OPENAI_COMPATIBLE`].
pub fn known_default(provider: Provider, model: &str) -> ContextWindow {
    let (tokens, source) = family_window(provider, &model.to_ascii_lowercase());
    ContextWindow { tokens, source }
}

fn family_window(provider: Provider, model: &str) -> (u64, WindowSource) {
    // The model name without a vendor prefix ("openai/gpt-4o", "anthropic.claude-...").
    let name = model.rsplit(['/', ':']).next().unwrap_or(model);
    let name = name.strip_prefix("anthropic.").unwrap_or(name);
    let families: &[(&str, u64, &'static str)] = &[
        ("claude", 200_000, "Claude models"),
        ("gpt-4.1", 1_047_576, "GPT-4.1 models"),
        ("gpt-5", 400_000, "GPT-5 models"),
        ("gpt-4o", 128_000, "GPT-4o models"),
        ("gpt-4-turbo", 128_000, "GPT-4 Turbo"),
        ("gpt-3.5", 16_385, "GPT-3.5"),
        ("o1", 200_000, "OpenAI o-series models"),
        ("o3", 200_000, "OpenAI o-series models"),
        ("o4", 200_000, "OpenAI o-series models"),
        ("gemini", 1_048_576, "Gemini models"),
        ("deepseek", 128_000, "DeepSeek models"),
        ("mistral-large", 128_000, "Mistral Large"),
    ];
    if let Some((_, tokens, family)) = families.iter().find(|(p, _, _)| name.starts_with(p)) {
        return (*tokens, WindowSource::Default(family));
    }
    match provider {
        Provider::Anthropic => (200_000, WindowSource::Default("Anthropic's API")),
        Provider::Openai => (
            UNKNOWN_OPENAI_COMPATIBLE,
            WindowSource::Guess("an unknown model on an OpenAI-compatible server"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn families_have_their_published_windows_and_unknown_models_a_small_one() {
        let cases = [
            (Provider::Openai, "gpt-4.1-mini", 1_047_576),
            (Provider::Openai, "gpt-4o", 128_000),
            (Provider::Openai, "openai/gpt-4o-mini", 128_000),
            (Provider::Openai, "o3-mini", 200_000),
            (Provider::Openai, "gpt-5", 400_000),
            (Provider::Anthropic, "claude-sonnet-4-5", 200_000),
            (Provider::Openai, "anthropic.claude-3-haiku", 200_000),
            (Provider::Anthropic, "some-future-model", 200_000),
            (Provider::Openai, "qwen2.5-coder", UNKNOWN_OPENAI_COMPATIBLE),
            (Provider::Openai, "gemma3-270m", UNKNOWN_OPENAI_COMPATIBLE),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(p, m, _)| (*m, known_default(*p, m).tokens))
            .collect();
        let want: Vec<_> = cases.iter().map(|(_, m, t)| (*m, *t)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_source_reads_as_a_reason() {
        let w = ContextWindow {
            tokens: 4096,
            source: WindowSource::Server("/props n_ctx"),
        };
        assert_eq!(
            w.to_string(),
            "4096 tokens (from the server's /props n_ctx)"
        );
        assert_eq!(
            known_default(Provider::Openai, "x").to_string(),
            "8192 tokens (from a guess for an unknown model on an OpenAI-compatible server)"
        );
    }
}
