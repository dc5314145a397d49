//! A Discord thread as a workstream: naming a new thread and recording its workstream. Both
//! the gateway handler (mentions) and the interactions (`/ask`) open threads, so this lives
//! beneath both and neither imports the other for it.

use serenity::all::ChannelId;

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

/// Records a new thread's workstream, owned by whoever started it.
pub(super) async fn start_workstream(
    bot: &Bot,
    channel: ChannelId,
    owner: &str,
) -> Result<(), sandpiper_agent::store::StoreError> {
    bot.agent
        .store()
        .ensure_workstream(&workstream_key(channel), Some(owner))
        .await
        .map(|_| ())
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
