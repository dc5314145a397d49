//! Slack's part of deciding away from the thread ([`crate::membership`]): which of the
//! candidate user groups the person is in, asked of Slack as a click on a card asks it.

use std::sync::Arc;

use sandpiper_agent::workstream::{KeyPlatform, WorkstreamKey};

use super::Ctx;
use crate::membership::Membership;

/// Slack as a [`Membership`].
pub(super) struct SlackMembership(pub(super) Arc<Ctx>);

#[async_trait::async_trait]
impl Membership for SlackMembership {
    fn platform(&self) -> KeyPlatform {
        KeyPlatform::Slack
    }

    fn approver_roles(&self) -> &[String] {
        &self.0.config.approver_usergroups
    }

    fn thread_access(&self) -> crate::config::ThreadAccess {
        self.0.config.thread_access
    }

    async fn roles_of(
        &self,
        user: &str,
        _workstream: &WorkstreamKey,
        candidates: &[String],
    ) -> Result<Vec<String>, String> {
        Ok(self.0.api.groups_of(user, candidates).await)
    }
}
