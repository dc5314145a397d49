//! A Discord thread as a workstream: naming a new thread, recording its workstream, stopping
//! its turn. The gateway handler (mentions), the buttons (Stop) and the slash commands
//! (`/ask`, `/stop`) all do these, so they live beneath all three and none imports another
//! for them.

use std::sync::Arc;

use serenity::all::{ChannelId, User};

use super::respond::Error;
use super::{Bot, workstream_key};

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
) -> Result<(), sandpiper_agent::store::StoreError> {
    let parent = parent.map(workstream_key);
    bot.agent
        .store()
        .ensure_workstream_in(&workstream_key(channel), Some(owner), parent.as_deref())
        .await
        .map(|_| ())
}

/// `/stop` or the Stop button: cancels the running turn, if the person may talk here.
pub(super) async fn stop(bot: &Arc<Bot>, channel: ChannelId, user: &User) -> Result<String, Error> {
    let key = workstream_key(channel);
    let Some(ws) = bot.agent.store().workstream(&key).await? else {
        return Ok("There is no workstream in this channel.".into());
    };
    let person = bot.person(user).await?;
    if bot.config.thread_access == crate::config::ThreadAccess::Owner
        && ws.row.owner.as_deref() != Some(person.id.as_str())
    {
        return Ok("Only the thread's owner can stop it.".into());
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
