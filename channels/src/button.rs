//! The ids of the bot's buttons and dialogs, one format on every platform: [`CardButton`] is
//! written with `Display` when a card or a live answer is drawn and read back with `FromStr`
//! when it is clicked. An id comes back from the platform's client, so it is not trusted: it
//! only *names* a request or a workstream, which the click router then checks
//! ([`crate::click`]); anything that does not parse whole (a forged id, junk appended, an id
//! from another program) is refused and changes nothing.

use std::fmt;
use std::str::FromStr;

use sandpiper_agent::approvals::ClickAction;

/// Longest id a platform accepts (Discord: 100 characters; Slack allows 255).
pub const MAX_ID: usize = 100;

/// A button (or the note dialog) the bot drew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardButton {
    /// One answer to one request: `ap:<request>:<action>`.
    Decide {
        /// The stored request's id.
        request: String,
        /// What the button answers.
        action: ClickAction,
    },
    /// Approve all (`approve`) or Deny all on a card whose first request is `first`:
    /// `apall:<first>:a` / `apall:<first>:d`. The card's other requests are read from the
    /// card itself and each is checked on its own.
    DecideAll {
        /// The card's first request.
        first: String,
        /// Approve all, else Deny all.
        approve: bool,
    },
    /// Resume the turn that asked `request` and stopped running: `rs:<request>`.
    Resume {
        /// A request of that turn (the card's first).
        request: String,
    },
    /// Stop the turn running in a workstream: `stop:<workstream key>`.
    Stop {
        /// The workstream's key.
        workstream: String,
    },
    /// The submitted note dialog of a with-note answer: `nap:<request>:<action>`.
    Note {
        /// The stored request's id.
        request: String,
        /// What the note goes with.
        action: ClickAction,
    },
}

/// Why an id is not one of ours; logged, never shown beyond "not one I know".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ButtonIdError {
    /// No known prefix, a malformed request id, or too long.
    #[error("not one of the bot's button ids")]
    Malformed,
    /// A known prefix with an unknown action code (junk appended, another version).
    #[error("unknown button action `{0}`")]
    UnknownAction(String),
}

impl CardButton {
    /// The Stop button of `workstream`'s live answer.
    pub fn stop(workstream: &str) -> Self {
        CardButton::Stop {
            workstream: workstream.to_owned(),
        }
    }

    /// The narrower Always allow a pending request about `tool` offers beside Always allow
    /// for the tool, with its label: **Always allow `git status`** for `bash` (the command's
    /// program and subcommand), **Always allow MCP server github** for an MCP tool; `None`
    /// when none is offered. What it allows is not in the id: the click derives it again from
    /// the stored request, so a forged id cannot grant another.
    pub fn always_allow_pattern(
        request: &str,
        tool: &str,
        preview: &str,
    ) -> Option<(Self, String)> {
        use sandpiper_agent::approvals::Grant;
        let (action, grant) = sandpiper_agent::approvals::policy::offered_grant(tool, preview)?;
        let label = match grant {
            Grant::Pattern { prefix, .. } => format!("Always allow `{prefix}`"),
            Grant::Server(server) => format!("Always allow MCP server {server}"),
            Grant::Tool(tool) => format!("Always allow {tool}"),
        };
        let button = CardButton::Decide {
            request: request.to_owned(),
            action,
        };
        Some((button, label.chars().take(80).collect()))
    }

    /// The request the button names, if it names one.
    pub fn request(&self) -> Option<&str> {
        match self {
            CardButton::Decide { request, .. }
            | CardButton::Note { request, .. }
            | CardButton::Resume { request } => Some(request),
            CardButton::DecideAll { first, .. } => Some(first),
            CardButton::Stop { .. } => None,
        }
    }
}

impl fmt::Display for CardButton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CardButton::Decide { request, action } => write!(f, "ap:{request}:{}", action.code()),
            CardButton::Note { request, action } => write!(f, "nap:{request}:{}", action.code()),
            CardButton::DecideAll { first, approve } => {
                write!(f, "apall:{first}:{}", if *approve { "a" } else { "d" })
            }
            CardButton::Resume { request } => write!(f, "rs:{request}"),
            CardButton::Stop { workstream } => write!(f, "stop:{workstream}"),
        }
    }
}

/// A request id as the store makes them (`ap_…`): letters, digits, `_` and `-`.
fn request_id(id: &str) -> Result<String, ButtonIdError> {
    let valid = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(id.to_owned())
    } else {
        Err(ButtonIdError::Malformed)
    }
}

/// `<request>:<code>` with a known action code.
fn request_and_action(rest: &str) -> Result<(String, ClickAction), ButtonIdError> {
    let (request, code) = rest.rsplit_once(':').ok_or(ButtonIdError::Malformed)?;
    let request = request_id(request)?;
    let action =
        ClickAction::from_code(code).ok_or_else(|| ButtonIdError::UnknownAction(code.into()))?;
    Ok((request, action))
}

