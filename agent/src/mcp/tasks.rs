//! Background refresh: debounced re-listing on list-changed notifications, and periodic
//! polling of servers that do not push changes.

use std::hash::{BuildHasher, Hasher};
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::McpManager;

/// The first retry of a failed connect waits this long; each further one twice as long, up
/// to the breaker's longest cool-off.
pub(crate) const RETRY_FIRST: Duration = Duration::from_secs(1);

/// How long to wait before connection attempt number `failures + 1`.
pub(crate) fn retry_delay(failures: u32, max: Duration) -> Duration {
    RETRY_FIRST
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
        .min(max.max(RETRY_FIRST))
}

/// Connects `server` in the background until it has listed once (later losses are handled
/// by calls and the periodic refresh): each failed attempt counts towards the breaker, and
/// the next waits for the backoff or the breaker's cool-off, whichever is longer. Shutdown
/// cancels an attempt mid-way, which kills the server's processes.
pub(crate) async fn connect_until_listed(
    manager: Weak<McpManager>,
    server: String,
    shutdown: CancellationToken,
) {
    let mut failures = 0u32;
    let mut first = true;
    loop {
        let Some(manager) = manager.upgrade() else {
            return;
        };
        let Some(slot) = manager.slots.get(&server).cloned() else {
            return;
        };
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => None,
            result = async {
                let _guard = slot.connect_lock.lock().await;
                match slot.live_client() {
                    Some(_) => Ok(()),
                    None => manager.connect_slot(&slot).await.map(drop),
                }
            } => Some(result),
        };
        // The first attempt ends once its result is in the catalog, so that a one-shot
        // command that waited for it (`tools`, `mcp list`) reads the tools it listed.
        let settle = |first: &mut bool| {
            if std::mem::take(first) {
                manager
                    .starting
                    .send_if_modified(|starting| starting.remove(&server));
            }
        };
        let Some(result) = outcome else {
            manager.rebuild_catalog();
            settle(&mut first);
            return;
        };
        let wait = match result {
            Ok(()) => {
                slot.record_success();
                manager.rebuild_catalog();
                settle(&mut first);
                return;
            }
            Err(error) => {
                failures += 1;
                slot.record_failure(&error, None, &manager.options);
                manager.rebuild_catalog();
                settle(&mut first);
                if !manager.options.retry_connects {
                    return;
                }
                let cooling = slot.check_breaker().err().map(|e| match e {
                    super::McpError::CoolingOff { retry_in, .. } => retry_in,
                    _ => Duration::ZERO,
                });
                let wait = retry_delay(failures, manager.options.cooldown_max)
                    .max(cooling.unwrap_or_default());
                tracing::info!(server = %server, failures, retry_in_ms = super::slot::millis(wait),
                    "MCP server not connected; retrying");
                wait
            }
        };
        drop(manager);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Notifications arriving within this window cause one refresh.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(250);

/// Re-lists `server` after each burst of list-changed notifications.
pub(crate) async fn watch_list_changes(
    manager: Weak<McpManager>,
    server: String,
    mut signals: mpsc::Receiver<()>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            signal = signals.recv() => if signal.is_none() { return },
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(DEBOUNCE) => {}
        }
        while signals.try_recv().is_ok() {}
        let Some(manager) = manager.upgrade() else {
            return;
        };
        for report in manager.refresh(Some(&server)).await {
            if let Some(error) = report.error {
                tracing::warn!(server = %report.server, error = %error, "MCP refresh after list change failed");
            }
        }
    }
}

/// Every `interval` (first after a per-process random offset, so a fleet of bots does not
/// hit shared servers at once), re-lists servers that do not push tool changes and
/// reconnects disconnected ones.
pub(crate) async fn poll(
    manager: Weak<McpManager>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut wait = stagger(interval);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = interval;
        let Some(manager) = manager.upgrade() else {
            return;
        };
        let due: Vec<String> = manager
            .slots
            .values()
            .filter(|slot| slot.invalid.is_none())
            .filter(|slot| {
                let state = slot.state();
                !state.listing.pushes_tools || state.client.is_none()
            })
            .map(|slot| slot.name.clone())
            .collect();
        for server in due {
            if manager.shutdown.is_cancelled() {
                return;
            }
            for report in manager.refresh(Some(&server)).await {
                if let Some(error) = report.error {
                    tracing::warn!(server = %report.server, error = %error, "periodic MCP refresh failed");
                }
            }
        }
    }
}

/// A random offset in `[0, interval)`, fixed per call from a randomly seeded hasher.
fn stagger(interval: Duration) -> Duration {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let millis = u64::try_from(interval.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    Duration::from_millis(hasher.finish() % millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_doubling_up_to_the_longest_cool_off() {
        let max = Duration::from_secs(10);
        let delays: Vec<u64> = (1..=6).map(|n| retry_delay(n, max).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(retry_delay(0, max), RETRY_FIRST);
    }

    #[test]
    fn stagger_is_within_interval() {
        for _ in 0..100 {
            assert!(stagger(Duration::from_secs(10)) < Duration::from_secs(10));
        }
        assert_eq!(stagger(Duration::ZERO), Duration::ZERO);
    }
}
