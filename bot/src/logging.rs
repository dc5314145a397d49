//! The process's one log subscriber: which events (`SANDPIPER_LOG`, else `RUST_LOG`, in
//! `tracing`'s `EnvFilter` syntax: `info`, `sandpiper_agent=debug,warn`), in which shape
//! (`[log] format`, overridden by `SANDPIPER_LOG_FORMAT`: `text` or `json`), to stderr (or,
//! for `chat`, to a file: [`LogPlace`]).
//!
//! An invalid filter stops start-up with the parser's message instead of silently logging
//! nothing. The start-up lines an operator reads (`sandpiper: serving http://…`) are events
//! with the target `sandpiper` ([`startup!`](crate::startup)), always shown at `info`
//! whatever the filter says, so they reach the same place and shape as every other line.

use std::io::IsTerminal;
use std::path::PathBuf;

use sandpiper_agent::config::{Env, LogConfig, LogFormat};
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

/// The target of start-up lines.
pub const STARTUP_TARGET: &str = "sandpiper";

/// The filter when neither variable is set: warnings and errors.
pub const DEFAULT_FILTER: &str = "warn";

/// A start-up line an operator reads (`sandpiper: Discord: connecting`): an `info` event with
/// the target [`STARTUP_TARGET`], shown whatever the filter.
#[macro_export]
macro_rules! startup {
    ($($arg:tt)+) => {
        ::tracing::info!(target: "sandpiper", $($arg)+)
    };
}

/// Why logging could not start.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The filter does not parse; the operator fixes the variable.
    #[error("invalid ${var} `{value}`: {message}")]
    Filter {
        /// `SANDPIPER_LOG` or `RUST_LOG`.
        var: &'static str,
        /// What it holds.
        value: String,
        /// The parser's message.
        message: String,
    },
    /// `SANDPIPER_LOG_FORMAT` is neither `text` nor `json`.
    #[error("invalid $SANDPIPER_LOG_FORMAT: {0}")]
    Format(String),
}

/// What [`init`] installs, read from the environment and `[log]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    /// The filter directives, and the variable they came from (`None`: the default).
    pub filter: (String, Option<&'static str>),
    /// The line format.
    pub format: LogFormat,
}

impl LogSettings {
    /// The settings `env` and `config` give: `SANDPIPER_LOG`, else `RUST_LOG`, else
    /// [`DEFAULT_FILTER`]; `SANDPIPER_LOG_FORMAT`, else `[log] format`, else text.
    pub fn from_env(config: &LogConfig, env: &dyn Env) -> Result<Self, LogError> {
        let filter = ["SANDPIPER_LOG", "RUST_LOG"]
            .into_iter()
            .find_map(|var| env.var(var).map(|value| (value, Some(var))))
            .unwrap_or_else(|| (DEFAULT_FILTER.to_owned(), None));
        let format = match env.var("SANDPIPER_LOG_FORMAT") {
            Some(value) => value.parse().map_err(LogError::Format)?,
            None => config.format.unwrap_or_default(),
        };
        Ok(Self { filter, format })
    }

    /// The parsed filter, or the parser's complaint.
    pub fn env_filter(&self) -> Result<EnvFilter, LogError> {
        let (value, var) = &self.filter;
        EnvFilter::builder()
            .parse(value)
            .map_err(|e| LogError::Filter {
                var: var.unwrap_or("SANDPIPER_LOG"),
                value: value.clone(),
                message: e.to_string(),
            })
    }
}

/// The layer that writes every admitted event to `writer` in `settings`' format, coloured
/// when `ansi` (a terminal reads it).
pub fn layer<W>(
    settings: &LogSettings,
    writer: W,
    ansi: bool,
) -> Result<Box<dyn Layer<Registry> + Send + Sync>, LogError>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = settings.env_filter()?;
    let startup =
        filter_fn(|meta| meta.target() == STARTUP_TARGET && *meta.level() <= tracing::Level::INFO);
    let admitted = filter.or(startup);
    Ok(match settings.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .fmt_fields(crate::log_format::EscapedFields::default())
            .with_ansi(ansi)
            .with_writer(writer)
            .with_filter(admitted)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(writer)
            .with_filter(admitted)
            .boxed(),
    })
}