impl FromStr for CardButton {
    type Err = ButtonIdError;

    fn from_str(id: &str) -> Result<Self, Self::Err> {
        if id.len() > MAX_ID {
            return Err(ButtonIdError::Malformed);
        }
        let (kind, rest) = id.split_once(':').ok_or(ButtonIdError::Malformed)?;
        match kind {
            "ap" => {
                let (request, action) = request_and_action(rest)?;
                Ok(CardButton::Decide { request, action })
            }
            "nap" => {
                let (request, action) = request_and_action(rest)?;
                Ok(CardButton::Note { request, action })
            }
            "apall" => {
                let (first, code) = rest.rsplit_once(':').ok_or(ButtonIdError::Malformed)?;
                let approve = match code {
                    "a" => true,
                    "d" => false,
                    other => return Err(ButtonIdError::UnknownAction(other.into())),
                };
                Ok(CardButton::DecideAll {
                    first: request_id(first)?,
                    approve,
                })
            }
            "rs" => Ok(CardButton::Resume {
                request: request_id(rest)?,
            }),
            "stop" => {
                let workstream: sandpiper_agent::workstream::WorkstreamKey =
                    rest.parse().map_err(|_| ButtonIdError::Malformed)?;
                Ok(CardButton::Stop {
                    workstream: workstream.to_string(),
                })
            }
            _ => Err(ButtonIdError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_card_offers_a_command_pattern_for_bash_and_the_server_for_an_mcp_tool() {
        let offer = |tool: &str, preview: &str| {
            CardButton::always_allow_pattern("ap_1", tool, preview)
                .map(|(b, label)| (b.to_string(), label))
        };
        assert_eq!(
            offer("bash", "git status --short"),
            Some(("ap:ap_1:ap".into(), "Always allow `git status`".into()))
        );
        assert_eq!(
            offer("mcp__github__create_issue", "{}"),
            Some(("ap:ap_1:as".into(), "Always allow MCP server github".into()))
        );
        assert_eq!(offer("bash", "git status && rm -rf /"), None);
        assert_eq!(offer("write_file", "notes.txt"), None);
        assert_eq!(
            "ap:ap_1:as".parse::<CardButton>(),
            Ok(CardButton::Decide {
                request: "ap_1".into(),
                action: ClickAction::AlwaysAllowServer,
            })
        );
    }

    #[test]
    fn every_button_reads_back_as_written() {
        let buttons = [
            CardButton::Decide {
                request: "ap_1f".into(),
                action: ClickAction::AlwaysAllow,
            },
            CardButton::Note {
                request: "ap_1f".into(),
                action: ClickAction::Annotate,
            },
            CardButton::DecideAll {
                first: "ap_1f".into(),
                approve: true,
            },
            CardButton::DecideAll {
                first: "ap_1f".into(),
                approve: false,
            },
            CardButton::Resume {
                request: "ap_1f".into(),
            },
            CardButton::stop("discord:123"),
            CardButton::stop("slack:T1:C2:1700000000.000100"),
        ];
        for b in buttons {
            assert_eq!(b.to_string().parse::<CardButton>(), Ok(b.clone()), "{b}");
        }
        assert_eq!(
            CardButton::Decide {
                request: "ap_1".into(),
                action: ClickAction::Approve
            }
            .to_string(),
            "ap:ap_1:a"
        );
    }

    #[test]
    fn forged_junk_suffixed_and_unknown_ids_are_refused() {
        let cases = [
            ("ap:ap_1:zz", ButtonIdError::UnknownAction("zz".into())),
            ("apall:ap_1:a:zz", ButtonIdError::UnknownAction("zz".into())),
            ("apall:ap_1:x", ButtonIdError::UnknownAction("x".into())),
            ("apall:ap_1", ButtonIdError::Malformed),
            ("ap:../../etc:a", ButtonIdError::Malformed),
            ("ap::a", ButtonIdError::Malformed),
            ("rs:", ButtonIdError::Malformed),
            ("rs:ap_1 ", ButtonIdError::Malformed),
            ("stop:", ButtonIdError::Malformed),
            ("stop:nowhere:1", ButtonIdError::Malformed),
            ("stop", ButtonIdError::Malformed),
            ("totally-not-ours", ButtonIdError::Malformed),
            ("ap_all:a:ap_1", ButtonIdError::Malformed),
        ];
        for (id, want) in cases {
            assert_eq!(id.parse::<CardButton>(), Err(want), "{id}");
        }
        let long = format!("ap:{}:a", "x".repeat(MAX_ID));
        assert_eq!(long.parse::<CardButton>(), Err(ButtonIdError::Malformed));
    }
}
