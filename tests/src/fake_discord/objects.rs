//! Complete Discord JSON objects, shaped as the real API sends them. serenity drops a gateway
//! event whose payload misses one required field, so every builder here fills them all; the unit
//! tests in `tests.rs` deserialize each one into serenity's own model types.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::state::{InteractionKind, StoredInteraction, StoredMessage, ThreadRecord};
use super::{APP_ID, BOT_ID, FakeUser, GUILD_ID};

/// The permissions every member and the bot hold: the usual text-channel set, as a decimal
/// string like Discord sends it.
pub(super) const MEMBER_PERMISSIONS: &str = "1071698660929";

/// [`MEMBER_PERMISSIONS`] plus Administrator (`1 << 3`).
pub(super) const ADMIN_PERMISSIONS: &str = "1071698660937";

/// The name of [`BOT_ID`].
pub(super) const BOT_NAME: &str = "sandpiper";

/// Milliseconds since the Unix epoch.
pub(super) fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An ISO 8601 timestamp (`2024-05-01T12:00:00.000000+00:00`), as Discord writes them.
pub(super) fn timestamp(millis: u64) -> String {
    let secs = millis / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (always positive here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}000+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        millis % 1000
    )
}

/// A user object; the bot is marked as one.
pub(super) fn user(who: &FakeUser) -> Value {
    json!({
        "id": who.id.to_string(),
        "username": who.name,
        "discriminator": "0",
        "global_name": who.global_name.as_deref().unwrap_or(&who.name),
        "avatar": null,
        "bot": who.id == BOT_ID,
        "system": false,
        "banner": null,
        "accent_color": null,
        "public_flags": 0,
        "flags": 0,
        "avatar_decoration_data": null,
    })
}

/// The bot as `GET /users/@me` and READY describe it (a user plus the private fields).
pub(super) fn current_user() -> Value {
    let mut me = user(&bot_user());
    me["verified"] = json!(true);
    me["mfa_enabled"] = json!(false);
    me["email"] = Value::Null;
    me["locale"] = json!("en-US");
    me["premium_type"] = json!(0);
    me
}

/// The bot as a [`FakeUser`], so it can be treated like everyone else in member lists.
pub(super) fn bot_user() -> FakeUser {
    FakeUser::new(BOT_ID, BOT_NAME)
}

/// A guild member; `with_permissions` adds the `permissions` field interactions carry.
pub(super) fn member(who: &FakeUser, joined_at: &str, with_permissions: bool) -> Value {
    let mut member = json!({
        "user": user(who),
        "nick": null,
        "avatar": null,
        "banner": null,
        "roles": who.roles.iter().map(u64::to_string).collect::<Vec<_>>(),
        "joined_at": joined_at,
        "premium_since": null,
        "deaf": false,
        "mute": false,
        "flags": 0,
        "pending": false,
        "communication_disabled_until": null,
    });
    if with_permissions {
        member["permissions"] = json!(if who.admin {
            ADMIN_PERMISSIONS
        } else {
            MEMBER_PERMISSIONS
        });
    }
    member
}

/// A role. `GUILD_ID` itself is the @everyone role, like on Discord.
pub(super) fn role(id: u64, position: u16) -> Value {
    let name = if id == GUILD_ID {
        "@everyone".to_owned()
    } else {
        format!("role-{id}")
    };
    json!({
        "id": id.to_string(),
        "name": name,
        "description": null,
        "color": 0,
        "colors": { "primary_color": 0, "secondary_color": null, "tertiary_color": null },
        "hoist": false,
        "icon": null,
        "unicode_emoji": null,
        "position": position,
        "permissions": MEMBER_PERMISSIONS,
        "managed": false,
        "mentionable": false,
        "flags": 0,
    })
}

/// A guild's one text channel ([`CHANNEL_ID`](super::CHANNEL_ID) in [`GUILD_ID`], or one added with
/// `FakeDiscord::add_guild`).
pub(super) fn text_channel(id: u64, guild: u64) -> Value {
    json!({
        "id": id.to_string(),
        "type": 0,
        "guild_id": guild.to_string(),
        "name": "general",
        "position": 0,
        "permission_overwrites": [],
        "topic": null,
        "nsfw": false,
        "last_message_id": null,
        "rate_limit_per_user": 0,
        "parent_id": null,
        "last_pin_timestamp": null,
        "flags": 0,
    })
}

