//! Mentions and messages → turns. A mention in a channel starts (or continues) the workstream
//! of its thread; later replies in that thread continue it without a mention; a DM starts one
//! workstream per DM thread.
//!
//! Each event, click and slash command is handled once however often, and on however many
//! nodes, Slack delivers it ([`first_delivery`]): Slack redelivers what was acknowledged late
//! and spreads envelopes over every Socket Mode connection, so two nodes (or one node's two
//! connections) can receive the same one.

use std::sync::Arc;
use std::time::Duration;

use sandpiper_agent::store::users::User;
use slack_morphism::prelude::*;

use super::mrkdwn::unescape;
use super::turn::{Thread, submit};
use super::{Ctx, ThreadAccess};
use crate::intake::Closed;
use crate::thread::Work;

/// The most `(workstream, user)` notices remembered.
const MAX_TOLD: usize = 10_000;

/// How long the delivery check may wait for the database before the event is handled
/// anyway: a slash command's acknowledgement waits for it, and a click's trigger (to open a
/// dialog) lives 3 s from the click; a healthy database answers in milliseconds.
const DELIVERY_CHECK_PATIENCE: Duration = Duration::from_secs(1);

/// Something Slack delivered, by the id that stays the same in every redelivery.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Delivery<'a> {
    /// An Events API event, by its `event_id`.
    Event(&'a str),
    /// A click, form submission or slash command, by its `trigger_id`: Slack makes one per
    /// user action and a redelivered envelope carries the same payload.
    Trigger(&'a str),
}

impl Delivery<'_> {
    /// The id in the `channel_events` table (trigger ids prefixed: they share the table with
    /// event ids).
    fn key(self) -> String {
        match self {
            Delivery::Event(id) => id.to_owned(),
            Delivery::Trigger(id) => format!("trigger:{id}"),
        }
    }
}

/// Whether this node takes `delivery`: true the first time it arrives, on any node sharing
/// the database. When the database does not answer (in time) it is taken too: a rare
/// duplicate answer beats a lost message.
pub(crate) async fn first_delivery(ctx: &Ctx, delivery: Delivery<'_>) -> bool {
    let key = delivery.key();
    let check = ctx.agent.store().first_delivery("slack", &key);
    match tokio::time::timeout(DELIVERY_CHECK_PATIENCE, check).await {
        Ok(Ok(true)) => true,
        Ok(Ok(false)) => {
            tracing::debug!(id = %key, "delivered before: ignored");
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, id = %key, "cannot check whether Slack delivered this before; handling it");
            true
        }
        Err(_) => {
            tracing::warn!(id = %key, "the delivery check timed out; handling it");
            true
        }
    }
}

/// The id that identifies an interaction across redeliveries; `None` for kinds without one
/// (they are handled every time: nothing sandpiper does with them has effects).
pub(crate) fn trigger_of(event: &SlackInteractionEvent) -> Option<&str> {
    let trigger = match event {
        SlackInteractionEvent::BlockActions(ev) => Some(&ev.trigger_id),
        SlackInteractionEvent::MessageAction(ev) => Some(&ev.trigger_id),
        SlackInteractionEvent::Shortcut(ev) => Some(&ev.trigger_id),
        SlackInteractionEvent::ViewSubmission(ev) => ev.trigger_id.as_ref(),
        SlackInteractionEvent::ViewClosed(ev) => ev.trigger_id.as_ref(),
        SlackInteractionEvent::BlockSuggestion(_) | SlackInteractionEvent::DialogSubmission(_) => {
            None
        }
    };
    trigger.map(|t| t.0.as_str())
}

/// Handles one interaction (already acknowledged) unless it was delivered before.
pub(crate) async fn handle_interaction(ctx: Arc<Ctx>, event: SlackInteractionEvent) {
    if let Some(trigger) = trigger_of(&event)
        && !first_delivery(&ctx, Delivery::Trigger(trigger)).await
    {
        return;
    }
    super::interactions::handle(ctx, event).await;
}

