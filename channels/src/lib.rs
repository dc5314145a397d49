//! Chat platforms for sandpiper. Each channel translates platform events into turn requests
//! and [`TurnEvent`](sandpiper_agent::protocol::TurnEvent)s into platform messages.
//!
//! # Layout
//!
//! Shared by every platform:
//! - [`commands`]: the command table (`ask`, `stop`, `status`, …) and its parsing.
//! - [`answers`]: the text answers of the informational commands.
//! - [`connectors`]: `/connectors`: show or change a thread's or channel's MCP servers.
//! - [`account`]: `link`, `whoami`, `rename`, `memory` about the person asking.
//! - [`turns`]: one lane per workstream: queued messages, `/stop`.
//! - [`tasks`]: every background task of a channel, tracked and drained at shutdown.
//! - [`stream`]: streaming a turn onto a platform (throttled edits, splits, tool lines).
//! - [`card`]: the approval card, platform-neutral.
//! - [`live`]: approvals a running turn waits for.
//! - [`clicks`]: what a click on an approval button does, checked against the store.
//! - [`intake`]: which ways in are open (`channels`, `dms`), the same rule on every platform.
//! - [`split`]: cutting long answers at a platform's message limit without breaking code blocks.
//! - [`visible`]: model-written text as an approver may safely see it (escapes, cut notes).
//!
//! Platforms:
//! - [`console`]: a terminal channel for local use, demos and scripts (`sandpiper chat`).
//! - [`discord`]: Discord through serenity.
//! - [`slack`]: Slack through slack-morphism (Socket Mode or the Events API).

pub mod account;
pub mod answers;
pub mod card;
pub mod clicks;
pub mod commands;
pub mod connectors;
pub mod console;
pub mod discord;
pub mod intake;
pub mod live;
pub mod slack;
pub mod split;
pub mod stream;
pub mod tasks;
pub mod turns;
pub mod visible;
