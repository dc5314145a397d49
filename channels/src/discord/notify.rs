//! Discord's part of notifications ([`crate::notify`]): opening a DM
//! (`POST /users/@me/channels`), posting with every mention switched off, and a reply in a DM
//! to a notification continuing the workstream that sent it.

use std::sync::Arc;

use sandpiper_agent::notify::ChannelType;
use serenity::all::{ChannelId, CreateMessage, Message};

use super::Bot;
use super::render::{Body, LIMIT, clip};
use crate::notify::{NotifyPlatform, PostError, Reply, ReplyOutcome};

/// Discord as a [`NotifyPlatform`].
pub(super) struct DiscordNotify(pub(super) Arc<Bot>);

/// A Discord channel id (non-zero number).
fn channel_id(id: &str) -> Result<ChannelId, PostError> {
    id.parse::<u64>()
        .ok()
        .and_then(std::num::NonZeroU64::new)
        .map(ChannelId::from)
        .ok_or_else(|| PostError(format!("`{id}` is not a Discord channel id")))
}

/// The notification's text: the title in bold, then the message, with `@everyone`, `@here`
/// and user and role mentions broken by a zero-width space. The message also goes out with
/// no allowed mentions, so nothing pings even if a form slipped through.
pub(crate) fn render(title: Option<&str>, message: &str) -> String {
    let text = match title {
        Some(title) => format!("**{}**\n{message}", title.replace('*', "\\*")),
        None => message.to_owned(),
    };
    clip(&neutralise(&text), LIMIT)
}

fn neutralise(text: &str) -> String {
    text.replace("@everyone", "@\u{200b}everyone")
        .replace("@here", "@\u{200b}here")
        .replace("<@", "<@\u{200b}")
}

#[async_trait::async_trait]
impl NotifyPlatform for DiscordNotify {
    fn platform(&self) -> ChannelType {
        ChannelType::Discord
    }

    fn listens_in(&self, channel: &str) -> bool {
        channel_id(channel).is_ok_and(|c| self.0.listens_in(c))
    }

    async fn open_dm(&self, user: &str) -> Result<String, PostError> {
        let id: u64 = user
            .parse()
            .map_err(|_| PostError(format!("`{user}` is not a Discord user id")))?;
        let http = self.0.http();
        let recipient = serde_json::json!({ "recipient_id": id.to_string() });
        let dm = self
            .0
            .pace
            .send("open DM", || http.create_private_channel(&recipient))
            .await
            .map_err(|e| PostError(format!("cannot open a DM: {e}")))?;
        Ok(dm.id.to_string())
    }

    async fn post(
        &self,
        channel: &str,
        title: Option<&str>,
        message: &str,
    ) -> Result<String, PostError> {
        let channel = channel_id(channel)?;
        let http = self.0.http();
        let body = Body {
            content: render(title, message),
            ..Body::default()
        };
        let msg: CreateMessage = body.create();
        let sent = self
            .0
            .pace
            .send("notification", || channel.send_message(&http, msg.clone()))
            .await
            .map_err(|e| PostError(e.to_string()))?;
        Ok(sent.id.to_string())
    }
}

/// A DM that replies to a message: continued in the workstream that sent it when that
/// message was a notification. `None` when it is not a reply to one (the DM rules apply).
pub(super) async fn reply_to_notification(
    bot: &Arc<Bot>,
    msg: &Message,
) -> Result<Option<ReplyOutcome>, sandpiper_agent::AgentError> {
    let Some(replied_to) = msg.message_reference.as_ref().and_then(|r| r.message_id) else {
        return Ok(None);
    };
    let Some(starters) = bot.starters.get() else {
        return Ok(None);
    };
    let ledger = bot.agent.notifications();
    let channel = msg.channel_id.to_string();
    let replied_to = replied_to.to_string();
    if ledger
        .find(ChannelType::Discord.as_str(), &channel, &replied_to)
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let author = bot.person(&msg.author).await?;
    let account = msg.author.id.to_string();
    let reply = Reply {
        platform: ChannelType::Discord,
        channel: &channel,
        replied_to: &replied_to,
        account: &account,
        username: &author.username,
        text: &msg.content,
    };
    let outcome = crate::notify::continue_from_reply(&ledger, starters, reply).await?;
    Ok(Some(outcome))
}

/// Tells the author of a refused reply why, in their own DM with the bot (never in the
/// channel the reply was written in, which may not be theirs alone).
pub(super) async fn tell_privately(bot: &Arc<Bot>, author: &serenity::all::User, text: &str) {
    let notify = DiscordNotify(bot.clone());
    let sent = match notify.open_dm(&author.id.to_string()).await {
        Ok(dm) => notify.post(&dm, None, text).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "could not tell a reply's author privately");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn nothing_in_a_notification_can_ping() {
        assert_eq!(
            render(Some("CI *red*"), "@everyone @here <@&55> <@12> done"),
            "**CI \\*red\\***\n@\u{200b}everyone @\u{200b}here <@\u{200b}&55> <@\u{200b}12> done"
        );
        assert_eq!(render(None, "plain"), "plain");
    }
}
