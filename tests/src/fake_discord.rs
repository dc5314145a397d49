//! A fake Discord on 127.0.0.1 that an unmodified serenity 0.12.5 client talks to: REST under
//! `/api/v10` and the gateway websocket at `/gateway`. Tests play the users (messages, button
//! clicks, slash commands, modal submits), break the connection or the API on purpose, and read
//! back what the bot did.
//!
//! ```ignore
//! let discord = FakeDiscord::start().await;
//! let http = HttpBuilder::new("token").proxy(discord.base_url()).ratelimiter_disabled(true).build();
//! // build a serenity Client with `http`, start it...
//! discord.wait_ready(WAIT).await;
//! let alice = FakeUser::new(1, "alice");
//! discord.user_message(CHANNEL_ID, &alice, &format!("{} hi", discord.mention())).await;
//! let reply = discord
//!     .wait_until(WAIT, "a reply", |d| d.messages(CHANNEL_ID).into_iter().find(|m| m.author_id == BOT_ID))
//!     .await;
//! ```
//!
//! # Layout
//! - this file: [`FakeDiscord`], the test's handle: acting as users, and inspection.
//! - `records.rs`: the plain data tests hand in and read back ([`FakeUser`], [`FakeMessage`], …).
//! - `state.rs`: the world (users, channels, threads, interactions) behind one lock.
//! - `messages.rs`: creating, editing and deleting messages, with Discord's limits.
//! - `objects.rs`: complete Discord JSON objects (serenity drops events missing a field).
//! - `rest.rs`: routes, the recording and failure-injecting middleware, channel/guild handlers.
//! - `interactions.rs`: interaction callbacks and the interaction webhook (`@original`, follow-ups).
//! - `gateway.rs`: the websocket: HELLO, IDENTIFY/READY, heartbeats, RESUME with replay.
//! - `multipart.rs`: `payload_json` + `files[N]` upload bodies.

mod gateway;
mod interactions;
mod messages;
mod multipart;
mod objects;
mod records;
mod rest;
mod state;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

pub use gateway::shard_of;
pub use records::{Failure, FakeMessage, FakeThread, FakeUser, RecordedRequest};
use state::{InteractionKind, PendingFailure, State, StoredInteraction};

/// The bot's user id.
pub const BOT_ID: u64 = 810_000_000_000_000_100;
/// The application flag of the Message Content intent (`GATEWAY_MESSAGE_CONTENT`, 1 << 19).
pub const GATEWAY_MESSAGE_CONTENT: u64 = 1 << 19;
/// The bot's application id (distinct from [`BOT_ID`], so code mixing them up fails).
pub const APP_ID: u64 = 810_000_000_000_000_200;
/// The one guild; also the id of its @everyone role.
pub const GUILD_ID: u64 = 810_000_000_000_000_300;
/// The guild's text channel (type 0), where users talk to the bot.
pub const CHANNEL_ID: u64 = 810_000_000_000_000_400;

/// What the handlers share: the world behind one lock, and where the server listens.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    addr: SocketAddr,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gateway_url(&self) -> String {
        format!("ws://{}/gateway", self.addr)
    }
}

/// Stops accepting connections when the last handle goes.
#[derive(Debug)]
struct Server(JoinHandle<()>);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running fake Discord. Cheap to clone; the server stops when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct FakeDiscord {
    shared: Arc<Shared>,
    _server: Arc<Server>,
}

