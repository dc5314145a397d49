//! The size of a request in tokens, estimated from its bytes before it is sent.
//!
//! No tokenizer fits every OpenAI-compatible server, so the estimate counts bytes of what a
//! request carries (the system message, each message's text, tool calls and images, the tool
//! schemas) and divides by a bytes-per-token ratio. Two things keep it close to what the
//! server counts: the ratio is calibrated by every `usage` the server reports ([`TokenGauge`]),
//! and a workstream's next request is estimated as the previous request's reported prompt
//! tokens plus only what changed since ([`Observed`]), so the estimate's error is that of the
//! few messages added, not of the whole history.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::{Message, ToolSchema};

/// Bytes counted for every message besides its text: role markers and separators of a chat
/// template, the JSON around a tool call.
const MESSAGE_OVERHEAD: u64 = 16;

/// Bytes counted for one image (about 1,500 tokens on both providers at usual sizes).
const IMAGE_BYTES: u64 = 6_000;

/// The ratio before any usage was seen: below what real tokenizers reach on English text,
/// code and JSON (3.5 to 4.5), so a first estimate errs on the large side.
const INITIAL_BYTES_PER_TOKEN: f64 = 3.0;

/// What an estimate adds for what it cannot see: a little when anchored on the previous
/// request's count, more when it is the ratio alone.
const SAFETY_ANCHORED: f64 = 1.02;
const SAFETY: f64 = 1.05;

/// The bytes-per-token ratio of one model, calibrated by the usage its server reports.
/// Shared by every workstream talking to that model.
#[derive(Debug)]
pub struct TokenGauge {
    /// Bytes per token, times 1,000.
    milli: AtomicU64,
}

impl Default for TokenGauge {
    fn default() -> Self {
        Self {
            milli: AtomicU64::new((INITIAL_BYTES_PER_TOKEN * 1000.0) as u64),
        }
    }
}

impl TokenGauge {
    /// The ratio in force.
    pub fn bytes_per_token(&self) -> f64 {
        self.milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// Learns from a request of `bytes` that the server counted as `tokens` prompt tokens.
    /// Requests too small to say much (a few hundred tokens) are ignored.
    pub fn observe(&self, bytes: u64, tokens: u64) {
        if tokens < 200 || bytes == 0 {
            return;
        }
        let seen = (bytes as f64 / tokens as f64).clamp(1.0, 8.0);
        let old = self.bytes_per_token();
        let new = 0.5 * old + 0.5 * seen;
        self.milli.store((new * 1000.0) as u64, Ordering::Relaxed);
    }
}

/// The previous request of a workstream: its size in bytes and the prompt tokens the server
/// reported for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// Bytes as [`request_bytes`] counts them.
    pub bytes: u64,
    /// Prompt tokens the server counted.
    pub tokens: u64,
}

/// Bytes of the tool schemas offered (name, description and parameters as JSON), counted
/// without building the text.
pub fn tools_bytes(tools: &[ToolSchema]) -> u64 {
    tools
        .iter()
        .map(|t| {
            MESSAGE_OVERHEAD
                + t.name.len() as u64
                + t.description.len() as u64
                + json_len(&t.parameters)
        })
        .sum()
}

/// Bytes of one message as sent.
pub fn message_bytes(m: &Message) -> u64 {
    MESSAGE_OVERHEAD
        + m.content.len() as u64
        + m.tool_calls
            .iter()
            .map(|c| {
                MESSAGE_OVERHEAD
                    + c.id.len() as u64
                    + c.name.len() as u64
                    + c.arguments.len() as u64
            })
            .sum::<u64>()
        + m.images.len() as u64 * IMAGE_BYTES
}

/// Bytes of a whole request: the system message, the messages and the tools' bytes.
pub fn request_bytes(system: &str, messages: &[Message], tools_bytes: u64) -> u64 {
    MESSAGE_OVERHEAD
        + system.len() as u64
        + messages.iter().map(message_bytes).sum::<u64>()
        + tools_bytes
}

/// Estimated prompt tokens of a request of `bytes`, from the previous request of the same
/// workstream when the server reported its size, else from the ratio alone.
pub fn estimate(bytes: u64, gauge: &TokenGauge, observed: Option<Observed>) -> u64 {
    let per_token = gauge.bytes_per_token();
    let tokens = match observed {
        Some(o) => {
            (o.tokens as f64 + (bytes as f64 - o.bytes as f64) / per_token) * SAFETY_ANCHORED
        }
        None => bytes as f64 / per_token * SAFETY,
    };
    tokens.max(0.0).ceil() as u64
}

/// Length of `value` as compact JSON, without allocating it.
fn json_len(value: &serde_json::Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_moves_toward_what_the_server_counts() {
        let gauge = TokenGauge::default();
        for _ in 0..8 {
            gauge.observe(40_000, 10_000);
        }
        assert!(
            (gauge.bytes_per_token() - 4.0).abs() < 0.02,
            "{}",
            gauge.bytes_per_token()
        );
        // Tiny requests and nonsense ratios do not pull it around.
        gauge.observe(100, 10);
        gauge.observe(1_000_000, 201);
        assert!(gauge.bytes_per_token() <= 8.0);
    }

    #[test]
    fn a_workstream_estimate_is_the_last_count_plus_what_changed() {
        let gauge = TokenGauge::default();
        let observed = Observed {
            bytes: 30_000,
            tokens: 8_000,
        };
        // 3,000 bytes more at 3 bytes a token: 1,000 tokens more, plus the safety margin.
        let e = estimate(33_000, &gauge, Some(observed));
        assert_eq!(e, (9_000.0_f64 * SAFETY_ANCHORED).ceil() as u64);
        // Without an observation, bytes over the ratio.
        assert_eq!(
            estimate(3_000, &gauge, None),
            (1_000.0_f64 * SAFETY).ceil() as u64
        );
        // After compaction the request is smaller than the one observed.
        assert!(estimate(3_000, &gauge, Some(observed)) < 8_000);
    }

    #[test]
    fn messages_count_text_calls_and_images() {
        let mut m = Message::assistant("abcd");
        m.tool_calls.push(crate::model::ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        });
        assert_eq!(message_bytes(&m), 16 + 4 + 16 + 1 + 4 + 2);
        let schema = ToolSchema {
            name: "t".into(),
            description: "d".into(),
            parameters: serde_json::json!({"type": "object"}).into(),
            defer_loading: false,
        };
        assert_eq!(tools_bytes(&[schema]), 16 + 1 + 1 + 17);
    }
}
