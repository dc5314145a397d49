//! What happens in a turn, in one folder.
//!
//! A person's message (or a watch, or a resumed turn) becomes a [`TurnRequest`] for
//! [`Agent::run_turn`]; from there the steps run in this order:
//!
//! ```text
//!  load ──► fit ──► build the request ──► stream the model ──► commit ──► tool batch ─┐
//!  (agent/    (agent/fit,   (prompt, memory,   (model::ChatModel)   (store)    (batch:     │
//!   run)       context)      nudge, tool_search)                                prepare →  │
//!                                                                               approve →  │
//!   ▲                                                                           execute)   │
//!   └───────────────────────── until the model answers without tool calls ◄────────────────┘
//! ```
//!
//! # Layout
//!
//! - [`agent`]: the [`Agent`], its entry points, and the loop itself (`agent/run.rs`: load
//!   the turn, build the request, stream, commit, run the batch); `agent/fit.rs` fits the
//!   request to the model's window and compacts; `agent/subagent.rs` runs a sub-agent's loop.
//! - [`batch`]: prepare → approve → execute for one batch of tool calls.
//! - [`subagent`]: the sub-agents (`task`, `plan`): kinds, tool sets, limits, status line.
//! - [`context`]: the model's context window: its size, request estimates, output limits,
//!   compaction and overflow recovery.
//! - [`tool_search`]: which tools each model call is offered, and the `tool_search` tool.
//! - [`request`]: what one model call sends, so that its beginning does not change: the
//!   stable system message, the compaction checkpoint as the opening note of the history,
//!   and each message with the context note it was first sent with.
//! - [`prompt`]: the system message and the context note (time, memories, nudges).
//! - [`clock`]: the wall clock of the context note, which tests can move.
//! - [`memory`]: which memories are relevant to the conversation, for the request.
//! - [`nudge`]: ephemeral hints that suggest saving a memory at the right moments.

pub mod agent;
pub mod batch;
pub mod clock;
pub mod context;
pub mod memory;
pub mod nudge;
pub mod prompt;
pub mod request;
pub mod subagent;
pub mod tool_search;

pub use agent::{Agent, AgentError, ResumeRequest, TurnOutcome, TurnRequest, WorkstreamStatus};
