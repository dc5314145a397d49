//! Buttons (approval cards, Stop), the note dialog, and slash commands from the one command
//! table. Every interaction is answered within Discord's 3 seconds: decisions are single
//! store updates, and slow commands are answered first and worked on after.

use std::sync::Arc;

use sandpiper_agent::approval_policy::{ClickAction, parse_button_id};
use serenity::all::{
    ActionRowComponent, ChannelId, CommandInteraction, CommandOptionType, ComponentInteraction,
    Context, CreateActionRow, CreateAllowedMentions, CreateCommand, CreateCommandOption,
    CreateInputText, CreateInteractionResponse, CreateInteractionResponseMessage, CreateModal,
    EditThread, InputTextStyle, Interaction, Member, ModalInteraction, Permissions, User,
};

use super::render::{self, ephemeral};
use super::{Bot, PLATFORM, handler, workstream_key};
use crate::account::Person;
use crate::answers::{Where, answer};
use crate::clicks::{self, Click, ClickOutcome};
use crate::commands::{COMMANDS, Command};

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

/// Routes an interaction.
pub async fn dispatch(bot: &Arc<Bot>, interaction: Interaction) {
    // A failure (the database away, say) is told to the clicker rather than left to Discord's
    // "This interaction failed"; when the failure was the reply itself this one fails too and
    // is only logged.
    let sorry = |e: &dyn std::fmt::Display| {
        tracing::warn!(error = %e, "handling a Discord interaction failed");
        private(&format!(
            "⚠️ That did not go through ({e}); nothing changed. Please try again in a moment."
        ))
    };
    let told = match &interaction {
        Interaction::Component(c) => match on_button(bot, c).await {
            Err(e) => reply_button(bot, c, sorry(&e)).await,
            Ok(()) => Ok(()),
        },
        Interaction::Modal(m) => match on_note(bot, m).await {
            Err(e) => reply_modal(bot, m, sorry(&e)).await,
            Ok(()) => Ok(()),
        },
        Interaction::Command(c) => match on_command(bot, c).await {
            Err(e) => reply_command(bot, c, sorry(&e)).await,
            Ok(()) => Ok(()),
        },
        _ => Ok(()),
    };
    if let Err(e) = told {
        tracing::debug!(error = %e, "could not tell the user about a failed interaction");
    }
}

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Answers a button click.
async fn reply_button(bot: &Bot, c: &ComponentInteraction, r: CreateInteractionResponse) -> Result {
    let http = bot.http();
    bot.pace
        .send("interaction reply", || c.create_response(&http, r.clone()))
        .await?;
    Ok(())
}

/// Answers a note dialog.
async fn reply_modal(bot: &Bot, m: &ModalInteraction, r: CreateInteractionResponse) -> Result {
    let http = bot.http();
    bot.pace
        .send("interaction reply", || m.create_response(&http, r.clone()))
        .await?;
    Ok(())
}

/// Answers a slash command.
async fn reply_command(bot: &Bot, c: &CommandInteraction, r: CreateInteractionResponse) -> Result {
    let http = bot.http();
    bot.pace
        .send("interaction reply", || c.create_response(&http, r.clone()))
        .await?;
    Ok(())
}

fn private(text: &str) -> CreateInteractionResponse {
    CreateInteractionResponse::Message(ephemeral(text))
}

fn public(text: &str) -> CreateInteractionResponse {
    CreateInteractionResponse::Message(
        CreateInteractionResponseMessage::new()
            .content(render::clip(text, render::LIMIT))
            .allowed_mentions(CreateAllowedMentions::new()),
    )
}

fn roles(member: Option<&Member>) -> Vec<String> {
    member
        .map(|m| m.roles.iter().map(|r| r.to_string()).collect())
        .unwrap_or_default()
}

