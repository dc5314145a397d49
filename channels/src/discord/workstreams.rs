//! A Discord thread as a workstream: naming a new thread, recording its workstream, stopping
//! its turn. The gateway handler (mentions), the buttons (Stop) and the slash commands
//! (`/ask`, `/stop`) all do these, so they live beneath all three and none imports another
//! for them.

use std::sync::Arc;

use serenity::all::{Channel, ChannelId, Member, Permissions, User};

use super::respond::Error;
use super::{Bot, workstream_key};
use crate::permissions::{Standing, may_stop};

/// A thread name from the first words of the prompt.
pub(super) fn thread_name(prompt: &str) -> String {
    let mut name = String::new();
    for word in prompt.split_whitespace() {
        if name.chars().count() + word.chars().count() + 1 > 90 {
            break;
        }
        if !name.is_empty() {
            name.push(' ');
        }
        name.push_str(word);
    }
    if name.is_empty() {
        let fallback: String = prompt.chars().take(90).collect();
        if fallback.trim().is_empty() {
            return "sandpiper".into();
        }
        return fallback;
    }
    name
}

/// Records a new thread's workstream, owned by whoever started it, with the channel it was
/// opened from (`parent`; `None` for a DM): the channel tier of connector policy.
pub(super) async fn start_workstream(
    bot: &Bot,
    channel: ChannelId,
    owner: &str,
    parent: Option<ChannelId>,
) -> Result<(), sandpiper_agent::StoreError> {
    if let Some(parent) = parent {
        name_channel(bot, parent);
    }
    let parent = parent.map(workstream_key);
    bot.agent
        .open_workstream(&workstream_key(channel), Some(owner), parent.as_deref())
        .await
        .map(|_| ())
}

/// Records, in the background, what `channel` (a new thread's parent) is called, so the page
/// says `#general on Discord`: once per channel in this process. A failure costs only the name.
fn name_channel(bot: &Bot, channel: ChannelId) {
    if !bot.named.first(channel) {
        return;
    }
    let (http, agent) = (bot.http(), bot.agent.clone());
    bot.tasks.spawn(async move {
        let name = match http.get_channel(channel).await {
            Ok(Channel::Guild(c)) => c.name,
            Ok(_) => return,
            Err(e) => {
                tracing::debug!(error = %e, %channel, "cannot read the channel's name");
                return;
            }
        };
        if let Err(e) = agent.name_channel(&workstream_key(channel), &name).await {
            tracing::debug!(error = %e, %channel, "cannot record the channel's name");
        }
    });
}

/// An administrator of the bot here: Discord's Administrator permission or a role in
/// `[discord] admin_roles` (deleting global memories, which every thread's prompt sees).
pub(super) fn is_bot_admin(member: Option<&Member>, admin_roles: &[String]) -> bool {
    member.is_some_and(|m| {
        m.permissions
            .is_some_and(|p| p.contains(Permissions::ADMINISTRATOR))
            || m.roles.iter().any(|r| admin_roles.contains(&r.to_string()))
    })
}

/// Where `person` stands in a thread owned by `owner`: an approver by an `approver_roles`
/// role; an admin by Administrator, Manage Threads or an `admin_roles` role.
pub(super) fn standing(
    bot: &Bot,
    owner: Option<&str>,
    person: &str,
    member: Option<&Member>,
) -> Standing {
    let roles = |list: &[String]| {
        member.is_some_and(|m| m.roles.iter().any(|r| list.contains(&r.to_string())))
    };
    let manages = member.and_then(|m| m.permissions).is_some_and(|p| {
        p.contains(Permissions::ADMINISTRATOR) || p.contains(Permissions::MANAGE_THREADS)
    });
    Standing {
        owner: owner == Some(person),
        approver: roles(&bot.config.approver_roles),
        admin: manages || is_bot_admin(member, &bot.config.admin_roles),
    }
}

/// `/stop` or the Stop button: cancels the running turn, if the person may stop it
/// ([`may_stop`]).
pub(super) async fn stop(
    bot: &Arc<Bot>,
    channel: ChannelId,
    user: &User,
    member: Option<&Member>,
) -> Result<String, Error> {
    let key = workstream_key(channel);
    let Some(ws) = bot.agent.workstream(&key).await? else {
        return Ok("There is no workstream in this channel.".into());
    };
    let person = bot.person(user).await?;
    let who = standing(bot, ws.owner.as_deref(), &person.id, member);
    if let Err(refusal) = may_stop(bot.config.thread_access, who) {
        return Ok(refusal.to_string());
    }
    let stopped = crate::thread::stop_anywhere(&bot.agent, &key, |k| bot.turns.stop(k)).await;
    Ok(if stopped {
        tracing::info!(workstream = %key, by = %person.username, "turn stopped");
        "⏹️ Stopping.".into()
    } else {
        "Nothing is running here.".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn thread_names_come_from_the_first_words() {
        assert_eq!(
            thread_name("why is   CI red on main?"),
            "why is CI red on main?"
        );
        assert_eq!(thread_name(&"word ".repeat(50)).len(), 89);
        assert_eq!(thread_name(""), "sandpiper");
    }
}
