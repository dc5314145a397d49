//! Watches: periodic polling of a command in a workstream, firing when a condition holds.
//!
//! - [`condition`]: the `stop_on` language: a Python expression parsed by a real Python
//!   parser (`ruff_python_parser`) and compiled into a small whitelisted tree; anything
//!   outside the whitelist is refused when the watch is created, with its position.
//! - [`value`]: the values a condition computes with, with Python's semantics.
//! - `eval`: evaluation under a step budget and size caps, so no condition can hang or
//!   exhaust memory.

pub mod condition;
mod eval;
pub mod value;

pub use condition::{Condition, ConditionError, Poll};
pub use eval::EvalError;