/// Handles one Events API callback (already acknowledged) unless it was delivered before.
pub(crate) async fn handle(ctx: Arc<Ctx>, event: SlackPushEventCallback) {
    if !first_delivery(&ctx, Delivery::Event(&event.event_id.0)).await {
        return;
    }
    let team = event.team_id.0;
    match event.event {
        SlackEventCallbackBody::AppMention(m) => {
            let channel = m.channel.0;
            // Outside `channels` a mention may only continue a thread the bot already owns
            // (its channel was listed when it was opened); it never opens one.
            let may_start = match ctx.admits(&channel) {
                Ok(()) => true,
                Err(Closed::DmsOff) => return,
                Err(closed) => {
                    tracing::debug!(%channel, user = %m.user.0, %closed, "mention outside the listed channels");
                    false
                }
            };
            let ts = m.origin.ts.0;
            let thread_ts = m.origin.thread_ts.map_or_else(|| ts.clone(), |t| t.0);
            let text = m.content.text.unwrap_or_default();
            let thread = Thread {
                team,
                channel,
                thread_ts,
            };
            converse(&ctx, thread, &m.user.0, &ts, &text, may_start).await;
        }
        SlackEventCallbackBody::Message(m) => {
            if m.subtype.is_some() || m.sender.bot_id.is_some() {
                return;
            }
            let Some(user) = m.sender.user.map(|u| u.0) else {
                return;
            };
            let Some(channel) = m.origin.channel.map(|c| c.0) else {
                return;
            };
            if user == ctx.bot_user {
                return;
            }
            let text = m.content.and_then(|c| c.text).unwrap_or_default();
            let is_dm = matches!(m.origin.channel_type, Some(SlackChannelType(ref t)) if t == "im")
                || super::is_dm_channel(&channel);
            // A reply in a notification's thread continues the workstream that sent it,
            // DMs on or off.
            if is_dm
                && let Some(root) = m.origin.thread_ts.as_ref()
                && let Some(outcome) =
                    super::notify::reply_to_notification(&ctx, &channel, &root.0, &user, &text)
                        .await
            {
                // Both are said to the author alone (ephemeral).
                if let crate::notify::ReplyOutcome::Refused(why)
                | crate::notify::ReplyOutcome::NotForYou(why) = outcome
                {
                    let thread = Thread {
                        team,
                        channel,
                        thread_ts: root.0.clone(),
                    };
                    tell(&ctx, &thread, &user, &format!(":warning: {why}")).await;
                }
                return;
            }
            if is_dm && !ctx.config.dms {
                // The quiet choice: no answer at all while DMs are off, even in a DM thread
                // that was opened while they were on.
                tracing::debug!(%user, "direct message ignored: [slack] dms is off");
                return;
            }
            let ts = m.origin.ts.0;
            let thread_ts = match (is_dm, m.origin.thread_ts) {
                (true, thread) => thread.map_or_else(|| ts.clone(), |t| t.0),
                (false, Some(thread)) => thread.0,
                (false, None) => return,
            };
            if !is_dm && text.contains(&format!("<@{}>", ctx.bot_user)) {
                // The app_mention event of the same message handles it.
                return;
            }
            let thread = Thread {
                team,
                channel,
                thread_ts,
            };
            converse(&ctx, thread, &user, &ts, &text, is_dm).await;
        }
        _ => {}
    }
}

/// The sandpiper user behind a Slack user.
pub(crate) async fn person(ctx: &Ctx, slack_user: &str) -> Option<User> {
    let name = ctx.api.display_name(slack_user).await;
    match ctx
        .agent
        .store()
        .user_for_identity("slack", slack_user, &name)
        .await
    {
        Ok(user) => Some(user),
        Err(e) => {
            tracing::warn!(error = %e, "cannot look up the sandpiper user");
            None
        }
    }
}

/// `slack_user` said `text` in `thread`, in the message `ts`. `may_start`: a mention or DM may
/// open a new workstream; a plain thread reply only continues one.
pub(crate) async fn converse(
    ctx: &Arc<Ctx>,
    thread: Thread,
    slack_user: &str,
    ts: &str,
    text: &str,
    may_start: bool,
) {
    let key = thread.key();
    let info = match ctx.agent.store().workstream(&key).await {
        Ok(info) => info,
        Err(e) => {
            tracing::warn!(error = %e, workstream = %key, "cannot read the workstream");
            // Only a message meant for the bot is answered: during a database outage every
            // message in every channel fails here.
            if may_start || text.contains(&format!("<@{}>", ctx.bot_user)) {
                not_taken(ctx, &thread, slack_user, &e.to_string()).await;
            }
            return;
        }
    };
    if info.is_none() && !may_start {
        return;
    }
    let Some(user) = person(ctx, slack_user).await else {
        not_taken(ctx, &thread, slack_user, "my database did not answer").await;
        return;
    };
    if let Some(info) = &info {
        if info.closed_at.is_some() {
            let text =
                "This thread's workstream is closed; mention me in the channel to start a new one.";
            tell(ctx, &thread, slack_user, text).await;
            return;
        }
        let owner = info.row.owner.as_deref();
        if ctx.config.thread_access == ThreadAccess::Owner && owner.is_some_and(|o| o != user.id) {
            let first = {
                let mut told = ctx.told.lock().unwrap_or_else(|e| e.into_inner());
                if told.len() >= MAX_TOLD {
                    told.clear();
                }
                told.insert((key.clone(), slack_user.to_owned()))
            };
            if first {
                let text = "Only the person who started this thread can talk to me here.";
                tell(ctx, &thread, slack_user, text).await;
            }
            return;
        }
    }
    let text = strip_mention(&unescape(text), &ctx.bot_user);
    if text.trim().is_empty() {
        tell(
            ctx,
            &thread,
            slack_user,
            "Yes? Ask me something after the mention.",
        )
        .await;
        return;
    }
    let work = Work::message(&user.id, text);
    submit(ctx, thread, work, Some(ts.to_owned()), Some(slack_user)).await;
}

/// Tells `slack_user` their message was dropped because of `why`.
async fn not_taken(ctx: &Ctx, thread: &Thread, slack_user: &str, why: &str) {
    let text = format!(
        ":warning: I could not take that message ({why}). Nothing was done with it; please send it again in a moment."
    );
    tell(ctx, thread, slack_user, &text).await;
}

/// An ephemeral note for one person in the thread.
pub(crate) async fn tell(ctx: &Ctx, thread: &Thread, slack_user: &str, text: &str) {
    if let Err(e) = ctx
        .api
        .ephemeral(&thread.channel, slack_user, Some(&thread.thread_ts), text)
        .await
    {
        tracing::warn!(error = %e, "ephemeral notice failed");
    }
}

/// The message without the bot's own mention.
fn strip_mention(text: &str, bot_user: &str) -> String {
    text.replace(&format!("<@{bot_user}>"), "")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bots_mention_is_removed() {
        assert_eq!(strip_mention("<@U0BOT> why <@U1>?", "U0BOT"), "why <@U1>?");
    }
}
