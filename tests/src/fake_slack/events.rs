//! Complete Slack payloads as JSON, shaped like the ones Slack sends (and that slack-morphism
//! deserializes): Socket Mode frames, Events API callbacks, interactive payloads, slash commands,
//! and the message, user and channel objects the Web API answers with.

use serde_json::{Map, Value, json};

use super::state::StoredMessage;
use super::{BOT_USER_ID, SlackUser, TEAM_ID};

/// The app the fake bot belongs to.
pub(super) const APP_ID: &str = "A0FAKE";
/// The bot id of the fake bot user (messages it posts carry it).
pub(super) const BOT_ID: &str = "B0BOT";
/// The bot user's name.
pub(super) const BOT_NAME: &str = "sandpiper";
/// The team's domain.
pub(super) const TEAM_DOMAIN: &str = "fake";
/// The verification token Slack puts in legacy payloads.
const VERIFICATION_TOKEN: &str = "fake-verification-token";
/// Seconds of the first timestamp the fake hands out.
pub(super) const EPOCH: u64 = 1_700_000_000;

/// The first frame of every Socket Mode connection.
pub(super) fn hello() -> Value {
    json!({
        "type": "hello",
        "num_connections": 1,
        "debug_info": {"host": "fake", "approximate_connection_time": 3600},
        "connection_info": {"app_id": APP_ID},
    })
}

/// What Slack sends before it closes a Socket Mode connection for a refresh.
pub(super) fn disconnect() -> Value {
    json!({
        "type": "disconnect",
        "reason": "refresh_requested",
        "debug_info": {"host": "fake"},
    })
}

/// A Socket Mode envelope; `kind` is `events_api`, `interactive` or `slash_commands`.
pub(super) fn envelope(envelope_id: &str, kind: &str, payload: Value, retry: u32) -> Value {
    json!({
        "envelope_id": envelope_id,
        "type": kind,
        "payload": payload,
        // Slack accepts a response payload for slash commands and interactions, never for events.
        "accepts_response_payload": kind != "events_api",
        "retry_attempt": retry,
        "retry_reason": if retry == 0 { "" } else { "timeout" },
    })
}

/// The outer `event_callback` body around `event`, as Slack posts it in Events API (HTTP) mode and
/// as the payload of an `events_api` Socket Mode envelope.
pub fn event_callback_json(event: Value, event_id: &str) -> Value {
    let event_time = event["event_ts"]
        .as_str()
        .and_then(|ts| ts.split('.').next())
        .and_then(|secs| secs.parse::<u64>().ok())
        .unwrap_or(EPOCH);
    json!({
        "token": VERIFICATION_TOKEN,
        "team_id": TEAM_ID,
        "context_team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": event_time,
        "authorizations": [{
            "enterprise_id": null,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "is_bot": true,
            "is_enterprise_install": false,
        }],
        "is_ext_shared_channel": false,
        "event_context": format!("4-fake-{event_id}"),
    })
}

/// An `app_mention` event; thread replies that mention the bot carry `thread_ts`.
pub(super) fn app_mention(
    channel: &str,
    user: &str,
    text: &str,
    ts: &str,
    thread: Option<&str>,
) -> Value {
    let mut event = json!({
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "team": TEAM_ID,
        "channel": channel,
        "event_ts": ts,
        "client_msg_id": format!("msg-{ts}"),
    });
    if let Some(thread_ts) = thread {
        event["thread_ts"] = json!(thread_ts);
    }
    event
}

/// A plain user `message` event (`channel_type` `channel`, `group` or `im` by the channel id).
pub(super) fn user_message(
    channel: &str,
    user: &str,
    text: &str,
    ts: &str,
    thread: Option<&str>,
) -> Value {
    let mut event = json!({
        "type": "message",
        "user": user,
        "text": text,
        "ts": ts,
        "team": TEAM_ID,
        "channel": channel,
        "event_ts": ts,
        "channel_type": channel_type(channel),
        "client_msg_id": format!("msg-{ts}"),
    });
    if let Some(thread_ts) = thread {
        event["thread_ts"] = json!(thread_ts);
    }
    event
}

