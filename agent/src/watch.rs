//! Watches: periodic polling of a command in a workstream, firing when a condition holds.
//!
//! - [`condition`]: the `stop_on` language: a Python expression parsed by a real Python
//!   parser (`ruff_python_parser`) and compiled into a small whitelisted tree; anything
//!   outside the whitelist is refused when the watch is created, with its position.
//! - `ast`: the tree a condition compiles into, which `eval` evaluates.
//! - [`value`]: the values a condition computes with, with Python's semantics.
//! - `eval`: evaluation under a step budget and size caps, so no condition can hang or
//!   exhaust memory.
//! - [`spec`]: a watch as asked for, checked (name, interval, condition, poll budget), and how
//!   watches are listed.
//! - [`verdict`]: what a poll means (wait, fire, fail) and the message a firing watch writes.
//! - [`runner`]: claims due watches, polls them like bash, and hands what fires to the
//!   thread through a [`Dispatch`].
//!
//! The `watches` table is [`crate::store::watches`]; the tool is `tools/watch.json`.

mod ast;
pub mod condition;
mod eval;
pub mod runner;
pub mod spec;
pub mod value;
pub mod verdict;

/// A stored watch and why a command on one failed, as [`Agent`](crate::Agent) hands them back.
pub use crate::store::watches::{WatchError, WatchRecord};
pub use condition::{Condition, ConditionError, Poll};
pub use eval::EvalError;
pub use runner::{Delivery, Dispatch, DispatchError, WatchRunner};
pub use spec::{Spec, SpecError, list_text, short_id};