/// A direct-message channel (type 1) between the bot and `recipient`.
pub(super) fn dm_channel(id: u64, recipient: &FakeUser) -> Value {
    json!({
        "id": id.to_string(),
        "type": 1,
        "last_message_id": null,
        "last_pin_timestamp": null,
        "recipients": [user(recipient)],
        "flags": 0,
    })
}

/// `value` (a message or an interaction) as it arrives from a DM: no guild, no member; an
/// interaction names its `user` instead.
pub(super) fn outside_guild(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.remove("guild_id");
        object.remove("guild");
        object.remove("guild_locale");
        if let Some(member) = object.remove("member")
            && object.contains_key("token")
        {
            object.insert("user".into(), member["user"].clone());
            object.insert("context".into(), json!(1));
        }
        if let Some(reference) = object
            .get_mut("message_reference")
            .and_then(Value::as_object_mut)
        {
            reference.remove("guild_id");
        }
        if let Some(channel) = object.get_mut("channel").and_then(Value::as_object_mut) {
            channel.remove("guild_id");
        }
    }
    value
}

/// A thread channel (type 11 public or 12 private).
pub(super) fn thread(t: &ThreadRecord) -> Value {
    let created = timestamp(t.created_millis);
    let mut thread = json!({
        "id": t.public.id.to_string(),
        "type": t.public.kind,
        "guild_id": t.guild_id.to_string(),
        "parent_id": t.public.parent_id.to_string(),
        "owner_id": t.public.owner_id.to_string(),
        "name": t.public.name,
        "last_message_id": null,
        "rate_limit_per_user": 0,
        "message_count": t.message_count,
        "member_count": if t.public.bot_joined { 1 } else { 0 },
        "total_message_sent": t.message_count,
        "flags": 0,
        "thread_metadata": {
            "archived": t.public.archived,
            "auto_archive_duration": t.auto_archive_duration,
            "archive_timestamp": created,
            "locked": t.public.locked,
            "create_timestamp": created,
            "invitable": true,
        },
    });
    if t.public.bot_joined {
        thread["member"] = json!({ "join_timestamp": created, "flags": 1 });
    }
    thread
}

/// A channel as an interaction's partial `channel` field.
pub(super) fn partial_channel(channel: &Value) -> Value {
    let mut partial = json!({
        "id": channel["id"],
        "type": channel["type"],
        "name": channel["name"],
        "guild_id": channel.get("guild_id").cloned().unwrap_or_else(|| json!(GUILD_ID.to_string())),
        "permissions": MEMBER_PERMISSIONS,
        "flags": 0,
    });
    if let Some(parent) = channel.get("parent_id").filter(|p| !p.is_null()) {
        partial["parent_id"] = parent.clone();
    }
    if let Some(meta) = channel.get("thread_metadata") {
        partial["thread_metadata"] = meta.clone();
    }
    partial
}

