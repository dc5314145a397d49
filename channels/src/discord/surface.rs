//! A Discord thread as the stream renderer's [`Surface`] and the card approver's
//! [`CardSurface`].

use std::sync::Arc;

use serenity::all::{ChannelId, CreateAllowedMentions, CreateAttachment, CreateMessage, MessageId};

use super::Bot;
use super::render::{self, Body};
use crate::approver::CardSurface;
use crate::card::ApprovalCard;
use crate::stream::{Post, Surface, SurfaceError};

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

#[async_trait::async_trait]
impl CardSurface for ThreadSurface {
    async fn post_card(&self, card: &ApprovalCard) -> Result<String, SurfaceError> {
        let body = render::card(card, &self.bot.timeout_words());
        Ok(self.send(&body, "approval card").await?.to_string())
    }

    async fn replace_card(&self, id: &str, card: &ApprovalCard) -> Result<(), SurfaceError> {
        let body = render::card(card, &self.bot.timeout_words());
        self.replace(message_id(id)?, &body).await
    }

    fn approver_roles(&self) -> Vec<String> {
        self.bot.config.approver_roles.clone()
    }
}
