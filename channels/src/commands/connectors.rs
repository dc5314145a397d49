//! `/connectors`: show or change which MCP servers a thread, or its channel, may use — the
//! same text and the same permission rule on every platform. Platforms say where the command
//! was typed and who typed it ([`At`]); the policy itself is [`sandpiper_agent::connectors`].
//!
//! Who may change: a thread's tier, its starter or an admin; a channel's tier, an admin only
//! (Discord: Administrator or `[discord] admin_roles`; Slack: `[slack] admin_usergroups`).

use std::fmt::Write as _;

use sandpiper_agent::Agent;
use sandpiper_agent::connectors::{ConnectorView, Tier};

use crate::commands::{ConnectorsAction, PolicyScope};

/// Where `/connectors` was typed, and by whom.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    /// The thread's workstream, when typed in (or, on Slack, for) one of ours.
    pub workstream: Option<&'a str>,
    /// The channel key (`discord:<id>`, `slack:<team>:<channel>`): the thread's parent, or
    /// the channel the command was typed in.
    pub channel: Option<&'a str>,
    /// The person's sandpiper user id.
    pub user_id: &'a str,
    /// Whether the person administers the bot here.
    pub admin: bool,
    /// How commands are typed (`/`, `/sandpiper `).
    pub prefix: &'a str,
}

/// The answer to `/connectors …` (shown only to the person who typed it).
pub async fn answer(
    agent: &Agent,
    action: &ConnectorsAction,
    scope: PolicyScope,
    at: At<'_>,
) -> String {
    match run(agent, action, scope, at).await {
        Ok(text) => text,
        Err(e) => format!("connectors: {e}"),
    }
}

async fn run(
    agent: &Agent,
    action: &ConnectorsAction,
    scope: PolicyScope,
    at: At<'_>,
) -> Result<String, sandpiper_agent::StoreError> {
    // Typed in a channel rather than a thread: the channel is what there is to change.
    let scope = match (scope, at.workstream, at.channel) {
        (PolicyScope::Thread, None, Some(_)) => PolicyScope::Channel,
        _ => scope,
    };
    let ids: Option<Vec<String>> = match action {
        ConnectorsAction::Show => return show(agent, scope, at).await,
        ConnectorsAction::Set(ids) => Some(ids.clone()),
        ConnectorsAction::None => Some(Vec::new()),
        ConnectorsAction::Clear => None,
    };
    match scope {
        PolicyScope::Thread => {
            let Some(ws) = at.workstream else {
                return Ok(format!(
                    "Use {p}connectors in a thread I answer in, or add `channel` to change this \
                     channel ({p}connectors set a,b channel).",
                    p = at.prefix
                ));
            };
            let owner = agent.workstream(ws).await?.and_then(|w| w.owner);
            if !at.admin && owner.as_deref() != Some(at.user_id) {
                return Ok(
                    "🚫 Only the person who started this thread, or an admin, can change its \
                     connectors."
                        .into(),
                );
            }
            agent.set_thread_connectors(ws, ids.as_deref()).await?;
            tracing::info!(workstream = ws, by = at.user_id, connectors = ?ids, "thread connectors changed");
        }
        PolicyScope::Channel => {
            let Some(channel) = at.channel else {
                return Ok(
                    "I do not know this thread's channel; ask an admin to use the HTTP \
                           API (PATCH /v1/api/channels/{id}/connectors)."
                        .into(),
                );
            };
            if !at.admin {
                return Ok("🚫 Only an admin can change a channel's connectors.".into());
            }
            agent
                .set_channel_connectors(channel, ids.as_deref(), Some(at.user_id))
                .await?;
            tracing::info!(channel, by = at.user_id, connectors = ?ids, "channel connectors changed");
        }
    }
    let mut text = String::from(match (action, scope) {
        (ConnectorsAction::Clear, PolicyScope::Thread) => {
            "✅ This thread's selection is cleared.\n"
        }
        (ConnectorsAction::Clear, PolicyScope::Channel) => {
            "✅ The channel's selection is cleared.\n"
        }
        (_, PolicyScope::Thread) => "✅ This thread's connectors are set.\n",
        (_, PolicyScope::Channel) => "✅ The channel's connectors are set.\n",
    });
    text.push_str(&show(agent, scope, at).await?);
    Ok(text)
}

async fn show(
    agent: &Agent,
    scope: PolicyScope,
    at: At<'_>,
) -> Result<String, sandpiper_agent::StoreError> {
    let view = match (scope, at.workstream, at.channel) {
        (PolicyScope::Thread, Some(ws), _) => agent.workstream_connectors(ws).await?,
        (_, _, Some(channel)) => agent.channel_connectors(channel).await?,
        _ => {
            return Ok(format!(
                "Use {}connectors in a thread I answer in.",
                at.prefix
            ));
        }
    };
    Ok(describe(
        &view,
        scope == PolicyScope::Thread && at.workstream.is_some(),
    ))
}

/// `Connectors allowed here: github (from the thread)` and one line per tier.
pub fn describe(view: &ConnectorView, thread: bool) -> String {
    let e = &view.effective;
    let mut out = String::new();
    let here = if thread {
        "in this thread"
    } else {
        "in this channel"
    };
    let from = match e.source {
        Tier::All => "no tier restricts them".to_owned(),
        source if e.declared.len() > 1 => {
            let others: Vec<&str> = e.declared[1..].iter().map(|t| t.as_str()).collect();
            format!("from the {source} tier, narrowed by {}", others.join(", "))
        }
        source => format!("from the {source} tier"),
    };
    let _ = writeln!(out, "Connectors allowed {here}: {} ({from})", e.describe());
    let tier = |ids: &Option<Vec<String>>| match ids {
        None => "not set".to_owned(),
        Some(ids) if ids.is_empty() => "none".to_owned(),
        Some(ids) => ids.join(", "),
    };
    if thread {
        let _ = writeln!(out, "• thread: {}", tier(&view.tiers.workstream));
    }
    let channel = view.channel.as_deref().unwrap_or("unknown");
    let _ = writeln!(out, "• channel {channel}: {}", tier(&view.tiers.channel));
    let _ = write!(out, "• project: {}", tier(&view.tiers.project));
    out
}
