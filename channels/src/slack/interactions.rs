//! Button clicks and modal submissions. Approval clicks go through
//! [`Agent::decide`](sandpiper_agent::Agent::decide), which checks the clicker against the
//! stored request; refusals reach only the clicker
//! (`chat.postEphemeral`); a with-note button opens a modal whose submission decides with the
//! note; after a decision the card is re-rendered from the store. A card whose turn stopped
//! running says so and offers **Resume** once that turn is decided; pressing it queues the
//! turn ([`Agent::resume_click`](sandpiper_agent::Agent::resume_click)).
//!
//! Who is an approver is judged against the user groups stored with the request (as they were
//! when it was asked) as well as this node's `approver_usergroups`, so a click is judged alike
//! on every node.

use std::sync::Arc;

use sandpiper_agent::approval_policy::{
    ClickAction, button_id, parse_button_id, parse_resume_button_id,
};
use sandpiper_agent::approvals::{BatchClick, Click, ClickOutcome, ResumeClick, ResumeOutcome};
use serde::{Deserialize, Serialize};
use slack_morphism::prelude::*;

use super::Ctx;
use super::blocks::{self, ALL_PREFIX, NOTE_BLOCK, NOTE_CALLBACK, STOP_ACTION};
use super::events::person;
use super::mrkdwn::escape;
use super::turn::{Thread, update_card};
use crate::card::{ApprovalCard, TurnNote};
use crate::thread::{OutsideTurn, TurnStarter as _, Work};

/// What the note modal carries back (`private_metadata`).
#[derive(Debug, Serialize, Deserialize)]
struct NoteMeta {
    /// The clicked button's id: the request and what the note goes with.
    b: String,
    /// Channel of the card.
    c: String,
    /// The card message.
    ts: String,
    /// Every request on the card.
    ids: Vec<String>,
}

