//! Recognising the two refusals a long workstream meets, among all the ways a model call
//! fails: "the context is full" and "this history is not valid". Both are answered by
//! changing what is sent (compacting), never by sending the same thing again.
//!
//! The shapes are the servers' own: OpenAI's `context_length_exceeded`, llama.cpp's
//! `exceed_context_size_error` (with `n_prompt_tokens` and `n_ctx`), vLLM's "maximum context
//! length is N tokens", Anthropic's "prompt is too long: N tokens > M maximum", and
//! llama.cpp's HTTP 500 "Failed to parse tool call arguments as JSON".

use std::sync::LazyLock;

use regex::Regex;

use crate::model::ModelError;

/// Why a server refused a request that an outage would not explain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request does not fit the context window.
    ContextFull {
        /// The window, when the server named it.
        window: Option<u64>,
        /// The request's prompt tokens, when the server named them.
        prompt: Option<u64>,
    },
    /// The server refused something in the history (a message, a tool call, its arguments).
    History {
        /// The server's words.
        message: String,
    },
}

/// What `error` means for the conversation, or `None` for an outage, a timeout or anything
/// else that sending again later could cure.
pub fn classify(error: &ModelError) -> Option<Refusal> {
    match error {
        ModelError::Http { status, body } => classify_http(*status, body),
        ModelError::Provider(message) => context_full(message),
        _ => None,
    }
}

/// [`classify`] for an HTTP error status and its body.
pub fn classify_http(status: u16, body: &str) -> Option<Refusal> {
    if !(400..600).contains(&status) || matches!(status, 401 | 403 | 404 | 408 | 429) {
        return None;
    }
    if let Some(full) = context_full(body) {
        return Some(full);
    }
    let lower = body.to_ascii_lowercase();
    let names_history = [
        "tool call",
        "tool_call",
        "tool_use",
        "tool_result",
        "argument",
        "messages",
        "message at",
        "role",
    ]
    .iter()
    .any(|w| lower.contains(w));
    let outage = matches!(status, 502..=504)
        || ["overloaded", "unavailable", "loading model", "try again"]
            .iter()
            .any(|w| lower.contains(w));
    (names_history && !outage).then(|| Refusal::History {
        message: server_message(body),
    })
}

fn context_full(text: &str) -> Option<Refusal> {
    let lower = text.to_ascii_lowercase();
    let says_full = [
        "context_length_exceeded",
        "exceed_context_size",
        "exceeds the available context size",
        "maximum context length",
        "prompt is too long",
        "context length",
        "context window",
        "too many tokens",
        "input is too long",
    ]
    .iter()
    .any(|w| lower.contains(w));
    if !says_full {
        return None;
    }
    let (window, prompt) = numbers(text);
    Some(Refusal::ContextFull { window, prompt })
}

/// The window and prompt sizes a context error names, where it names them.
fn numbers(text: &str) -> (Option<u64>, Option<u64>) {
    static PATTERNS: LazyLock<[(Regex, Regex); 4]> = LazyLock::new(|| {
        let re = |s: &str| Regex::new(s).expect("a valid pattern");
        [
            // llama.cpp: JSON fields.
            (
                re(r#""n_ctx"\s*:\s*(\d+)"#),
                re(r#""n_prompt_tokens"\s*:\s*(\d+)"#),
            ),
            // llama.cpp: "request (8203 tokens) exceeds the available context size (8192 tokens)".
            (
                re(r"available context size \((\d+) tokens\)"),
                re(r"request \((\d+) tokens\)"),
            ),
            // Anthropic: "prompt is too long: 210000 tokens > 200000 maximum".
            (re(r"tokens > (\d+) maximum"), re(r"too long: (\d+) tokens")),
            // OpenAI, vLLM: "maximum context length is 4096 tokens. However, you requested
            // 5000 tokens (4000 in the messages, 1000 in the completion)" / "your messages
            // resulted in 5000 tokens".
            (
                re(r"maximum context length is (\d+) tokens"),
                re(r"\((\d+) in the messages|resulted in (\d+) tokens"),
            ),
        ]
    });
    let first = |re: &Regex| {
        re.captures(text).and_then(|c| {
            c.iter()
                .skip(1)
                .flatten()
                .next()
                .and_then(|m| m.as_str().parse::<u64>().ok())
        })
    };
    let mut window = None;
    let mut prompt = None;
    for (w, p) in PATTERNS.iter() {
        window = window.or_else(|| first(w));
        prompt = prompt.or_else(|| first(p));
    }
    (window, prompt)
}

/// The message inside a JSON error body (`error.message`, or `message`), else the body.
fn server_message(body: &str) -> String {
    let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
    json.as_ref()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
        })
        .and_then(|m| m.as_str())
        .map_or_else(|| body.trim().to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn full(window: Option<u64>, prompt: Option<u64>) -> Option<Refusal> {
        Some(Refusal::ContextFull { window, prompt })
    }

    #[test]
    fn every_servers_context_error_is_recognised_with_its_numbers() {
        let cases: Vec<(u16, &str, Option<Refusal>)> = vec![
            (
                400,
                r#"{"error":{"code":400,"message":"request (8203 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":8203,"n_ctx":8192}}"#,
                full(Some(8192), Some(8203)),
            ),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130501 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                full(Some(128_000), Some(130_501)),
            ),
            (
                400,
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
                full(Some(4096), Some(4000)),
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
                full(Some(200_000), Some(210_000)),
            ),
            (
                500,
                r#"{"error":{"code":500,"message":"Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error","type":"server_error"}}"#,
                Some(Refusal::History {
                    message: "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error".into(),
                }),
            ),
            (
                400,
                r#"{"error":{"message":"Invalid 'messages[3].tool_calls': empty array.","type":"invalid_request_error"}}"#,
                Some(Refusal::History {
                    message: "Invalid 'messages[3].tool_calls': empty array.".into(),
                }),
            ),
            // Outages and everything else: not the conversation's fault.
            (503, r#"{"error":{"message":"Loading model","code":503}}"#, None),
            (500, "internal error", None),
            (429, "rate limited: too many tokens per minute", None),
            (401, "invalid api key", None),
            (400, r#"{"error":{"message":"unknown model gpt-9"}}"#, None),
        ];
        for (status, body, want) in cases {
            assert_eq!(classify_http(status, body), want, "{status} {body}");
        }
    }

    #[test]
    fn an_error_inside_the_stream_can_say_the_context_is_full() {
        let e = ModelError::Provider(
            "the request exceeds the available context size (2048 tokens)".into(),
        );
        assert_eq!(classify(&e), full(Some(2048), None));
        assert_eq!(
            classify(&ModelError::Timeout(std::time::Duration::from_secs(1))),
            None
        );
    }
}
