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
        /// What became of the call's approval, when it asked for one.
        approval: Option<ApprovalOutcome>,
    },
    /// The turn cannot start yet because too many turns run (`agent.max_concurrent_turns`,
    /// `agent.max_turns_per_user`); sent at most once, before anything else of the turn. The
    /// turn starts by itself when a place frees up, or gives up its place when stopped.
    Waiting(TurnWait),
    /// Something the user should know that is not part of the answer (round limit, ...).
    Notice(String),
    /// A sub-agent (`task`, `plan`) made progress: the line of its call is redrawn from this.
    SubAgent(SubAgentStatus),
    /// The model writes a summary of older messages to make room in its context window: on a
    /// small model that takes minutes, and the thread would otherwise show nothing meanwhile.
    Compacting(Compacting),
    /// A file to show in the thread (a long plan before its review); the platform uploads it
    /// where it can and names it where it cannot.
    Attachment {
        /// The call it belongs to.
        call_id: String,
        /// File name, e.g. `plan.md`.
        filename: String,
        /// The content.
        body: String,
        /// One line saying what it is.
        comment: String,
    },
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

/// Where a sub-agent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubAgentPhase {
    /// Waiting for the model.
    Thinking,
    /// A tool call waits for a person's decision.
    AwaitingApproval,
    /// Tool calls run.
    Running,
    /// It gave its answer.
    Done,
    /// It stopped before answering (its round cap or token budget, a stop, an error).
    Stopped,
}

/// A sub-agent's progress, shown as one line in the parent's thread and edited as it works.
/// [`SubAgentStatus`]'s `Display` is that line, the same on every platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAgentStatus {
    /// The parent's call that runs the sub-agent (whose line shows the status).
    pub call_id: String,
    /// `task` or `plan`.
    pub tool: String,
    /// The short title of its job.
    pub title: String,
    /// Model calls made so far.
    pub step: u32,
    /// Tool calls made so far.
    pub tool_calls: u32,
    /// Of those, denied (or not decided in time).
    pub denied: u32,
    /// What it is doing now (a tool call's header), when it is doing one thing.
    pub current: Option<String>,
    /// Where it is.
    pub phase: SubAgentPhase,
}

impl std::fmt::Display for SubAgentStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let calls = match self.tool_calls {
            1 => "1 tool call".to_owned(),
            n => format!("{n} tool calls"),
        };
        let denied = match self.denied {
            0 => String::new(),
            n => format!(" ({n} denied)"),
        };
        let now = match (self.phase, &self.current) {
            (SubAgentPhase::Thinking, _) => "thinking".to_owned(),
            (SubAgentPhase::AwaitingApproval, Some(c)) => format!("awaiting approval: {c}"),
            (SubAgentPhase::AwaitingApproval, None) => "awaiting approval".to_owned(),
            (SubAgentPhase::Running, Some(c)) => format!("running {c}"),
            (SubAgentPhase::Running, None) => "running tools".to_owned(),
            (SubAgentPhase::Done, _) => "done".to_owned(),
            (SubAgentPhase::Stopped, _) => "stopped".to_owned(),
        };
        write!(
            f,
            "{}: {} · step {} · {calls}{denied} · {now}",
            self.tool, self.title, self.step
        )
    }
}

/// Where a compaction that asks the model for a summary is; its `Display` is the one status
/// line every platform shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compacting {
    /// The summary was asked for.
    Started,
    /// It ended. When compacted, a notice saying what changed follows; when `stopped`, nothing
    /// changed and nothing else is said.
    Ended {
        /// Whether the turn was stopped before the summary came.
        stopped: bool,
    },
}

impl std::fmt::Display for Compacting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("🗜 Compacting this conversation to fit the model's context window…")?;
        match self {
            Self::Started => Ok(()),
            Self::Ended { stopped: false } => f.write_str(" done."),
            Self::Ended { stopped: true } => f.write_str(" stopped; nothing was changed."),
        }
    }
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

/// What a person is asked to decide: the card's buttons follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ApprovalKind {
    /// Whether a tool call may run: Approve / Deny / Always allow, each with an optional note.
    #[default]
    ToolCall,
    /// A review gate on something the agent produced (a plan): Accept / Reject / Annotate.
    Review,
}

impl ApprovalKind {
    /// The stored text (`tool_call`, `review`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ToolCall => "tool_call",
            Self::Review => "review",
        }
    }

    /// The kind a stored text names; `None` for a text no kind has.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::ToolCall, Self::Review]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

/// A tool call (or a review gate) awaiting a person's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalItem {
    /// Stored approval request id (what platform buttons name).
    pub request_id: String,
    /// What is asked: a tool call, or a review.
    pub kind: ApprovalKind,
    /// The call.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// One line naming the call.
    pub header: String,
    /// Longer preview.
    pub preview: String,
}

