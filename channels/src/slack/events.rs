//! Mentions and messages → turns. A mention in a channel starts (or continues) the workstream
//! of its thread; later replies in that thread continue it without a mention; a DM starts one
//! workstream per DM thread. Who may talk, and what a closed thread or an empty mention
//! answers, is [`crate::permissions`]'s.

use std::sync::Arc;

use slack_morphism::prelude::*;

use super::Ctx;
use super::delivery::{Delivery, first_delivery};
use super::mrkdwn::unescape;
use super::turn::{Thread, submit};
use crate::intake::Closed;
use crate::permissions::{Refusal, Standing, heard, may_talk};
use crate::thread::Work;

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
    let info = match ctx.agent.workstream(&key).await {
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
    if info.is_none() {
        name_channel(ctx, &thread);
    }
    let Some(user) = ctx.person(slack_user).await else {
        not_taken(ctx, &thread, slack_user, "my database did not answer").await;
        return;
    };
    let addressed = may_start || text.contains(&format!("<@{}>", ctx.bot_user));
    if let Some(info) = &info {
        if info.closed {
            if ctx.told.first((key.clone(), slack_user.to_owned())) {
                tell(ctx, &thread, slack_user, &Refusal::ThreadClosed.to_string()).await;
            }
            return;
        }
        let owner = info.owner.as_deref();
        let who = Standing {
            owner: owner.is_none_or(|o| o == user.id),
            ..Standing::default()
        };
        let owner_name = match owner {
            Some(id) if !who.owner => Some(ctx.agent.people().public_name_of(id).await),
            _ => None,
        };
        if let Err(refusal) = may_talk(ctx.config.thread_access, who, owner_name.as_deref()) {
            if ctx.told.first((key.clone(), slack_user.to_owned())) {
                tell(ctx, &thread, slack_user, &refusal.to_string()).await;
            }
            return;
        }
    }
    let text = match heard(&strip_mention(&unescape(text), &ctx.bot_user), addressed) {
        Ok(Some(text)) => text.to_owned(),
        Ok(None) => return,
        Err(hint) => {
            tell(ctx, &thread, slack_user, &hint.to_string()).await;
            return;
        }
    };
    let work = Work::message(&user.id, text);
    let work = match crate::turns::Place::from_slack_ts(ts) {
        Some(place) => work.at(place),
        None => work,
    };
    submit(ctx, thread, work, Some(ts.to_owned()), Some(slack_user));
}

/// Tells `slack_user` their message was dropped because of `why`.
/// Records, in the background, what the channel of a thread being opened is called (the
/// page says `#general on Slack`), once per channel in this process; a DM has no name. A
/// failure costs only the name.
fn name_channel(ctx: &Arc<Ctx>, thread: &Thread) {
    let Some(channel_key) = sandpiper_agent::connectors::channel_from_key(&thread.key()) else {
        return;
    };
    if super::is_dm_channel(&thread.channel) || !ctx.named.first(thread.channel.clone()) {
        return;
    }
    let (ctx2, channel) = (ctx.clone(), thread.channel.clone());
    super::spawn(ctx, async move {
        let named = match ctx2.api.channel_name(&channel).await {
            Ok(Some(name)) => ctx2.agent.name_channel(&channel_key, &name).await,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, %channel, "cannot read the channel's name");
                return;
            }
        };
        if let Err(e) = named {
            tracing::debug!(error = %e, %channel, "cannot record the channel's name");
        }
    });
}

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
