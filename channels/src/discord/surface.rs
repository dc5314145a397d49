//! A Discord thread as the stream renderer's [`Surface`], and the [`Approver`] that posts
//! approval cards into it.

use std::sync::Arc;
use std::time::Duration;

use sandpiper_agent::protocol::{ApprovalItem, Approver, Decision};
use serenity::all::{ChannelId, CreateAllowedMentions, CreateAttachment, CreateMessage, MessageId};

use super::Bot;
use super::render::{self, Body};
use crate::card::{ApprovalCard, MAX_ROWS};
use crate::stream::{Post, StreamSink, Surface, SurfaceError};

/// One thread (or DM channel).
pub struct ThreadSurface {
    pub(super) bot: Arc<Bot>,
    pub(super) channel: ChannelId,
}

fn err(e: serenity::Error) -> SurfaceError {
    SurfaceError(e.to_string())
}

impl ThreadSurface {
    /// Posts a body; returns the message id.
    pub(super) async fn send(&self, body: &Body, what: &str) -> Result<MessageId, SurfaceError> {
        let http = self.bot.http();
        let msg = body.create();
        let sent = self
            .bot
            .pace
            .send(what, || self.channel.send_message(&http, msg.clone()))
            .await
            .map_err(err)?;
        Ok(sent.id)
    }

    /// Replaces a message's body.
    pub(super) async fn replace(&self, id: MessageId, body: &Body) -> Result<(), SurfaceError> {
        let http = self.bot.http();
        let edit = body.edit();
        self.bot
            .pace
            .send("edit message", || {
                self.channel.edit_message(&http, id, edit.clone())
            })
            .await
            .map_err(err)?;
        Ok(())
    }
}

fn message_id(id: &str) -> Result<MessageId, SurfaceError> {
    id.parse::<u64>()
        .ok()
        .filter(|n| *n != 0)
        .map(MessageId::new)
        .ok_or_else(|| SurfaceError(format!("bad message id {id}")))
}

#[async_trait::async_trait]
impl Surface for ThreadSurface {
    fn limit(&self) -> usize {
        render::LIMIT
    }

    async fn post(&self, post: &Post) -> Result<String, SurfaceError> {
        let body = render::post(post, self.channel.get());
        Ok(self.send(&body, "post message").await?.to_string())
    }

    async fn edit(&self, id: &str, post: &Post) -> Result<(), SurfaceError> {
        let body = render::post(post, self.channel.get());
        self.replace(message_id(id)?, &body).await
    }

    async fn upload(
        &self,
        filename: &str,
        body: Vec<u8>,
        comment: &str,
    ) -> Result<(), SurfaceError> {
        let http = self.bot.http();
        let msg = CreateMessage::new()
            .content(render::clip(comment, render::LIMIT))
            .add_file(CreateAttachment::bytes(body, filename))
            .allowed_mentions(CreateAllowedMentions::new());
        self.bot
            .pace
            .send("upload", || self.channel.send_message(&http, msg.clone()))
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn typing(&self) -> Result<(), SurfaceError> {
        let http = self.bot.http();
        self.bot
            .pace
            .send("typing", || self.channel.broadcast_typing(&http))
            .await
            .map_err(err)
    }
}

/// Posts approval cards and waits for clicks.
pub struct CardApprover {
    pub(super) surface: Arc<ThreadSurface>,
    pub(super) sink: StreamSink,
    pub(super) workstream: String,
}

#[async_trait::async_trait]
impl Approver for CardApprover {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        // The tool lines go first, then the card about them.
        self.sink.settle().await;
        let bot = &self.surface.bot;
        let ids: Vec<String> = items.iter().map(|i| i.request_id.clone()).collect();
        // Registered before posting, so the quickest click finds the waiting turn.
        let waiters = bot.live.register(&ids);
        let timeout = bot.timeout_words();
        let mut guard = CardGuard {
            bot: bot.clone(),
            channel: self.surface.channel,
            cards: Vec::new(),
            armed: true,
        };
        for chunk in items.chunks(MAX_ROWS) {
            let card = ApprovalCard::pending(chunk, &self.workstream);
            match self
                .surface
                .send(&render::card(&card, &timeout), "approval card")
                .await
            {
                Ok(id) => guard
                    .cards
                    .push((id, chunk.iter().map(|i| i.request_id.clone()).collect())),
                Err(e) => {
                    tracing::warn!(error = %e, workstream = %self.workstream, "could not post an approval card; denying");
                    return items
                        .iter()
                        .map(|_| {
                            Decision::deny(Some("the approval card could not be posted".into()))
                        })
                        .collect();
                }
            }
        }
        let decisions = waiters.all().await;
        guard.armed = false;
        decisions
    }
}

/// Updates the cards when the turn stops waiting without every click (timeout, `/stop`):
/// the pipeline records why, and the cards are redrawn from the store to say so.
struct CardGuard {
    bot: Arc<Bot>,
    channel: ChannelId,
    cards: Vec<(MessageId, Vec<String>)>,
    armed: bool,
}

impl Drop for CardGuard {
    fn drop(&mut self) {
        if !self.armed || self.cards.is_empty() {
            return;
        }
        let bot = self.bot.clone();
        let channel = self.channel;
        let cards = std::mem::take(&mut self.cards);
        self.bot.tasks.spawn(async move {
            let surface = ThreadSurface {
                bot: bot.clone(),
                channel,
            };
            for (id, requests) in cards {
                // The pipeline writes the outcome right after dropping the wait.
                let mut card = None;
                for _ in 0..40 {
                    let loaded = bot.load_card(&requests).await;
                    let settled = loaded.as_ref().is_some_and(|c| !c.any_pending());
                    card = loaded;
                    if settled {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if let Some(card) = card {
                    let body = render::card(&card, &bot.timeout_words());
                    if let Err(e) = surface.replace(id, &body).await {
                        tracing::warn!(error = %e, "could not update an approval card");
                    }
                }
            }
        });
    }
}
