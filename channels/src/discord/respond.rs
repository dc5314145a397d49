//! Answers an interaction within Discord's 3 seconds, whatever the work behind it takes.
//!
//! Discord forgets an interaction that is not answered in 3 s, and the person sees "This
//! interaction failed". Handlers give their answer to a [`Responder`]; [`Responder::guard`] runs
//! the handler and, if it has not answered after [`DEFER_AFTER`] (a database waiting out a
//! restart, say), tells Discord to wait: a deferred response. An answer after that is delivered
//! by editing the original response or as a follow-up message, which Discord accepts for
//! 15 minutes.

use std::future::Future;
use std::time::Duration;

use serenity::all::{
    CommandInteraction, ComponentInteraction, CreateAllowedMentions, CreateInteractionResponse,
    CreateInteractionResponseFollowup, CreateInteractionResponseMessage, CreateModal,
    EditInteractionResponse, ModalInteraction,
};
use tokio::sync::Mutex;

use super::Bot;
use super::render::{self, Body, ephemeral};

/// How long a handler may work before Discord is told to wait (its limit is 3 s).
pub const DEFER_AFTER: Duration = Duration::from_millis(2000);

/// What went wrong while handling an interaction.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// An answer to an interaction.
pub enum Reply {
    /// Redraw the message the button or dialog belongs to (a decided card).
    Update(Body),
    /// A message only the person sees.
    Private(String),
    /// A message in the channel.
    Public(String),
    /// A dialog; only possible as the first answer, within the 3 s.
    Modal(CreateModal),
    /// Nothing to show.
    Nothing,
}

/// The interaction being answered.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// A button.
    Component(&'a ComponentInteraction),
    /// A submitted dialog.
    Modal(&'a ModalInteraction),
    /// A slash command.
    Command(&'a CommandInteraction),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing sent yet.
    Open,
    /// Discord was told to wait; the original response is still to be filled in.
    Deferred,
    /// The original response is there; more answers are follow-ups.
    Answered,
}

/// Answers one interaction (see the module docs).
pub struct Responder<'a> {
    bot: &'a Bot,
    source: Source<'a>,
    phase: Mutex<Phase>,
}

impl<'a> Responder<'a> {
    /// A responder for `source`.
    pub fn new(bot: &'a Bot, source: Source<'a>) -> Self {
        Self {
            bot,
            source,
            phase: Mutex::new(Phase::Open),
        }
    }

    /// Runs `work`, deferring the response if it has not answered after [`DEFER_AFTER`].
    pub async fn guard<T>(&self, work: impl Future<Output = T>) -> T {
        let defer = async {
            tokio::time::sleep(DEFER_AFTER).await;
            self.defer().await;
            std::future::pending::<T>().await
        };
        // Both run: a `send` that starts while the deferral is on the wire waits for it.
        tokio::select! {
            done = work => done,
            never = defer => never,
        }
    }

    async fn defer(&self) {
        let mut phase = self.phase.lock().await;
        if *phase != Phase::Open {
            return;
        }
        let response = match self.source {
            Source::Component(_) | Source::Modal(_) => CreateInteractionResponse::Acknowledge,
            // `/ask` opens its thread from the public answer; everything else answers privately.
            Source::Command(c) => CreateInteractionResponse::Defer(
                CreateInteractionResponseMessage::new().ephemeral(c.data.name != "ask"),
            ),
        };
        match self.create(response).await {
            Ok(()) => {
                tracing::info!(
                    after_ms = DEFER_AFTER.as_millis() as u64,
                    "interaction deferred"
                );
                *phase = Phase::Deferred;
            }
            Err(e) => tracing::warn!(error = %e, "deferring an interaction failed"),
        }
    }

    /// Sends `reply`: as the response while there is time, else as an edit or a follow-up.
    pub async fn send(&self, reply: Reply) -> Result<(), Error> {
        let mut phase = self.phase.lock().await;
        match *phase {
            Phase::Open => {
                let response = match reply {
                    Reply::Update(body) => {
                        CreateInteractionResponse::UpdateMessage(body.response())
                    }
                    Reply::Private(text) => CreateInteractionResponse::Message(ephemeral(&text)),
                    Reply::Public(text) => CreateInteractionResponse::Message(
                        CreateInteractionResponseMessage::new()
                            .content(render::clip(&text, render::LIMIT))
                            .allowed_mentions(CreateAllowedMentions::new()),
                    ),
                    Reply::Modal(modal) => CreateInteractionResponse::Modal(modal),
                    Reply::Nothing => CreateInteractionResponse::Acknowledge,
                };
                self.create(response).await?;
            }
            Phase::Deferred | Phase::Answered => {
                let fill_in = *phase == Phase::Deferred;
                match reply {
                    Reply::Update(body) => self.edit(body.edit_response()).await?,
                    Reply::Private(text) | Reply::Public(text)
                        if fill_in && matches!(self.source, Source::Command(_)) =>
                    {
                        let edit = EditInteractionResponse::new()
                            .content(render::clip(&text, render::LIMIT))
                            .allowed_mentions(CreateAllowedMentions::new());
                        self.edit(edit).await?;
                    }
                    Reply::Private(text) => self.follow_up(&text, true).await?,
                    Reply::Public(text) => self.follow_up(&text, false).await?,
                    Reply::Modal(_) => {
                        let text = "That took me too long to open the dialog; please click again.";
                        self.follow_up(text, true).await?;
                    }
                    Reply::Nothing => {}
                }
            }
        }
        *phase = Phase::Answered;
        Ok(())
    }

    async fn create(&self, response: CreateInteractionResponse) -> Result<(), serenity::Error> {
        let http = self.bot.http();
        self.bot
            .pace
            .send("interaction reply", || {
                let response = response.clone();
                let http = &http;
                async move {
                    match self.source {
                        Source::Component(c) => c.create_response(http, response).await,
                        Source::Modal(m) => m.create_response(http, response).await,
                        Source::Command(c) => c.create_response(http, response).await,
                    }
                }
            })
            .await
    }

    async fn edit(&self, edit: EditInteractionResponse) -> Result<(), serenity::Error> {
        let http = self.bot.http();
        self.bot
            .pace
            .send("interaction edit", || {
                let edit = edit.clone();
                let http = &http;
                async move {
                    match self.source {
                        Source::Component(c) => c.edit_response(http, edit).await,
                        Source::Modal(m) => m.edit_response(http, edit).await,
                        Source::Command(c) => c.edit_response(http, edit).await,
                    }
                }
            })
            .await
            .map(|_| ())
    }

    async fn follow_up(&self, text: &str, private: bool) -> Result<(), serenity::Error> {
        let http = self.bot.http();
        let message = CreateInteractionResponseFollowup::new()
            .content(render::clip(text, render::LIMIT))
            .ephemeral(private)
            .allowed_mentions(CreateAllowedMentions::new());
        self.bot
            .pace
            .send("interaction follow-up", || {
                let message = message.clone();
                let http = &http;
                async move {
                    match self.source {
                        Source::Component(c) => c.create_followup(http, message).await,
                        Source::Modal(m) => m.create_followup(http, message).await,
                        Source::Command(c) => c.create_followup(http, message).await,
                    }
                }
            })
            .await
            .map(|_| ())
    }
}
