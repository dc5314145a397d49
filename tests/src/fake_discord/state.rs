//! The fake's world: users, channels, messages, threads, interactions and what the bot asked
//! for. Everything here is synchronous and runs under one lock; REST handlers and the public
//! API call these methods and the gateway dispatches what they return.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::gateway::Gateway;
use super::objects::{self, now_millis, timestamp};
use super::{
    BOT_ID, CHANNEL_ID, Failure, FakeMessage, FakeThread, FakeUser, GUILD_ID, RecordedRequest,
};

/// Message flag: only the invoking user sees it.
pub(super) const EPHEMERAL: u64 = 64;
/// Message flag: a deferred interaction response still "thinking".
pub(super) const LOADING: u64 = 128;
/// Message flag: a thread was started from this message.
const HAS_THREAD: u64 = 32;

/// The Discord epoch (2015-01-01) in Unix milliseconds, the base of every snowflake.
const DISCORD_EPOCH: u64 = 1_420_070_400_000;

/// A REST request the fake refuses, with Discord's status and JSON error body.
#[derive(Debug)]
pub(super) struct Rejection {
    pub status: u16,
    pub body: Value,
}

impl Rejection {
    pub(super) fn new(status: u16, code: u32, message: &str) -> Self {
        Self {
            status,
            body: objects::error(code, message),
        }
    }

    pub(super) fn unknown_channel() -> Self {
        Self::new(404, 10003, "Unknown Channel")
    }

    pub(super) fn unknown_message() -> Self {
        Self::new(404, 10008, "Unknown Message")
    }

    /// Discord's 50035 with the offending field, like a real validation failure.
    pub(super) fn invalid_form(field: &str, code: &str, message: &str) -> Self {
        let mut body = objects::error(50035, "Invalid Form Body");
        body["errors"] = json!({ field: { "_errors": [{ "code": code, "message": message }] } });
        Self { status: 400, body }
    }
}

/// A message plus what the public [`FakeMessage`] view leaves out.
#[derive(Debug, Clone)]
pub(super) struct StoredMessage {
    pub public: FakeMessage,
    pub attachment_ids: Vec<u64>,
    pub created_millis: u64,
    pub edited_millis: Option<u64>,
    /// Discord's message type: 0 default, 19 reply, 20 slash-command response.
    pub kind: u8,
    pub mentions: Vec<FakeUser>,
    pub mention_roles: Vec<u64>,
}

/// A thread plus the fields only its JSON needs.
#[derive(Debug, Clone)]
pub(super) struct ThreadRecord {
    pub public: FakeThread,
    /// The guild of its parent channel.
    pub guild_id: u64,
    pub created_millis: u64,
    pub message_count: u64,
    pub auto_archive_duration: u64,
}

/// What an interaction was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InteractionKind {
    Command,
    Component,
    ModalSubmit,
}

/// An interaction the fake sent, and how the bot answered it.
#[derive(Debug, Clone)]
pub(super) struct StoredInteraction {
    pub id: u64,
    pub token: String,
    pub kind: InteractionKind,
    pub channel_id: u64,
    /// The message a button sat on (or the modal came from).
    pub message_id: Option<u64>,
    /// The response `@original` refers to, once there is one.
    pub original_message_id: Option<u64>,
    pub acknowledged: bool,
    /// When it was dispatched: Discord takes the first response within 3 s only.
    pub created: std::time::Instant,
    /// Callback bodies and follow-up bodies, in order.
    pub responses: Vec<Value>,
}

/// A failure queued by `fail_next`.
#[derive(Debug, Clone)]
pub(super) struct PendingFailure {
    pub method: String,
    pub path_contains: String,
    /// Only requests whose JSON body contains this (any when empty).
    pub body_contains: String,
    pub failure: Failure,
    pub remaining: usize,
}

