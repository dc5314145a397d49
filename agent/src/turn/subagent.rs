//! Sub-agents: the `task` and `plan` tools hand a job to a model loop of its own, which runs
//! to completion inside the parent's tool call and returns its final answer as the result.
//!
//! - **History.** A sub-agent's messages are stored as a workstream of their own, keyed
//!   [`child_key`] (`<parent>/task:<call id>`), so they survive, are linked to the parent by
//!   their key, and never enter the parent's history.
//! - **Tools.** [`SubAgentKind::Task`] gets the task-agent set (`task_agent: true`),
//!   [`SubAgentKind::Plan`] the read-only agent set (`agent: true`), both with the MCP tools
//!   connector policy allows the parent's thread. No tool search, and never `task` or `plan`
//!   (no recursion): the batch refuses any built-in outside the set.
//! - **Approvals.** Its calls ask in the parent's thread through the turn's approver, marked
//!   `task: <title> › bash: …`, under the thread's rules and grants; auto-approve applies.
//! - **Progress.** One status line ([`crate::protocol::SubAgentStatus`]) edited as it works:
//!   [`StatusSink`] turns its events into that line on the parent's sink.
//! - **Limits.** `[agent] task_max_rounds` model calls and `task_max_tokens` tokens; a stop of
//!   the parent's turn stops it, its approvals and its tools.
//!
//! The loop itself is [`crate::Agent::run_subagent`] (in `agent/subagent.rs`).

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::protocol::{ApprovalOutcome, SubAgentPhase, SubAgentStatus, TurnEvent, TurnSink};
use crate::tools::{InTurn, ToolContext, ToolRegistry};
use crate::workstream::WorkstreamKey;

/// Which sub-agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubAgentKind {
    /// `task`: a delegated job, with the task-agent tools (it may write and run commands).
    Task,
    /// `plan`: a planning job, with the read-only agent tools.
    Plan,
}

impl SubAgentKind {
    /// The tool that runs it.
    pub const fn tool(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Plan => "plan",
        }
    }

    /// The sub-agent the tool `name` runs, if it runs one.
    pub fn of(name: &str) -> Option<Self> {
        [Self::Task, Self::Plan]
            .into_iter()
            .find(|k| k.tool() == name)
    }

    /// The built-in tools it may call: `task_agent: true` or `agent: true` in `tools/*.json`.
    pub fn builtin_tools(self, registry: &ToolRegistry) -> BTreeSet<String> {
        registry
            .iter()
            .filter(|t| match self {
                Self::Task => t.spec.task_agent,
                Self::Plan => t.spec.agent,
            })
            .map(|t| t.spec.name.clone())
            .collect()
    }

    /// What its system message adds to the base prompt: its role and what its answer is for.
    pub const fn brief(self) -> &'static str {
        match self {
            Self::Task => {
                "\nYou are working as a sub-agent: the assistant of this thread delegated one \
                 task to you. Work on it on your own with your tools until it is done; nobody \
                 reads your intermediate messages, and you cannot ask questions. Your final \
                 message (a reply without tool calls) is returned to the delegating assistant \
                 as the task's result: say concisely what you did, what you found, and what is \
                 left undone.\n"
            }
            Self::Plan => {
                "\nYou are working as a planning sub-agent: explore with your read-only tools, \
                 then reply (without tool calls) with a structured plan in Markdown: the goal, \
                 the steps in order (with the files and commands involved), risks and open \
                 questions. Do not start the work itself. Your final message is saved as the \
                 plan and put to the people of the thread for review.\n"
            }
        }
    }
}

/// The workstream key of the sub-agent run by `call_id` in `parent`.
pub fn child_key(parent: &WorkstreamKey, kind: SubAgentKind, call_id: &str) -> WorkstreamKey {
    parent.child(kind.tool(), call_id)
}

/// Characters of a job's short title.
const TITLE_CHARS: usize = 48;

/// A job's short title: its first line, cut at a word near 48 characters.
pub fn short_title(prompt: &str) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line: String = line.chars().filter(|c| !c.is_control()).collect();
    if line.chars().count() <= TITLE_CHARS {
        return line;
    }
    let cut: String = line.chars().take(TITLE_CHARS).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i >= TITLE_CHARS / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end())
}

