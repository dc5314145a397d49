//! The sandpiper agent: everything that is not a chat platform.
//!
//! # Layout
//!
//! Wings first; the modules below them are the small pieces the wings share.
//!
//! - [`turn`]: what happens in a turn: the [`Agent`] and its loop, fitting to the window, the
//!   tool batch (prepare → approve → execute), sub-agents, context and compaction, tool
//!   search, the system prompt, relevant memories and nudges.
//! - [`approvals`]: the approval engine: who may decide a click (`approvals::policy`), the
//!   request builder, asking, deciding clicks, closing requests, grants, review gates,
//!   resuming turns interrupted by a restart; one writer for every stored change
//!   (`approvals::ledger`), which also keeps the audit trail.
//! - [`tools`]: built-in tools (one file each), their registry and argument handling.
//! - [`process`]: every child process: its clean environment, confinement (Landlock,
//!   namespaces, seccomp), the launcher and the standing spawner, process trees, signals.
//!   All `unsafe` of the crate is here.
//! - [`store`]: persistence of workstreams, messages, approvals and grants (sqlx: SQLite and
//!   PostgreSQL). Its row types are the crate's own; channels see [`protocol`] views.
//! - [`model`]: the [`model::ChatModel`] seam and the OpenAI-compatible and Anthropic providers.
//! - [`mcp`]: the MCP client: external tool servers (stdio, HTTP), their tools, resources and
//!   prompts.
//! - [`cluster`]: several nodes on one database: workstream leases, hand-offs to the owner,
//!   takeover when a node dies.
//! - [`watch`]: watches' `stop_on` conditions: a whitelisted Python subset, bounded.
//! - [`notify`]: a notification on the wire between the notify tool and a gateway node.
//! - [`workstream`]: one conversation in memory, the LRU cache of live ones, and what a
//!   workstream key names ([`workstream::WorkstreamKey`]).
//! - [`config`]: the typed configuration (TOML, then environment overrides).
//! - [`protocol`]: what a channel sees and answers: turn events, approval items and views,
//!   workstream views, decisions.
//! - [`people`]: who a platform account is: handles, display names, linked identities.
//! - [`connectors`]: connector policy: which MCP servers a turn may use, from its tiers.
//! - [`turn_limits`]: how many turns run at once, overall and per person.
//! - [`budget`]: daily budgets in tokens or money per person, thread and channel, the refusal
//!   when one is used up, and the one way to change one (with its audit event).
//! - [`price`]: `[usage.prices]` and the one rule that turns tokens into money.
//! - [`activity`]: what running turns are doing now, for the status page.
//! - [`metrics`]: counters for `GET /metrics` (turns, model calls, tool calls, notify).
//! - [`bm25`]: relevance ranking shared by memory injection and tool search.
//! - [`output`]: cutting long output for the model (tools and MCP alike).
//! - [`sign_in`]: one-time sign-in links to the status page (`/console`).
//! - [`service_jwt`]: HS256 service tokens between nodes (issuer, audience, short expiry).

pub mod activity;
pub mod approvals;
pub mod bm25;
pub mod budget;
pub mod cluster;
pub mod config;
pub mod connectors;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod output;
pub mod people;
pub mod price;
pub mod private_file;
pub mod process;
pub mod protocol;
pub mod service_jwt;
pub mod sign_in;
pub mod store;
pub mod tools;
pub mod turn;
pub mod turn_limits;
pub mod watch;
pub mod workstream;

pub use config::Config;
/// The store failed; what every narrow question to the agent can answer.
pub use store::StoreError;
pub use turn::{Agent, AgentError, ResumeRequest, TurnOutcome, TurnRequest, WorkstreamStatus};
