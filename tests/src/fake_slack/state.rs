//! What the fake remembers: the workspace (channels, messages, views, files, users), every Web API
//! call, the open Socket Mode connections and the envelopes waiting for one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::events::EPOCH;
use super::{BOT_USER_ID, FakeSlackMessage};

/// Shared by the handle, the HTTP handlers and the websocket tasks.
pub(super) struct Shared {
    ledger: Mutex<Ledger>,
    /// `http://127.0.0.1:PORT`.
    pub(super) base_url: String,
    /// Cancelled when the last [`super::FakeSlack`] handle is dropped: stops the server and
    /// closes every websocket.
    pub(super) stop: CancellationToken,
}

impl Shared {
    pub(super) fn new(base_url: String) -> Self {
        let mut ledger = Ledger::default();
        ledger
            .users
            .insert(BOT_USER_ID.to_owned(), super::events::BOT_NAME.to_owned());
        Self {
            ledger: Mutex::new(ledger),
            base_url,
            stop: CancellationToken::new(),
        }
    }

    /// The ledger; a panic in another test thread must not hide what was recorded.
    pub(super) fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A message in a channel as the fake stores it.
pub(super) type StoredMessage = FakeSlackMessage;

/// A frame for one websocket task.
#[derive(Debug)]
pub(super) enum Outbound {
    /// A JSON text frame (an envelope).
    Frame(String),
    /// Send `{"type":"disconnect"}`, wait briefly for the client to close, then close.
    Disconnect,
}

/// An open Socket Mode connection that has been sent `hello`.
pub(super) struct Connection {
    pub(super) id: usize,
    pub(super) outbound: UnboundedSender<Outbound>,
}

/// A file announced with `files.getUploadURLExternal`.
#[derive(Debug, Clone)]
pub(super) struct StoredFile {
    pub(super) id: String,
    pub(super) filename: String,
    /// `None` until the bytes were POSTed to the upload URL.
    pub(super) bytes: Option<Vec<u8>>,
    pub(super) title: Option<String>,
    pub(super) channel: Option<String>,
    pub(super) thread_ts: Option<String>,
}

/// A rate-limit answer armed with `fail_next`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    pub(super) times: usize,
    pub(super) retry_after_secs: u64,
}

/// Everything recorded, behind one lock (never held across an await).
#[derive(Default)]
pub(super) struct Ledger {
    counter: u64,
    /// Every Web API call in order: method and arguments.
    pub(super) calls: Vec<(String, Value)>,
    pub(super) channels: HashMap<String, Vec<StoredMessage>>,
    /// Views as `views.open` returned them, in order.
    pub(super) opened_views: Vec<Value>,
    /// The current state of each view by id.
    pub(super) views: HashMap<String, Value>,
    pub(super) files: Vec<StoredFile>,
    pub(super) usergroups: HashMap<String, Vec<String>>,
    /// Known users: id → name.
    pub(super) users: HashMap<String, String>,
    /// Display names that differ from the name: id → display name.
    pub(super) display_names: HashMap<String, String>,
    /// DM channel of each user id.
    pub(super) dm_channels: HashMap<String, String>,
    pub(super) failures: HashMap<String, Failure>,
    /// Methods the app has no scope for: they answer `missing_scope`.
    pub(super) unscoped: HashSet<String>,
    /// The bot token's scopes as `x-oauth-scopes` names them; `None`: the manifest's.
    pub(super) scopes: Option<Vec<String>>,
    /// `(method, needle, error)`: a call of `method` whose arguments contain `needle` answers
    /// `error` (Slack's answer to blocks it will not show).
    pub(super) refused: Vec<(String, String, String)>,
    /// Trigger ids handed out with clicks, commands and submissions.
    /// When each was handed out: Slack honours a trigger for 3 s, once.
    pub(super) triggers: HashMap<String, std::time::Instant>,
    /// Acks in order: envelope id and the optional response payload.
    pub(super) acks: Vec<(String, Option<Value>)>,
    /// Every envelope sent (or queued), in order.
    pub(super) envelopes: Vec<Value>,
    /// The last `events_api` envelope, for redelivery.
    pub(super) last_event: Option<Value>,
    pub(super) connections: Vec<Connection>,
    /// Envelopes that found no open connection; sent on the next one.
    pub(super) pending: VecDeque<String>,
    /// Websocket connections accepted so far.
    pub(super) connection_count: usize,
    /// Connections that were sent `hello` so far.
    pub(super) hello_count: usize,
    /// Every envelope goes to every open connection (each copy with its own envelope id),
    /// not to one: the same event reaching several nodes or connections.
    pub(super) fan_out: bool,
    /// With [`super::FakeSlack::spread`]: the seeded generator that picks each envelope's
    /// connection (xorshift64*); `None`: the oldest open connection takes every envelope.
    pub(super) spread: Option<u64>,
    /// Envelopes a connection was sent and has not acknowledged (with `spread` only): the
    /// connection's id and the envelope, sent again elsewhere if the connection goes.
    pub(super) in_flight: HashMap<String, (usize, Value)>,
    /// Told of every message the bot posts or updates (see `FakeSlack::on_bot_text`).
    pub(super) bot_text_hook: Option<BotTextHook>,
}

