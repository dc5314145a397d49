//! The record of delivered notifications, as the notifier and a reply need it: how many went
//! to one place and how many one person asked for lately (across threads), what was sent where (so a reply continues the thread
//! that sent it), and whether a channel is a workstream's thread.

use super::{Recent, Requester};
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

    /// How many notifications went to `channel` on `platform`, and how many `requester`
    /// sent, since `since` (ms), across every thread: what [`super::within_limits`] judges.
    pub async fn recent(
        &self,
        platform: &str,
        channel: &str,
        requester: Option<&Requester>,
        since: i64,
    ) -> Result<Recent, StoreError> {
        let to_recipient = self
            .store
            .notifications_to_since(platform, channel, since)
            .await?;
        let by_requester = match requester {
            Some(Requester::Person(name)) => self.store.notifications_by_since(name, since).await?,
            Some(Requester::Thread(key)) => {
                self.store
                    .unrequested_notifications_since(key, since)
                    .await?
            }
            None => 0,
        };
        Ok(Recent {
            to_recipient,
            by_requester,
        })
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
