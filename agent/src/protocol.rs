//! The channel boundary: events a turn emits, and the approval round-trip a channel answers.
//!
//! Discord, Slack and the console translate these into platform messages; the agent never
//! knows which platform it talks to.

/// How a prepared tool call is shown before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallView {
    /// Links this view to its output chunks and result.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// One line naming the call.
    pub header: String,
    /// Longer preview (command, diff, content); may be empty.
    pub preview: String,
    /// Whether a person must decide before it runs.
    pub needs_approval: bool,
    /// Set when preparation failed; the call will not run and the model gets this error.
    pub error: Option<String>,
}

/// Something that happened during a turn, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEvent {
    /// A piece of the model's answer.
    TextDelta(String),
    /// A tool call was prepared (shown for every call, approved or not).
    ToolPending(ToolCallView),
    /// Streamed output of a running tool (bash lines).
    ToolOutputChunk {
        /// The call producing it.
        call_id: String,
        /// The chunk, usually one line with its newline.
        chunk: String,
    },
    /// A tool call finished (or was denied, or failed); the text is what the model sees.
    ToolResult {
        /// The call.
        call_id: String,
        /// Tool name.
        name: String,
        /// Result text.
        output: String,
        /// Whether it failed or was denied.
        is_error: bool,
    },
    /// The turn cannot start yet because too many turns run (`agent.max_concurrent_turns`,
    /// `agent.max_turns_per_user`); sent at most once, before anything else of the turn. The
    /// turn starts by itself when a place frees up, or gives up its place when stopped.
    Waiting(TurnWait),
    /// Something the user should know that is not part of the answer (round limit, ...).
    Notice(String),
    /// The turn failed; the message is meant for the user.
    Error(String),
    /// The turn is over.
    TurnComplete {
        /// The final answer text (may be empty).
        text: String,
        /// Whether it was cancelled.
        cancelled: bool,
    },
}

/// Why a turn waits before it starts; its `Display` is the notice shown in the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnWait {
    /// `running` turns run across all workstreams, the most `agent.max_concurrent_turns`
    /// allows.
    Busy {
        /// Turns running.
        running: usize,
    },
    /// The author already has `running` turns, the most `agent.max_turns_per_user` allows.
    UserBusy {
        /// The author's turns running.
        running: usize,
    },
}

impl std::fmt::Display for TurnWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            TurnWait::Busy { running } => write!(
                f,
                "waiting: {running} turn{} running; this one starts when one ends",
                if running == 1 { " is" } else { "s are" }
            ),
            TurnWait::UserBusy { running } => write!(
                f,
                "waiting: you already have {running} turn{} running; this one starts when {} ends",
                if running == 1 { "" } else { "s" },
                if running == 1 { "it" } else { "one of them" }
            ),
        }
    }
}

/// Receives a turn's events. Called from the turn's task; must not block.
pub trait TurnSink: Send + Sync {
    /// One event.
    fn event(&self, event: TurnEvent);
}

/// A sink that drops everything (benchmarks, background turns).
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl TurnSink for NullSink {
    fn event(&self, _event: TurnEvent) {}
}

/// A tool call awaiting a person's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalItem {
    /// Stored approval request id (what platform buttons name).
    pub request_id: String,
    /// The call.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// One line naming the call.
    pub header: String,
    /// Longer preview.
    pub preview: String,
}

/// What a person decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Approve,
    /// Do not run it.
    Deny,
    /// Run it, and run this tool without asking for the rest of the workstream.
    AlwaysAllow,
}

impl Verdict {
    /// Whether the call runs.
    pub fn runs(self) -> bool {
        !matches!(self, Verdict::Deny)
    }
}

/// A decision on one [`ApprovalItem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Approve, deny or always allow.
    pub verdict: Verdict,
    /// Text typed with the decision; reaches the model in the tool result.
    pub feedback: Option<String>,
    /// Who decided (a username), when known.
    pub decided_by: Option<String>,
}

impl Decision {
    /// An approval without feedback.
    pub fn approve() -> Self {
        Self {
            verdict: Verdict::Approve,
            feedback: None,
            decided_by: None,
        }
    }

    /// A denial with an optional reason.
    pub fn deny(feedback: Option<String>) -> Self {
        Self {
            verdict: Verdict::Deny,
            feedback,
            decided_by: None,
        }
    }

    /// Names who decided.
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.decided_by = Some(who.into());
        self
    }
}

/// Decides approvals; what a channel implements (buttons, a y/n prompt, ...).
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// Asks about a batch in one round-trip; returns one decision per item, in order. Fewer
    /// decisions than items count as denials for the rest.
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision>;
}

/// Approves everything (`--yes`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

#[async_trait::async_trait]
impl Approver for ApproveAll {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        items.iter().map(|_| Decision::approve()).collect()
    }
}