/// A full message, as in MESSAGE_CREATE and the REST answers. `author` is resolved by the
/// caller (a known user or the bot).
pub(super) fn message(m: &StoredMessage, author: &FakeUser, joined_at: &str) -> Value {
    let p = &m.public;
    let attachments: Vec<Value> = p
        .attachments
        .iter()
        .zip(&m.attachment_ids)
        .map(|((filename, bytes), id)| {
            let url = format!(
                "https://cdn.discordapp.com/attachments/{}/{id}/{filename}",
                p.channel_id
            );
            json!({
                "id": id.to_string(),
                "filename": filename,
                "size": bytes.len(),
                "url": url,
                "proxy_url": url,
                "content_type": "application/octet-stream",
            })
        })
        .collect();
    let embeds: Vec<Value> = p
        .embeds
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut e = e.clone();
            if e.get("type").is_none() {
                e["type"] = json!("rich");
            }
            e
        })
        .collect();
    let reactions: Vec<Value> = p
        .reactions
        .iter()
        .map(|emoji| {
            json!({
                "count": 1,
                "count_details": { "burst": 0, "normal": 1 },
                "me": true,
                "me_burst": false,
                "burst_colors": [],
                "emoji": { "id": null, "name": emoji },
            })
        })
        .collect();
    let mut message = json!({
        "id": p.id.to_string(),
        "channel_id": p.channel_id.to_string(),
        "guild_id": GUILD_ID.to_string(),
        "author": user(author),
        "member": member(author, joined_at, false),
        "content": p.content,
        "timestamp": timestamp(m.created_millis),
        "edited_timestamp": m.edited_millis.map(timestamp),
        "tts": false,
        "mention_everyone": false,
        "mentions": m.mentions.iter().map(user).collect::<Vec<_>>(),
        "mention_roles": m.mention_roles.iter().map(u64::to_string).collect::<Vec<_>>(),
        "attachments": attachments,
        "embeds": embeds,
        "reactions": reactions,
        "components": if p.components.is_array() { p.components.clone() } else { json!([]) },
        "pinned": false,
        "type": m.kind,
        "flags": p.flags,
        "webhook_id": null,
        "application_id": null,
        "position": null,
    });
    if let Some(reference) = p.reply_to {
        message["message_reference"] = json!({
            "type": 0,
            "message_id": reference.to_string(),
            "channel_id": p.channel_id.to_string(),
            "guild_id": GUILD_ID.to_string(),
        });
    }
    if p.interaction_id.is_some() {
        message["webhook_id"] = json!(APP_ID.to_string());
        message["application_id"] = json!(APP_ID.to_string());
    }
    message
}

/// The fields every interaction carries, whatever its type.
pub(super) fn interaction(
    i: &StoredInteraction,
    user: &FakeUser,
    channel: &Value,
    joined_at: &str,
) -> Value {
    let kind = match i.kind {
        InteractionKind::Command => 2,
        InteractionKind::Component => 3,
        InteractionKind::ModalSubmit => 5,
    };
    json!({
        "id": i.id.to_string(),
        "application_id": APP_ID.to_string(),
        "type": kind,
        "token": i.token,
        "version": 1,
        "guild_id": GUILD_ID.to_string(),
        "guild": { "id": GUILD_ID.to_string(), "locale": "en-US", "features": [] },
        "channel_id": channel["id"],
        "channel": partial_channel(channel),
        "member": member(user, joined_at, true),
        "app_permissions": MEMBER_PERMISSIONS,
        "locale": "en-US",
        "guild_locale": "en-US",
        "entitlements": [],
        "authorizing_integration_owners": { "0": GUILD_ID.to_string() },
        "context": 0,
        "attachment_size_limit": 10_485_760,
    })
}

/// A registered application command as Discord echoes it back, with ids filled in.
pub(super) fn command(sent: &Value, id: u64, guild: Option<u64>) -> Value {
    let mut command = sent.clone();
    command["id"] = json!(id.to_string());
    command["application_id"] = json!(APP_ID.to_string());
    command["version"] = json!(id.to_string());
    if command.get("type").is_none() {
        command["type"] = json!(1);
    }
    if command.get("description").is_none() {
        command["description"] = json!("");
    }
    if command.get("default_member_permissions").is_none() {
        command["default_member_permissions"] = Value::Null;
    }
    if let Some(guild) = guild {
        command["guild_id"] = json!(guild.to_string());
    }
    command
}

/// `GET /oauth2/applications/@me`.
pub(super) fn application() -> Value {
    json!({
        "id": APP_ID.to_string(),
        "name": BOT_NAME,
        "icon": null,
        "description": "",
        "rpc_origins": [],
        "bot_public": false,
        "bot_require_code_grant": false,
        "bot": user(&bot_user()),
        "owner": user(&FakeUser::new(1, "owner")),
        "verify_key": "0000000000000000000000000000000000000000000000000000000000000000",
        "team": null,
        "flags": 0,
        "tags": [],
        "integration_types_config": {},
        "redirect_uris": [],
        "interactions_endpoint_url": null,
    })
}

/// A Discord JSON error body.
pub(super) fn error(code: u32, message: &str) -> Value {
    json!({ "message": message, "code": code })
}