/// A job for a sub-agent.
pub struct SubAgentJob<'a> {
    /// Which sub-agent.
    pub kind: SubAgentKind,
    /// The short title shown on its status line and approvals.
    pub title: String,
    /// Its first message: the job, with any context (a previous plan).
    pub prompt: String,
    /// The parent call's tool context: working directory, files read, connector scope and
    /// the cancellation of the parent's call.
    pub ctx: &'a ToolContext,
    /// The parent's turn.
    pub turn: &'a InTurn<'a>,
}

/// Why a sub-agent stopped before it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubAgentStop {
    /// It made `agent.task_max_rounds` model calls.
    Rounds(u32),
    /// It used `agent.task_max_tokens` tokens or more.
    Tokens(u64),
}

impl std::fmt::Display for SubAgentStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rounds(n) => write!(
                f,
                "the sub-agent was stopped after {n} model calls (agent.task_max_rounds) before \
                 it finished"
            ),
            Self::Tokens(n) => write!(
                f,
                "the sub-agent was stopped after using {n} tokens (agent.task_max_tokens) \
                 before it finished"
            ),
        }
    }
}

/// How a sub-agent's run ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubAgentOutcome {
    /// Its last answer text (its result when it finished).
    pub text: String,
    /// Model calls made.
    pub rounds: u32,
    /// Tool calls made.
    pub tool_calls: usize,
    /// Tokens used (prompt plus completion).
    pub tokens: u64,
    /// Set when a limit stopped it.
    pub stopped: Option<SubAgentStop>,
    /// Whether the parent's turn was stopped meanwhile.
    pub cancelled: bool,
}

impl SubAgentOutcome {
    /// Whether it gave its own final answer.
    pub fn finished(&self) -> bool {
        self.stopped.is_none() && !self.cancelled
    }
}

/// A sub-agent's sink: its events become its status line on the parent's sink. Its answer
/// text and tool output do not reach the thread (the answer returns as the parent call's
/// result); its tool calls show as the line's current step and count.
pub struct StatusSink<'a> {
    parent: &'a dyn TurnSink,
    status: Mutex<SubAgentStatus>,
}

impl<'a> StatusSink<'a> {
    /// The line of `call_id` (a `kind` call titled `title`) on `parent`.
    pub fn new(parent: &'a dyn TurnSink, call_id: &str, kind: SubAgentKind, title: &str) -> Self {
        Self {
            parent,
            status: Mutex::new(SubAgentStatus {
                call_id: call_id.to_owned(),
                tool: kind.tool().to_owned(),
                title: title.to_owned(),
                step: 0,
                tool_calls: 0,
                denied: 0,
                current: None,
                phase: SubAgentPhase::Thinking,
            }),
        }
    }

    /// Changes the status and shows it.
    fn update(&self, change: impl FnOnce(&mut SubAgentStatus)) {
        let shown = {
            let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
            change(&mut status);
            status.clone()
        };
        self.parent.event(TurnEvent::SubAgent(shown));
    }

    /// A model call starts.
    pub fn step(&self, step: u32) {
        self.update(|s| {
            s.step = step;
            s.phase = SubAgentPhase::Thinking;
            s.current = None;
        });
    }

    /// It ended: answered ([`SubAgentPhase::Done`]) or not ([`SubAgentPhase::Stopped`]).
    pub fn end(&self, phase: SubAgentPhase) {
        self.update(|s| {
            s.phase = phase;
            s.current = None;
        });
    }