impl FakeDiscord {
    /// Binds 127.0.0.1 on a free port and serves REST and the gateway.
    ///
    /// # Panics
    /// If no local port can be bound.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake discord: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fake discord: local address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(format!("ws://{addr}/gateway"))),
            addr,
        });
        let app = rest::router(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("fake discord: server stopped: {e}");
            }
        });
        Self {
            shared,
            _server: Arc::new(Server(task)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// `http://127.0.0.1:PORT`: what the bot gets as its API base (`HttpBuilder::proxy`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Waits until the bot has identified and been sent READY and GUILD_CREATE.
    ///
    /// # Panics
    /// After `timeout`, with the requests seen so far.
    pub async fn wait_ready(&self, timeout: Duration) {
        self.wait_until(timeout, "the bot to IDENTIFY on the gateway", |d| {
            d.lock().gateway.ready.then_some(())
        })
        .await;
    }

    /// `<@BOT_ID>`, to put in a message that should mention the bot.
    pub fn mention(&self) -> String {
        format!("<@{BOT_ID}>")
    }

    /// `author` posts `content` in `channel_id` (the text channel or a thread): stored and
    /// dispatched as MESSAGE_CREATE (queued while the bot is disconnected). Returns its id.
    ///
    /// # Panics
    /// If the channel does not exist.
    pub async fn user_message(&self, channel_id: u64, author: &FakeUser, content: &str) -> u64 {
        let mut state = self.lock();
        state.register(author);
        let new = messages::NewMessage {
            channel_id,
            author_id: author.id,
            body: &json!({ "content": content }),
            files: &[],
            kind: 0,
            interaction_id: None,
            deferred: false,
        };
        let message = state.create_message(new).unwrap_or_else(|e| {
            panic!("fake discord: user message in {channel_id} refused: {e:?}")
        });
        state::id_of(&message["id"]).expect("fake discord: created message has an id")
    }

    /// `author` answers the message `reply_to` in `channel_id` with Discord's reply feature
    /// (`message_reference`): stored and dispatched as MESSAGE_CREATE. Returns its id.
    ///
    /// # Panics
    /// If the channel does not exist.
    pub async fn user_reply(
        &self,
        channel_id: u64,
        author: &FakeUser,
        content: &str,
        reply_to: u64,
    ) -> u64 {
        let mut state = self.lock();
        state.register(author);
        let body = json!({
            "content": content,
            "message_reference": { "message_id": reply_to.to_string() },
        });
        let new = messages::NewMessage {
            channel_id,
            author_id: author.id,
            body: &body,
            files: &[],
            kind: 0,
            interaction_id: None,
            deferred: false,
        };
        let message = state
            .create_message(new)
            .unwrap_or_else(|e| panic!("fake discord: reply in {channel_id} refused: {e:?}"));
        state::id_of(&message["id"]).expect("fake discord: created message has an id")
    }

    /// The DM channel between the bot and `user`, opened on first use.
    pub fn dm_channel(&self, user: &FakeUser) -> u64 {
        let mut state = self.lock();
        state.register(user);
        state.dm_channel(user.id)
    }

    /// `author` writes `content` to the bot in their DM (no guild, no member): stored and
    /// dispatched as MESSAGE_CREATE. Returns the DM channel id and the message id.
    pub async fn dm(&self, author: &FakeUser, content: &str) -> (u64, u64) {
        let channel = self.dm_channel(author);
        (channel, self.user_message(channel, author, content).await)
    }

    /// `user` clicks the button `custom_id` on a stored message: INTERACTION_CREATE type 3
    /// carrying the whole message. Returns the interaction id.
    ///
    /// # Panics
    /// If the message is not in `channel_id`.
    pub async fn click(
        &self,
        channel_id: u64,
        message_id: u64,
        user: &FakeUser,
        custom_id: &str,
    ) -> u64 {
        let data = json!({ "custom_id": custom_id, "component_type": 2 });
        self.interact(
            InteractionKind::Component,
            channel_id,
            Some(message_id),
            user,
            data,
        )
    }

    /// `user` runs the slash command `name` with `options` (e.g.
    /// `json!([{"name": "prompt", "type": 3, "value": "hi"}])`): INTERACTION_CREATE type 2.
    pub async fn slash(&self, channel_id: u64, user: &FakeUser, name: &str, options: Value) -> u64 {
        let registered = self
            .lock()
            .commands
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| state::id_of(&c["id"]));
        let id = registered.unwrap_or_else(|| self.lock().next_id());
        let mut data = json!({
            "id": id.to_string(),
            "name": name,
            "type": 1,
            "options": options,
            "guild_id": GUILD_ID.to_string(),
        });
        if self.lock().dm_channels.contains_key(&channel_id) {
            data = objects::outside_guild(data);
        }
        self.interact(InteractionKind::Command, channel_id, None, user, data)
    }

    /// `user` submits the modal `custom_id` with text-input `fields` (`(custom_id, value)`):
    /// INTERACTION_CREATE type 5, carrying `message_id`'s message if the modal came from one.
    pub async fn modal_submit(
        &self,
        channel_id: u64,
        message_id: Option<u64>,
        user: &FakeUser,
        custom_id: &str,
        fields: &[(&str, &str)],
    ) -> u64 {
        let rows: Vec<Value> = fields
            .iter()
            .map(|(id, value)| json!({ "type": 1, "components": [{ "type": 4, "custom_id": id, "value": value }] }))
            .collect();
        let data = json!({ "custom_id": custom_id, "components": rows });
        self.interact(
            InteractionKind::ModalSubmit,
            channel_id,
            message_id,
            user,
            data,
        )
    }

    fn interact(
        &self,
        kind: InteractionKind,
        channel_id: u64,
        message_id: Option<u64>,
        user: &FakeUser,
        data: Value,
    ) -> u64 {
        let mut state = self.lock();
        state.register(user);
        let channel = state
            .channel_json(channel_id)
            .unwrap_or_else(|_| panic!("fake discord: no channel {channel_id} to interact in"));
        let id = state.next_id();
        let stored = StoredInteraction {
            id,
            token: format!("fake-interaction-token-{id}"),
            kind,
            channel_id,
            message_id,
            original_message_id: None,
            acknowledged: false,
            created: std::time::Instant::now(),
            responses: Vec::new(),
        };
        let mut event = objects::interaction(&stored, user, &channel, &state.joined_at);
        if state.dm_channels.contains_key(&channel_id) {
            event = objects::outside_guild(event);
            event["channel"] = channel.clone();
        } else if let Some(guild) = state.guild_of(channel_id).filter(|g| *g != GUILD_ID) {
            // An interaction in an added guild names it, and so goes to that guild's shard.
            let guild = json!(guild.to_string());
            event["guild_id"] = guild.clone();
            event["guild"]["id"] = guild.clone();
            event["authorizing_integration_owners"]["0"] = guild;
        }
        event["data"] = data;
        if let Some(message_id) = message_id {
            let message = state
                .message_by_id(channel_id, message_id)
                .unwrap_or_else(|| {
                    panic!("fake discord: no message {message_id} in channel {channel_id}")
                });
            event["message"] = state.message_json(message);
        }
        state.interactions.insert(id, stored);
        state.gateway.dispatch("INTERACTION_CREATE", event);
        id
    }

    /// Dispatches any gateway event as is, for what the helpers above do not cover.
    pub fn dispatch(&self, event: &str, data: Value) {
        self.lock().gateway.dispatch(event, data);
    }

    /// Closes the gateway websocket with code 4000. serenity reconnects and RESUMEs; events
    /// dispatched meanwhile are queued and replayed after the RESUME.
    pub async fn disconnect(&self) {
        self.lock().gateway.close(4000);
        tokio::task::yield_now().await;
    }

    /// Adds a guild with one text channel, `channel_id` (the fake starts with [`GUILD_ID`]
    /// and [`CHANNEL_ID`]): users can talk there as in the first; its events go to shard
    /// [`shard_of`]`(guild_id, total)`, and a shard that is connected gets its GUILD_CREATE.
    /// Interactions (clicks, slash commands) in its channel and threads name it, and go to
    /// its shard too.
    pub fn add_guild(&self, guild_id: u64, channel_id: u64) {
        let mut state = self.lock();
        state.guilds.insert(guild_id, channel_id);
        if state.gateway.ready {
            let guild = gateway::guild_create(&state, guild_id);
            state
                .gateway
                .dispatch_in(Some(guild_id), "GUILD_CREATE", guild);
        }
    }

    /// Gives the guilds role `id` (named `role-<id>`), held by nobody yet: as a server has the
    /// roles its configuration names before anyone is given them.
    pub fn add_role(&self, id: u64) {
        self.lock().roles.push(id);
    }

    /// The `shard: [id, total]` of every IDENTIFY so far, in order.
    pub fn identified_shards(&self) -> Vec<(u32, u32)> {
        self.lock().gateway.identified.clone()
    }

    /// How many times the bot sent IDENTIFY (op 2).
    pub fn identify_count(&self) -> usize {
        self.lock().gateway.identify_count
    }

    /// How many times the bot RESUMEd (op 6) a session the fake accepted.
    pub fn resume_count(&self) -> usize {
        self.lock().gateway.resume_count
    }

    /// From now on `hook` is called with the channel (or thread) and the content of every
    /// message the bot creates or edits, as it stands after the change: a load harness's way
    /// to see an answer appear without polling [`FakeDiscord::messages`]. It runs under the
    /// fake's lock: it must be quick and must not call the fake.
    pub fn on_bot_text(&self, hook: impl Fn(u64, &str) + Send + Sync + 'static) {
        self.lock().bot_text_hook = Some(state::BotTextHook(Arc::new(hook)));
    }

    /// Every REST call so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// The messages in a channel or thread now, oldest first (ephemeral ones included).
    pub fn messages(&self, channel_id: u64) -> Vec<FakeMessage> {
        let state = self.lock();
        state
            .messages
            .get(&channel_id)
            .into_iter()
            .flatten()
            .map(|m| m.public.clone())
            .collect()
    }

    /// Every thread, in creation order.
    pub fn threads(&self) -> Vec<FakeThread> {
        self.lock()
            .threads
            .iter()
            .map(|t| t.public.clone())
            .collect()
    }

    /// A moderator reopens thread `id` (unarchived and unlocked), as Discord lets them.
    pub fn unlock_thread(&self, id: u64) {
        let mut state = self.lock();
        if let Some(t) = state.threads.iter_mut().find(|t| t.public.id == id) {
            t.public.archived = false;
            t.public.locked = false;
        }
    }

    /// The callback bodies and follow-up bodies the bot sent for an interaction, in order.
    pub fn interaction_responses(&self, interaction_id: u64) -> Vec<Value> {
        self.lock()
            .interactions
            .get(&interaction_id)
            .map(|i| i.responses.clone())
            .unwrap_or_default()
    }

    /// The commands of the last `PUT .../commands`, as the fake answered them (with ids).
    pub fn registered_commands(&self) -> Vec<Value> {
        self.lock().commands.clone()
    }

    /// How many typing indicators the bot started in a channel.
    pub fn typing_count(&self, channel_id: u64) -> usize {
        self.lock().typing.get(&channel_id).copied().unwrap_or(0)
    }

    /// The application's flags from now on (e.g. `0`: the Message Content intent is off in
    /// the developer portal).
    pub fn set_application_flags(&self, flags: u64) {
        self.shared.lock().application_flags = flags;
    }

    /// Fails the next `times` requests whose method is `method` and whose path contains
    /// `path_contains` (they are still recorded).
    pub fn fail_next(&self, method: &str, path_contains: &str, failure: Failure, times: usize) {
        self.lock().failures.push(PendingFailure {
            method: method.to_owned(),
            path_contains: path_contains.to_owned(),
            body_contains: String::new(),
            failure,
            remaining: times,
        });
    }

    /// Fails the next `times` requests of `method` whose JSON body contains `needle` (an
    /// approval card, say), whatever their path.
    pub fn fail_next_with_body(&self, method: &str, needle: &str, failure: Failure, times: usize) {
        self.lock().failures.push(PendingFailure {
            method: method.to_owned(),
            path_contains: String::new(),
            body_contains: needle.to_owned(),
            failure,
            remaining: times,
        });
    }

    /// Polls `f` every 20 ms until it returns `Some`.
    ///
    /// # Panics
    /// After `timeout`: "timed out waiting for {what}", with the latest requests.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut f: impl FnMut(&Self) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(value) = f(self) {
                return value;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("timed out waiting for {what}\n{}", self.recent_requests());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last requests, one a line, for failure messages.
    fn recent_requests(&self) -> String {
        let requests = self.requests();
        let skip = requests.len().saturating_sub(30);
        let mut dump = format!(
            "fake discord: {} requests, the last {}:\n",
            requests.len(),
            requests.len() - skip
        );
        for r in &requests[skip..] {
            let mut body = r.body.to_string();
            if body.len() > 300 {
                let cut = (0..=300)
                    .rev()
                    .find(|i| body.is_char_boundary(*i))
                    .unwrap_or(0);
                body.truncate(cut);
                body.push('…');
            }
            dump.push_str(&format!(
                "  {} {} -> {} {body}\n",
                r.method, r.path, r.status
            ));
        }
        dump
    }
}
