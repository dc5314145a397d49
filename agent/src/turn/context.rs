//! The model's context window: how large it is, how large a request is, what an answer may
//! use, and what to do when a long-lived workstream outgrows it.
//!
//! # Layout
//! - [`window`]: the window in force and where it came from (config, the server, a known
//!   default for the model family, or learned from a server's "too long" error).
//! - [`estimate`]: the size of a request in tokens, from its bytes, calibrated by the prompt
//!   tokens the server reported for the previous request.
//! - [`budget`]: what fits: the prompt budget before compaction and each request's output limit.
//! - [`compact`]: compaction as pure steps over the history: shorten old large tool outputs,
//!   choose where the verbatim part starts, render the older part for the summary.
//! - [`overflow`]: recognising a server's "the context is full" and "this history is invalid"
//!   errors among all the ways a model call fails.
//!
//! The turn loop (`agent/turn/context.rs`) ties them together; the full history always stays
//! in the store and only what is sent to the model changes.

pub mod budget;
pub mod compact;
pub mod estimate;
pub mod overflow;
pub mod window;

pub use budget::Budget;
pub use estimate::{Observed, TokenGauge};
pub use window::{ContextWindow, WindowSource};

/// The smallest context window sandpiper works with: a system message, one message and an
/// answer need at least this much.
pub const MIN_WINDOW: u64 = 512;
