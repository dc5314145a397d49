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
    /// `thread_access` as this node is configured: who may talk in the platform's threads,
    /// from the page too ([`crate::web`]). Open to anyone unless the platform says otherwise,
    /// as the setting's default is.
    fn thread_access(&self) -> crate::config::ThreadAccess {
        crate::config::ThreadAccess::Anyone
    }
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
    let (roles, approver_roles) = roles_now(
        agent,
        platforms,
        &request.workstream,
        click.request_id,
        click.user_id,
    )
    .await?;
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

/// Whether `user_id` may decide request `request_id` (of `workstream`) from the page: the
/// rules of a click ([`Agent::may_decide`]) with the roles the thread's platform says they
/// hold now, asked as [`decide_away`] asks. What the status page lists for them; `Err`
/// (logged) when the store or the platform fails.
pub async fn may_decide_away(
    agent: &Agent,
    platforms: &[Arc<dyn Membership>],
    workstream: &str,
    request_id: &str,
    user_id: &str,
) -> Result<bool, String> {
    let (roles, approver_roles) =
        roles_now(agent, platforms, workstream, request_id, user_id).await?;
    let who = approvals::Clicker {
        user_id,
        roles: &roles,
        approver_roles: &approver_roles,
    };
    agent
        .may_decide(request_id, &who)
        .await
        .map_err(|e| e.to_string())
}

/// The roles `user_id` holds now where `workstream` lives, and the approver roles its
/// platform is configured with on this node; none when this node has no connection to that
/// platform.
async fn roles_now(
    agent: &Agent,
    platforms: &[Arc<dyn Membership>],
    workstream: &str,
    request_id: &str,
    user_id: &str,
) -> Result<(Vec<String>, Vec<String>), String> {
    let key: Option<WorkstreamKey> = workstream.parse().ok();
    let platform = key
        .as_ref()
        .and_then(|k| platforms.iter().find(|p| p.platform() == k.platform()));
    let (Some(key), Some(platform)) = (key, platform) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let roles = roles_there(agent, platform.as_ref(), &key, request_id, user_id).await?;
    Ok((roles, platform.approver_roles().to_vec()))
}

/// The roles the person holds on `platform` now, through their identity there (none without
/// one, and none asked for when no role could matter).
async fn roles_there(
    agent: &Agent,
    platform: &dyn Membership,
    key: &WorkstreamKey,
    request_id: &str,
    user_id: &str,
) -> Result<Vec<String>, String> {
    let name = platform.platform().prefix().trim_end_matches(':');
    let identities = agent
        .people()
        .identities(user_id)
        .await
        .map_err(|e| e.to_string())?;
    let Some(identity) = identities.into_iter().find(|i| i.platform == name) else {
        return Ok(Vec::new());
    };
    let requests = [request_id.to_owned()];
    let candidates = candidate_roles(agent, platform.approver_roles(), &requests).await;
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    platform
        .roles_of(&identity.platform_user_id, key, &candidates)
        .await
}