/// Everything the fake knows, behind `Shared`'s lock.
#[derive(Debug)]
pub(super) struct State {
    last_id: u64,
    pub users: BTreeMap<u64, FakeUser>,
    /// Messages per channel or thread, oldest first.
    pub messages: BTreeMap<u64, Vec<StoredMessage>>,
    pub threads: Vec<ThreadRecord>,
    pub requests: Vec<RecordedRequest>,
    pub interactions: BTreeMap<u64, StoredInteraction>,
    pub commands: Vec<Value>,
    pub typing: HashMap<u64, usize>,
    pub failures: Vec<PendingFailure>,
    pub gateway: Gateway,
    /// When every member "joined" the guild.
    pub joined_at: String,
    /// Direct-message channels: channel id → the user the bot talks with there.
    pub dm_channels: BTreeMap<u64, u64>,
    /// Guilds and their one text channel each: guild id → channel id ([`GUILD_ID`] →
    /// [`CHANNEL_ID`] always).
    pub guilds: BTreeMap<u64, u64>,
    /// The application's `flags` (`GET /oauth2/applications/@me`): the Message Content
    /// intent's bit is on unless a test turns it off.
    pub application_flags: u64,
    /// Told of every message the bot creates or edits (see `FakeDiscord::on_bot_text`).
    pub bot_text_hook: Option<BotTextHook>,
    /// Roles the guilds have whether or not anyone holds them (`FakeDiscord::add_role`).
    pub roles: Vec<u64>,
}

/// A watcher of the bot's messages: called with the channel (or thread) and the content,
/// under the state's lock, so it must be quick and must not call back into the fake.
#[derive(Clone)]
pub(super) struct BotTextHook(pub BotTextFn);

/// What [`BotTextHook`] calls: the channel (or thread) and the content.
pub(super) type BotTextFn = std::sync::Arc<dyn Fn(u64, &str) + Send + Sync>;

impl std::fmt::Debug for BotTextHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BotTextHook")
    }
}

impl State {
    pub(super) fn new(gateway_url: String) -> Self {
        let mut users = BTreeMap::new();
        users.insert(BOT_ID, objects::bot_user());
        Self {
            last_id: 0,
            users,
            messages: BTreeMap::new(),
            threads: Vec::new(),
            requests: Vec::new(),
            interactions: BTreeMap::new(),
            commands: Vec::new(),
            typing: HashMap::new(),
            failures: Vec::new(),
            gateway: Gateway::new(gateway_url),
            joined_at: timestamp(now_millis().saturating_sub(86_400_000)),
            dm_channels: BTreeMap::new(),
            guilds: BTreeMap::from([(GUILD_ID, CHANNEL_ID)]),
            application_flags: super::GATEWAY_MESSAGE_CONTENT,
            bot_text_hook: None,
            roles: Vec::new(),
        }
    }

    /// A fresh snowflake: the current time in its top bits, always larger than the last one.
    pub(super) fn next_id(&mut self) -> u64 {
        let candidate = now_millis().saturating_sub(DISCORD_EPOCH) << 22;
        self.last_id = candidate.max(self.last_id + 1);
        self.last_id
    }

    /// Remembers `user` so member lookups and mentions find them.
    pub(super) fn register(&mut self, user: &FakeUser) {
        self.users.insert(user.id, user.clone());
    }

    pub(super) fn user(&self, id: u64) -> FakeUser {
        self.users
            .get(&id)
            .cloned()
            .unwrap_or_else(|| FakeUser::new(id, &format!("user-{id}")))
    }

    /// Every role any known member holds or [`State::roles`] names, plus `guild`'s @everyone
    /// (whose id is the guild's).
    pub(super) fn roles_in(&self, guild: u64) -> Vec<Value> {
        let mut ids: Vec<u64> = self
            .users
            .values()
            .flat_map(|u| u.roles.iter().copied())
            .chain(self.roles.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|id| *id != guild);
        let mut roles = vec![objects::role(guild, 0)];
        roles.extend(
            ids.iter()
                .zip(1u16..)
                .map(|(id, position)| objects::role(*id, position)),
        );
        roles
    }

    pub(super) fn thread(&self, id: u64) -> Option<&ThreadRecord> {
        self.threads.iter().find(|t| t.public.id == id)
    }

    /// The DM channel with `user`, opened on first use.
    pub(super) fn dm_channel(&mut self, user: u64) -> u64 {
        if let Some((channel, _)) = self.dm_channels.iter().find(|(_, u)| **u == user) {
            return *channel;
        }
        let channel = self.next_id();
        self.dm_channels.insert(channel, user);
        channel
    }

    /// The guild whose text channel `id` is.
    fn guild_of_text_channel(&self, id: u64) -> Option<u64> {
        self.guilds
            .iter()
            .find(|(_, channel)| **channel == id)
            .map(|(guild, _)| *guild)
    }

    /// The guild a text channel or thread belongs to; `None` for a DM or an unknown channel.
    pub(super) fn guild_of(&self, channel: u64) -> Option<u64> {
        self.guild_of_text_channel(channel)
            .or_else(|| self.thread(channel).map(|t| t.guild_id))
    }

