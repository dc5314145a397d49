//! The script: what the fake LLM answers, independent of the wire format.
//!
//! A [`Reply`] says *what* the model answers (text, tool calls, an HTTP error, ...), never *how*
//! it is encoded; the endpoint the client hits decides whether it is rendered as OpenAI chat
//! completion chunks or as Anthropic Messages events. One script therefore serves both providers.

use std::time::Duration;

use serde_json::Value;

/// One tool call the scripted model makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallSpec {
    /// Call id; the client must answer it with a tool result in a later request.
    pub id: String,
    /// Tool name (need not name a real tool, to test unknown-tool handling).
    pub name: String,
    /// Raw argument text, streamed in fragments (usually JSON, possibly not).
    pub arguments: String,
}

impl ToolCallSpec {
    /// A call whose arguments are `arguments` encoded as JSON.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self::raw(id, name, arguments.to_string())
    }

    /// A call whose argument text is sent exactly as given, valid JSON or not.
    pub fn raw(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The argument text cut into up to three pieces, so clients must concatenate fragments.
    pub(crate) fn argument_fragments(&self) -> Vec<String> {
        split_in_three(&self.arguments)
    }
}

/// Token counts the fake reports at the end of a streamed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache (part of `input_tokens`).
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache (part of `input_tokens`; Anthropic).
    pub cache_write_tokens: u64,
}

impl Default for TokenUsage {
    /// Small fixed numbers, so tests that check usage accounting have known values.
    fn default() -> Self {
        Self {
            input_tokens: 12,
            output_tokens: 7,
            cached_tokens: 0,
            cache_write_tokens: 0,
        }
    }
}

/// How a streamed reply ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Ending {
    /// Normally: finish reason, usage, then the protocol's end marker.
    #[default]
    Complete,
    /// With an error reported inside the stream (OpenAI `{"error":..}`, Anthropic `event: error`)
    /// instead of the normal end.
    Error(String),
    /// The connection drops right after the content, without any end marker.
    Disconnect,
}

/// A 200 `text/event-stream` answer: text, then tool calls, then the ending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamedReply {
    /// Text pieces, one delta each; their concatenation is the answer text.
    pub text_chunks: Vec<String>,
    /// Tool calls made after the text, in order (several means parallel calls).
    pub tool_calls: Vec<ToolCallSpec>,
    /// Reported token usage.
    pub usage: TokenUsage,
    /// Pause before every event after the first (zero: send everything at once).
    pub chunk_delay: Duration,
    /// Pause after the headers, before the first event: a model that takes long to begin.
    pub hold: Duration,
    /// How the stream ends.
    pub ending: Ending,
    /// Sources `(title, url)` of a native web search the model ran before answering. Rendered
    /// only on the Anthropic endpoint: `server_tool_use` and `web_search_tool_result` blocks,
    /// then the text block carrying one `citations_delta` per source.
    pub web_citations: Vec<(String, String)>,
    /// The answer stopped at the output limit: finish reason `length` (OpenAI) or stop
    /// reason `max_tokens` (Anthropic). Set by a window-enforcing fake that cut the text.
    pub cut_off: bool,
}

impl StreamedReply {
    /// Whether the model stops to wait for tool results (`tool_calls` / `tool_use`).
    pub(crate) fn calls_tools(&self) -> bool {
        !self.tool_calls.is_empty()
    }
}

/// One scripted answer of the fake LLM, consumed by one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A streamed answer.
    Stream(StreamedReply),
    /// An HTTP error instead of a stream; the body is the provider's JSON error shape around
    /// `message`.
    HttpError {
        /// HTTP status code (an invalid code is answered as 500 and recorded as an error).
        status: u16,
        /// Error message inside the JSON body.
        message: String,
        /// Seconds for a `Retry-After` header, if any.
        retry_after: Option<u64>,
    },
    /// A 200 `text/event-stream` whose data line is not valid JSON.
    Garbage,
    /// An error exactly as a real server words it: `status` with this JSON `body` (what a
    /// window-enforcing fake answers; see [`super::window`]).
    Refused {
        /// HTTP status code.
        status: u16,
        /// The JSON body.
        body: Value,
    },
    /// A 200 `text/event-stream` that sends headers and then nothing for this long, then ends.
    Stall(Duration),
}

