//! The `notifications` table: which workstream sent each delivered notification, keyed by the
//! platform message it became (`discord`, DM channel, message id; `slack`, DM channel, ts).
//! A reply to that message continues the workstream, after a restart and on another node
//! too: the map lives in the database, not in one process's memory.

use super::{Store, StoreError, now_ms};

/// One delivered notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentNotification {
    /// `discord` or `slack`.
    pub platform: String,
    /// Where it was posted (a DM channel or a channel).
    pub channel: String,
    /// The platform message id (Discord) or ts (Slack).
    pub message_id: String,
    /// The workstream that sent it.
    pub workstream: String,
    /// The sandpiper user it was for (`notify(username=…)`), when it went to a person.
    pub recipient: Option<String>,
    /// The platform account it was sent to (its platform user id), when it went to a
    /// person: only that account's reply continues the workstream.
    pub recipient_account: Option<String>,
    /// The username of the person whose turn asked for it (`None`: no person, a watch's
    /// turn); their notifications count together, from whichever thread.
    pub requester: Option<String>,
    /// Who a reply's turn is charged to (a sandpiper user id): whoever the turn that asked
    /// for it was charged to.
    pub charged_to: Option<String>,
}

impl Store {
    /// Records a delivered notification (again: a no-op).
    pub async fn record_notification(&self, sent: &SentNotification) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO notifications \
             (platform, channel, message_id, workstream, recipient, recipient_account, \
             requester, charged_to, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (platform, channel, message_id) DO NOTHING",
        )
        .bind(&sent.platform)
        .bind(&sent.channel)
        .bind(&sent.message_id)
        .bind(&sent.workstream)
        .bind(sent.recipient.as_deref())
        .bind(sent.recipient_account.as_deref())
        .bind(sent.requester.as_deref())
        .bind(sent.charged_to.as_deref())
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The notification that `message_id` in `channel` is, if it is one.
    pub async fn notification(
        &self,
        platform: &str,
        channel: &str,
        message_id: &str,
    ) -> Result<Option<SentNotification>, StoreError> {
        /// What the row adds to the message's place.
        #[derive(sqlx::FromRow)]
        struct Row {
            workstream: String,
            recipient: Option<String>,
            recipient_account: Option<String>,
            requester: Option<String>,
            charged_to: Option<String>,
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT workstream, recipient, recipient_account, requester, charged_to \
             FROM notifications \
             WHERE platform = $1 AND channel = $2 AND message_id = $3",
        )
        .bind(platform)
        .bind(channel)
        .bind(message_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|row| SentNotification {
            platform: platform.to_owned(),
            channel: channel.to_owned(),
            message_id: message_id.to_owned(),
            workstream: row.workstream,
            recipient: row.recipient,
            recipient_account: row.recipient_account,
            requester: row.requester,
            charged_to: row.charged_to,
        }))
    }

    /// How many notifications were delivered to `channel` (a person's DM or a channel) on
    /// `platform` since `since` (unix ms), from every thread and person: the per-recipient
    /// limit's count.
    pub async fn notifications_to_since(
        &self,
        platform: &str,
        channel: &str,
        since: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM notifications \
             WHERE platform = $1 AND channel = $2 AND created_at > $3",
        )
        .bind(platform)
        .bind(channel)
        .bind(since)
        .fetch_one(self.pool())
        .await?)
    }

    /// How many notifications the person `requester` (a username) asked for since `since`
    /// (unix ms), from every thread, to anyone: the per-requester limit's count.
    pub async fn notifications_by_since(
        &self,
        requester: &str,
        since: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM notifications WHERE requester = $1 AND created_at > $2",
        )
        .bind(requester)
        .bind(since)
        .fetch_one(self.pool())
        .await?)
    }

    /// How many notifications `workstream` sent since `since` (unix ms) in turns no person
    /// asked for (a watch's): such a thread is counted as its own requester.
    pub async fn unrequested_notifications_since(
        &self,
        workstream: &str,
        since: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM notifications \
             WHERE workstream = $1 AND requester IS NULL AND created_at > $2",
        )
        .bind(workstream)
        .bind(since)
        .fetch_one(self.pool())
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn a_notification_is_found_by_its_message_only() {
        let store = Store::memory().await.unwrap();
        let sent = SentNotification {
            platform: "discord".into(),
            channel: "77".into(),
            message_id: "88".into(),
            workstream: "slack:T1:C1:1.0".into(),
            recipient: Some("u1".into()),
            recipient_account: Some("U1".into()),
            requester: Some("bob".into()),
            charged_to: None,
        };
        store.record_notification(&sent).await.unwrap();
        store.record_notification(&sent).await.unwrap();
        assert_eq!(
            store.notification("discord", "77", "88").await.unwrap(),
            Some(sent.clone())
        );
        assert_eq!(store.notification("slack", "77", "88").await.unwrap(), None);
        assert_eq!(
            store.notification("discord", "77", "89").await.unwrap(),
            None
        );
        let other_thread = SentNotification {
            message_id: "90".into(),
            workstream: "slack:T1:C1:2.0".into(),
            requester: None,
            charged_to: None,
            ..sent
        };
        store.record_notification(&other_thread).await.unwrap();
        // Counted across threads: to the place, by the person, and a thread nobody asked in.
        assert_eq!(
            store
                .notifications_to_since("discord", "77", 0)
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            store
                .notifications_to_since("slack", "77", 0)
                .await
                .unwrap(),
            0
        );
        assert_eq!(store.notifications_by_since("bob", 0).await.unwrap(), 1);
        assert_eq!(store.notifications_by_since("carol", 0).await.unwrap(), 0);
        let unrequested = |ws: &'static str| store.unrequested_notifications_since(ws, 0);
        assert_eq!(unrequested("slack:T1:C1:2.0").await.unwrap(), 1);
        assert_eq!(unrequested("slack:T1:C1:1.0").await.unwrap(), 0);
        let later = i64::MAX - 1;
        assert_eq!(
            store
                .notifications_to_since("discord", "77", later)
                .await
                .unwrap(),
            0
        );
    }
}
