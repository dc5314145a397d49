//! Discord's interactions: buttons and the note dialog are translated into the one click
//! router ([`crate::click`]) over a [`ClickPlace`]; slash commands go to [`super::commands`].
//! Every interaction is answered within Discord's 3 seconds (see [`super::respond`]): decisions
//! are single store updates, slow commands are answered first and worked on after, and a
//! handler held up anyway (the database away) has its response deferred.

use std::sync::Arc;

use sandpiper_agent::approvals::ClickAction;
use sandpiper_agent::workstream::WorkstreamKey;
use serenity::all::{
    ActionRowComponent, ChannelId, ComponentInteraction, CreateActionRow, CreateInputText,
    CreateModal, InputTextStyle, Interaction, Member, ModalInteraction, User,
};

use super::respond::{Error, Reply, Responder, Source};
use super::{Bot, commands, render, workstream_key, workstreams};

use crate::button::CardButton;
use crate::card::ApprovalCard;
use crate::click::{self, ClickPlace, Clicker};
use crate::config::ThreadAccess;
use crate::permissions::{Refusal, Standing};
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

pub(super) fn roles(member: Option<&Member>) -> Vec<String> {
    member
        .map(|m| m.roles.iter().map(|r| r.to_string()).collect())
        .unwrap_or_default()
}

/// A button or a submitted dialog, as the click router sees it.
struct DiscordClick<'a> {
    bot: &'a Arc<Bot>,
    reply: &'a Responder<'a>,
    user: &'a User,
    member: Option<&'a Member>,
    channel: ChannelId,
    /// The request ids on the clicked card.
    card: Vec<String>,
}

#[async_trait::async_trait]
impl ClickPlace for DiscordClick<'_> {
    fn workstream(&self) -> Option<String> {
        Some(workstream_key(self.channel))
    }

    fn card(&self) -> Vec<String> {
        self.card.clone()
    }

    fn approver_roles(&self) -> &[String] {
        &self.bot.config.approver_roles
    }

    fn thread_access(&self) -> ThreadAccess {
        self.bot.config.thread_access
    }

    async fn clicker(&self, _requests: &[String]) -> std::result::Result<Clicker, String> {
        let person = self
            .bot
            .person(self.user)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Clicker {
            user_id: person.id,
            roles: roles(self.member),
        })
    }

    async fn standing(&self, workstream: &str) -> std::result::Result<Standing, String> {
        let person = self
            .bot
            .person(self.user)
            .await
            .map_err(|e| e.to_string())?;
        let owner = self
            .bot
            .agent
            .workstream(workstream)
            .await
            .map_err(|e| e.to_string())?
            .and_then(|w| w.owner);
        Ok(workstreams::standing(
            self.bot,
            owner.as_deref(),
            &person.id,
            self.member,
        ))
    }

    async fn stop(&self, workstream: &str) -> bool {
        let bot = self.bot;
        crate::thread::stop_anywhere(&bot.agent, workstream, |k| bot.turns.stop(k)).await
    }

    fn resume(&self, workstream: &str, author: Option<String>) {
        let channel = match workstream.parse() {
            Ok(WorkstreamKey::Discord { channel }) => ChannelId::new(channel),
            _ => self.channel,
        };
        if let Err(e) = self.bot.submit(channel, Work::Resume { author }) {
            tracing::warn!(error = %e, %channel, "could not queue the resumed turn");
        }
    }

    fn quote(&self, header: &str) -> String {
        format!("`{}`", header.replace('`', "'"))
    }

    async fn tell(&self, text: &str) {
        self.send(Reply::Private(text.to_owned())).await;
    }

    async fn redraw(&self, card: &ApprovalCard) {
        let body = render::card(card, &self.bot.timeout_words());
        self.send(Reply::Update(body)).await;
    }

    async fn open_note(
        &self,
        button: &CardButton,
        _header: &str,
    ) -> std::result::Result<(), String> {
        let CardButton::Note { action, .. } = button else {
            return Err("not a note dialog".into());
        };
        let title = match action {
            ClickAction::ApproveWithNote => "Approve with a note",
            ClickAction::Annotate => "Annotate",
            _ => "Deny with a note",
        };
        let modal = CreateModal::new(button.to_string(), title).components(vec![
            CreateActionRow::InputText(
                CreateInputText::new(InputTextStyle::Paragraph, "Note for the agent", "note")
                    .required(true)
                    .max_length(1000),
            ),
        ]);
        self.reply
            .send(Reply::Modal(modal))
            .await
            .map_err(|e| e.to_string())
    }
}

impl DiscordClick<'_> {
    async fn send(&self, reply: Reply) {
        if let Err(e) = self.reply.send(reply).await {
            tracing::warn!(error = %e, "could not answer a Discord click");
        }
    }
}

async fn on_button(bot: &Arc<Bot>, c: &ComponentInteraction, reply: &Responder<'_>) -> Result {
    let place = DiscordClick {
        bot,
        reply,
        user: &c.user,
        member: c.member.as_ref(),
        channel: c.channel_id,
        card: render::card_requests(&c.message),
    };
    click::on_click(&bot.agent, &place, &c.data.custom_id, None).await;
    // A click that changed nothing visible still answers Discord.
    reply.send(Reply::Nothing).await
}

/// The note dialog was submitted: routed like the button it came from, with its note.
async fn on_note(bot: &Arc<Bot>, m: &ModalInteraction, reply: &Responder<'_>) -> Result {
    let note = m
        .data
        .components
        .iter()
        .flat_map(|row| row.components.iter())
        .find_map(|c| match c {
            ActionRowComponent::InputText(t) if t.custom_id == "note" => t.value.clone(),
            _ => None,
        });
    let id = m.data.custom_id.as_str();
    let card = match (&m.message, id.parse::<CardButton>()) {
        (Some(msg), _) => render::card_requests(msg),
        (None, Ok(button)) => button.request().map(str::to_owned).into_iter().collect(),
        (None, Err(_)) => Vec::new(),
    };
    let place = DiscordClick {
        bot,
        reply,
        user: &m.user,
        member: m.member.as_ref(),
        channel: m.channel_id,
        card,
    };
    // Only a dialog's id may carry a note: a note on a plain button id is a forgery.
    if matches!(id.parse(), Ok(CardButton::Note { .. })) {
        click::on_click(&bot.agent, &place, id, Some(note.unwrap_or_default())).await;
    } else {
        place.tell(&Refusal::UnknownButton.to_string()).await;
    }
    reply.send(Reply::Nothing).await
}