/// Slack's `channel_type` for a conversation id.
pub(super) fn channel_type(channel: &str) -> &'static str {
    match channel.chars().next() {
        Some('D') => "im",
        Some('G') => "group",
        _ => "channel",
    }
}

/// The `user` object of interactive payloads.
fn basic_user(user: &SlackUser) -> Value {
    json!({"id": user.id, "username": user.name, "name": user.name, "team_id": TEAM_ID})
}

fn team() -> Value {
    json!({"id": TEAM_ID, "domain": TEAM_DOMAIN})
}

/// What a button click refers to.
pub(super) struct Click<'a> {
    pub(super) channel: &'a str,
    pub(super) message: &'a StoredMessage,
    pub(super) user: &'a SlackUser,
    pub(super) action_id: &'a str,
    pub(super) value: &'a str,
    pub(super) trigger_id: &'a str,
    pub(super) response_url: &'a str,
    pub(super) action_ts: &'a str,
}

/// A `block_actions` payload for a button click on a stored message.
pub(super) fn block_actions(click: &Click<'_>) -> Value {
    let (block_id, button_text) = find_action(&click.message.blocks, click.action_id);
    let mut action = json!({
        "type": "button",
        "action_id": click.action_id,
        "block_id": block_id,
        "value": click.value,
        "action_ts": click.action_ts,
    });
    if let Some(text) = button_text {
        action["text"] = text;
    }
    let ephemeral = click.message.ephemeral_for.is_some();
    let mut payload = json!({
        "type": "block_actions",
        "user": basic_user(click.user),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": click.message.ts,
            "channel_id": click.channel,
            "is_ephemeral": ephemeral,
        },
        "trigger_id": click.trigger_id,
        "team": team(),
        "enterprise": null,
        "is_enterprise_install": false,
        "channel": {"id": click.channel, "name": channel_name(click.channel)},
        "state": {"values": {}},
        "response_url": click.response_url,
        "actions": [action],
    });
    // Slack does not include ephemeral messages in the payload (it never stored them).
    if !ephemeral {
        payload["message"] = message_json(click.message);
    }
    payload
}

/// The `block_id` of the block holding `action_id`, and the element's `text`, searching nested
/// elements (actions blocks, section accessories).
fn find_action(blocks: &Value, action_id: &str) -> (String, Option<Value>) {
    for block in blocks.as_array().into_iter().flatten() {
        let elements = block["elements"].as_array().into_iter().flatten();
        for element in elements.chain(std::iter::once(&block["accessory"])) {
            if element["action_id"] == action_id {
                let block_id = block["block_id"].as_str().unwrap_or_default().to_owned();
                return (block_id, element.get("text").cloned());
            }
        }
    }
    (String::new(), None)
}

/// A `view_submission` payload for `view` (as views.open returned it) with input values set.
pub(super) fn view_submission(
    user: &SlackUser,
    view: &Value,
    values: &[(&str, &str, &str)],
    trigger_id: &str,
) -> Value {
    let mut state = Map::new();
    for (block_id, action_id, value) in values {
        let block = state
            .entry((*block_id).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        block[*action_id] = json!({"type": "plain_text_input", "value": value});
    }
    let mut view = view.clone();
    view["state"] = json!({"values": state});
    json!({
        "type": "view_submission",
        "team": team(),
        "user": basic_user(user),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id,
        "view": view,
        "response_urls": [],
        "is_enterprise_install": false,
        "enterprise": null,
    })
}

/// What a slash command invocation carries.
pub(super) struct Command<'a> {
    pub(super) channel: &'a str,
    pub(super) user: &'a SlackUser,
    pub(super) command: &'a str,
    pub(super) text: &'a str,
    pub(super) trigger_id: &'a str,
    pub(super) response_url: &'a str,
}

