//! Button clicks and modal submissions, translated into the one click router
//! ([`crate::click`]) over a [`ClickPlace`]: refusals reach only the clicker
//! (`chat.postEphemeral`), a with-note button opens a modal whose submission comes back as the
//! note dialog's id, and a decided card is redrawn from the store.
//!
//! Who is an approver is judged against the user groups stored with the request (as they were
//! when it was asked) as well as this node's `approver_usergroups`, so a click is judged alike
//! on every node.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use slack_morphism::prelude::*;

use super::Ctx;
use super::blocks::{self, NOTE_BLOCK, NOTE_CALLBACK};
use super::mrkdwn::escape;
use super::turn::update_card;
use crate::button::CardButton;
use crate::card::ApprovalCard;
use crate::click::{self, ClickPlace, Clicker};
use crate::config::ThreadAccess;
use crate::permissions::{Refusal, Standing};
use crate::thread::{OutsideTurn, TurnStarter as _, Work};

/// What the note modal carries back (`private_metadata`).
#[derive(Debug, Serialize, Deserialize)]
struct NoteMeta {
    /// The note dialog's id ([`CardButton::Note`]): the request and what the note goes with.
    b: String,
    /// Channel of the card.
    c: String,
    /// The card message.
    ts: String,
    /// Every request on the card.
    ids: Vec<String>,
    /// The thread of the card (Stop and refusals go by it).
    #[serde(default)]
    t: Option<String>,
}

/// Where a click happened, as the click router sees it.
struct SlackClick<'a> {
    ctx: &'a Arc<Ctx>,
    team: String,
    channel: String,
    message_ts: String,
    /// The clicker's Slack user id.
    user: String,
    /// Request ids on the clicked card.
    card: Vec<String>,
    /// The thread of the clicked message (refusals go there).
    thread_ts: Option<String>,
    /// The click's trigger (opening a dialog needs it; a submitted dialog has none).
    trigger: Option<String>,
}

/// Handles one interaction (already acknowledged).
pub(crate) async fn handle(ctx: Arc<Ctx>, event: SlackInteractionEvent) {
    match event {
        SlackInteractionEvent::BlockActions(ev) => block_actions(&ctx, ev).await,
        SlackInteractionEvent::ViewSubmission(ev) => view_submission(&ctx, ev).await,
        _ => {}
    }
}

async fn block_actions(ctx: &Arc<Ctx>, ev: SlackInteractionBlockActionsEvent) {
    let Some(user) = ev.user.map(|u| u.id.0) else {
        return;
    };
    let SlackInteractionActionContainer::Message(container) = ev.container else {
        return;
    };
    let Some(channel) = container
        .channel_id
        .map(|c| c.0)
        .or(ev.channel.map(|c| c.id.0))
    else {
        return;
    };
    let thread_ts = ev
        .message
        .as_ref()
        .and_then(|m| m.origin.thread_ts.as_ref())
        .map(|t| t.0.clone());
    let card = ev
        .message
        .and_then(|m| m.content.blocks)
        .and_then(|b| serde_json::to_value(b).ok())
        .map(|b| blocks::card_request_ids(&b))
        .unwrap_or_default();
    let place = SlackClick {
        ctx,
        team: ev.team.id.0,
        channel,
        message_ts: container.message_ts.0,
        user,
        card,
        thread_ts,
        trigger: Some(ev.trigger_id.0),
    };
    for action in ev.actions.unwrap_or_default() {
        click::on_click(&ctx.agent, &place, &action.action_id.0, None).await;
    }
}

