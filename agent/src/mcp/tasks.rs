//! Background refresh: debounced re-listing on list-changed notifications, and periodic
//! polling of servers that do not push changes.

use std::hash::{BuildHasher, Hasher};
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::McpManager;

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
    fn stagger_is_within_interval() {
        for _ in 0..100 {
            assert!(stagger(Duration::from_secs(10)) < Duration::from_secs(10));
        }
        assert_eq!(stagger(Duration::ZERO), Duration::ZERO);
    }
}