/// A `slash_commands` payload.
pub(super) fn slash_command(cmd: &Command<'_>) -> Value {
    json!({
        "token": VERIFICATION_TOKEN,
        "team_id": TEAM_ID,
        "team_domain": TEAM_DOMAIN,
        "channel_id": cmd.channel,
        "channel_name": channel_name(cmd.channel),
        "user_id": cmd.user.id,
        "user_name": cmd.user.name,
        "command": cmd.command,
        "text": cmd.text,
        "api_app_id": APP_ID,
        "is_enterprise_install": "false",
        "response_url": cmd.response_url,
        "trigger_id": cmd.trigger_id,
    })
}

/// A stored message as Slack's message object (Web API answers and interactive payloads).
pub(super) fn message_json(message: &StoredMessage) -> Value {
    let mut json = json!({
        "type": "message",
        "ts": message.ts,
        "user": message.user,
        "text": message.text,
        "team": TEAM_ID,
    });
    if message.user == BOT_USER_ID {
        json["bot_id"] = json!(BOT_ID);
        json["app_id"] = json!(APP_ID);
    }
    if let Some(thread_ts) = &message.thread_ts {
        json["thread_ts"] = json!(thread_ts);
    }
    if !message.blocks.is_null() {
        json["blocks"] = message.blocks.clone();
    }
    if message.edits > 0 {
        json["edited"] = json!({"user": message.user, "ts": message.ts});
    }
    json
}

/// The name of a conversation (`general` for the default channel).
pub(super) fn channel_name(channel: &str) -> String {
    if channel == super::CHANNEL_ID {
        "general".to_owned()
    } else {
        channel.to_lowercase()
    }
}

/// A conversation object for `conversations.info` / `conversations.open`.
pub(super) fn channel_json(channel: &str, im_user: Option<&str>) -> Value {
    let kind = channel_type(channel);
    let mut json = json!({
        "id": channel,
        "created": EPOCH,
        "is_channel": kind == "channel",
        "is_group": kind == "group",
        "is_im": kind == "im",
        "is_mpim": false,
        "is_private": kind != "channel",
        "is_archived": false,
        "is_general": channel == super::CHANNEL_ID,
        "is_shared": false,
        "is_org_shared": false,
        "is_member": true,
    });
    match im_user {
        Some(user) => json["user"] = json!(user),
        None => {
            json["name"] = json!(channel_name(channel));
            json["name_normalized"] = json!(channel_name(channel));
            json["creator"] = json!(BOT_USER_ID);
            json["num_members"] = json!(2);
        }
    }
    json
}

/// A user object for `users.info`.
pub(super) fn user_json(id: &str, name: &str, display: &str) -> Value {
    let bot = id == BOT_USER_ID;
    json!({
        "id": id,
        "team_id": TEAM_ID,
        "name": name,
        "deleted": false,
        "real_name": name,
        "tz": "Europe/London",
        "tz_label": "Greenwich Mean Time",
        "tz_offset": 0,
        "profile": {
            "real_name": name,
            "real_name_normalized": name,
            "display_name": display,
            "display_name_normalized": display,
            "status_text": "",
            "status_emoji": "",
            "team": TEAM_ID,
        },
        "is_admin": false,
        "is_owner": false,
        "is_primary_owner": false,
        "is_restricted": false,
        "is_ultra_restricted": false,
        "is_bot": bot,
        "is_app_user": false,
        "updated": EPOCH,
    })
}

/// A user group for `usergroups.list`: its handle is its id in lower case (`S0ONCALL` is
/// `@s0oncall`).
pub(super) fn usergroup_json(id: &str) -> Value {
    let handle = id.to_lowercase();
    json!({
        "id": id,
        "team_id": TEAM_ID,
        "is_usergroup": true,
        "is_subteam": true,
        "name": id,
        "description": "",
        "handle": handle,
        "is_external": false,
        "date_create": EPOCH,
        "date_update": EPOCH,
        "date_delete": 0,
        "auto_type": null,
        "created_by": BOT_USER_ID,
        "updated_by": BOT_USER_ID,
        "deleted_by": null,
        "prefs": {"channels": [], "groups": []},
        "user_count": 0,
    })
}
