//! The record of delivered notifications, as the notifier and a reply need it: how many a
//! thread sent to one place lately, what was sent where (so a reply continues the thread
//! that sent it), and whether a channel is a workstream's thread.

use crate::store::notifications::SentNotification;
use crate::store::{Store, StoreError};

/// Delivered notifications. Cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    store: Store,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").finish_non_exhaustive()
    }
}

impl Ledger {
    /// The notifications `store` records.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// How many notifications `workstream` delivered to `channel` on `platform` since
    /// `since` (ms).
    pub async fn sent_since(
        &self,
        workstream: &str,
        platform: &str,
        channel: &str,
        since: i64,
    ) -> Result<i64, StoreError> {
        self.store
            .notifications_to_since(workstream, platform, channel, since)
            .await
    }

    /// Records a delivered notification, so a reply to it continues its thread.
    pub async fn record(&self, sent: &SentNotification) -> Result<(), StoreError> {
        self.store.record_notification(sent).await
    }

    /// The notification posted as `message_id` in `channel`, if it was one.
    pub async fn find(
        &self,
        platform: &str,
        channel: &str,
        message_id: &str,
    ) -> Result<Option<SentNotification>, StoreError> {
        self.store.notification(platform, channel, message_id).await
    }

    /// Whether `key` is a workstream's (a notification never posts into another thread).
    pub async fn is_workstream(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.store.workstream(key).await?.is_some())
    }
}
