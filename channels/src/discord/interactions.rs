//! Buttons (approval cards, Stop), the note dialog, and the routing of slash commands to
//! [`super::commands`]. Every interaction is answered within Discord's 3 seconds (see [`super::respond`]):
//! decisions are single store updates, slow commands are answered first and worked on after,
//! and a handler held up anyway (the database away) has its response deferred. A card whose
//! turn stopped running offers Resume, which queues the turn in the thread
//! ([`sandpiper_agent::Agent::resume_click`]).

use std::sync::Arc;

use sandpiper_agent::approval_policy::{ClickAction, parse_button_id, parse_resume_button_id};
use serenity::all::{
    ActionRowComponent, ChannelId, ComponentInteraction, CreateActionRow, CreateInputText,
    CreateModal, InputTextStyle, Interaction, Member, ModalInteraction,
};

use super::respond::{Error, Reply, Responder, Source};
use super::{Bot, commands, render, workstreams};
use sandpiper_agent::approvals::{BatchClick, Click, ClickOutcome, ResumeClick, ResumeOutcome};

use crate::card::{ApprovalCard, TurnNote};
use crate::thread::Work;

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
                Source::Command(c) => commands::on_command(bot, c, &reply).await,
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
        let text = workstreams::stop(bot, channel, &c.user).await?;
        return reply.send(Reply::Private(text)).await;
    }
    if let Some(approve) = render::parse_all_id(id) {
        return on_all(bot, c, reply, approve).await;
    }
    if let Some(request) = parse_resume_button_id(id) {
        return on_resume(bot, c, reply, request).await;
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
    let outcome = bot
        .agent
        .decide(Click {
            request_id: request,
            action,
            user_id: &person.id,
            username: person.shown_name(),
            roles: &roles,
            approver_roles: &bot.config.approver_roles,
            note: None,
        })
        .await?;
    if outcome == ClickOutcome::NeedsNote {
        let title = match action {
            ClickAction::ApproveWithNote => "Approve with a note",
            ClickAction::Annotate => "Annotate",
            _ => "Deny with a note",
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
    let response = after_decision(&requests, bot, outcome).await;
    reply.send(response).await
}

/// Answers a decided click: redraws the card (or tells the clicker why nothing changed); a
/// card whose turn stopped running says so, and offers Resume once its turn is decided.
async fn after_decision(requests: &[String], bot: &Arc<Bot>, outcome: ClickOutcome) -> Reply {
    match outcome {
        ClickOutcome::Unknown => {
            Reply::Private("I have no record of this approval request; nothing changed.".into())
        }
        ClickOutcome::Refused(reason) => Reply::Private(format!("🚫 {reason}")),
        ClickOutcome::NeedsNote => Reply::Private("A note is needed.".into()),
        ClickOutcome::Decided { turn, .. } => redraw(bot, requests, TurnNote::after(turn)).await,
        ClickOutcome::Gone(_) => redraw(bot, requests, None).await,
    }
}

/// Resume on a card whose turn stopped running: the owner or an approver queues the turn in
/// the thread's lane; anyone else is told privately why not.
async fn on_resume(
    bot: &Arc<Bot>,
    c: &ComponentInteraction,
    reply: &Responder<'_>,
    request: &str,
) -> Result {
    let person = bot.person(&c.user).await?;
    let roles = roles(c.member.as_ref());
    let outcome = bot
        .agent
        .resume_click(ResumeClick {
            request_id: request,
            user_id: &person.id,
            username: person.shown_name(),
            roles: &roles,
            approver_roles: &bot.config.approver_roles,
        })
        .await?;
    let response = match outcome {
        ResumeOutcome::Unknown => {
            Reply::Private("I have no record of this approval request; nothing changed.".into())
        }
        ResumeOutcome::Refused(reason) => Reply::Private(format!("🚫 {reason}")),
        ResumeOutcome::NothingToResume => Reply::Private(
            "There is nothing left to resume: that turn was resumed already or the thread moved \
             on."
            .into(),
        ),
        ResumeOutcome::Resume { author, .. } => {
            resume_turn(bot, c.channel_id, author);
            let requests = render::card_requests(&c.message);
            let note = TurnNote::Resumed {
                by: person.shown_name().to_owned(),
            };
            redraw(bot, &requests, Some(note)).await
        }
    };
    reply.send(response).await
}

/// Resumes the turn that stopped running, in its thread's lane.
fn resume_turn(bot: &Arc<Bot>, channel: ChannelId, author: Option<String>) {
    if let Err(e) = bot.submit(channel, Work::Resume { author }) {
        tracing::warn!(error = %e, %channel, "could not queue the resumed turn");
    }
}

async fn redraw(bot: &Bot, requests: &[String], note: Option<TurnNote>) -> Reply {
    match ApprovalCard::load(&bot.agent, requests).await {
        Some(card) => Reply::Update(render::card(&card.with_turn(note), &bot.timeout_words())),
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
    let outcome = bot
        .agent
        .decide_all(BatchClick {
            request_ids: &requests,
            action,
            user_id: &person.id,
            username: person.shown_name(),
            roles: &roles,
            approver_roles: &bot.config.approver_roles,
        })
        .await;
    let refusal = outcome.refusal_text(|h| format!("`{}`", h.replace('`', "'")));
    if outcome.changed || refusal.is_none() {
        let note = outcome.turn.and_then(TurnNote::after);
        reply.send(redraw(bot, &requests, note).await).await?;
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
    let outcome = bot
        .agent
        .decide(Click {
            request_id: &request,
            action,
            user_id: &person.id,
            username: person.shown_name(),
            roles: &roles,
            approver_roles: &bot.config.approver_roles,
            note,
        })
        .await?;
    let requests = match &m.message {
        Some(msg) => render::card_requests(msg),
        None => vec![request.clone()],
    };
    // A dialog opened from a message updates that message like a button.
    let response = after_decision(&requests, bot, outcome).await;
    reply.send(response).await
}