/// Where the log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogPlace {
    /// stderr: `serve` and the one-shot commands.
    Stderr,
    /// Appended to this file (created 0600 in a 0700 directory): `chat`, whose terminal is
    /// the conversation.
    File(PathBuf),
}

/// The installed log, for the one line that ends a failed process.
#[derive(Debug, Clone, Copy)]
pub struct Logging {
    format: LogFormat,
    /// Whether the log is read on stderr (else it goes to a file).
    on_stderr: bool,
}

impl Logging {
    /// Reports the error that ends the process: one event in the log's own shape when the
    /// log is JSON on stderr (a log pipeline reads every line as an object), else the plain
    /// `error: …` line a person reads on the terminal.
    pub fn fatal(&self, error: &str) {
        match (self.format, self.on_stderr) {
            (LogFormat::Json, true) => {
                tracing::error!(target: STARTUP_TARGET, error, "sandpiper stopped: {error}")
            }
            _ => eprintln!("error: {error}"),
        }
    }
}

/// Installs the process's subscriber, writing to `place` (stderr when the file cannot be
/// opened, with a note why); call once, before anything logs.
pub fn init(config: &LogConfig, env: &dyn Env, place: LogPlace) -> Result<Logging, LogError> {
    let settings = LogSettings::from_env(config, env)?;
    let file = match place {
        LogPlace::Stderr => None,
        // Log lines may name workstreams and people: the owner's only.
        LogPlace::File(path) => match sandpiper_agent::private_file::open_append(&path) {
            Ok(file) => Some(file),
            Err(e) => {
                eprintln!(
                    "note: cannot write the log to {}: {e}; logging to stderr",
                    path.display()
                );
                None
            }
        },
    };
    let on_stderr = file.is_none();
    let layer = match file {
        Some(file) => layer(&settings, std::sync::Mutex::new(file), false)?,
        None => layer(&settings, std::io::stderr, std::io::stderr().is_terminal())?,
    };
    // A second call (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(layer).try_init();
    Ok(Logging {
        format: settings.format,
        on_stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    struct Vars(BTreeMap<&'static str, &'static str>);

    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| (*v).to_owned())
        }
    }

    fn vars(pairs: &[(&'static str, &'static str)]) -> Vars {
        Vars(pairs.iter().copied().collect())
    }

    #[test]
    fn sandpiper_log_wins_over_rust_log_and_the_format_env_over_the_file() {
        let json = LogConfig {
            format: Some(LogFormat::Json),
        };
        let s = LogSettings::from_env(&json, &vars(&[("RUST_LOG", "debug")])).unwrap();
        assert_eq!(s.filter, ("debug".to_owned(), Some("RUST_LOG")));
        assert_eq!(s.format, LogFormat::Json);
        let s = LogSettings::from_env(
            &json,
            &vars(&[
                ("RUST_LOG", "debug"),
                ("SANDPIPER_LOG", "info"),
                ("SANDPIPER_LOG_FORMAT", "TEXT"),
            ]),
        )
        .unwrap();
        assert_eq!(
            s,
            LogSettings {
                filter: ("info".to_owned(), Some("SANDPIPER_LOG")),
                format: LogFormat::Text,
            }
        );
        let s = LogSettings::from_env(&LogConfig::default(), &vars(&[])).unwrap();
        assert_eq!((s.filter.0.as_str(), s.format), ("warn", LogFormat::Text));
        let bad = LogSettings::from_env(&json, &vars(&[("SANDPIPER_LOG_FORMAT", "xml")]));
        assert_eq!(
            bad.unwrap_err().to_string(),
            "invalid $SANDPIPER_LOG_FORMAT: unknown log format `xml`: use text or json"
        );
    }

    #[test]
    fn an_invalid_filter_is_an_error_that_names_the_variable() {
        let s = LogSettings::from_env(
            &LogConfig::default(),
            &vars(&[("RUST_LOG", "sandpiper=loud")]),
        )
        .unwrap();
        let err = s.env_filter().unwrap_err().to_string();
        assert!(
            err.starts_with("invalid $RUST_LOG `sandpiper=loud`: "),
            "{err}"
        );
        for good in ["info", "sandpiper_agent=debug,warn", "off"] {
            let s = LogSettings {
                filter: (good.to_owned(), None),
                format: LogFormat::Text,
            };
            assert!(s.env_filter().is_ok(), "{good}");
        }
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(settings: &LogSettings, emit: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let layer = layer(settings, move || writer.clone(), false).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn json_is_one_object_per_line_with_spans_and_startup_lines_pass_any_filter() {
        let settings = LogSettings {
            filter: ("error".to_owned(), None),
            format: LogFormat::Json,
        };
        let text = capture(&settings, || {
            let node = tracing::error_span!("node", node = "node-1");
            let _n = node.enter();
            let turn = tracing::error_span!("turn", workstream = "discord:1", turn = 7);
            let _t = turn.enter();
            crate::startup!("serving http://127.0.0.1:1/health");
            tracing::info!("filtered out");
            tracing::error!(error = "boom\nforged", "turn failed");
        });
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["target"], "sandpiper");
        assert_eq!(lines[0]["level"], "INFO");
        assert_eq!(
            lines[0]["fields"]["message"],
            "serving http://127.0.0.1:1/health"
        );
        let e = &lines[1];
        assert_eq!(e["fields"]["message"], "turn failed");
        assert_eq!(e["fields"]["error"], "boom\nforged");
        assert_eq!(e["span"]["workstream"], "discord:1");
        assert_eq!(e["span"]["turn"], 7);
        assert_eq!(e["spans"][0]["node"], "node-1");
        assert!(
            e["timestamp"].as_str().is_some_and(|t| t.contains('T')),
            "{e}"
        );
    }

    #[test]
    fn audit_events_are_logged_by_what_they_are_about() {
        use sandpiper_agent::store::audit::{AuditEvent, AuditKind};
        use sandpiper_agent::store::usage::{BudgetScope, BudgetUnit};
        let settings = LogSettings {
            filter: ("info".to_owned(), None),
            format: LogFormat::Json,
        };
        let event = |kind| AuditEvent {
            at: 1,
            workstream: "slack:T1:C1".into(),
            request: None,
            call_id: None,
            tool: None,
            actor: Some("admin".into()),
            actor_id: Some("u1".into()),
            kind,
        };
        let budget = event(AuditKind::BudgetChanged {
            scope: BudgetScope::Channel,
            subject: "slack:T1:C1".into(),
            subject_name: None,
            unit: BudgetUnit::Tokens,
            old: None,
            new: Some(1000),
        });
        let text = capture(&settings, || {
            budget.log();
            event(AuditKind::TimedOut).log();
        });
        let lines: Vec<(String, String, String)> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|l| {
                let field = |name: &str| l["fields"][name].as_str().unwrap_or_default().to_owned();
                (
                    l["target"].as_str().unwrap_or_default().to_owned(),
                    field("kind"),
                    field("message"),
                )
            })
            .collect();
        let line =
            |kind: &str, message: &str| ("audit".to_owned(), kind.to_owned(), message.to_owned());
        assert_eq!(
            lines,
            vec![
                line("budget_changed", "budget change"),
                line("timed_out", "approval event"),
            ]
        );
    }

    #[test]
    fn text_lines_keep_the_plain_startup_shape() {
        let settings = LogSettings {
            filter: ("warn".to_owned(), None),
            format: LogFormat::Text,
        };
        let text = capture(&settings, || {
            crate::startup!("Discord: connecting");
            tracing::info!(target: "sandpiper::node", "hidden");
        });
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("INFO sandpiper: Discord: connecting"),
            "{text}"
        );
    }
}