/// Where an approval request stands. Stored as text in `tool_approvals.status`; the strings
/// ([`ApprovalStatus::as_str`]) are the ones rows have always had, so old databases read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalStatus {
    /// Asked, nobody decided yet.
    Pending,
    /// A person approved the call.
    Approved,
    /// A person denied the call.
    Denied,
    /// A person approved the call and every later call of its tool in the workstream.
    AlwaysAllowed,
    /// Nobody decided within the approval timeout; the call did not run.
    TimedOut,
    /// The turn that asked was stopped or is gone; the call did not run.
    Cancelled,
    /// (A review) accepted with a note for the model.
    Annotated,
}

impl ApprovalStatus {
    /// The stored text (`pending`, `approved`, `denied`, `always`, `timed_out`, `cancelled`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::AlwaysAllowed => "always",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Annotated => "annotated",
        }
    }

    /// Whether the request still waits for a decision.
    pub const fn is_pending(self) -> bool {
        matches!(self, Self::Pending)
    }

    /// Whether a person decided it (approved, denied, always allowed or annotated), as
    /// opposed to pending, timed out or cancelled.
    pub const fn decided_by_person(self) -> bool {
        matches!(
            self,
            Self::Approved | Self::Denied | Self::AlwaysAllowed | Self::Annotated
        )
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `tool_approvals.status` text no [`ApprovalStatus`] has: the row was written by something
/// else (or a newer sandpiper). The caller reports the row as corrupt rather than guess.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown approval status `{0}`")]
pub struct UnknownApprovalStatus(pub String);

impl std::str::FromStr for ApprovalStatus {
    type Err = UnknownApprovalStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => Self::Pending,
            "approved" => Self::Approved,
            "denied" => Self::Denied,
            "always" => Self::AlwaysAllowed,
            "timed_out" => Self::TimedOut,
            "cancelled" => Self::Cancelled,
            "annotated" => Self::Annotated,
            other => return Err(UnknownApprovalStatus(other.to_owned())),
        })
    }
}

impl From<Verdict> for ApprovalStatus {
    /// The status a person's decision is stored as.
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Approve => Self::Approved,
            Verdict::Deny => Self::Denied,
            Verdict::AlwaysAllow => Self::AlwaysAllowed,
            Verdict::Annotate => Self::Annotated,
        }
    }
}

/// An approval request as a channel shows it: the item asked about, and what became of it. A
/// card draws itself from these (after a restart too: [`Agent::approval`](crate::Agent::approval)
/// reads one back), so a channel never sees the stored row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalView {
    /// What is asked: the request id, the call, its header and preview.
    pub item: ApprovalItem,
    /// The workstream whose people decide it (a sub-agent's parent thread).
    pub workstream: String,
    /// The workstream's owner when it was asked (they may always decide it); `None` when it
    /// had none, and for requests stored before approvers were kept.
    pub owner: Option<String>,
    /// Who started the turn that asked (a sandpiper user id), when known.
    pub requested_by: Option<String>,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// Who decided (a username), when a person did.
    pub decided_by: Option<String>,
    /// When it was decided or closed (unix ms).
    pub decided_at: Option<i64>,
    /// Through which path it was decided; `None` while pending, and for requests decided
    /// before the path was kept.
    pub decided_via: Option<DecisionPath>,
    /// The note typed with the decision.
    pub feedback: Option<String>,
}

impl ApprovalView {
    /// A request just asked: pending, nobody decided yet.
    pub fn pending(item: ApprovalItem, workstream: &str) -> Self {
        Self {
            item,
            workstream: workstream.to_owned(),
            owner: None,
            requested_by: None,
            status: ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            decided_via: None,
            feedback: None,
        }
    }

    /// Whether it was decided on the status page (its card says so).
    pub fn decided_from_web(&self) -> bool {
        self.decided_via == Some(DecisionPath::Web)
    }
}

/// A workstream as a channel needs it: whose it is and whether it still answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkstreamView {
    /// Its key (`discord:<thread id>`, `slack:<team>:<channel>:<ts>`, `console:<name>`).
    pub key: String,
    /// Who opened it (a sandpiper user id): they may stop, close and always-allow in it.
    pub owner: Option<String>,
    /// Closed for good (`/close`): the thread gets no more answers.
    pub closed: bool,
}

/// A console workstream as `sandpiper chat --list` and `/workstreams` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleWorkstream {
    /// Its name: the key is `console:<name>`.
    pub name: String,
    /// The directory its tools last worked in; `None` for one from before it was recorded.
    pub workdir: Option<String>,
    /// When it was last active (unix ms).
    pub last_active_ms: i64,
    /// The last message a person sent in it.
    pub last_message: Option<String>,
    /// Closed for good (`/close`).
    pub closed: bool,
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
    /// (A review) accepted with a note the model must take into account.
    Annotate,
}

