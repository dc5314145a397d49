//! Chat platforms for sandpiper. Each channel translates platform events into turn requests
//! and clicks, and [`TurnEvent`](sandpiper_agent::protocol::TurnEvent)s and decisions into
//! platform messages; the approval logic itself is the agent's
//! ([`sandpiper_agent::approvals`]).
//!
//! # Layout
//!
//! Shared by every platform:
//! - [`config`]: `[discord]` and `[slack]`, read from the agent's configuration file.
//! - [`commands`]: the command table (`ask`, `stop`, `status`, …) and its parsing, and the
//!   answers every platform gives: [`commands::answers`] (the informational commands),
//!   [`commands::account`] (`link`, `whoami`, `rename`, `memory` about the person asking),
//!   [`commands::connectors`] (show or change a thread's or channel's MCP servers),
//!   [`commands::grants`] (`/grants`: the thread's always-allow grants, and taking them back),
//!   [`commands::watches`] (`/watch list|cancel|resume`, and where a fired watch goes) and
//!   [`commands::console_link`] (`/console`, a one-time sign-in link to the status page).
//!   A command answer talks to the agent, never to its store (`channels/clippy.toml` says so).
//! - [`turns`]: one lane per workstream: queued messages, `/stop`.
//! - [`tasks`]: every background task of a channel, tracked and drained at shutdown.
//! - [`stream`]: streaming a turn onto a platform (throttled edits, splits, tool lines, a
//!   sub-agent's status line on its call's line, attachments).
//! - [`card`]: the approval card, platform-neutral.
//! - [`approver`]: the card approver every platform uses over its [`approver::CardSurface`].
//! - [`button`]: the ids of the bot's buttons and dialogs ([`button::CardButton`]), one format.
//! - [`click`]: the one click router: every button and dialog on every platform, over a
//!   platform's [`click::ClickPlace`].
//! - [`thread`]: a turn in a thread, the same on every platform, and turns started from
//!   outside a chat message ([`thread::TurnStarter`]).
//! - [`notify`]: notifications on a gateway: delivery to DMs and channels, and replies that
//!   continue the workstream that sent them (platforms implement [`notify::NotifyPlatform`]).
//! - [`membership`]: deciding away from the thread (the status page) by the thread's rules,
//!   with the roles the platform says a person holds now ([`membership::Membership`]).
//! - [`intake`]: which ways in are open (`channels`, `dms`), the same rule on every platform.
//! - [`permissions`]: who may stop, close and talk in a thread, what a closed thread and an
//!   empty mention answer, and the one wording of a refusal.
//! - [`web`]: talking from the status page: a person's message into a workstream by its
//!   thread's rules, and the page's own conversations (`web:<id>`) and their lanes.
//! - [`status`]: a platform connection's state, for `/ready`.
//! - [`split`]: cutting long answers at a platform's message limit without breaking code blocks.
//! - [`visible`]: model-written text as an approver may safely see it (escapes, cut notes).
//!
//! Platforms:
//! - [`console`]: a terminal channel for local use, demos and scripts (`sandpiper chat`): a
//!   line editor, the chat commands, escaped and Markdown-drawn answers.
//! - [`discord`]: Discord through serenity.
//! - [`slack`]: Slack through slack-morphism (Socket Mode or the Events API).

pub mod approver;
pub mod button;
pub mod card;
pub mod click;
pub mod commands;
pub mod config;
pub mod console;
pub mod discord;
pub mod intake;
pub mod membership;
pub mod notify;
pub mod permissions;
pub mod slack;
pub mod split;
pub mod status;
pub mod stream;
pub mod tasks;
pub mod thread;
pub mod turns;
pub mod visible;
pub mod web;
