//! Watches in the chat: where a fired watch goes (the [`Starters`] of this process, as the
//! watch runner's [`Dispatch`]), and `/watch list|cancel|resume` — the same text and the same
//! rule on every platform.
//!
//! Who may cancel or resume a watch: the person who started the thread, or an admin. A
//! watch's command runs unattended, so resuming one is like approving it again; listing is
//! for anyone who can use commands in the thread.

use sandpiper_agent::Agent;
use sandpiper_agent::watch::WatchError;
use sandpiper_agent::watch::runner::{Delivery, Dispatch, DispatchError};
use sandpiper_agent::watch::{self};
use sandpiper_agent::workstream::KeyPattern;

use crate::commands::WatchAction;
use crate::thread::{OutsideTurn, StartError, Starters, Work};

impl Dispatch for Starters {
    fn keys(&self) -> Vec<KeyPattern> {
        Starters::keys(self)
    }

    fn deliver(&self, workstream: &str, delivery: Delivery) -> Result<(), DispatchError> {
        let work = match delivery {
            // No author: the depth guard counts these, and no person's turn limits apply; the
            // person who set the watch up pays for it.
            Delivery::Turn {
                text,
                shown,
                charged_to,
            } => Work::Message {
                author: None,
                text,
                shown: Some(shown),
                place: None,
                charged_to,
            },
            Delivery::Notice(text) => Work::Notice(text),
        };
        let turn = OutsideTurn {
            workstream: workstream.to_owned(),
            work,
        };
        match self.start(turn) {
            Ok(_) => Ok(()),
            Err(StartError::QueueFull(_)) => Err(DispatchError::Busy),
            Err(e @ StartError::NoChannel(_)) => Err(DispatchError::Unreachable(e.to_string())),
        }
    }
}

/// Where `/watch` was typed, and by whom.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    /// The thread's workstream, when typed in (or, on Slack, for) one of ours.
    pub workstream: Option<&'a str>,
    /// The person's sandpiper user id.
    pub user_id: &'a str,
    /// Whether the person administers the bot here.
    pub admin: bool,
    /// How commands are typed (`/`, `/sandpiper `).
    pub prefix: &'a str,
}

/// The answer to `/watch …` (shown only to the person who typed it).
pub async fn answer(agent: &Agent, action: &WatchAction, at: At<'_>) -> String {
    let Some(ws) = at.workstream else {
        return format!("Use {}watch in a thread I answer in.", at.prefix);
    };
    let result = match action {
        WatchAction::List => agent
            .watches_of(ws)
            .await
            .map(|w| {
                format!(
                    "```\n{}```",
                    watch::list_text(&w, sandpiper_agent::store::now_ms())
                )
            })
            .map_err(WatchError::from),
        WatchAction::Cancel(which) | WatchAction::Resume(which) => {
            match may_change(agent, ws, at).await {
                Ok(None) => {}
                Ok(Some(refusal)) => return refusal,
                Err(e) => return format!("watch: {e}"),
            }
            if matches!(action, WatchAction::Cancel(_)) {
                agent.cancel_watch(ws, which).await.map(|w| {
                    tracing::info!(workstream = ws, watch = %w.id, by = at.user_id, "watch cancelled");
                    format!("⏹ watch `{}` cancelled after {} poll(s)", w.watch.name, w.polls)
                })
            } else {
                agent.resume_watch(ws, which).await.map(|w| {
                    tracing::info!(workstream = ws, watch = %w.id, by = at.user_id, "watch resumed");
                    format!("▶️ watch `{}` resumed; it polls now", w.watch.name)
                })
            }
        }
    };
    result.unwrap_or_else(|e| format!("watch: {e}"))
}

/// `None` when the person may cancel or resume this thread's watches, else the refusal.
async fn may_change(
    agent: &Agent,
    ws: &str,
    at: At<'_>,
) -> Result<Option<String>, sandpiper_agent::StoreError> {
    if at.admin {
        return Ok(None);
    }
    let owner = agent.workstream(ws).await?.and_then(|w| w.owner);
    Ok((owner.as_deref() != Some(at.user_id)).then(|| {
        "🚫 Only the person who started this thread, or an admin, can cancel or resume its \
         watches."
            .to_owned()
    }))
}
