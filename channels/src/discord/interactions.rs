//! Buttons (approval cards, Stop), the note dialog, and slash commands from the one command
//! table. Every interaction is answered within Discord's 3 seconds (see [`super::respond`]):
//! decisions are single store updates, slow commands are answered first and worked on after,
//! and a handler held up anyway (the database away) has its response deferred.

use std::sync::Arc;

use sandpiper_agent::approval_policy::{ClickAction, parse_button_id};
use serenity::all::{
    ActionRowComponent, ChannelId, CommandInteraction, CommandOptionType, ComponentInteraction,
    Context, CreateActionRow, CreateCommand, CreateCommandOption, CreateInputText, CreateModal,
    EditThread, InputTextStyle, Interaction, Member, ModalInteraction, Permissions, User,
};

use super::render;
use super::respond::{Error, Reply, Responder, Source};
use super::workstreams::{start_workstream, thread_name};
use super::{Bot, PLATFORM, workstream_key};
use crate::account::Person;
use crate::answers::{Where, answer};
use crate::clicks::{self, BatchClick, Click, ClickOutcome};
use crate::commands::{COMMANDS, Command};
use crate::intake::Place;

/// Registers the command table: in `[discord] guild` only (instant), else globally.
pub async fn register_commands(bot: &Bot, ctx: &Context) {
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
        Some(guild) => serenity::all::GuildId::new(guild)
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

/// Routes an interaction. Each is answered through a [`Responder`], within Discord's 3 s
/// whatever the handler waits for; a failure (the database away, say) is told to the person
/// rather than left to Discord's "This interaction failed".
pub async fn dispatch(bot: &Arc<Bot>, interaction: Interaction) {
    let source = match &interaction {
        Interaction::Component(c) => Source::Component(c),
        Interaction::Modal(m) => Source::Modal(m),
        Interaction::Command(c) => Source::Command(c),
        _ => return,
    };
    let reply = Responder::new(bot, source);
    let result = reply
        .guard(async {
            match source {
                Source::Component(c) => on_button(bot, c, &reply).await,
                Source::Modal(m) => on_note(bot, m, &reply).await,
                Source::Command(c) => on_command(bot, c, &reply).await,
            }
        })
        .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "handling a Discord interaction failed");
        let text = format!("⚠️ That did not go through ({e}). Please try again in a moment.");
        if let Err(e) = reply.send(Reply::Private(text)).await {
            tracing::debug!(error = %e, "could not tell the user about a failed interaction");
        }
    }
}

type Result<T = ()> = std::result::Result<T, Error>;

fn roles(member: Option<&Member>) -> Vec<String> {
    member
        .map(|m| m.roles.iter().map(|r| r.to_string()).collect())
        .unwrap_or_default()
}

async fn on_button(bot: &Arc<Bot>, c: &ComponentInteraction, reply: &Responder<'_>) -> Result {
    let id = c.data.custom_id.as_str();
    if let Some(channel) = render::parse_stop_id(id) {
        let text = stop(bot, channel, &c.user).await?;
        return reply.send(Reply::Private(text)).await;
    }
    if let Some(approve) = render::parse_all_id(id) {
        return on_all(bot, c, reply, approve).await;
    }
    let (request, action) = match parse_button_id(id) {
        Ok(parsed) => parsed,
        Err(e) => {
            tracing::warn!(custom_id = id, error = %e, user = %c.user.id, "unknown or forged button");
            let text = format!("That button is not one I know ({e}); nothing changed.");
            return reply.send(Reply::Private(text)).await;
        }
    };
    let person = bot.person(&c.user).await?;
    let roles = roles(c.member.as_ref());
    let outcome = clicks::decide(
        &bot.agent,
        &bot.live,
        Click {
            request_id: request,
            action,
            user_id: &person.id,
            username: &person.username,
            roles: &roles,
            approver_roles: &bot.config.approver_roles,
            note: None,
        },
    )
    .await?;
    if outcome == ClickOutcome::NeedsNote {
        let title = if action == ClickAction::ApproveWithNote {
            "Approve with a note"
        } else {
            "Deny with a note"
        };
        let modal =
            CreateModal::new(render::note_modal_id(request, action), title).components(vec![
                CreateActionRow::InputText(
                    CreateInputText::new(InputTextStyle::Paragraph, "Note for the agent", "note")
                        .required(true)
                        .max_length(1000),
                ),
            ]);
        return reply.send(Reply::Modal(modal)).await;
    }
    let requests = render::card_requests(&c.message);
    let response = after_decision(bot, c.channel_id, &requests, outcome).await;
    reply.send(response).await
}

