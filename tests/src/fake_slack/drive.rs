//! What people in the workspace do, as the envelopes Slack sends for it: mentions, messages,
//! button clicks, form submissions, slash commands; and what Slack itself does: redeliveries and
//! connection refreshes.

use serde_json::Value;

use super::{
    BOT_USER_ID, FakeSlack, FakeSlackMessage, SlackUser, event_callback_json, events, socket,
};

impl FakeSlack {
    /// Stores a user message and sends its event in an `events_api` envelope; returns its ts.
    fn user_message(
        &self,
        channel: &str,
        user: &SlackUser,
        text: &str,
        thread: Option<&str>,
        mention: bool,
    ) -> String {
        self.remember(user);
        let (ts, event_id) = {
            let mut ledger = self.shared.ledger();
            let ts = ledger.next_ts();
            let message = FakeSlackMessage {
                ts: ts.clone(),
                thread_ts: thread.map(str::to_owned),
                user: user.id.clone(),
                text: text.to_owned(),
                blocks: Value::Null,
                edits: 0,
                ephemeral_for: None,
                reactions: vec![],
            };
            ledger.store(channel, message);
            (ts, ledger.next_id("Ev"))
        };
        let event = if mention {
            events::app_mention(channel, &user.id, text, &ts, thread)
        } else {
            events::user_message(channel, &user.id, text, &ts, thread)
        };
        self.send_event(event_callback_json(event, &event_id));
        ts
    }

    fn send_event(&self, payload: Value) {
        let envelope_id = self.next_envelope_id();
        let envelope = events::envelope(&envelope_id, "events_api", payload, 0);
        self.shared.ledger().last_event = Some(envelope.clone());
        socket::deliver(&self.shared, envelope);
    }

    fn next_envelope_id(&self) -> String {
        format!("envelope-{}", self.shared.ledger().next())
    }

    /// `user` mentions the bot in `channel` (`<@U0BOT>` is prepended unless `text` has it).
    /// Sends `app_mention`; returns the message ts.
    pub async fn app_mention(&self, channel: &str, user: &SlackUser, text: &str) -> String {
        self.user_message(channel, user, &mention_text(text), None, true)
    }

    /// Like [`FakeSlack::app_mention`], inside the thread rooted at `thread_ts`.
    pub async fn app_mention_in_thread(
        &self,
        channel: &str,
        thread_ts: &str,
        user: &SlackUser,
        text: &str,
    ) -> String {
        self.user_message(channel, user, &mention_text(text), Some(thread_ts), true)
    }

    /// `user` replies in the thread rooted at `thread_ts` without mentioning the bot. Sends a
    /// `message` event; returns the message ts.
    pub async fn thread_message(
        &self,
        channel: &str,
        thread_ts: &str,
        user: &SlackUser,
        text: &str,
    ) -> String {
        self.user_message(channel, user, text, Some(thread_ts), false)
    }

    /// `user` writes to the bot in their DM (optionally in a thread). Sends a `message` event
    /// with `channel_type` `im`; returns the DM channel id and the message ts.
    pub async fn dm_message(
        &self,
        user: &SlackUser,
        text: &str,
        thread_ts: Option<&str>,
    ) -> (String, String) {
        let channel = self.dm_channel(&user.id);
        let ts = self.user_message(&channel, user, text, thread_ts, false);
        (channel, ts)
    }

    /// Sends the last `events_api` envelope again, as Slack does when an ack was late: new
    /// envelope id, same `event_id`, `retry_attempt` 1, `retry_reason` `timeout`.
    ///
    /// # Panics
    /// If no event was sent yet.
    pub async fn redeliver_last_event(&self) {
        let last = self.shared.ledger().last_event.clone();
        let last = last.expect("fake slack: redeliver_last_event before any event");
        let envelope = events::envelope(
            &self.next_envelope_id(),
            "events_api",
            last["payload"].clone(),
            1,
        );
        socket::deliver(&self.shared, envelope);
    }

    /// `user` clicks the button `action_id` (with `value`) on the message `message_ts`. Sends a
    /// `block_actions` interaction carrying the stored message; returns its trigger id.
    ///
    /// # Panics
    /// If there is no such message.
    pub async fn click(
        &self,
        channel: &str,
        message_ts: &str,
        user: &SlackUser,
        action_id: &str,
        value: &str,
    ) -> String {
        self.remember(user);
        let (payload, trigger_id) = {
            let mut ledger = self.shared.ledger();
            let trigger_id = ledger.next_trigger();
            let response_url = format!("{}/response/{}", self.shared.base_url, ledger.next());
            let action_ts = ledger.next_ts();
            let message = ledger
                .message_mut(channel, message_ts)
                .unwrap_or_else(|| {
                    panic!("fake slack: click on a missing message {message_ts} in {channel}")
                })
                .clone();
            let payload = events::block_actions(&events::Click {
                channel,
                message: &message,
                user,
                action_id,
                value,
                trigger_id: &trigger_id,
                response_url: &response_url,
                action_ts: &action_ts,
            });
            (payload, trigger_id)
        };
        self.send_interactive(payload);
        trigger_id
    }

    /// `user` submits `view` (one of [`FakeSlack::opened_views`]) with plain text inputs
    /// `(block_id, action_id, value)`. Sends `view_submission`; returns the envelope id (see
    /// [`FakeSlack::ack_payload`] for a `response_action`).
    pub async fn view_submission(
        &self,
        user: &SlackUser,
        view: Value,
        values: &[(&str, &str, &str)],
    ) -> String {
        self.remember(user);
        let trigger_id = self.shared.ledger().next_trigger();
        self.send_interactive(events::view_submission(user, &view, values, &trigger_id))
    }

    fn send_interactive(&self, payload: Value) -> String {
        let envelope_id = self.next_envelope_id();
        socket::deliver(
            &self.shared,
            events::envelope(&envelope_id, "interactive", payload, 0),
        );
        envelope_id
    }

    /// `user` runs `command` (e.g. `/sandpiper`) with `text` in `channel`. Sends a
    /// `slash_commands` envelope; returns its trigger id.
    pub async fn slash_command(
        &self,
        channel: &str,
        user: &SlackUser,
        command: &str,
        text: &str,
    ) -> String {
        self.remember(user);
        let (trigger_id, response_url) = {
            let mut ledger = self.shared.ledger();
            let trigger_id = ledger.next_trigger();
            (
                trigger_id,
                format!("{}/response/{}", self.shared.base_url, ledger.next()),
            )
        };
        let payload = events::slash_command(&events::Command {
            channel,
            user,
            command,
            text,
            trigger_id: &trigger_id,
            response_url: &response_url,
        });
        let envelope_id = self.next_envelope_id();
        socket::deliver(
            &self.shared,
            events::envelope(&envelope_id, "slash_commands", payload, 0),
        );
        trigger_id
    }

    /// Sends `{"type":"disconnect","reason":"refresh_requested"}` on every open connection and
    /// closes them. The client reconnects through `apps.connections.open`; envelopes sent
    /// meanwhile are delivered on the next connection.
    pub async fn disconnect(&self) {
        socket::disconnect_all(&self.shared);
    }
}

/// `text` with a mention of the bot.
fn mention_text(text: &str) -> String {
    let mention = format!("<@{BOT_USER_ID}>");
    if text.contains(&mention) {
        text.to_owned()
    } else {
        format!("{mention} {text}")
    }
}