impl Reply {
    /// Streams `text`, one delta per word (whitespace stays attached to the word before it).
    pub fn text(text: impl AsRef<str>) -> Self {
        Self::text_chunks(split_words(text.as_ref()))
    }

    /// Streams exactly these text deltas.
    pub fn text_chunks<S: Into<String>>(chunks: impl IntoIterator<Item = S>) -> Self {
        Self::Stream(StreamedReply {
            text_chunks: chunks.into_iter().map(Into::into).collect(),
            ..StreamedReply::default()
        })
    }

    /// Like [`Reply::text`], pausing `delay` before every event after the first, so a test can
    /// cancel mid-answer.
    pub fn slow_text(text: impl AsRef<str>, delay: Duration) -> Self {
        Self::text(text).with_chunk_delay(delay)
    }

    /// One tool call with JSON arguments.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls(vec![ToolCallSpec::new(id, name, arguments)])
    }

    /// One tool call whose argument text is sent verbatim (possibly invalid JSON).
    pub fn tool_call_raw(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self::tool_calls(vec![ToolCallSpec::raw(id, name, arguments)])
    }

    /// Several tool calls in one answer (parallel calls).
    pub fn tool_calls(calls: Vec<ToolCallSpec>) -> Self {
        Self::Stream(StreamedReply {
            tool_calls: calls,
            ..StreamedReply::default()
        })
    }

    /// Text (split per word) followed by tool calls in the same answer.
    pub fn text_then_tool_calls(text: impl AsRef<str>, calls: Vec<ToolCallSpec>) -> Self {
        Self::Stream(StreamedReply {
            text_chunks: split_words(text.as_ref()),
            tool_calls: calls,
            ..StreamedReply::default()
        })
    }

    /// An HTTP error with the provider's JSON error body around `message`.
    pub fn http_error(status: u16, message: impl Into<String>) -> Self {
        Self::HttpError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// An HTTP error (typically 429) carrying `Retry-After: secs`.
    pub fn http_error_with_retry_after(status: u16, secs: u64) -> Self {
        Self::HttpError {
            status,
            message: format!("rate limited, retry after {secs}s"),
            retry_after: Some(secs),
        }
    }

    /// A 200 event stream with a malformed (non-JSON) data line.
    pub fn garbage() -> Self {
        Self::Garbage
    }

    /// Headers, then silence for `duration` (for timeout tests).
    pub fn stall(duration: Duration) -> Self {
        Self::Stall(duration)
    }

    /// Reports these token counts instead of the default [`TokenUsage`].
    ///
    /// # Panics
    /// If this is not a streamed reply (a script-writing mistake).
    pub fn with_usage(self, input_tokens: u64, output_tokens: u64) -> Self {
        self.map_stream("with_usage", |s| {
            s.usage = TokenUsage {
                input_tokens,
                output_tokens,
                ..TokenUsage::default()
            }
        })
    }

    /// Of the prompt tokens, `cached` were served from the provider's cache and `written`
    /// written to it (reported as each provider reports them).
    ///
    /// # Panics
    /// If this is not a streamed reply.
    pub fn with_cache(self, cached: u64, written: u64) -> Self {
        self.map_stream("with_cache", |s| {
            s.usage.cached_tokens = cached;
            s.usage.cache_write_tokens = written;
        })
    }

    /// The model searched the web natively (Anthropic's server tool) and cites `(title, url)`
    /// sources on its text.
    ///
    /// # Panics
    /// If this is not a streamed reply.
    pub fn with_web_citations(self, sources: &[(&str, &str)]) -> Self {
        let sources = sources
            .iter()
            .map(|(t, u)| ((*t).to_owned(), (*u).to_owned()))
            .collect();
        self.map_stream("with_web_citations", |s| s.web_citations = sources)
    }

    /// Pauses `delay` before every event after the first.
    ///
    /// # Panics
    /// If this is not a streamed reply.
    pub fn with_chunk_delay(self, delay: Duration) -> Self {
        self.map_stream("with_chunk_delay", |s| s.chunk_delay = delay)
    }

    /// Sends the headers, then nothing for `delay`, then the reply: a slow model that a test
    /// can watch (or stop) while it is held.
    ///
    /// # Panics
    /// If this is not a streamed reply.
    pub fn held(self, delay: Duration) -> Self {
        self.map_stream("held", |s| s.hold = delay)
    }

    /// Ends the stream with an in-stream provider error instead of finishing normally. Tool
    /// calls of such a reply need no answer in [`super::FakeLlm::verify`].
    ///
    /// # Panics
    /// If this is not a streamed reply.
    pub fn then_error(self, message: impl Into<String>) -> Self {
        let message = message.into();
        self.map_stream("then_error", |s| s.ending = Ending::Error(message))
    }

    /// Drops the connection after the content, without an end marker. Tool calls of such a
    /// reply need no answer in [`super::FakeLlm::verify`].
    ///
    /// # Panics
    /// If this is not a streamed reply.
    pub fn then_disconnect(self) -> Self {
        self.map_stream("then_disconnect", |s| s.ending = Ending::Disconnect)
    }

    /// Tool calls the client is expected to answer: those of a stream that ends normally.
    pub(crate) fn answerable_tool_calls(&self) -> &[ToolCallSpec] {
        match self {
            Self::Stream(s) if s.ending == Ending::Complete => &s.tool_calls,
            _ => &[],
        }
    }

    fn map_stream(self, what: &str, f: impl FnOnce(&mut StreamedReply)) -> Self {
        match self {
            Self::Stream(mut s) => {
                f(&mut s);
                Self::Stream(s)
            }
            other => {
                panic!("fake LLM script: {what} applies only to streamed replies, not {other:?}")
            }
        }
    }
}