/// Answers a decided click: redraws the card (or tells the clicker why nothing changed) and
/// resumes a turn interrupted by a restart.
async fn after_decision(
    bot: &Arc<Bot>,
    channel: ChannelId,
    requests: &[String],
    outcome: ClickOutcome,
) -> Reply {
    match outcome {
        ClickOutcome::Unknown => {
            Reply::Private("I have no record of this approval request; nothing changed.".into())
        }
        ClickOutcome::Refused(reason) => Reply::Private(format!("🚫 {reason}")),
        ClickOutcome::NeedsNote => Reply::Private("A note is needed.".into()),
        ClickOutcome::Decided { record, resume } => {
            if resume {
                bot.submit_resume(channel, record.requested_by.clone());
            }
            redraw(bot, requests).await
        }
        ClickOutcome::Gone(_) => redraw(bot, requests).await,
    }
}

async fn redraw(bot: &Bot, requests: &[String]) -> Reply {
    match bot.load_card(requests).await {
        Some(card) => Reply::Update(render::card(&card, &bot.timeout_words())),
        None => Reply::Nothing,
    }
}

/// Approve all / Deny all: each pending request on the card, each checked on its own; the
/// card is redrawn when anything was decided and the clicker is told privately which requests
/// they could not decide, and why.
async fn on_all(
    bot: &Arc<Bot>,
    c: &ComponentInteraction,
    reply: &Responder<'_>,
    approve: bool,
) -> Result {
    let person = bot.person(&c.user).await?;
    let roles = roles(c.member.as_ref());
    let requests = render::card_requests(&c.message);
    let action = if approve {
        ClickAction::Approve
    } else {
        ClickAction::Deny
    };
    let outcome = clicks::decide_all(
        &bot.agent,
        &bot.live,
        BatchClick {
            request_ids: &requests,
            action,
            user_id: &person.id,
            username: &person.username,
            roles: &roles,
            approver_roles: &bot.config.approver_roles,
        },
    )
    .await;
    if let Some(record) = &outcome.resume {
        bot.submit_resume(c.channel_id, record.requested_by.clone());
    }
    let refusal = outcome.refusal_text(|h| format!("`{}`", h.replace('`', "'")));
    if outcome.changed || refusal.is_none() {
        reply.send(redraw(bot, &requests).await).await?;
    }
    match refusal {
        Some(text) => reply.send(Reply::Private(text)).await,
        None => Ok(()),
    }
}

/// The note dialog was submitted.
async fn on_note(bot: &Arc<Bot>, m: &ModalInteraction, reply: &Responder<'_>) -> Result {
    let Some((request, action)) = render::parse_note_modal_id(&m.data.custom_id) else {
        return reply
            .send(Reply::Private("Unknown dialog; nothing changed.".into()))
            .await;
    };
    let note = m
        .data
        .components
        .iter()
        .flat_map(|row| row.components.iter())
        .find_map(|c| match c {
            ActionRowComponent::InputText(t) if t.custom_id == "note" => t.value.clone(),
            _ => None,
        });
    let person = bot.person(&m.user).await?;
    let roles = roles(m.member.as_ref());
    let outcome = clicks::decide(
        &bot.agent,
        &bot.live,
        Click {
            request_id: &request,
            action,
            user_id: &person.id,
            username: &person.username,
            roles: &roles,
            approver_roles: &bot.config.approver_roles,
            note,
        },
    )
    .await?;
    let requests = match &m.message {
        Some(msg) => render::card_requests(msg),
        None => vec![request.clone()],
    };
    // A dialog opened from a message updates that message like a button.
    let response = after_decision(bot, m.channel_id, &requests, outcome).await;
    reply.send(response).await
}

