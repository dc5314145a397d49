//! The Web API methods: each reads its arguments, changes the workspace, and answers with the
//! fields Slack sends (`ok` is added by the caller) or a Slack error code.

use serde_json::{Value, json};

use super::events::{self, APP_ID, BOT_ID, BOT_NAME};
use super::state::{Ledger, StoredFile, StoredMessage};
use super::{BOT_USER_ID, TEAM_ID};

/// What a method answers: the response fields, or Slack's `error` code.
type Answer = Result<Value, &'static str>;

/// Dispatches one call.
pub(super) fn answer(ledger: &mut Ledger, base_url: &str, method: &str, args: &Value) -> Answer {
    match method {
        "auth.test" => Ok(json!({
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": false,
        })),
        "apps.connections.open" => {
            let ticket = ledger.next();
            let ws = base_url.replacen("http://", "ws://", 1);
            Ok(json!({"url": format!("{ws}/socket?ticket={ticket}")}))
        }
        "chat.postMessage" => post_message(ledger, args),
        "chat.update" => update_message(ledger, args),
        "chat.postEphemeral" => post_ephemeral(ledger, args),
        "chat.delete" => {
            let (channel, ts) = (text(args, "channel"), text(args, "ts"));
            let messages = ledger
                .channels
                .get_mut(&channel)
                .ok_or("channel_not_found")?;
            let before = messages.len();
            messages.retain(|m| m.ts != ts);
            if messages.len() == before {
                return Err("message_not_found");
            }
            Ok(json!({"channel": channel, "ts": ts}))
        }
        "views.open" => open_view(ledger, args),
        "views.update" => update_view(ledger, args),
        "conversations.open" => {
            let channel = match args.get("channel").and_then(Value::as_str) {
                Some(channel) => channel.to_owned(),
                None => {
                    let users = list(args, "users");
                    let [user] = users.as_slice() else {
                        return Err("users_list_not_supplied");
                    };
                    ledger.dm_channel(user)
                }
            };
            let im_user = ledger.dm_user(&channel);
            Ok(json!({
                "no_op": false,
                "already_open": false,
                "channel": events::channel_json(&channel, im_user.as_deref()),
            }))
        }
        "conversations.info" => {
            let channel = text(args, "channel");
            if channel.is_empty() {
                return Err("channel_not_found");
            }
            let im_user = ledger.dm_user(&channel);
            if channel.starts_with('D') && im_user.is_none() {
                return Err("channel_not_found");
            }
            Ok(json!({"channel": events::channel_json(&channel, im_user.as_deref())}))
        }
        "users.info" => {
            let id = text(args, "user");
            let name = ledger.users.get(&id).ok_or("user_not_found")?;
            let display = ledger.display_names.get(&id).unwrap_or(name);
            Ok(json!({"user": events::user_json(&id, name, display)}))
        }
        "usergroups.list" => {
            let mut ids: Vec<&String> = ledger.usergroups.keys().collect();
            ids.sort();
            let groups: Vec<Value> = ids
                .into_iter()
                .map(|id| events::usergroup_json(id))
                .collect();
            Ok(json!({"usergroups": groups}))
        }
        "usergroups.users.list" => {
            let group = text(args, "usergroup");
            let users = ledger.usergroups.get(&group).ok_or("no_such_subteam")?;
            Ok(json!({"users": users}))
        }
        "files.getUploadURLExternal" => {
            let filename = text(args, "filename");
            if filename.is_empty() {
                return Err("invalid_arguments");
            }
            let id = ledger.next_id("F");
            ledger.files.push(StoredFile {
                id: id.clone(),
                filename,
                bytes: None,
                title: None,
                channel: None,
                thread_ts: None,
            });
            Ok(json!({"upload_url": format!("{base_url}/upload/{id}"), "file_id": id}))
        }
        "files.completeUploadExternal" => complete_upload(ledger, base_url, args),
        "reactions.add" => {
            let (channel, ts, name) = (
                text(args, "channel"),
                text(args, "timestamp"),
                text(args, "name"),
            );
            let message = ledger
                .message_mut(&channel, &ts)
                .ok_or("message_not_found")?;
            if message.reactions.contains(&name) {
                return Err("already_reacted");
            }
            message.reactions.push(name);
            Ok(json!({}))
        }
        "reactions.remove" => {
            let (channel, ts, name) = (
                text(args, "channel"),
                text(args, "timestamp"),
                text(args, "name"),
            );
            let message = ledger
                .message_mut(&channel, &ts)
                .ok_or("message_not_found")?;
            let before = message.reactions.len();
            message.reactions.retain(|r| *r != name);
            if message.reactions.len() == before {
                return Err("no_reaction");
            }
            Ok(json!({}))
        }
        "assistant.threads.setStatus" => Ok(json!({})),
        _ => Err("unknown_method"),
    }
}

