//! Model providers: the [`ChatModel`] seam and the conversation types sent to it.
//!
//! A provider turns a [`ChatRequest`] into a stream of [`ModelEvent`]s. Tool calls arrive as
//! deltas keyed by an index (OpenAI's `index`, Anthropic's content block index); the turn loop
//! assembles them with [`ResponseAssembler`], so providers stay thin translators of the wire.

mod anthropic;
mod assemble;
mod endpoint;
mod openai;
mod retry;
mod scripted;
mod sse;

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use serde::{Deserialize, Serialize};

pub use anthropic::AnthropicModel;
pub use assemble::{AssembledResponse, ResponseAssembler};
pub use openai::OpenAiModel;
pub use retry::RetryPolicy;
pub use scripted::ScriptedModel;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A person talking to the agent.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering `tool_call_id`.
    Tool,
}

impl Role {
    /// The lower-case name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a stored role name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

/// One tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id; the tool result answers it.
    pub id: String,
    /// Tool name as the model wrote it (may name no tool at all).
    pub name: String,
    /// Raw argument text as the model sent it (usually JSON, sometimes not).
    pub arguments: String,
}

/// An image attached to a message (read_file on an image with a vision model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// MIME type, e.g. `image/png`.
    pub media_type: String,
    /// Base64 (standard alphabet, padded) of the image bytes.
    pub data: String,
}

/// One entry of a workstream's history, as stored and as sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Text content (may be empty for an assistant message that only calls tools).
    pub content: String,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool result: the tool's name. For a user message: who said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Images attached to a user message or a tool result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content.into())
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, content.into())
    }

    /// A tool result answering `call_id`.
    pub fn tool_result(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            name: Some(name.into()),
            ..Self::plain(Role::Tool, content.into())
        }
    }

    fn plain(role: Role, content: String) -> Self {
        Self {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            images: Vec::new(),
        }
    }
}

/// A function tool offered to the model (metadata keys already stripped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object, shared: every model call of every turn offers
    /// the same schemas, so offering one copies a pointer, not the tree.
    #[serde(with = "shared_json")]
    pub parameters: std::sync::Arc<serde_json::Value>,
    /// Deferred by tool search: the provider keeps it out of the model's context until its
    /// own tool search finds it (only set for providers with native tool search).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defer_loading: bool,
}

/// What a model call is asked to do. Borrows the history so that a turn never copies it.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The system message (base prompt, date, working directory, ...).
    pub system: &'a str,
    /// The conversation so far, oldest first.
    pub messages: &'a [Message],
    /// Tools the model may call. Empty when the model does not support tools.
    pub tools: &'a [ToolSchema],
    /// The most tokens the answer may use; `None` leaves the provider's configured cap.
    pub max_tokens: Option<u32>,
    /// The conversation this request continues or is made for, for providers that keep a
    /// conversation's prompt in one cache (OpenAI's `prompt_cache_key`, llama.cpp's slots).
    pub cache_key: Option<CacheKey<'a>>,
}

/// Whose prompt cache a request uses: what a provider needs to keep one conversation's
/// requests on one cache, and the calls made for it off that cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKey<'a> {
    /// A call of the conversation with this workstream key: a turn's model calls, or a
    /// sub-agent's (whose key is its own child key, so it is kept off its parent's cache).
    Conversation(&'a str),
    /// A one-off call made for this workstream (its compaction summary): its prompt shares
    /// nothing with the conversation's, so it must not evict the conversation's cache.
    Aside(&'a str),
}

impl<'a> CacheKey<'a> {
    /// The workstream key.
    pub fn workstream(self) -> &'a str {
        match self {
            CacheKey::Conversation(key) | CacheKey::Aside(key) => key,
        }
    }
}

/// Token counts reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens the provider served from its prompt cache (part of `input_tokens`).
    pub cached_tokens: u64,
    /// Prompt tokens the provider wrote to its prompt cache for later calls (part of
    /// `input_tokens`; Anthropic reports them and charges more for them).
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds another call's counts (a turn's usage over its model calls).
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// One event of a streamed model response.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// A piece of the answer text.
    TextDelta(String),
    /// A piece of a tool call. `id` and `name` arrive at least once per index (usually first);
    /// `arguments` pieces are concatenated in order.
    ToolCallDelta {
        /// Position of the call in the response; deltas with the same index belong together.
        index: usize,
        /// The call id, when this delta carries it.
        id: Option<String>,
        /// The tool name, when this delta carries it.
        name: Option<String>,
        /// A piece of the argument text.
        arguments: String,
    },
    /// Token usage.
    Usage(Usage),
    /// The response is complete.
    Done {
        /// Provider's stop reason (`stop`, `tool_calls`, `end_turn`, `tool_use`, ...).
        finish_reason: Option<String>,
    },
}

/// A streamed model response.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ModelError>> + Send>>;

/// A chat model provider.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// Starts a response. Connection errors, 429 and 5xx are retried inside (see
    /// [`RetryPolicy`]); an error returned here or inside the stream is final for this call.
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ModelStream, ModelError>;

    /// The model name, for logs and `config check`.
    fn model_name(&self) -> &str;

    /// The context window the server says it has, and where it said so (`"/props n_ctx"`),
    /// when it says. Asked once, with a short timeout; `None` when the server does not tell.
    async fn server_context_window(&self) -> Option<(u64, &'static str)> {
        None
    }
}

/// Why a model call failed. Every variant is shown to the user; none is a panic.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The provider could not be reached (after retries). Shown in the thread without the
    /// endpoint: operators find it in the logs and in `doctor`.
    #[error("cannot reach the model: {message}")]
    Connect {
        /// Endpoint that was called, redacted ([`crate::config::redact_url`]), for logs.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The provider answered with an HTTP error (after retries for 429/5xx).
    #[error("the model provider answered HTTP {status}: {body}")]
    Http {
        /// HTTP status code.
        status: u16,
        /// Response body, truncated.
        body: String,
    },
    /// The request or the stream took longer than the configured timeout.
    #[error("the model did not answer within {0:?}")]
    Timeout(Duration),
    /// The provider sent something that is not the protocol (bad SSE, invalid JSON, ...).
    #[error("the model sent a malformed response: {0}")]
    Protocol(String),
    /// The provider reported an error inside the stream.
    #[error("the model reported an error: {0}")]
    Provider(String),
}

/// (De)serializes an `Arc<serde_json::Value>` as the value it holds (serde's `rc` feature,
/// for one field).
mod shared_json {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::sync::Arc;

    pub(super) fn serialize<S: Serializer>(
        value: &Arc<serde_json::Value>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.as_ref().serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Arc<serde_json::Value>, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Arc::new)
    }
}
