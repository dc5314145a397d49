//! What a chat channel asks the agent about workstreams, people, approval requests and
//! deliveries: a narrow set of questions, so a channel talks to the agent and never reaches
//! into its store.

use crate::Agent;
use crate::notify::Ledger;
use crate::people::People;
use crate::protocol::{ApprovalView, ConsoleWorkstream, WorkstreamView};
use crate::store::StoreError;
use crate::store::platform_names::Named;
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

    /// Records what channel `channel` (a channel key: `slack:T1:C1`, `discord:10`) is called,
    /// so the page can say `#general on Slack`.
    pub async fn name_channel(&self, channel: &str, name: &str) -> Result<(), StoreError> {
        let names = [(channel.to_owned(), name.to_owned())];
        self.inner.store.record_names(Named::Channel, &names).await
    }

    /// Records what approver roles (Discord role ids, Slack user group ids) are called, each
    /// `(id, name)`, so the page can say who may decide by name.
    pub async fn name_roles(&self, names: &[(String, String)]) -> Result<(), StoreError> {
        self.inner.store.record_names(Named::Role, names).await
    }

    /// The console's workstreams, most recently active first (`sandpiper chat --list`).
    pub async fn console_workstreams(&self) -> Result<Vec<ConsoleWorkstream>, StoreError> {
        self.inner.store.console_workstreams().await
    }

    /// Opens console workstream `key` for the person at the terminal (`owner`): theirs (one
    /// from before the console recorded its person becomes theirs too, so `/status` names
    /// them), with the directory its tools work in recorded for `--list`.
    pub async fn open_console_workstream(
        &self,
        key: &str,
        owner: &str,
        workdir: Option<&str>,
    ) -> Result<(), StoreError> {
        let store = &self.inner.store;
        store.ensure_workstream_in(key, Some(owner), None).await?;
        store.claim_owner(key, owner).await?;
        if let Some(dir) = workdir {
            store.set_workdir(key, dir).await?;
        }
        Ok(())
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

    /// What `of` used since `since` (unix ms), and, when `[usage.prices]` is set, what it
    /// cost: for `/usage`.
    pub async fn usage_priced(
        &self,
        of: crate::store::usage::UsageOf<'_>,
        since: i64,
    ) -> Result<(crate::store::usage::UsageTotals, Option<crate::price::Bill>), StoreError> {
        let per_model = self.inner.store.usage_per_model(of, since).await?;
        let totals = per_model.iter().fold(
            Default::default(),
            |sum: crate::store::usage::UsageTotals, (_, t)| sum.plus(t),
        );
        let prices = &self.inner.config.usage.prices;
        let bill = (!prices.is_empty()).then(|| {
            crate::price::Bill::of(prices, per_model.iter().map(|(m, t)| (m.as_str(), t)))
        });
        Ok((totals, bill))
    }

    /// Changes the daily budget of a person, a thread or a channel, as `by` (a sandpiper user
    /// id; the caller checked they are an admin) asked in chat or on the status page: a cap in
    /// tokens or money, or every cap lifted. Each change is kept on record and is an audit
    /// event. What changed (old → new).
    pub async fn change_budget(
        &self,
        of: &crate::budget::BudgetOf,
        cap: crate::budget::NewCap,
        by: &str,
    ) -> Result<Vec<crate::budget::Changed>, StoreError> {
        let changed =
            crate::budget::change(&self.inner.store, &self.inner.config.budgets, of, cap, by)
                .await?;
        for c in &changed {
            tracing::info!(scope = ?c.key.scope, subject = %c.key.subject, unit = ?c.key.unit, old = c.old, new = c.new, by, "budget changed");
        }
        Ok(changed)
    }
}
