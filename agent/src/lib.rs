//! The sandpiper agent: everything that is not a chat platform.
//!
//! # Layout
//!
//! - [`config`]: the typed configuration (TOML, then environment overrides).
//! - [`model`]: the [`model::ChatModel`] seam and the OpenAI-compatible and Anthropic providers.
//! - [`tools`]: built-in tools (one file each), their registry and argument handling.
//! - [`store`]: persistence of workstreams, messages, approvals and grants (sqlx: SQLite and
//!   PostgreSQL).
//! - [`protocol`]: what a channel sees and answers: turn events, approval items, decisions.
//! - [`approvals`]: the approval engine: who may decide a click (`approvals::policy`), the
//!   request builder, asking, deciding clicks, closing requests, grants, review gates,
//!   resuming turns interrupted by a restart; one writer for every stored change
//!   (`approvals::ledger`), which also keeps the audit trail.
//! - [`context`]: the model's context window: its size, request sizes, output limits and
//!   compaction of long workstreams.
//! - [`connectors`]: connector policy: which MCP servers a turn may use, from its tiers.
//! - [`pipeline`]: prepare → approve → execute for one batch of tool calls.
//! - [`workstream`]: one conversation in memory, the LRU cache of live ones, and what a
//!   workstream key names ([`workstream::WorkstreamKey`]).
//! - [`turn_limits`]: how many turns run at once, overall and per person.
//! - [`activity`]: what running turns are doing now, for the status page.
//! - [`agent`]: the turn loop that ties the above together; [`Agent`] is the entry point.
//! - [`prompt`]: the system message.
//! - [`cluster`]: several nodes on one database: workstream leases, hand-offs to the owner,
//!   takeover when a node dies.
//! - [`mcp`]: the MCP client: external tool servers (stdio, HTTP), their tools, resources and
//!   prompts.
//! - [`metrics`]: counters for `GET /metrics` (turns, model calls, tool calls, notify).
//! - [`memory`]: relevance injection of memories into the system message.
//! - [`notify`]: a notification on the wire between the notify tool and a gateway node.
//! - [`nudge`]: ephemeral hints that suggest saving a memory at the right moments.
//! - [`bm25`]: relevance ranking shared by memory injection and tool search.
//! - [`child_env`]: the clean environment tools and MCP servers start from.
//! - [`confine`]: what tool processes may see of the bot (Landlock, namespaces, seccomp).
//! - [`output`]: cutting long output for the model (tools and MCP alike).
//! - [`watch`]: watches' `stop_on` conditions: a whitelisted Python subset, bounded.
//! - [`sign_in`]: one-time sign-in links to the status page (`/console`).
//! - [`service_jwt`]: HS256 service tokens between nodes (issuer, audience, short expiry).
//! - [`subagent`]: sub-agents (`task`, `plan`): their kinds, tool sets, limits and status
//!   line; the loop is [`Agent::run_subagent`].
//! - [`tool_search`]: dynamic tool search: which tools each model call is offered, and the
//!   client-side `tool_search` tool.

pub mod activity;
pub mod agent;
pub mod approvals;
pub mod bm25;
pub mod child_env;
pub mod cluster;
pub mod config;
pub mod confine;
pub mod connectors;
pub mod context;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod nudge;
pub mod output;
pub mod people;
pub mod pipeline;
pub mod prompt;
pub mod protocol;
pub mod service_jwt;
pub mod sign_in;
pub mod store;
pub mod subagent;
pub mod tool_search;
pub mod tools;
pub mod turn_limits;
pub mod watch;
pub mod workstream;

pub use agent::{Agent, AgentError, ResumeRequest, TurnOutcome, TurnRequest, WorkstreamStatus};
pub use config::Config;