    /// The status as last shown.
    pub fn status(&self) -> SubAgentStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl TurnSink for StatusSink<'_> {
    fn event(&self, event: TurnEvent) {
        match event {
            TurnEvent::ToolPending(view) => self.update(|s| {
                s.tool_calls += 1;
                s.phase = if view.needs_approval {
                    SubAgentPhase::AwaitingApproval
                } else {
                    SubAgentPhase::Running
                };
                s.current = Some(view.header);
            }),
            TurnEvent::ToolResult { approval, .. } => self.update(|s| {
                if approval.is_some_and(ApprovalOutcome::refused) {
                    s.denied += 1;
                }
                s.phase = SubAgentPhase::Running;
                s.current = None;
            }),
            // An approved call that prints is running.
            TurnEvent::ToolOutputChunk { .. } => {
                let waiting = self
                    .status
                    .lock()
                    .map(|s| s.phase == SubAgentPhase::AwaitingApproval)
                    .unwrap_or(false);
                if waiting {
                    self.update(|s| s.phase = SubAgentPhase::Running);
                }
            }
            // Its answer is the parent's tool result; its notices stay its own.
            TurnEvent::TextDelta(_)
            | TurnEvent::Waiting(_)
            | TurnEvent::Notice(_)
            | TurnEvent::Error(_)
            | TurnEvent::TurnComplete { .. }
            | TurnEvent::SubAgent(_)
            | TurnEvent::Compacting(_)
            | TurnEvent::Attachment { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolCallView;
    use pretty_assertions::assert_eq;

    #[derive(Default)]
    struct Lines(Mutex<Vec<String>>);

    impl TurnSink for Lines {
        fn event(&self, event: TurnEvent) {
            if let TurnEvent::SubAgent(s) = event {
                self.0.lock().unwrap().push(s.to_string());
            }
        }
    }

    #[test]
    fn titles_are_the_first_line_cut_at_a_word() {
        assert_eq!(short_title("\n  Fix the tests\nthen push"), "Fix the tests");
        assert_eq!(
            short_title(
                "Rename every use of the old configuration loader across the whole workspace"
            ),
            "Rename every use of the old configuration…"
        );
        assert_eq!(short_title(""), "");
    }

    #[test]
    fn the_tools_that_run_sub_agents_are_named() {
        assert_eq!(SubAgentKind::of("task"), Some(SubAgentKind::Task));
        assert_eq!(SubAgentKind::of("plan"), Some(SubAgentKind::Plan));
        assert_eq!(SubAgentKind::of("bash"), None);
    }

    #[test]
    fn child_keys_name_parent_tool_and_call() {
        let key =
            |parent: &str, kind, call| child_key(&parent.parse().unwrap(), kind, call).to_string();
        assert_eq!(
            key("discord:1", SubAgentKind::Task, "c7"),
            "discord:1/task:c7"
        );
        assert_eq!(
            key("console:x", SubAgentKind::Plan, "p"),
            "console:x/plan:p"
        );
        assert_eq!(
            key("console:x/task:c1", SubAgentKind::Task, "c2"),
            "console:x/task:c1/task:c2"
        );
    }

    #[test]
    fn the_status_line_follows_steps_calls_and_denials() {
        let lines = Lines::default();
        let sink = StatusSink::new(&lines, "t1", SubAgentKind::Task, "fix the tests");
        sink.step(1);
        sink.event(TurnEvent::TextDelta("ignored".into()));
        sink.event(TurnEvent::ToolPending(ToolCallView {
            call_id: "s1".into(),
            name: "bash".into(),
            header: "bash: cargo test".into(),
            preview: String::new(),
            needs_approval: true,
            error: None,
        }));
        sink.event(TurnEvent::ToolResult {
            call_id: "s1".into(),
            name: "bash".into(),
            output: "denied by alice; the call did not run".into(),
            is_error: true,
            approval: Some(ApprovalOutcome::Denied),
        });
        sink.step(2);
        sink.end(SubAgentPhase::Done);
        assert_eq!(
            lines.0.into_inner().unwrap(),
            [
                "task: fix the tests · step 1 · 0 tool calls · thinking",
                "task: fix the tests · step 1 · 1 tool call · awaiting approval: bash: cargo test",
                "task: fix the tests · step 1 · 1 tool call (1 denied) · running tools",
                "task: fix the tests · step 2 · 1 tool call (1 denied) · thinking",
                "task: fix the tests · step 2 · 1 tool call (1 denied) · done",
            ]
        );
    }

    #[test]
    fn no_sub_agent_is_offered_task_or_plan() {
        let registry = ToolRegistry::builtin().unwrap();
        for kind in [SubAgentKind::Task, SubAgentKind::Plan] {
            let tools = kind.builtin_tools(&registry);
            assert!(
                !tools.contains("task") && !tools.contains("plan"),
                "{tools:?}"
            );
        }
        let plan = SubAgentKind::Plan.builtin_tools(&registry);
        assert!(
            plan.contains("read_file") && !plan.contains("bash"),
            "{plan:?}"
        );
        let task = SubAgentKind::Task.builtin_tools(&registry);
        assert!(
            task.contains("bash") && task.contains("edit_file"),
            "{task:?}"
        );
    }
}