/// `/stop` or the Stop button: cancels the running turn, if the person may talk here.
async fn stop(bot: &Arc<Bot>, channel: ChannelId, user: &User) -> Result<String> {
    let key = workstream_key(channel);
    let Some(ws) = bot.agent.store().workstream(&key).await? else {
        return Ok("There is no workstream in this channel.".into());
    };
    let person = bot.person(user).await?;
    if bot.config.thread_access == sandpiper_agent::config::ThreadAccess::Owner
        && ws.row.owner.as_deref() != Some(person.id.as_str())
    {
        return Ok("Only the thread's owner can stop it.".into());
    }
    Ok(if bot.turns.stop(&key) {
        tracing::info!(workstream = %key, by = %person.username, "turn stopped");
        "⏹️ Stopping.".into()
    } else {
        "Nothing is running here.".into()
    })
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

/// An administrator of the bot here: Discord's Administrator permission or a role in
/// `[discord] admin_roles` (deleting global memories, which every thread's prompt sees).
fn is_bot_admin(member: Option<&Member>, admin_roles: &[String]) -> bool {
    member.is_some_and(|m| {
        m.permissions
            .is_some_and(|p| p.contains(Permissions::ADMINISTRATOR))
            || m.roles.iter().any(|r| admin_roles.contains(&r.to_string()))
    })
}

/// May close any thread: Administrator or Manage Threads.
fn is_admin(member: Option<&Member>) -> bool {
    member.and_then(|m| m.permissions).is_some_and(|p| {
        p.contains(Permissions::ADMINISTRATOR) || p.contains(Permissions::MANAGE_THREADS)
    })
}

async fn on_command(bot: &Arc<Bot>, c: &CommandInteraction, reply: &Responder<'_>) -> Result {
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
    let ws = bot.agent.store().workstream(&key).await?;
    if let Err(closed) = bot.admits(command_place(c, ws.is_some())) {
        tracing::info!(command = %c.data.name, channel = %c.channel_id, user = %c.user.id, %closed, "command refused");
        return reply.send(Reply::Private(format!("🚫 {closed}"))).await;
    }
    match cmd {
        Command::Ask { prompt } => ask(bot, c, reply, prompt, ws.is_some()).await,
        Command::Stop => {
            let text = stop(bot, c.channel_id, &c.user).await?;
            reply.send(Reply::Private(text)).await
        }
        Command::Close => {
            let Some(ws) = ws else {
                return reply
                    .send(Reply::Private("Use /close in a thread I answer in.".into()))
                    .await;
            };
            let person = bot.person(&c.user).await?;
            if ws.row.owner.as_deref() != Some(person.id.as_str()) && !is_admin(c.member.as_deref())
            {
                let text = "🚫 Only the person who started this thread, or an admin, can close it.";
                return reply.send(Reply::Private(text.into())).await;
            }
            bot.turns.stop(&key);
            bot.agent.store().close_workstream(&key).await?;
            bot.agent.forget(&key);
            let text = format!(
                "🔒 Closed by {}. This workstream has ended.",
                person.username
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
        other => {
            let who = Person {
                platform: PLATFORM,
                platform_user_id: &c.user.id.to_string(),
                display_name: c.user.global_name.as_deref().unwrap_or(&c.user.name),
            };
            let at = Where {
                workstream: ws.as_ref().map(|w| w.row.key.as_str()),
                prefix: "/",
                admin: is_bot_admin(c.member.as_deref(), &bot.config.admin_roles),
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
        start_workstream(bot, c.channel_id, &person.id).await?;
    }
    if in_thread || direct {
        bot.submit_turn(c.channel_id, person, prompt);
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
    start_workstream(bot, thread.id, &person.id).await?;
    tracing::info!(workstream = %workstream_key(thread.id), owner = %person.username, "new workstream from /ask");
    bot.submit_turn(thread.id, person, prompt);
    Ok(())
}
