//! Messages: creating, editing and deleting them with Discord's limits and side effects
//! (mentions, attachments, unarchiving threads, MESSAGE_* dispatches).

use serde_json::{Value, json};

use super::GUILD_ID;
use super::objects::now_millis;
use super::records::FakeMessage;
use super::state::{EPHEMERAL, LOADING, Rejection, State, StoredMessage, id_of};

impl State {
    /// Creates a message from a REST-style body (content, embeds, components, flags,
    /// allowed_mentions, message_reference) and dispatches MESSAGE_CREATE unless ephemeral.
    pub(super) fn create_message(&mut self, new: NewMessage<'_>) -> Result<Value, Rejection> {
        let NewMessage {
            channel_id,
            author_id,
            body,
            files,
            kind,
            interaction_id,
            deferred,
        } = new;
        self.channel_json(channel_id)?;
        validate(body, !deferred, files)?;
        if let Some(t) = self.threads.iter_mut().find(|t| t.public.id == channel_id) {
            if t.public.archived && t.public.locked {
                return Err(Rejection::new(400, 50083, "Thread is archived"));
            }
            // Discord unarchives an unlocked thread when someone posts in it.
            t.public.archived = false;
            t.message_count += 1;
        }
        let id = self.next_id();
        let reply_to = body["message_reference"]["message_id"]
            .as_str()
            .and_then(|s| s.parse().ok());
        let mut message = StoredMessage {
            public: FakeMessage {
                id,
                channel_id,
                author_id,
                content: String::new(),
                embeds: json!([]),
                components: json!([]),
                attachments: Vec::new(),
                edits: 0,
                flags: body["flags"].as_u64().unwrap_or(0) | if deferred { LOADING } else { 0 },
                allowed_mentions: Value::Null,
                reply_to,
                interaction_id,
                reactions: Vec::new(),
            },
            attachment_ids: Vec::new(),
            created_millis: now_millis(),
            edited_millis: None,
            kind: if kind == 0 && reply_to.is_some() {
                19
            } else {
                kind
            },
            mentions: Vec::new(),
            mention_roles: Vec::new(),
        };
        self.apply_body(&mut message, body, files);
        self.tell_hook(&message);
        let json = self.message_json(&message);
        let ephemeral = message.public.flags & EPHEMERAL != 0;
        self.messages.entry(channel_id).or_default().push(message);
        if !ephemeral {
            self.gateway.dispatch("MESSAGE_CREATE", json.clone());
        }
        Ok(json)
    }

    /// Applies an edit body to a stored message and dispatches MESSAGE_UPDATE.
    pub(super) fn edit_message(
        &mut self,
        channel_id: u64,
        id: u64,
        body: &Value,
        files: &[(String, Vec<u8>)],
    ) -> Result<Value, Rejection> {
        validate(body, false, files)?;
        let mut message = self.find_message(channel_id, id)?.clone();
        message.public.edits += 1;
        message.edited_millis = Some(now_millis());
        message.public.flags &= !LOADING;
        self.apply_body(&mut message, body, files);
        self.tell_hook(&message);
        let json = self.message_json(&message);
        let ephemeral = message.public.flags & EPHEMERAL != 0;
        *self.find_message(channel_id, id)? = message;
        if !ephemeral {
            self.gateway.dispatch("MESSAGE_UPDATE", json.clone());
        }
        Ok(json)
    }

    pub(super) fn delete_message(&mut self, channel_id: u64, id: u64) -> Result<(), Rejection> {
        self.find_message(channel_id, id)?;
        if let Some(ms) = self.messages.get_mut(&channel_id) {
            ms.retain(|m| m.public.id != id);
        }
        let guild = self.guild_of(channel_id).unwrap_or(GUILD_ID);
        let event = json!({
            "id": id.to_string(),
            "channel_id": channel_id.to_string(),
            "guild_id": guild.to_string(),
        });
        self.gateway.dispatch("MESSAGE_DELETE", event);
        Ok(())
    }