/// See [`Reply::text`].
pub fn text(text: impl AsRef<str>) -> Reply {
    Reply::text(text)
}

/// See [`Reply::tool_call`].
pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Reply {
    Reply::tool_call(id, name, arguments)
}

/// See [`Reply::tool_call_raw`].
pub fn tool_call_raw(
    id: impl Into<String>,
    name: impl Into<String>,
    arguments: impl Into<String>,
) -> Reply {
    Reply::tool_call_raw(id, name, arguments)
}

/// See [`Reply::tool_calls`].
pub fn tool_calls(calls: Vec<ToolCallSpec>) -> Reply {
    Reply::tool_calls(calls)
}

/// Text followed by one tool call with JSON arguments (see [`Reply::text_then_tool_calls`]).
pub fn text_then_tool_call(
    text: impl AsRef<str>,
    id: impl Into<String>,
    name: impl Into<String>,
    arguments: Value,
) -> Reply {
    Reply::text_then_tool_calls(text, vec![ToolCallSpec::new(id, name, arguments)])
}

/// Splits after each whitespace run's characters, keeping every character: "a b" → ["a ", "b"].
fn split_words(text: &str) -> Vec<String> {
    text.split_inclusive(char::is_whitespace)
        .map(str::to_owned)
        .collect()
}

/// Cuts `text` at character boundaries into up to three non-empty pieces.
fn split_in_three(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let cuts = [0, n / 3, 2 * n / 3, n];
    cuts.windows(2)
        .filter(|w| w[0] < w[1])
        .map(|w| chars[w[0]..w[1]].iter().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting_keeps_every_character() {
        assert_eq!(
            split_words("hello brave\nworld"),
            ["hello ", "brave\n", "world"]
        );
        assert_eq!(split_words(""), Vec::<String>::new());
        assert_eq!(split_in_three(r#"{"a":1}"#), [r#"{""#, r#"a""#, ":1}"]);
        assert_eq!(split_in_three("ab"), ["a", "b"]);
        assert_eq!(split_in_three("é"), ["é"]);
        assert_eq!(split_in_three(""), Vec::<String>::new());
    }
}
