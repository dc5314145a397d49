//! The wall clock a turn reads for its context note; tests move it forward to show that what a
//! request sends does not depend on when it is sent.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Local};

/// The local time, plus whatever tests advanced it by.
#[derive(Debug, Default)]
pub struct Clock {
    advanced_ms: AtomicI64,
}

impl Clock {
    /// Now, as the next context note will say it.
    pub fn now(&self) -> DateTime<Local> {
        let advanced = chrono::Duration::milliseconds(self.advanced_ms.load(Ordering::Relaxed));
        Local::now() + advanced
    }

    /// Moves the clock forward by `by` (tests: "minutes later").
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.advanced_ms.fetch_add(ms, Ordering::Relaxed);
    }
}
