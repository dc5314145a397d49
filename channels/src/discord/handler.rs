//! Gateway events: a mention in a listened channel opens a thread; a message in one of our
//! threads (known from the store, so it survives restarts) continues its workstream.

use crate::thread::Work;
use std::sync::Arc;

use crate::config::ThreadAccess;
use serenity::all::{
    ChannelId, Context, CreateThread, EventHandler, GuildId, Interaction, Message, Ready,
};

use super::render::Body;
use super::surface::ThreadSurface;
use super::workstreams::{start_workstream, thread_name};
use super::{Bot, workstream_key};
use crate::intake::Place;
use crate::permissions::{Refusal, Standing, heard, may_talk};

/// serenity's event handler.
pub struct Handler {
    pub(super) bot: Arc<Bot>,
}

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        let _ = self.bot.me.set(ready.user.id);
        *self.bot.stage.lock().unwrap_or_else(|e| e.into_inner()) =
            serenity::gateway::ConnectionStage::Connected;
        tracing::info!(target: "sandpiper", user = %ready.user.name, guilds = ready.guilds.len(), "Discord: connected");
        super::commands::register(&self.bot, &ctx).await;
        let guilds = ready.guilds.iter().map(|g| g.id).collect();
        name_approver_roles(&self.bot, guilds);
    }

    async fn shard_stage_update(
        &self,
        _ctx: Context,
        event: serenity::gateway::ShardStageUpdateEvent,
    ) {
        tracing::info!(from = ?event.old, to = ?event.new, "Discord gateway stage");
        *self.bot.stage.lock().unwrap_or_else(|e| e.into_inner()) = event.new;
    }

    // serenity runs each event in a task of its own: tracked, so shutdown waits for it.
    async fn message(&self, _ctx: Context, msg: Message) {
        self.bot.tasks.track(gateway_message(&self.bot, msg)).await;
    }

    async fn interaction_create(&self, _ctx: Context, interaction: Interaction) {
        let dispatch = super::interactions::dispatch(&self.bot, interaction);
        self.bot.tasks.track(dispatch).await;
    }
}

/// Records, in the background, what the approver roles are called in `guilds`, so the page
/// says who may decide a card by role name. A failure costs only the names.
fn name_approver_roles(bot: &Arc<Bot>, guilds: Vec<GuildId>) {
    if bot.config.approver_roles.is_empty() {
        return;
    }
    let bot2 = bot.clone();
    bot.tasks.spawn(async move {
        let mut names = Vec::new();
        for guild in guilds {
            match bot2.http().get_guild_roles(guild).await {
                Ok(roles) => names.extend(
                    roles
                        .into_iter()
                        .map(|r| (r.id.to_string(), r.name))
                        .filter(|(id, _)| bot2.config.approver_roles.contains(id)),
                ),
                Err(e) => tracing::warn!(error = %e, %guild, "cannot read the guild's roles"),
            }
        }
        if let Err(e) = bot2.agent.name_roles(&names).await {
            tracing::warn!(error = %e, "cannot record the approver roles' names");
        }
    });
}

/// A message from the gateway: taken into a workstream, or said why not.
async fn gateway_message(bot: &Arc<Bot>, msg: Message) {
    if msg.author.bot {
        return;
    }
    let channel = msg.channel_id;
    let me = bot.me.get().copied();
    let addressed =
        (msg.guild_id.is_none() && bot.config.dms) || msg.mentions.iter().any(|u| Some(u.id) == me);
    if let Err(e) = on_message(bot, msg).await {
        tracing::warn!(error = %e, %channel, "handling a Discord message failed");
        // Only a message meant for the bot gets an answer: during a database outage every
        // message in every channel fails here, and the channel must not fill with notices.
        if addressed {
            let text = format!(
                "⚠️ I could not take that message ({e}). Nothing was done with it; please send it again in a moment."
            );
            notice(bot, channel, &text).await;
        }
    }
}

/// The prompt without the bot's mention.
fn strip_mention(content: &str, me: u64) -> String {
    content
        .replace(&format!("<@{me}>"), "")
        .replace(&format!("<@!{me}>"), "")
        .trim()
        .to_owned()
}

