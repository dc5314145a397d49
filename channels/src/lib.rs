//! Chat platforms for sandpiper. Each channel translates platform events into turn requests
//! and [`TurnEvent`](sandpiper_agent::protocol::TurnEvent)s into platform messages.
//!
//! # Layout
//!
//! - [`console`]: a terminal channel for local use, demos and scripts (`sandpiper chat`).
//! - [`split`]: cutting long answers at a platform's message limit without breaking code blocks.

pub mod console;
pub mod split;
