//! Discord's slash commands, built from the one command table ([`crate::commands`]): their
//! registration, and what each does when typed. Routed here by [`super::interactions`].

use crate::thread::Work;
use std::sync::Arc;

use serenity::all::{
    CommandInteraction, CommandOptionType, Context, CreateCommand, CreateCommandOption, EditThread,
};

use super::respond::{Error, Reply, Responder};
use super::workstreams::{self, is_bot_admin, start_workstream, thread_name};
use super::{Bot, PLATFORM, render, workstream_key};
use crate::commands::account::Person;
use crate::commands::answers::{Where, answer};
use crate::commands::{COMMANDS, Command};
use crate::intake::Place;

type Result<T = ()> = std::result::Result<T, Error>;

/// Registers the command table: in `[discord] guild` only (instant), else globally.
pub(super) async fn register(bot: &Bot, ctx: &Context) {
    let commands: Vec<CreateCommand> = COMMANDS
        .iter()
        .map(|c| {
            c.options.iter().fold(
                CreateCommand::new(c.name).description(c.description),
                |cmd, o| {
                    let opt = o.choices.iter().fold(
                        CreateCommandOption::new(CommandOptionType::String, o.name, o.description)
                            .required(o.required),
                        |opt, choice| opt.add_string_choice(*choice, *choice),
                    );
                    cmd.add_option(opt)
                },
            )
        })
        .collect();
    let result = match bot.config.guild {
        Some(guild) => serenity::all::GuildId::new(guild.get())
            .set_commands(&ctx.http, commands)
            .await
            .map(|c| c.len()),
        None => serenity::all::Command::set_global_commands(&ctx.http, commands)
            .await
            .map(|c| c.len()),
    };
    match result {
        Ok(n) => tracing::info!(commands = n, "slash commands registered"),
        Err(e) => tracing::warn!(error = %e, "registering slash commands failed"),
    }
}

/// Where a command was typed: a DM, one of our threads, or a channel (with a thread's parent,
/// so `/link` works in any thread of a listed channel).
fn command_place(c: &CommandInteraction, ours: bool) -> Place<u64> {
    if c.guild_id.is_none() {
        Place::Dm
    } else if ours {
        Place::OurThread
    } else {
        Place::Channel {
            id: c.channel_id.get(),
            parent: c
                .channel
                .as_ref()
                .and_then(|ch| ch.parent_id)
                .map(|p| p.get()),
        }
    }
}

