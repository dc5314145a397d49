//! Each event, click and slash command is handled once however often, and on however many
//! nodes, Slack delivers it ([`first_delivery`]): Slack redelivers what was acknowledged late
//! and spreads envelopes over every Socket Mode connection, so two nodes (or one node's two
//! connections) can receive the same one.

use std::sync::Arc;
use std::time::Duration;

use slack_morphism::prelude::*;

use super::Ctx;

/// How long the delivery check may wait for the database before the event is handled
/// anyway: a slash command's acknowledgement waits for it, and a click's trigger (to open a
/// dialog) lives 3 s from the click; a healthy database answers in milliseconds.
const DELIVERY_CHECK_PATIENCE: Duration = Duration::from_secs(1);

/// Something Slack delivered, by the id that stays the same in every redelivery.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Delivery<'a> {
    /// An Events API event, by its `event_id`.
    Event(&'a str),
    /// A click, form submission or slash command, by its `trigger_id`: Slack makes one per
    /// user action and a redelivered envelope carries the same payload.
    Trigger(&'a str),
}

impl Delivery<'_> {
    /// The id in the `channel_events` table (trigger ids prefixed: they share the table with
    /// event ids).
    fn key(self) -> String {
        match self {
            Delivery::Event(id) => id.to_owned(),
            Delivery::Trigger(id) => format!("trigger:{id}"),
        }
    }
}

/// Whether this node takes `delivery`: true the first time it arrives, on any node sharing
/// the database. When the database does not answer (in time) it is taken too: a rare
/// duplicate answer beats a lost message.
pub(crate) async fn first_delivery(ctx: &Ctx, delivery: Delivery<'_>) -> bool {
    let key = delivery.key();
    let check = ctx.agent.first_delivery("slack", &key);
    match tokio::time::timeout(DELIVERY_CHECK_PATIENCE, check).await {
        Ok(Ok(true)) => true,
        Ok(Ok(false)) => {
            tracing::debug!(id = %key, "delivered before: ignored");
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, id = %key, "cannot check whether Slack delivered this before; handling it");
            true
        }
        Err(_) => {
            tracing::warn!(id = %key, "the delivery check timed out; handling it");
            true
        }
    }
}

/// The id that identifies an interaction across redeliveries; `None` for kinds without one
/// (they are handled every time: nothing sandpiper does with them has effects).
pub(crate) fn trigger_of(event: &SlackInteractionEvent) -> Option<&str> {
    let trigger = match event {
        SlackInteractionEvent::BlockActions(ev) => Some(&ev.trigger_id),
        SlackInteractionEvent::MessageAction(ev) => Some(&ev.trigger_id),
        SlackInteractionEvent::Shortcut(ev) => Some(&ev.trigger_id),
        SlackInteractionEvent::ViewSubmission(ev) => ev.trigger_id.as_ref(),
        SlackInteractionEvent::ViewClosed(ev) => ev.trigger_id.as_ref(),
        SlackInteractionEvent::BlockSuggestion(_) | SlackInteractionEvent::DialogSubmission(_) => {
            None
        }
    };
    trigger.map(|t| t.0.as_str())
}

/// Handles one interaction (already acknowledged) unless it was delivered before.
pub(crate) async fn handle_interaction(ctx: Arc<Ctx>, event: SlackInteractionEvent) {
    if let Some(trigger) = trigger_of(&event)
        && !first_delivery(&ctx, Delivery::Trigger(trigger)).await
    {
        return;
    }
    super::interactions::handle(ctx, event).await;
}
