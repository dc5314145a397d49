//! The per-server circuit breaker: after `failure_threshold` consecutive failures a server is
//! cut off for a cool-off that doubles on each repeated trip, so a broken server fails fast.

use std::time::{Duration, Instant};

use super::McpOptions;

/// Breaker state of one server. Pure: the caller passes the clock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Breaker {
    /// Failures since the last success (or trip).
    consecutive: u32,
    /// Trips since the last success; the cool-off is `base * 2^(trips-1)`.
    trips: u32,
    /// While set and in the future, calls fail at once.
    open_until: Option<Instant>,
}

impl Breaker {
    /// `Err(remaining)` while cooling off; `Ok` lets a call (or a reconnect attempt) through.
    pub(crate) fn check(&self, now: Instant) -> Result<(), Duration> {
        match self.open_until {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// When calls are let through again, if the breaker is open.
    pub(crate) fn open_until(&self, now: Instant) -> Option<Instant> {
        self.open_until.filter(|until| *until > now)
    }

    /// A call succeeded: forget past failures.
    pub(crate) fn record_success(&mut self) {
        *self = Self::default();
    }

    /// A call failed because of the server. Returns the cool-off if this failure tripped the
    /// breaker. After a trip the breaker is half-open: one more failure trips it again (with
    /// a doubled cool-off), one success closes it.
    pub(crate) fn record_failure(
        &mut self,
        now: Instant,
        options: &McpOptions,
    ) -> Option<Duration> {
        self.consecutive += 1;
        let threshold = options.failure_threshold.max(1);
        let half_open = self.trips > 0;
        if self.consecutive < threshold && !half_open {
            return None;
        }
        let factor = 2u32.saturating_pow(self.trips.min(16));
        let cooldown = options
            .cooldown_base
            .saturating_mul(factor)
            .min(options.cooldown_max);
        self.trips += 1;
        self.consecutive = 0;
        self.open_until = Some(now + cooldown);
        Some(cooldown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> McpOptions {
        McpOptions {
            failure_threshold: 3,
            cooldown_base: Duration::from_secs(30),
            cooldown_max: Duration::from_secs(100),
            ..McpOptions::default()
        }
    }

    #[test]
    fn trips_after_threshold_and_doubles_up_to_max() {
        let o = options();
        let t0 = Instant::now();
        let mut b = Breaker::default();
        assert_eq!(b.record_failure(t0, &o), None);
        assert_eq!(b.record_failure(t0, &o), None);
        assert!(b.check(t0).is_ok());
        assert_eq!(b.record_failure(t0, &o), Some(Duration::from_secs(30)));
        assert_eq!(
            b.check(t0 + Duration::from_secs(10)),
            Err(Duration::from_secs(20))
        );
        let t1 = t0 + Duration::from_secs(31);
        assert!(b.check(t1).is_ok());
        // Half-open: the next failure trips again, doubled.
        assert_eq!(b.record_failure(t1, &o), Some(Duration::from_secs(60)));
        assert_eq!(b.record_failure(t1, &o), Some(Duration::from_secs(100)));
        assert_eq!(b.open_until(t1), Some(t1 + Duration::from_secs(100)));
        b.record_success();
        assert!(b.check(t1).is_ok());
        assert_eq!(b.record_failure(t1, &o), None);
    }
}