async fn on_message(bot: &Arc<Bot>, msg: Message) -> Result<(), sandpiper_agent::AgentError> {
    let direct = msg.guild_id.is_none();
    // A reply to a notification continues the workstream that sent it, DMs on or off.
    if direct && let Some(outcome) = super::notify::reply_to_notification(bot, &msg).await? {
        match outcome {
            crate::notify::ReplyOutcome::Refused(why) => {
                notice(bot, msg.channel_id, &format!("⚠️ {why}")).await;
            }
            crate::notify::ReplyOutcome::NotForYou(why) => {
                super::notify::tell_privately(bot, &msg.author, &format!("⚠️ {why}")).await;
            }
            _ => {}
        }
        return Ok(());
    }
    if direct && let Err(closed) = bot.admits(Place::Dm) {
        // The quiet choice: a DM while DMs are off gets no answer at all (an answer would
        // tell a stranger the bot is there and invite them to keep trying).
        tracing::debug!(user = %msg.author.id, %closed, "direct message ignored");
        return Ok(());
    }
    let key = workstream_key(msg.channel_id);
    if let Some(ws) = bot.agent.workstream(&key).await? {
        return in_thread(bot, msg, ws).await;
    }
    let Some(me) = bot.me.get().copied() else {
        return Ok(());
    };
    let mentioned = msg.mentions.iter().any(|u| u.id == me);
    let channel = msg.channel_id.get();
    let listed = bot
        .admits(Place::Channel {
            id: channel,
            parent: None,
        })
        .is_ok();
    let addressed = direct || (mentioned && listed);
    if !addressed {
        if mentioned {
            tracing::debug!(%channel, user = %msg.author.id, "mention in an unlisted channel ignored");
        }
        return Ok(());
    }
    let prompt = match heard(&strip_mention(&msg.content, me.get()), true) {
        Ok(Some(prompt)) => prompt.to_owned(),
        Ok(None) => return Ok(()),
        Err(hint) => {
            notice(bot, msg.channel_id, &hint.to_string()).await;
            return Ok(());
        }
    };
    let author = bot.person(&msg.author).await?;
    let channel = if direct {
        // A DM is its own workstream; no threads there.
        msg.channel_id
    } else {
        let http = bot.http();
        let builder = CreateThread::new(thread_name(&prompt));
        let thread = bot
            .pace
            .send("create thread", || {
                msg.channel_id
                    .create_thread_from_message(&http, msg.id, builder.clone())
            })
            .await;
        match thread {
            Ok(t) => t.id,
            Err(e) => {
                tracing::warn!(error = %e, channel = %msg.channel_id, "could not create a thread");
                return Ok(());
            }
        }
    };
    let parent = (!direct).then_some(msg.channel_id);
    start_workstream(bot, channel, &author.id, parent).await?;
    tracing::info!(workstream = %workstream_key(channel), owner = %author.username, "new workstream");
    let _ = bot.submit(
        channel,
        Work::message(&author.id, prompt).at(crate::turns::Place::from_snowflake(msg.id.get())),
    );
    Ok(())
}

async fn in_thread(
    bot: &Arc<Bot>,
    msg: Message,
    ws: sandpiper_agent::protocol::WorkstreamView,
) -> Result<(), sandpiper_agent::AgentError> {
    let me = bot.me.get().copied();
    let mentioned = msg.mentions.iter().any(|u| Some(u.id) == me);
    let stripped = strip_mention(&msg.content, me.map(|u| u.get()).unwrap_or_default());
    if stripped.is_empty() && !mentioned {
        // Nothing addressed to anyone (an attachment, a sticker): nothing to answer.
        return Ok(());
    }
    let author = bot.person(&msg.author).await?;
    if ws.closed {
        let text = Refusal::ThreadClosed.to_string();
        tell_once(bot, msg.channel_id, msg.author.id.get(), &text).await;
        return Ok(());
    }
    let owner = ws.owner.as_deref();
    let who = Standing {
        owner: owner == Some(author.id.as_str()),
        ..Standing::default()
    };
    let owner_name = match owner {
        Some(id) if bot.config.thread_access == ThreadAccess::Owner && !who.owner => {
            Some(bot.agent.people().public_name_of(id).await)
        }
        _ => None,
    };
    if let Err(refusal) = may_talk(bot.config.thread_access, who, owner_name.as_deref()) {
        tell_once(
            bot,
            msg.channel_id,
            msg.author.id.get(),
            &refusal.to_string(),
        )
        .await;
        return Ok(());
    }
    let text = match heard(&stripped, mentioned) {
        Ok(Some(text)) => text.to_owned(),
        Ok(None) => return Ok(()),
        Err(hint) => {
            notice(bot, msg.channel_id, &hint.to_string()).await;
            return Ok(());
        }
    };
    let _ = bot.submit(
        msg.channel_id,
        Work::message(&author.id, text).at(crate::turns::Place::from_snowflake(msg.id.get())),
    );
    Ok(())
}

/// Posts a notice to a user in a thread, once per thread and user.
async fn tell_once(bot: &Arc<Bot>, channel: ChannelId, user: u64, text: &str) {
    if bot.told.first((channel.get(), user)) {
        notice(bot, channel, text).await;
    }
}

/// Posts a plain notice in `channel`.
async fn notice(bot: &Arc<Bot>, channel: ChannelId, text: &str) {
    let surface = ThreadSurface {
        bot: bot.clone(),
        channel,
    };
    let body = Body {
        content: text.to_owned(),
        ..Body::default()
    };
    if let Err(e) = surface.send(&body, "notice").await {
        tracing::warn!(error = %e, "could not post a notice");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_mention_is_stripped() {
        assert_eq!(strip_mention("<@42> hello <@!42>", 42), "hello");
    }
}
