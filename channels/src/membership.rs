//! Deciding away from the thread (the status page): the person is judged by the rules a click
//! on the thread's card is judged by ([`Agent::decide_from_web`], the same
//! [`rule_on_click`](sandpiper_agent::approvals::rule_on_click)), with the roles the thread's
//! platform says they hold *now*, asked the way the card asks ([`candidate_roles`]). A page
//! session's admin flag counts for nothing here: an admin in chat without an approver role is
//! refused on the card, so on the page too; a role taken away in chat ends its power on the
//! page at the next decision.
//!
//! What the platform must do ([`Membership`]): say which roles a platform user holds in the
//! place of a workstream. When this node has no connection to the thread's platform, or the
//! person no identity there, they hold no role: the owner still decides, nobody else.

use std::sync::Arc;

use sandpiper_agent::Agent;
use sandpiper_agent::approvals::{self, Click, ClickAction, ClickOutcome};
use sandpiper_agent::protocol::DecisionPath;
use sandpiper_agent::workstream::{KeyPlatform, WorkstreamKey};

/// A chat platform asked about a person's roles away from a click.
#[async_trait::async_trait]
pub trait Membership: Send + Sync {
    /// The platform whose threads this answers for.
    fn platform(&self) -> KeyPlatform;
    /// `approver_roles` / `approver_usergroups` as this node is configured.
    fn approver_roles(&self) -> &[String];
    /// Which roles (Discord role ids, Slack user group ids) the platform user `user` holds now
    /// where `workstream` lives, among `candidates` (Discord answers with all of the member's
    /// roles, as a click's payload carries them). `Err` (shown) when the platform cannot tell.
    async fn roles_of(
        &self,
        user: &str,
        workstream: &WorkstreamKey,
        candidates: &[String],
    ) -> Result<Vec<String>, String>;
}

/// The roles that may matter for `requests`: the node's configured approver roles and those
/// stored with the requests (in force when each was asked, maybe on another node). A platform
/// that must ask about each role (Slack's user groups) asks about these.
pub async fn candidate_roles(
    agent: &Agent,
    configured: &[String],
    requests: &[String],
) -> Vec<String> {
    let mut candidates = configured.to_vec();
    for role in agent.approver_groups_of(requests).await {
        if !candidates.contains(&role) {
            candidates.push(role);
        }
    }
    candidates
}

/// A decision made away from the thread, by a signed-in sandpiper user.
#[derive(Debug, Clone)]
pub struct AwayClick<'a> {
    /// The request decided.
    pub request_id: &'a str,
    /// What was pressed.
    pub action: ClickAction,
    /// The sandpiper user deciding (records name them by it).
    pub user_id: &'a str,
    /// The note typed with it.
    pub note: Option<String>,
}

/// Decides `click` by the thread's rules for that person, their roles asked of the thread's
/// platform on this node (`platforms`); `Err` (shown) when the store or the platform fails.
pub async fn decide_away(
    agent: &Agent,
    platforms: &[Arc<dyn Membership>],
    click: AwayClick<'_>,
) -> Result<ClickOutcome, String> {
    let Some(request) = agent
        .approval(click.request_id)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(ClickOutcome::Unknown);
    };
    let key: Option<WorkstreamKey> = request.workstream.parse().ok();
    let platform = key
        .as_ref()
        .and_then(|k| platforms.iter().find(|p| p.platform() == k.platform()));
    let (roles, approver_roles) = match (key.as_ref(), platform) {
        (Some(key), Some(platform)) => {
            let roles = roles_there(agent, platform.as_ref(), key, &click).await?;
            (roles, platform.approver_roles().to_vec())
        }
        _ => (Vec::new(), Vec::new()),
    };
    tracing::info!(
        request = click.request_id,
        user = click.user_id,
        roles = ?roles,
        "a decision away from the thread, judged with the platform's roles now"
    );
    agent
        .decide_from_web(Click {
            request_id: click.request_id,
            action: click.action,
            clicker: approvals::Clicker {
                user_id: click.user_id,
                roles: &roles,
                approver_roles: &approver_roles,
            },
            note: click.note,
            path: DecisionPath::Web,
            grant: None,
        })
        .await
        .map_err(|e| e.to_string())
}

/// The roles the person holds on `platform` now, through their identity there (none without
/// one).
async fn roles_there(
    agent: &Agent,
    platform: &dyn Membership,
    key: &WorkstreamKey,
    click: &AwayClick<'_>,
) -> Result<Vec<String>, String> {
    let name = platform.platform().prefix().trim_end_matches(':');
    let identities = agent
        .people()
        .identities(click.user_id)
        .await
        .map_err(|e| e.to_string())?;
    let Some(identity) = identities.into_iter().find(|i| i.platform == name) else {
        return Ok(Vec::new());
    };
    let requests = [click.request_id.to_owned()];
    let candidates = candidate_roles(agent, platform.approver_roles(), &requests).await;
    platform
        .roles_of(&identity.platform_user_id, key, &candidates)
        .await
}
