//! `[log]`: how sandpiper writes its log (which events is `SANDPIPER_LOG` / `RUST_LOG`'s
//! business, read by the binary; see `bot/src/logging.rs`).

use serde::{Deserialize, Serialize};

/// `[log]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` (the default) or `json` (one object per line); `SANDPIPER_LOG_FORMAT`
    /// overrides it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<LogFormat>,
}

/// The shape of each log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (`2026-12-02T06:00:00Z  INFO sandpiper: …`).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields.message`, the
    /// current `span` and the `spans` it is in.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format `{other}`: use text or json")),
        }
    }
}