/// A string argument ("" if absent; numbers are rendered).
fn text(args: &Value, key: &str) -> String {
    match args.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn optional(args: &Value, key: &str) -> Option<String> {
    Some(text(args, key)).filter(|s| !s.is_empty())
}

/// A list argument given as a JSON array or a comma-separated string.
fn list(args: &Value, key: &str) -> Vec<String> {
    match args.get(key) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        Some(Value::String(s)) => s
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => vec![],
    }
}

/// The channel a message goes to: a user id means the DM with that user, as on Slack.
fn target_channel(ledger: &mut Ledger, args: &Value) -> Result<String, &'static str> {
    let channel = text(args, "channel");
    match channel.chars().next() {
        None => Err("channel_not_found"),
        Some('U' | 'W') => Ok(ledger.dm_channel(&channel)),
        Some(_) => Ok(channel),
    }
}

/// The bot's message from the content arguments.
fn bot_message(ledger: &mut Ledger, args: &Value) -> Result<StoredMessage, &'static str> {
    let text = text(args, "text");
    let markdown = optional(args, "markdown_text");
    let blocks = args.get("blocks").cloned().unwrap_or(Value::Null);
    if text.is_empty() && blocks.is_null() && markdown.is_none() {
        return Err("no_text");
    }
    Ok(StoredMessage {
        ts: ledger.next_ts(),
        thread_ts: optional(args, "thread_ts"),
        user: BOT_USER_ID.to_owned(),
        text: markdown.unwrap_or(text),
        blocks,
        edits: 0,
        ephemeral_for: None,
        reactions: vec![],
    })
}

fn post_message(ledger: &mut Ledger, args: &Value) -> Answer {
    let channel = target_channel(ledger, args)?;
    let message = bot_message(ledger, args)?;
    let json = events::message_json(&message);
    let ts = ledger.store(&channel, message);
    Ok(json!({"channel": channel, "ts": ts, "message": json}))
}

fn post_ephemeral(ledger: &mut Ledger, args: &Value) -> Answer {
    let channel = target_channel(ledger, args)?;
    let user = optional(args, "user").ok_or("user_not_in_channel")?;
    let mut message = bot_message(ledger, args)?;
    message.ephemeral_for = Some(user);
    let ts = ledger.store(&channel, message);
    Ok(json!({"message_ts": ts}))
}

fn update_message(ledger: &mut Ledger, args: &Value) -> Answer {
    let (channel, ts) = (text(args, "channel"), text(args, "ts"));
    let hook = ledger.bot_text_hook.clone();
    let message = ledger
        .message_mut(&channel, &ts)
        .ok_or("message_not_found")?;
    if message.user != BOT_USER_ID || message.ephemeral_for.is_some() {
        return Err("cant_update_message");
    }
    if let Some(text) = optional(args, "text").or_else(|| optional(args, "markdown_text")) {
        message.text = text;
    }
    if let Some(blocks) = args.get("blocks") {
        message.blocks = blocks.clone();
    }
    message.edits += 1;
    if let Some(hook) = hook {
        hook(&channel, message.thread_ts.as_deref(), &message.text);
    }
    let json = events::message_json(message);
    Ok(json!({
        "channel": channel,
        "ts": ts,
        "text": json["text"],
        "thread_ts": json.get("thread_ts"),
        "message": json,
    }))
}

