//! The **Resume** button of a card whose turn stopped running (sandpiper restarted, or the node
//! running it stopped) and whose requests are all decided. Like any click it is checked
//! against the stored request it names ([`rule_on_resume`]): the owner or an approver may
//! continue the turn. What it returns tells the channel to queue the resumed turn in the
//! thread's lane; a forged or repeated press finds nothing left to resume and changes nothing.

use crate::approvals::policy::{ClickContext, Clicker, Ruling, rule_on_resume};
use crate::{Agent, AgentError};

/// A press of Resume, resolved to sandpiper identities.
#[derive(Debug, Clone)]
pub struct ResumeClick<'a> {
    /// The request the button names (the card's first).
    pub request_id: &'a str,
    /// The clicker's sandpiper user id.
    pub user_id: &'a str,
    /// The clicker's username (logged, shown on the card).
    pub username: &'a str,
    /// The clicker's platform roles or user groups.
    pub roles: &'a [String],
    /// Roles whose members may decide (`approver_roles`, `approver_usergroups`); used only for
    /// requests stored without their approvers.
    pub approver_roles: &'a [String],
}

/// What the channel should do after a press of Resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// No such request (forged or deleted): tell the clicker, change nothing.
    Unknown,
    /// Not allowed, or not yet (a request of the turn still waits): tell only the clicker why.
    Refused(String),
    /// The turn the card asked for has nothing left to run (it was resumed already, or a new
    /// message moved the thread on): tell the clicker; change nothing.
    NothingToResume,
    /// Queue the resumed turn in `workstream`'s lane.
    Resume {
        /// Workstream key.
        workstream: String,
        /// Who started the interrupted turn (its memory scope).
        author: Option<String>,
    },
}

impl Agent {
    /// Judges a press of Resume on a card (see [`ResumeOutcome`]). Running the turn is the
    /// channel's: it queues [`Agent::resume_turn`] in the thread's lane, which does nothing
    /// when nothing dangles, so two quick presses run it once.
    pub async fn resume_click(&self, click: ResumeClick<'_>) -> Result<ResumeOutcome, AgentError> {
        let store = self.store();
        let Some(record) = store.get_approval(click.request_id).await? else {
            return Ok(ResumeOutcome::Unknown);
        };
        let owner = store
            .workstream(&record.workstream)
            .await?
            .and_then(|w| w.row.owner);
        let ctx = ClickContext {
            request: &record,
            owner: owner.as_deref(),
            approver_roles: click.approver_roles,
            require_approver_for: &self.config().approval.require_approver_for,
        };
        let who = Clicker {
            user_id: click.user_id,
            roles: click.roles,
        };
        if let Ruling::Deny(reason) = rule_on_resume(&ctx, &who) {
            tracing::info!(
                request = %record.id,
                workstream = %record.workstream,
                by = click.username,
                reason = %reason,
                "resume refused"
            );
            return Ok(ResumeOutcome::Refused(reason));
        }
        let history = self.history(&record.workstream).await?;
        let dangling = crate::approvals::resume::unanswered_calls(&history);
        if !dangling.iter().any(|c| c.id == record.call_id) {
            tracing::info!(
                request = %record.id,
                workstream = %record.workstream,
                by = click.username,
                "resume pressed with nothing left to resume"
            );
            return Ok(ResumeOutcome::NothingToResume);
        }
        if !super::click::batch_decided(self, &record.workstream).await? {
            return Ok(ResumeOutcome::Refused(
                "some requests of this turn still wait for a decision; decide them first".into(),
            ));
        }
        tracing::info!(
            request = %record.id,
            workstream = %record.workstream,
            by = click.username,
            calls = dangling.len(),
            "resuming an interrupted turn"
        );
        Ok(ResumeOutcome::Resume {
            workstream: record.workstream,
            author: record.requested_by,
        })
    }
}