async fn on_button(bot: &Arc<Bot>, c: &ComponentInteraction) -> Result {
    let id = c.data.custom_id.as_str();
    if let Some(channel) = render::parse_stop_id(id) {
        let text = stop(bot, ChannelId::new(channel.max(1)), &c.user).await?;
        return reply_button(bot, c, private(&text)).await;
    }
    if let Some(approve) = render::parse_all_id(id) {
        return on_all(bot, c, approve).await;
    }
    let (request, action) = match parse_button_id(id) {
        Ok(parsed) => parsed,
        Err(e) => {
            tracing::warn!(custom_id = id, error = %e, user = %c.user.id, "unknown or forged button");
            let text = format!("That button is not one I know ({e}); nothing changed.");
            return reply_button(bot, c, private(&text)).await;
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
        return reply_button(bot, c, CreateInteractionResponse::Modal(modal)).await;
    }
    let requests = render::card_requests(&c.message);
    let response = after_decision(bot, c.channel_id, &requests, outcome).await;
    reply_button(bot, c, response).await
}

/// Answers a decided click: redraws the card (or tells the clicker why nothing changed) and
/// resumes a turn interrupted by a restart.
async fn after_decision(
    bot: &Arc<Bot>,
    channel: ChannelId,
    requests: &[String],
    outcome: ClickOutcome,
) -> CreateInteractionResponse {
    match outcome {
        ClickOutcome::Unknown => CreateInteractionResponse::Message(ephemeral(
            "I have no record of this approval request; nothing changed.",
        )),
        ClickOutcome::Refused(reason) => {
            CreateInteractionResponse::Message(ephemeral(&format!("🚫 {reason}")))
        }
        ClickOutcome::NeedsNote => {
            CreateInteractionResponse::Message(ephemeral("A note is needed."))
        }
        ClickOutcome::Decided { record, resume } => {
            if resume {
                bot.submit_resume(channel, record.requested_by.clone());
            }
            redraw(bot, requests).await
        }
        ClickOutcome::Gone(_) => redraw(bot, requests).await,
    }
}

async fn redraw(bot: &Bot, requests: &[String]) -> CreateInteractionResponse {
    match bot.load_card(requests).await {
        Some(card) => CreateInteractionResponse::UpdateMessage(
            render::card(&card, &bot.timeout_words()).response(),
        ),
        None => CreateInteractionResponse::Acknowledge,
    }
}

/// Approve all / Deny all: each pending request on the card, each checked on its own.
async fn on_all(bot: &Arc<Bot>, c: &ComponentInteraction, approve: bool) -> Result {
    let person = bot.person(&c.user).await?;
    let roles = roles(c.member.as_ref());
    let requests = render::card_requests(&c.message);
    let action = if approve {
        ClickAction::Approve
    } else {
        ClickAction::Deny
    };
    let mut last = ClickOutcome::Unknown;
    for request in &requests {
        let Some(rec) = bot.agent.store().get_approval(request).await? else {
            continue;
        };
        if rec.status != "pending" {
            continue;
        }
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
        if let ClickOutcome::Refused(_) = outcome {
            last = outcome;
            break;
        }
        // A resumed turn needs its last decision only once.
        if matches!(last, ClickOutcome::Decided { resume: true, .. }) {
            continue;
        }
        last = outcome;
    }
    let response = after_decision(bot, c.channel_id, &requests, last).await;
    reply_button(bot, c, response).await
}

/// The note dialog was submitted.
async fn on_note(bot: &Arc<Bot>, m: &ModalInteraction) -> Result {
    let Some((request, action)) = render::parse_note_modal_id(&m.data.custom_id) else {
        return reply_modal(bot, m, private("Unknown dialog; nothing changed.")).await;
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
    reply_modal(bot, m, response).await
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

fn is_admin(member: Option<&Member>) -> bool {
    member.and_then(|m| m.permissions).is_some_and(|p| {
        p.contains(Permissions::ADMINISTRATOR) || p.contains(Permissions::MANAGE_THREADS)
    })
}

async fn on_command(bot: &Arc<Bot>, c: &CommandInteraction) -> Result {
    let http = bot.http();
    let options: Vec<(String, String)> = c
        .data
        .options
        .iter()
        .filter_map(|o| Some((o.name.clone(), o.value.as_str()?.to_owned())))
        .collect();
    let cmd = match Command::from_options(&c.data.name, &options) {
        Ok(cmd) => cmd,
        Err(e) => return reply_command(bot, c, private(&e.to_string())).await,
    };
    let key = workstream_key(c.channel_id);
    let ws = bot.agent.store().workstream(&key).await?;
    match cmd {
        Command::Ask { prompt } => ask(bot, c, prompt, ws.is_some()).await,
        Command::Stop => {
            let text = stop(bot, c.channel_id, &c.user).await?;
            reply_command(bot, c, private(&text)).await
        }
        Command::Close => {
            let Some(ws) = ws else {
                return reply_command(bot, c, private("Use /close in a thread I answer in.")).await;
            };
            let person = bot.person(&c.user).await?;
            if ws.row.owner.as_deref() != Some(person.id.as_str()) && !is_admin(c.member.as_deref())
            {
                return reply_command(
                    bot,
                    c,
                    private(
                        "🚫 Only the person who started this thread, or an admin, can close it.",
                    ),
                )
                .await;
            }
            bot.turns.stop(&key);
            bot.agent.store().close_workstream(&key).await?;
            bot.agent.forget(&key);
            let text = format!(
                "🔒 Closed by {}. This workstream has ended.",
                person.username
            );
            reply_command(bot, c, public(&text)).await?;
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
            };
            let text = answer(&bot.agent, &other, who, at)
                .await
                .unwrap_or_default();
            reply_command(bot, c, private(&text)).await
        }
    }
}

/// `/ask`: in one of our threads it is a message there; in a listened channel it opens a
/// thread from the command's reply.
async fn ask(bot: &Arc<Bot>, c: &CommandInteraction, prompt: String, in_thread: bool) -> Result {
    let http = bot.http();
    let person = bot.person(&c.user).await?;
    if !in_thread && !bot.listens_in(c.channel_id) {
        return reply_command(bot, c, private("I don't listen in this channel.")).await;
    }
    let shown = format!(
        "**{}** asked: {}",
        person.username,
        render::clip(&prompt, 1800)
    );
    reply_command(bot, c, public(&shown)).await?;
    if in_thread {
        bot.submit_turn(c.channel_id, person, prompt);
        return Ok(());
    }
    let original = bot
        .pace
        .send("ask original", || c.get_response(&http))
        .await?;
    let builder = serenity::all::CreateThread::new(handler::thread_name(&prompt));
    let thread = bot
        .pace
        .send("create thread", || {
            c.channel_id
                .create_thread_from_message(&http, original.id, builder.clone())
        })
        .await?;
    handler::start_workstream(bot, thread.id, &person.id).await?;
    tracing::info!(workstream = %workstream_key(thread.id), owner = %person.username, "new workstream from /ask");
    bot.submit_turn(thread.id, person, prompt);
    Ok(())
}
