//! What a chat channel asks the agent about workstreams, people, approval requests and
//! deliveries: a narrow set of questions, so a channel talks to the agent and never reaches
//! into its store.

use crate::Agent;
use crate::notify::Ledger;
use crate::people::People;
use crate::protocol::{ApprovalView, WorkstreamView};
use crate::store::StoreError;
use crate::store::users::User;
use crate::store::watches::{WatchError, WatchRecord};

impl Agent {
    /// A workstream's owner and whether it is closed; `None` when the bot has no workstream
    /// there.
    pub async fn workstream(&self, key: &str) -> Result<Option<WorkstreamView>, StoreError> {
        Ok(self.inner.store.workstream(key).await?.map(Into::into))
    }

    /// Records a workstream opened by `owner` in `parent` (the channel tier of connector
    /// policy); a workstream that exists keeps its owner, and a parent once recorded is kept.
    pub async fn open_workstream(
        &self,
        key: &str,
        owner: Option<&str>,
        parent: Option<&str>,
    ) -> Result<(), StoreError> {
        self.inner
            .store
            .ensure_workstream_in(key, owner, parent)
            .await
            .map(|_| ())
    }

    /// Ends a workstream for good (the caller stopped its turn first): nothing runs in it
    /// any more, and it is dropped from memory.
    pub async fn close_workstream(&self, key: &str) -> Result<(), StoreError> {
        self.inner.store.close_workstream(key).await?;
        self.forget(key);
        Ok(())
    }

    /// Every workstream key, for a channel that looks up its own (a Slack channel's threads).
    pub async fn workstream_keys(&self) -> Result<Vec<String>, StoreError> {
        self.inner.store.list_workstreams().await
    }

    /// The sandpiper user behind a platform identity, made on first sight; its handle is
    /// kept current.
    pub async fn person(&self, who: crate::people::Identity<'_>) -> Result<User, StoreError> {
        self.people().person(who).await
    }

    /// The sandpiper user `id`.
    pub async fn user(&self, id: &str) -> Result<Option<User>, StoreError> {
        self.inner.store.user(id).await
    }

    /// An approval request as it stands now (for a card that shows it).
    pub async fn approval(&self, id: &str) -> Result<Option<ApprovalView>, StoreError> {
        Ok(self.inner.store.get_approval(id).await?.map(Into::into))
    }

    /// Whether `platform` delivers the event `id` for the first time on any node (redeliveries
    /// and fan-out are handled once).
    pub async fn first_delivery(&self, platform: &str, id: &str) -> Result<bool, StoreError> {
        self.inner.store.first_delivery(platform, id).await
    }

    /// Forgets delivered event ids older than `max_age_ms`; how many went.
    pub async fn prune_delivered(&self, max_age_ms: i64) -> Result<u64, StoreError> {
        self.inner.store.prune_delivered(max_age_ms).await
    }

    /// People: identities, links, names and the memories a person can see.
    pub fn people(&self) -> People {
        People::new(self.inner.store.clone())
    }

    /// Delivered notifications (for the notifier and replies to them).
    pub fn notifications(&self) -> Ledger {
        Ledger::new(self.inner.store.clone())
    }

    /// The watches of `workstream`, active and ended.
    pub async fn watches_of(&self, workstream: &str) -> Result<Vec<WatchRecord>, StoreError> {
        self.inner.store.watches_of(workstream).await
    }

    /// Cancels the active watch of `workstream` named `which` (or whose id starts with it).
    pub async fn cancel_watch(
        &self,
        workstream: &str,
        which: &str,
    ) -> Result<WatchRecord, WatchError> {
        self.inner.store.cancel_watch(workstream, which).await
    }

    /// Resumes the paused watch of `workstream` named `which` (or whose id starts with it);
    /// it polls at once.
    pub async fn resume_watch(
        &self,
        workstream: &str,
        which: &str,
    ) -> Result<WatchRecord, WatchError> {
        self.inner.store.resume_watch(workstream, which).await
    }

    /// Sets (or with `None` clears) the connectors a thread may use; `false` when there is
    /// no such workstream.
    pub async fn set_thread_connectors(
        &self,
        workstream: &str,
        ids: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        self.inner
            .store
            .set_workstream_connectors(workstream, ids)
            .await
    }

    /// Sets (or with `None` clears) the connectors threads of `channel` may use; `by` is the
    /// admin who changed it.
    pub async fn set_channel_connectors(
        &self,
        channel: &str,
        ids: Option<&[String]>,
        by: Option<&str>,
    ) -> Result<(), StoreError> {
        self.inner
            .store
            .set_channel_connectors(channel, ids, by)
            .await
    }

    /// Whether `user` wrote a message in `workstream` (a participant of the thread).
    pub async fn wrote_in(&self, workstream: &str, user: &str) -> Result<bool, StoreError> {
        self.inner.store.wrote_in(workstream, user).await
    }

    /// What `of` used since `since` (unix ms), for `/usage` and `/status`.
    pub async fn usage(
        &self,
        of: crate::store::usage::UsageOf<'_>,
        since: i64,
    ) -> Result<crate::store::usage::UsageTotals, StoreError> {
        self.inner.store.usage(of, since).await
    }

    /// Sets the daily token budget of a person or a thread (`None` lifts it), as `by` (an
    /// admin: the caller checked) asked in chat; the change stays on record.
    pub async fn set_budget(
        &self,
        scope: crate::store::usage::BudgetScope,
        subject: &str,
        daily_tokens: Option<u64>,
        by: &str,
    ) -> Result<(), StoreError> {
        tracing::info!(scope = ?scope, subject, daily_tokens, by, "budget changed");
        self.inner
            .store
            .set_budget(scope, subject, daily_tokens, by)
            .await
    }
}