/// What became of a call that asked for approval: what the tool result carries, so nobody
/// reads it back from the result's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// Approved: it ran.
    Approved,
    /// Approved for the rest of the workstream (Always allow): it ran.
    AlwaysAllowed,
    /// (A review) accepted with a note.
    Annotated,
    /// Denied by a person (or because nobody could be asked): it did not run.
    Denied,
    /// Nobody decided in time: it did not run.
    TimedOut,
    /// The turn was stopped before it was decided: it did not run.
    Cancelled,
}

impl ApprovalOutcome {
    /// The outcome of a person's verdict.
    pub fn of(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Approve => ApprovalOutcome::Approved,
            Verdict::AlwaysAllow => ApprovalOutcome::AlwaysAllowed,
            Verdict::Annotate => ApprovalOutcome::Annotated,
            Verdict::Deny => ApprovalOutcome::Denied,
        }
    }

    /// Whether the call was refused: denied, or not decided in time.
    pub fn refused(self) -> bool {
        matches!(self, ApprovalOutcome::Denied | ApprovalOutcome::TimedOut)
    }
}

impl Verdict {
    /// Whether the call runs (a review: whether what it reviews stands).
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
    /// Who decided, as records name them, when known.
    pub decided_by: Option<String>,
    /// Their sandpiper user id, when a person decided: records name them by it.
    pub decided_by_id: Option<String>,
    /// How the decision was made (the audit trail records it); `None`: the approver did not
    /// say, recorded as [`DecisionPath::Automatic`].
    pub via: Option<DecisionPath>,
    /// (An Always allow) only what a card's narrower button offers for this request
    /// ([`crate::approvals::policy::offered_grant`]: a bash command's pattern, an MCP tool's
    /// server), not the whole tool.
    pub narrower: bool,
}

/// Through which path a decision reached sandpiper, as the audit trail records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionPath {
    /// A button on the card in the thread.
    Button,
    /// The note dialog a with-note button opens.
    NoteDialog,
    /// An answer typed at the console.
    Console,
    /// A button on the status page.
    Web,
    /// A decision stored before a restart, used by the resumed turn.
    Resumed,
    /// No person: sandpiper decided itself (a card that could not be posted, `--yes`).
    Automatic,
}

impl DecisionPath {
    /// The stored and shown text (`button`, `note_dialog`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Button => "button",
            Self::NoteDialog => "note_dialog",
            Self::Console => "console",
            Self::Web => "web",
            Self::Resumed => "resumed",
            Self::Automatic => "automatic",
        }
    }

    /// The path a stored text names; `None` for a text no path has (a row written by
    /// something else).
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Button,
            Self::NoteDialog,
            Self::Console,
            Self::Web,
            Self::Resumed,
            Self::Automatic,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }
}

impl std::fmt::Display for DecisionPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Decision {
    /// A decision, not yet stored.
    pub fn new(verdict: Verdict, feedback: Option<String>) -> Self {
        Self {
            verdict,
            feedback,
            decided_by: None,
            decided_by_id: None,
            via: None,
            narrower: false,
        }
    }

    /// An Always allow of only what the request's narrower button offers.
    pub fn always_narrower(feedback: Option<String>) -> Self {
        Self {
            narrower: true,
            ..Self::new(Verdict::AlwaysAllow, feedback)
        }
    }

    /// An approval without feedback.
    pub fn approve() -> Self {
        Self::new(Verdict::Approve, None)
    }

    /// A denial with an optional reason.
    pub fn deny(feedback: Option<String>) -> Self {
        Self::new(Verdict::Deny, feedback)
    }

    /// Names who decided.
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.decided_by = Some(who.into());
        self
    }

    /// Names who decided: the sandpiper user `id`, called `name`.
    pub fn by_person(mut self, id: impl Into<String>, name: impl Into<String>) -> Self {
        self.decided_by_id = Some(id.into());
        self.by(name)
    }

    /// Names the path the decision came through.
    pub fn via(mut self, path: DecisionPath) -> Self {
        self.via = Some(path);
        self
    }
}

/// Decides approvals; what a channel implements (buttons, a y/n prompt, ...).
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// Asks about a batch in one round-trip; returns one decision per item, in order. Fewer
    /// decisions than items count as denials for the rest. The future is dropped when the
    /// approval timeout passes or the turn is stopped.
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision>;

    /// The agent closed these requests itself (a timeout, a stop, or an answer it stored for
    /// this approver) and stored why, before this call: whatever shows them should say so
    /// now (reading them back through the agent). Requests decided by a click are not
    /// repeated here; the click already answered.
    async fn closed(&self, _request_ids: &[String]) {}

    /// Platform roles or user groups whose members may decide what this approver asks
    /// (`approver_roles`, `approver_usergroups`); stored with each request so that a click is
    /// judged the same on every node. None by default.
    fn approver_roles(&self) -> Vec<String> {
        Vec::new()
    }
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
