//! The **Resume** button of a card whose turn stopped running (sandpiper restarted, or the node
//! running it stopped) and whose requests are all decided. Like any click it is checked
//! against the stored request it names ([`rule_on_resume`]): the owner or an approver may
//! continue the turn. What it returns tells the channel to queue the resumed turn in the
//! thread's lane; a forged or repeated press finds nothing left to resume and changes nothing.

use crate::approvals::policy::{Clicker, Refusal, Ruling, rule_on_resume};
use crate::{Agent, AgentError};

/// A press of Resume, resolved to sandpiper identities.
#[derive(Debug, Clone)]
pub struct ResumeClick<'a> {
    /// The request the button names (the card's first).
    pub request_id: &'a str,
    /// Who pressed it.
    pub clicker: Clicker<'a>,
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
        /// Who pressed Resume, as records name them (the card says so).
        by: String,
    },
}

impl Agent {
    /// Judges a press of Resume on a card (see [`ResumeOutcome`]). Running the turn is the
    /// channel's: it queues [`Agent::resume_turn`] in the thread's lane, which does nothing
    /// when nothing dangles, so two quick presses run it once.
    pub async fn resume_click(&self, click: ResumeClick<'_>) -> Result<ResumeOutcome, AgentError> {
        let Some(record) = self.store().get_approval(click.request_id).await? else {
            return Ok(ResumeOutcome::Unknown);
        };
        let by = click.clicker.user_id;
        let ruling = super::click::judge(self, &record, &click.clicker, rule_on_resume).await?;
        if let Ruling::Deny(reason) = ruling {
            tracing::info!(
                request = %record.id,
                workstream = %record.workstream,
                by,
                reason = %reason,
                "resume refused"
            );
            return Ok(ResumeOutcome::Refused(reason.to_string()));
        }
        let history = self.history(&record.workstream).await?;
        let dangling = crate::approvals::resume::unanswered_calls(&history);
        if !dangling.iter().any(|c| c.id == record.call_id) {
            tracing::info!(
                request = %record.id,
                workstream = %record.workstream,
                by,
                "resume pressed with nothing left to resume"
            );
            return Ok(ResumeOutcome::NothingToResume);
        }
        if !super::click::batch_decided(self, &record.workstream).await? {
            return Ok(ResumeOutcome::Refused(Refusal::TurnStillAsks.to_string()));
        }
        tracing::info!(
            request = %record.id,
            workstream = %record.workstream,
            by,
            calls = dangling.len(),
            "resuming an interrupted turn"
        );
        let by = crate::approvals::ledger::name_of(self.store(), Some(by), None)
            .await
            .unwrap_or_default();
        Ok(ResumeOutcome::Resume {
            workstream: record.workstream,
            author: record.requested_by,
            by,
        })
    }
}