/// The view as Slack returns it: what was sent plus id, team, state and hash.
fn stateful_view(view: &Value, id: &str, hash: &str, root: &str) -> Value {
    let mut view = view.clone();
    for (key, value) in [
        ("id", json!(id)),
        ("team_id", json!(TEAM_ID)),
        ("state", json!({"values": {}})),
        ("hash", json!(hash)),
        ("root_view_id", json!(root)),
        ("app_id", json!(APP_ID)),
        ("bot_id", json!(BOT_ID)),
        ("app_installed_team_id", json!(TEAM_ID)),
    ] {
        view[key] = value;
    }
    for key in ["private_metadata", "callback_id", "external_id"] {
        if view.get(key).is_none() {
            view[key] = json!("");
        }
    }
    view
}

fn open_view(ledger: &mut Ledger, args: &Value) -> Answer {
    let trigger = text(args, "trigger_id");
    let Some(issued) = ledger.triggers.remove(&trigger) else {
        return Err("invalid_trigger_id");
    };
    if issued.elapsed() > std::time::Duration::from_secs(3) {
        return Err("expired_trigger_id");
    }
    let view = args
        .get("view")
        .filter(|v| v.is_object())
        .ok_or("invalid_arguments")?;
    let id = ledger.next_id("V");
    let hash = format!("{}.fakehash", ledger.next());
    let view = stateful_view(view, &id, &hash, &id);
    ledger.opened_views.push(view.clone());
    ledger.views.insert(id, view.clone());
    Ok(json!({"view": view}))
}

fn update_view(ledger: &mut Ledger, args: &Value) -> Answer {
    let id = match optional(args, "view_id") {
        Some(id) => id,
        None => {
            let external = optional(args, "external_id").ok_or("not_found")?;
            ledger
                .views
                .iter()
                .find(|(_, v)| v["external_id"] == external.as_str())
                .map(|(id, _)| id.clone())
                .ok_or("not_found")?
        }
    };
    let current = ledger.views.get(&id).ok_or("not_found")?;
    if let Some(hash) = optional(args, "hash")
        && current["hash"] != hash.as_str()
    {
        return Err("hash_conflict");
    }
    let root = current["root_view_id"].as_str().unwrap_or(&id).to_owned();
    let view = args
        .get("view")
        .filter(|v| v.is_object())
        .ok_or("invalid_arguments")?;
    let hash = format!("{}.fakehash", ledger.next());
    let view = stateful_view(view, &id, &hash, &root);
    ledger.views.insert(id, view.clone());
    Ok(json!({"view": view}))
}

fn complete_upload(ledger: &mut Ledger, base_url: &str, args: &Value) -> Answer {
    let channel =
        optional(args, "channel_id").or_else(|| list(args, "channels").into_iter().next());
    let thread_ts = optional(args, "thread_ts");
    let requested = args
        .get("files")
        .and_then(Value::as_array)
        .filter(|files| !files.is_empty())
        .ok_or("invalid_arguments")?;
    let mut answered = vec![];
    for requested in requested {
        let id = requested["id"].as_str().unwrap_or_default();
        let file = ledger
            .files
            .iter_mut()
            .find(|f| f.id == id && f.bytes.is_some())
            .ok_or("file_not_found")?;
        file.title = requested["title"].as_str().map(str::to_owned);
        file.channel = channel.clone();
        file.thread_ts = thread_ts.clone();
        answered.push(json!({
            "id": file.id,
            "created": events::EPOCH,
            "timestamp": events::EPOCH,
            "name": file.filename,
            "title": file.title.clone().unwrap_or_else(|| file.filename.clone()),
            "user": BOT_USER_ID,
            "size": file.bytes.as_ref().map_or(0, Vec::len),
            "url_private": format!("{base_url}/files/{}/{}", file.id, file.filename),
            "permalink": format!("https://fake.slack.com/files/{}", file.id),
            "is_external": false,
            "is_public": channel.as_deref().is_some_and(|c| c.starts_with('C')),
        }));
    }
    Ok(json!({"files": answered}))
}