    /// The fields a create or edit body sets; absent fields stay as they were.
    /// Shows a bot message as it now stands to the watcher of `FakeDiscord::on_bot_text`.
    fn tell_hook(&self, m: &StoredMessage) {
        if let Some(hook) = &self.bot_text_hook
            && m.public.author_id == super::BOT_ID
        {
            (hook.0)(m.public.channel_id, &m.public.content);
        }
    }

    fn apply_body(&mut self, m: &mut StoredMessage, body: &Value, files: &[(String, Vec<u8>)]) {
        if let Some(content) = body.get("content").filter(|c| !c.is_null()) {
            m.public.content = content.as_str().unwrap_or_default().to_owned();
            m.mentions = self
                .users
                .values()
                .filter(|u| {
                    m.public.content.contains(&format!("<@{}>", u.id))
                        || m.public.content.contains(&format!("<@!{}>", u.id))
                })
                .cloned()
                .collect();
            m.mention_roles = self
                .users
                .values()
                .flat_map(|u| u.roles.iter().copied())
                .filter(|r| m.public.content.contains(&format!("<@&{r}>")))
                .collect();
            m.mention_roles.dedup();
        }
        for field in ["embeds", "components"] {
            if let Some(v) = body.get(field).filter(|v| !v.is_null()) {
                let target = if field == "embeds" {
                    &mut m.public.embeds
                } else {
                    &mut m.public.components
                };
                *target = v.clone();
            }
        }
        if let Some(allowed) = body.get("allowed_mentions") {
            m.public.allowed_mentions = allowed.clone();
        }
        if let Some(kept) = body.get("attachments").and_then(Value::as_array) {
            let kept: Vec<u64> = kept.iter().filter_map(|a| id_of(&a["id"])).collect();
            let old = std::mem::take(&mut m.attachment_ids)
                .into_iter()
                .zip(std::mem::take(&mut m.public.attachments));
            for (id, file) in old.filter(|(id, _)| kept.contains(id)) {
                m.attachment_ids.push(id);
                m.public.attachments.push(file);
            }
        }
        for file in files {
            let id = self.next_id();
            m.attachment_ids.push(id);
            m.public.attachments.push(file.clone());
        }
    }
}

/// The arguments of [`State::create_message`].
pub(super) struct NewMessage<'a> {
    pub channel_id: u64,
    pub author_id: u64,
    pub body: &'a Value,
    pub files: &'a [(String, Vec<u8>)],
    pub kind: u8,
    pub interaction_id: Option<u64>,
    /// A deferred interaction response: empty and "thinking" until edited.
    pub deferred: bool,
}

/// The limits Discord enforces on a message body, with its error codes.
fn validate(body: &Value, creating: bool, files: &[(String, Vec<u8>)]) -> Result<(), Rejection> {
    let content = body["content"].as_str().unwrap_or_default();
    if content.chars().count() > 2000 {
        return Err(Rejection::invalid_form(
            "content",
            "BASE_TYPE_MAX_LENGTH",
            "Must be 2000 or fewer in length.",
        ));
    }
    let empty = |field: &str| body[field].as_array().is_none_or(Vec::is_empty);
    if creating && content.is_empty() && empty("embeds") && empty("components") && files.is_empty()
    {
        return Err(Rejection::new(400, 50006, "Cannot send an empty message"));
    }
    let rows = body["components"].as_array().map_or(&[][..], Vec::as_slice);
    if rows.len() > 5 {
        return Err(Rejection::invalid_form(
            "components",
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 1 and 5 in length.",
        ));
    }
    for row in rows {
        let items = row["components"].as_array().map_or(&[][..], Vec::as_slice);
        if items.len() > 5 {
            return Err(Rejection::invalid_form(
                "components",
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 5 in length.",
            ));
        }
        if items.iter().any(|c| {
            c["custom_id"]
                .as_str()
                .is_some_and(|id| id.chars().count() > 100)
        }) {
            return Err(Rejection::invalid_form(
                "custom_id",
                "BASE_TYPE_MAX_LENGTH",
                "Must be 100 or fewer in length.",
            ));
        }
    }
    Ok(())
}