/// A watcher of the bot's messages: called with the channel, the thread's root ts (if any)
/// and the text, under the ledger's lock, so it must be quick and must not call the fake.
pub(super) type BotTextHook = std::sync::Arc<dyn Fn(&str, Option<&str>, &str) + Send + Sync>;

impl Ledger {
    /// The index of the open connection that takes the next envelope: a seeded pick with
    /// [`super::FakeSlack::spread`], else the oldest.
    pub(super) fn pick_connection(&mut self) -> usize {
        let Some(state) = self.spread.as_mut() else {
            return 0;
        };
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let n = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (n % self.connections.len().max(1) as u64) as usize
    }

    /// A fresh number (ids, tickets, ts).
    pub(super) fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// A new message timestamp, later than all before: `1700000000.000100`, `….000200`, ….
    pub(super) fn next_ts(&mut self) -> String {
        let n = self.next();
        format!("{}.{:06}", EPOCH + n / 10_000, (n % 10_000) * 100)
    }

    /// A new id like `F0000007` with Slack's one-letter kind prefix.
    pub(super) fn next_id(&mut self, prefix: &str) -> String {
        let n = self.next();
        format!("{prefix}{n:07}")
    }

    /// A new trigger id, remembered as valid for `views.open`.
    pub(super) fn next_trigger(&mut self) -> String {
        let n = self.next();
        let trigger = format!("{n}.{}.fake{n:04x}", super::TEAM_ID);
        self.triggers
            .insert(trigger.clone(), std::time::Instant::now());
        trigger
    }

    /// The DM channel with `user`, created on first use.
    pub(super) fn dm_channel(&mut self, user: &str) -> String {
        if let Some(channel) = self.dm_channels.get(user) {
            return channel.clone();
        }
        let channel = self.next_id("D");
        self.dm_channels.insert(user.to_owned(), channel.clone());
        channel
    }

    /// The user a DM channel is with.
    pub(super) fn dm_user(&self, channel: &str) -> Option<String> {
        self.dm_channels
            .iter()
            .find(|(_, c)| c.as_str() == channel)
            .map(|(user, _)| user.clone())
    }

    /// Stores a message and returns its ts.
    pub(super) fn store(&mut self, channel: &str, message: StoredMessage) -> String {
        self.tell_hook(channel, &message);
        let ts = message.ts.clone();
        self.channels
            .entry(channel.to_owned())
            .or_default()
            .push(message);
        ts
    }

    /// Shows a visible bot message as it now stands to the watcher of `FakeSlack::on_bot_text`.
    pub(super) fn tell_hook(&self, channel: &str, message: &StoredMessage) {
        if let Some(hook) = &self.bot_text_hook
            && message.user == BOT_USER_ID
            && message.ephemeral_for.is_none()
        {
            hook(channel, message.thread_ts.as_deref(), &message.text);
        }
    }

    /// The message at `ts` in `channel`.
    pub(super) fn message_mut(&mut self, channel: &str, ts: &str) -> Option<&mut StoredMessage> {
        self.channels
            .get_mut(channel)?
            .iter_mut()
            .find(|m| m.ts == ts)
    }

    /// Consumes one armed failure of `method`, returning its Retry-After.
    pub(super) fn take_failure(&mut self, method: &str) -> Option<u64> {
        let failure = self.failures.get_mut(method)?;
        if failure.times == 0 {
            return None;
        }
        failure.times -= 1;
        Some(failure.retry_after_secs)
    }

    /// The last `n` calls, one per line, for timeout messages.
    pub(super) fn recent_calls(&self, n: usize) -> String {
        let start = self.calls.len().saturating_sub(n);
        self.calls[start..]
            .iter()
            .map(|(method, args)| format!("  {method} {args}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}