/// Where a click happened.
struct At {
    channel: String,
    message_ts: String,
    /// The clicker's Slack user id.
    user: String,
    /// Request ids on the clicked card.
    card: Vec<String>,
    /// The thread of the clicked message (refusals go there).
    thread_ts: Option<String>,
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
    let at = At {
        channel,
        message_ts: container.message_ts.0,
        user,
        card,
        thread_ts,
    };
    for action in ev.actions.unwrap_or_default() {
        let id = action.action_id.0;
        let value = action.value.unwrap_or_default();
        if id == STOP_ACTION {
            stop(ctx, &at, &value).await;
        } else if let Some(request) = parse_resume_button_id(&id) {
            resume(ctx, &at, request).await;
        } else if let Some(rest) = id.strip_prefix(ALL_PREFIX) {
            let action = if rest.starts_with("a:") {
                ClickAction::Approve
            } else {
                ClickAction::Deny
            };
            let ids: Vec<&str> = value.split(',').filter(|s| !s.is_empty()).collect();
            decide_all(ctx, &at, &ids, action).await;
        } else {
            match parse_button_id(&id) {
                Ok((request, action)) => {
                    decide(ctx, &at, request, action, None, Some(&ev.trigger_id.0)).await;
                }
                Err(e) => {
                    tracing::debug!(action_id = %id, error = %e, "unknown button");
                    refuse(ctx, &at, "That button is not one of mine.").await;
                }
            }
        }
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
    let at = At {
        channel: meta.c,
        message_ts: meta.ts,
        user: ev.user.id.0,
        card: meta.ids,
        thread_ts: None,
    };
    let Ok((request, action)) = parse_button_id(&meta.b) else {
        return;
    };
    decide(ctx, &at, request, action, Some(note), None).await;
}

/// The clicker as `clicks` needs them: sandpiper id, username and approver groups (those of
/// this node's configuration).
async fn clicker(ctx: &Ctx, slack_user: &str) -> Option<(String, String, Vec<String>)> {
    clicker_for(ctx, slack_user, &[]).await
}

/// [`clicker`] for a click on `requests`: the user groups stored with them count as approver
/// groups too (they were in force when the requests were asked, maybe on another node).
async fn clicker_for(
    ctx: &Ctx,
    slack_user: &str,
    requests: &[&str],
) -> Option<(String, String, Vec<String>)> {
    let user = person(ctx, slack_user).await?;
    let mut candidates = ctx.config.approver_usergroups.clone();
    for id in requests {
        if let Ok(Some(r)) = ctx.agent.store().get_approval(id).await
            && let Some(approvers) = r.approvers
        {
            for group in approvers.roles {
                if !candidates.contains(&group) {
                    candidates.push(group);
                }
            }
        }
    }
    let groups = ctx.api.groups_of(slack_user, &candidates).await;
    let shown = user.shown_name().to_owned();
    Some((user.id, shown, groups))
}

/// One decision; then the card is re-rendered, and an interrupted turn resumed.
async fn decide(
    ctx: &Arc<Ctx>,
    at: &At,
    request: &str,
    action: ClickAction,
    note: Option<String>,
    trigger: Option<&str>,
) {
    let Some((user_id, username, roles)) = clicker_for(ctx, &at.user, &[request]).await else {
        return;
    };
    let click = Click {
        request_id: request,
        action,
        user_id: &user_id,
        username: &username,
        roles: &roles,
        approver_roles: &ctx.config.approver_usergroups,
        note,
    };
    let outcome = match ctx.agent.decide(click).await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "deciding a click failed");
            refuse(ctx, at, &format!("Could not record your decision: {e}")).await;
            return;
        }
    };
    match outcome {
        ClickOutcome::Unknown => refuse(ctx, at, "I don't know this approval request.").await,
        ClickOutcome::Refused(reason) => refuse(ctx, at, &format!("Not allowed: {reason}")).await,
        ClickOutcome::NeedsNote => {
            let Some(trigger) = trigger else {
                return;
            };
            let header = ctx
                .agent
                .store()
                .get_approval(request)
                .await
                .ok()
                .flatten()
                .map(|r| r.header)
                .unwrap_or_default();
            let meta = NoteMeta {
                b: button_id(request, action),
                c: at.channel.clone(),
                ts: at.message_ts.clone(),
                ids: at.card.clone(),
            };
            let meta = serde_json::to_string(&meta).unwrap_or_default();
            let view = blocks::note_modal(action, &header, &meta);
            if let Err(e) = ctx.api.open_view(trigger, view).await {
                // Slack's trigger lives 3 s; a slow store can outlast it.
                tracing::warn!(error = %e, "opening the note modal failed");
                let text = format!("Could not open the note dialog ({e}); please click again.");
                refuse(ctx, at, &text).await;
            }
        }
        ClickOutcome::Decided { record, turn } => {
            refresh(ctx, at, &record.id, TurnNote::after(turn)).await;
        }
        ClickOutcome::Gone(record) => refresh(ctx, at, &record.id, None).await,
    }
}

/// Resume on a card whose turn stopped running: the owner or an approver queues the turn in
/// the thread's lane and the card says who resumed it; anyone else is told privately why not.
async fn resume(ctx: &Arc<Ctx>, at: &At, request: &str) {
    let Some((user_id, username, roles)) = clicker_for(ctx, &at.user, &[request]).await else {
        return;
    };
    let click = ResumeClick {
        request_id: request,
        user_id: &user_id,
        username: &username,
        roles: &roles,
        approver_roles: &ctx.config.approver_usergroups,
    };
    match ctx.agent.resume_click(click).await {
        Err(e) => {
            tracing::warn!(error = %e, "judging a Resume click failed");
            refuse(ctx, at, &format!("Could not resume: {e}")).await;
        }
        Ok(ResumeOutcome::Unknown) => {
            refuse(ctx, at, "I don't know this approval request.").await;
        }
        Ok(ResumeOutcome::Refused(reason)) => {
            refuse(ctx, at, &format!("Not allowed: {reason}")).await;
        }
        Ok(ResumeOutcome::NothingToResume) => {
            let text = "There is nothing left to resume: that turn was resumed already or the \
                        thread moved on.";
            refuse(ctx, at, text).await;
        }
        Ok(ResumeOutcome::Resume { workstream, author }) => {
            resume_turn(ctx, &workstream, author);
            let note = TurnNote::Resumed { by: username };
            refresh(ctx, at, request, Some(note)).await;
        }
    }
}

