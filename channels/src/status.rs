//! How a chat platform's connection stands, for the gateway's `/ready`: the same shape for
//! every platform.

use std::sync::Arc;

use serde::Serialize;

/// A platform connection as `/ready` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// Whether events can arrive and messages go out now.
    pub connected: bool,
    /// What the platform says about it (`connected`, `resuming`, `socket mode`, …).
    pub state: String,
}

/// Asks a platform for its [`Connection`], at any time from any task.
pub type Probe = Arc<dyn Fn() -> Connection + Send + Sync>;