    /// The channel object for a text channel, a thread or a DM.
    pub(super) fn channel_json(&self, id: u64) -> Result<Value, Rejection> {
        if let Some(guild) = self.guild_of_text_channel(id) {
            return Ok(objects::text_channel(id, guild));
        }
        if let Some(user) = self.dm_channels.get(&id) {
            return Ok(objects::dm_channel(id, &self.user(*user)));
        }
        self.thread(id)
            .map(objects::thread)
            .ok_or_else(Rejection::unknown_channel)
    }

    pub(super) fn message_json(&self, m: &StoredMessage) -> Value {
        let mut json = objects::message(m, &self.user(m.public.author_id), &self.joined_at);
        if self.dm_channels.contains_key(&m.public.channel_id) {
            return objects::outside_guild(json);
        }
        if let Some(guild) = self
            .guild_of(m.public.channel_id)
            .filter(|g| *g != GUILD_ID)
        {
            json["guild_id"] = json!(guild.to_string());
            if let Some(reference) = json.get_mut("message_reference") {
                reference["guild_id"] = json!(guild.to_string());
            }
        }
        json
    }

    pub(super) fn find_message(
        &mut self,
        channel_id: u64,
        id: u64,
    ) -> Result<&mut StoredMessage, Rejection> {
        self.channel_json(channel_id)?;
        self.messages
            .get_mut(&channel_id)
            .and_then(|ms| ms.iter_mut().find(|m| m.public.id == id))
            .ok_or_else(Rejection::unknown_message)
    }

    pub(super) fn message_by_id(&self, channel_id: u64, id: u64) -> Option<&StoredMessage> {
        self.messages
            .get(&channel_id)?
            .iter()
            .find(|m| m.public.id == id)
    }

    /// Starts a thread, from a message (its id becomes the thread's, as on Discord) or not.
    pub(super) fn create_thread(
        &mut self,
        parent_id: u64,
        starter: Option<u64>,
        body: &Value,
    ) -> Result<Value, Rejection> {
        let Some(guild_id) = self.guild_of_text_channel(parent_id) else {
            return Err(Rejection::new(
                400,
                50024,
                "Cannot execute action on this channel type",
            ));
        };
        let name = body["name"].as_str().unwrap_or_default().to_owned();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(Rejection::invalid_form(
                "name",
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            ));
        }
        let id = match starter {
            Some(message_id) => {
                let message = self.find_message(parent_id, message_id)?;
                if message.public.flags & HAS_THREAD != 0 {
                    return Err(Rejection::new(
                        400,
                        160004,
                        "A thread has already been created for this message",
                    ));
                }
                message.public.flags |= HAS_THREAD;
                message_id
            }
            None => self.next_id(),
        };
        let thread = ThreadRecord {
            public: FakeThread {
                id,
                parent_id,
                name,
                starter_message_id: starter,
                archived: false,
                locked: false,
                kind: body["type"]
                    .as_u64()
                    .map_or(11, |k| u8::try_from(k).unwrap_or(11)),
                owner_id: BOT_ID,
                bot_joined: true,
            },
            guild_id,
            created_millis: now_millis(),
            message_count: 0,
            auto_archive_duration: body["auto_archive_duration"].as_u64().unwrap_or(1440),
        };
        let mut json = objects::thread(&thread);
        self.threads.push(thread);
        json["newly_created"] = json!(true);
        self.gateway.dispatch("THREAD_CREATE", json.clone());
        Ok(json)
    }

    /// `PATCH /channels/{id}`: name, archived and locked of a thread.
    pub(super) fn update_channel(&mut self, id: u64, body: &Value) -> Result<Value, Rejection> {
        let Some(t) = self.threads.iter_mut().find(|t| t.public.id == id) else {
            return self.channel_json(id);
        };
        if let Some(name) = body["name"].as_str() {
            t.public.name = name.to_owned();
        }
        if let Some(archived) = body["archived"].as_bool() {
            t.public.archived = archived;
        }
        if let Some(locked) = body["locked"].as_bool() {
            t.public.locked = locked;
        }
        let json = objects::thread(t);
        self.gateway.dispatch("THREAD_UPDATE", json.clone());
        Ok(json)
    }

    pub(super) fn interaction_by_token(
        &mut self,
        token: &str,
    ) -> Result<&mut StoredInteraction, Rejection> {
        self.interactions
            .values_mut()
            .find(|i| i.token == token)
            .ok_or_else(|| Rejection::new(404, 10015, "Unknown Webhook"))
    }
}

/// A snowflake sent as a string or a number.
pub(super) fn id_of(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}