async fn view_submission(ctx: &Arc<Ctx>, ev: SlackInteractionViewSubmissionEvent) {
    let SlackView::Modal(modal) = &ev.view.view else {
        return;
    };
    if modal.callback_id.as_ref().map(|c| c.0.as_str()) != Some(NOTE_CALLBACK) {
        return;
    }
    let Some(meta) = modal
        .private_metadata
        .as_deref()
        .and_then(|m| serde_json::from_str::<NoteMeta>(m).ok())
    else {
        return;
    };
    let note = ev
        .view
        .state_params
        .state
        .as_ref()
        .and_then(|s| s.values.get(&SlackBlockId::new(NOTE_BLOCK.into())))
        .and_then(|v| v.get(&SlackActionId::new(NOTE_BLOCK.into())))
        .and_then(|v| v.value.clone())
        .unwrap_or_default();
    let place = SlackClick {
        ctx,
        team: ev.team.id.0,
        channel: meta.c,
        message_ts: meta.ts,
        user: ev.user.id.0,
        card: meta.ids,
        thread_ts: meta.t,
        trigger: None,
    };
    // Only a dialog's id may carry a note: a note on a plain button id is a forgery.
    if matches!(meta.b.parse(), Ok(CardButton::Note { .. })) {
        click::on_click(&ctx.agent, &place, &meta.b, Some(note)).await;
    } else {
        place.tell(&Refusal::UnknownButton.to_string()).await;
    }
}

#[async_trait::async_trait]
impl ClickPlace for SlackClick<'_> {
    fn workstream(&self) -> Option<String> {
        let thread = self.thread_ts.as_deref().unwrap_or(&self.message_ts);
        Some(
            sandpiper_agent::workstream::WorkstreamKey::slack(&self.team, &self.channel, thread)
                .to_string(),
        )
    }

    fn card(&self) -> Vec<String> {
        self.card.clone()
    }

    fn approver_roles(&self) -> &[String] {
        &self.ctx.config.approver_usergroups
    }

    fn thread_access(&self) -> ThreadAccess {
        self.ctx.config.thread_access
    }

    /// The user groups stored with `requests` count as approver groups too (they were in
    /// force when the requests were asked, maybe on another node).
    async fn clicker(&self, requests: &[String]) -> Result<Clicker, String> {
        let ctx = self.ctx;
        let user = ctx
            .person(&self.user)
            .await
            .ok_or("my database did not answer")?;
        let candidates = crate::membership::candidate_roles(
            &ctx.agent,
            &ctx.config.approver_usergroups,
            requests,
        )
        .await;
        let roles = ctx.api.groups_of(&self.user, &candidates).await;
        Ok(Clicker {
            user_id: user.id,
            roles,
        })
    }

    async fn standing(&self, workstream: &str) -> Result<Standing, String> {
        self.ctx
            .standing(&self.user, workstream)
            .await
            .map(|(_, s)| s)
            .ok_or_else(|| "my database did not answer".into())
    }

    async fn stop(&self, workstream: &str) -> bool {
        let ctx = self.ctx;
        crate::thread::stop_anywhere(&ctx.agent, workstream, |k| ctx.queue.stop(k)).await
    }

    fn resume(&self, workstream: &str, author: Option<String>) {
        let turn = OutsideTurn {
            workstream: workstream.to_owned(),
            work: Work::Resume { author },
        };
        if let Err(e) = super::turn::Starter(self.ctx.clone()).start(turn) {
            tracing::warn!(workstream, error = %e, "could not queue the resumed turn");
        }
    }

    fn quote(&self, header: &str) -> String {
        format!("`{}`", escape(&header.replace('`', "'")))
    }

    async fn tell(&self, text: &str) {
        if let Err(e) = self
            .ctx
            .api
            .ephemeral(&self.channel, &self.user, self.thread_ts.as_deref(), text)
            .await
        {
            tracing::warn!(error = %e, "ephemeral answer to a click failed");
        }
    }

    async fn redraw(&self, card: &ApprovalCard) {
        update_card(self.ctx, &self.channel, &self.message_ts, card).await;
    }

    async fn open_note(&self, button: &CardButton, header: &str) -> Result<(), String> {
        let CardButton::Note { action, .. } = button else {
            return Err("not a note dialog".into());
        };
        let Some(trigger) = &self.trigger else {
            return Err("no dialog can be opened from a dialog".into());
        };
        let meta = NoteMeta {
            b: button.to_string(),
            c: self.channel.clone(),
            ts: self.message_ts.clone(),
            ids: self.card.clone(),
            t: self.thread_ts.clone(),
        };
        let meta = serde_json::to_string(&meta).map_err(|e| e.to_string())?;
        let view = blocks::note_modal(*action, header, &meta);
        // Slack's trigger lives 3 s; a slow store can outlast it.
        self.ctx
            .api
            .open_view(trigger, view)
            .await
            .map_err(|e| e.to_string())
    }
}