/// Approve all / Deny all: every still pending request on the card, each checked on its own
/// (the same rules as Discord, in [`Agent::decide_all`](sandpiper_agent::Agent::decide_all)); the card is redrawn when anything
/// was decided and the clicker is told privately which requests they could not decide.
async fn decide_all(ctx: &Arc<Ctx>, at: &At, ids: &[&str], action: ClickAction) {
    let Some((user_id, username, roles)) = clicker_for(ctx, &at.user, ids).await else {
        return;
    };
    let ids: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    let outcome = ctx
        .agent
        .decide_all(BatchClick {
            request_ids: &ids,
            action,
            user_id: &user_id,
            username: &username,
            roles: &roles,
            approver_roles: &ctx.config.approver_usergroups,
        })
        .await;
    if outcome.changed {
        let first = ids.first().map(String::as_str).unwrap_or_default();
        let note = outcome.turn.and_then(TurnNote::after);
        refresh(ctx, at, first, note).await;
    }
    if let Some(text) = outcome.refusal_text(|h| format!("`{}`", escape(&h.replace('`', "'")))) {
        refuse(ctx, at, &text).await;
    }
}

/// Re-renders the clicked card from the store, with `note` about its turn.
async fn refresh(ctx: &Ctx, at: &At, fallback_id: &str, note: Option<TurnNote>) {
    let ids = if at.card.is_empty() {
        vec![fallback_id.to_owned()]
    } else {
        at.card.clone()
    };
    if let Some(card) = ApprovalCard::load(&ctx.agent, &ids).await {
        update_card(ctx, &at.channel, &at.message_ts, &card.with_turn(note)).await;
    }
}

/// Resumes a turn that stopped running (Resume was pressed), in its workstream's lane.
fn resume_turn(ctx: &Arc<Ctx>, workstream: &str, author: Option<String>) {
    tracing::info!(workstream, "resuming an interrupted turn");
    let turn = OutsideTurn {
        workstream: workstream.to_owned(),
        work: Work::Resume { author },
    };
    if let Err(e) = super::turn::Starter(ctx.clone()).start(turn) {
        tracing::warn!(workstream, error = %e, "could not queue the resumed turn");
    }
}

/// The Stop button on a live answer: the owner or an approver may stop the turn.
async fn stop(ctx: &Arc<Ctx>, at: &At, workstream: &str) {
    if Thread::parse(workstream).is_none() {
        return;
    }
    if !may_manage(ctx, &at.user, workstream).await {
        refuse(
            ctx,
            at,
            "Only the person who started this thread (or an approver) can stop it.",
        )
        .await;
        return;
    }
    if !crate::thread::stop_anywhere(&ctx.agent, workstream, |k| ctx.queue.stop(k)).await {
        refuse(ctx, at, "Nothing is running in this thread.").await;
    }
}

/// Whether `slack_user` owns `workstream` or is in an approver group.
pub(crate) async fn may_manage(ctx: &Ctx, slack_user: &str, workstream: &str) -> bool {
    let Some((user_id, _, groups)) = clicker(ctx, slack_user).await else {
        return false;
    };
    if !groups.is_empty() {
        return true;
    }
    let owner = ctx
        .agent
        .store()
        .workstream(workstream)
        .await
        .ok()
        .flatten()
        .and_then(|w| w.row.owner);
    owner.as_deref() == Some(user_id.as_str())
}

/// Tells only the clicker.
async fn refuse(ctx: &Ctx, at: &At, text: &str) {
    if let Err(e) = ctx
        .api
        .ephemeral(&at.channel, &at.user, at.thread_ts.as_deref(), text)
        .await
    {
        tracing::warn!(error = %e, "ephemeral refusal failed");
    }
}