pub(super) async fn on_command(
    bot: &Arc<Bot>,
    c: &CommandInteraction,
    reply: &Responder<'_>,
) -> Result {
    let http = bot.http();
    let options: Vec<(String, String)> = c
        .data
        .options
        .iter()
        .filter_map(|o| Some((o.name.clone(), o.value.as_str()?.to_owned())))
        .collect();
    let cmd = match Command::from_options(&c.data.name, &options) {
        Ok(cmd) => cmd,
        Err(e) => return reply.send(Reply::Private(e.to_string())).await,
    };
    let key = workstream_key(c.channel_id);
    let ws = bot.agent.workstream(&key).await?;
    if let Err(closed) = bot.admits(command_place(c, ws.is_some())) {
        tracing::info!(command = %c.data.name, channel = %c.channel_id, user = %c.user.id, %closed, "command refused");
        return reply.send(Reply::Private(format!("🚫 {closed}"))).await;
    }
    match cmd {
        Command::Ask { prompt } => ask(bot, c, reply, prompt, ws.is_some()).await,
        Command::Stop => {
            let text = workstreams::stop(bot, c.channel_id, &c.user, c.member.as_deref()).await?;
            reply.send(Reply::Private(text)).await
        }
        Command::Close => {
            let Some(ws) = ws else {
                return reply
                    .send(Reply::Private("Use /close in a thread I answer in.".into()))
                    .await;
            };
            let person = bot.person(&c.user).await?;
            let who =
                workstreams::standing(bot, ws.owner.as_deref(), &person.id, c.member.as_deref());
            if let Err(refusal) = crate::permissions::may_close(who) {
                return reply.send(Reply::Private(refusal.to_string())).await;
            }
            crate::thread::stop_anywhere(&bot.agent, &key, |k| bot.turns.stop(k)).await;
            bot.agent.close_workstream(&key).await?;
            let text = format!(
                "🔒 Closed by {}. This workstream has ended.",
                bot.agent.people().public_name_of(&person.id).await
            );
            reply.send(Reply::Public(text)).await?;
            let archive = EditThread::new().archived(true).locked(true);
            bot.pace
                .send("archive thread", || {
                    c.channel_id.edit_thread(&http, archive.clone())
                })
                .await?;
            tracing::info!(workstream = %key, by = %person.username, "workstream closed");
            Ok(())
        }
        Command::Connectors { action, scope } => {
            let person = bot.person(&c.user).await?;
            let parent = c.channel.as_ref().and_then(|ch| ch.parent_id);
            let channel = match &ws {
                // A thread opened before parents were recorded learns its parent here.
                Some(w) => match (
                    bot.agent.workstream_connectors(&w.key).await?.channel,
                    parent,
                ) {
                    (Some(known), _) => Some(known),
                    (None, Some(p)) => {
                        bot.agent
                            .open_workstream(&key, None, Some(&workstream_key(p)))
                            .await?;
                        Some(workstream_key(p))
                    }
                    (None, None) => None,
                },
                None if c.guild_id.is_some() => {
                    Some(parent.map_or_else(|| key.clone(), workstream_key))
                }
                None => None,
            };
            let at = crate::commands::connectors::At {
                workstream: ws.as_ref().map(|w| w.key.as_str()),
                channel: channel.as_deref(),
                user_id: &person.id,
                admin: is_bot_admin(c.member.as_deref(), &bot.config.admin_roles),
                prefix: "/",
            };
            let text = crate::commands::connectors::answer(&bot.agent, &action, scope, at).await;
            reply.send(Reply::Private(text)).await
        }
        other => {
            let handle = crate::discord::discord_handle(&c.user);
            let who = Person {
                platform: PLATFORM,
                platform_user_id: &c.user.id.to_string(),
                display_name: c.user.global_name.as_deref().unwrap_or(&c.user.name),
                handle: Some(&handle),
            };
            let approver = c.member.as_deref().is_some_and(|m| {
                m.roles
                    .iter()
                    .any(|r| bot.config.approver_roles.contains(&r.to_string()))
            });
            let at = Where {
                workstream: ws.as_ref().map(|w| w.key.as_str()),
                prefix: "/",
                admin: is_bot_admin(c.member.as_deref(), &bot.config.admin_roles),
                approver,
            };
            let text = answer(&bot.agent, &other, who, at)
                .await
                .unwrap_or_default();
            reply.send(Reply::Private(text)).await
        }
    }
}

/// `/ask`: in one of our threads it is a message there; in a listened channel it opens a
/// thread from the command's reply.
async fn ask(
    bot: &Arc<Bot>,
    c: &CommandInteraction,
    reply: &Responder<'_>,
    prompt: String,
    in_thread: bool,
) -> Result {
    let http = bot.http();
    let person = bot.person(&c.user).await?;
    let direct = c.guild_id.is_none();
    if !in_thread && !direct && !bot.listens_in(c.channel_id) {
        let text = "Use /ask in the channel itself; I open a thread for it.";
        return reply.send(Reply::Private(text.into())).await;
    }
    let shown = format!(
        "**{}** asked: {}",
        person.username,
        render::clip(&prompt, 1800)
    );
    reply.send(Reply::Public(shown)).await?;
    if direct && !in_thread {
        // DMs are on (intake let this through): a DM is its own workstream, as for messages.
        start_workstream(bot, c.channel_id, &person.id, None).await?;
    }
    if in_thread || direct {
        let _ = bot.submit(c.channel_id, Work::message(&person.id, prompt));
        return Ok(());
    }
    let original = bot
        .pace
        .send("ask original", || c.get_response(&http))
        .await?;
    let builder = serenity::all::CreateThread::new(thread_name(&prompt));
    let thread = bot
        .pace
        .send("create thread", || {
            c.channel_id
                .create_thread_from_message(&http, original.id, builder.clone())
        })
        .await?;
    start_workstream(bot, thread.id, &person.id, Some(c.channel_id)).await?;
    tracing::info!(workstream = %workstream_key(thread.id), owner = %person.username, "new workstream from /ask");
    let _ = bot.submit(thread.id, Work::message(&person.id, prompt));
    Ok(())
}
