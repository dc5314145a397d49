//! A fake Slack on 127.0.0.1 that the real slack-morphism client talks to: the Web API under
//! `/api/{method}` and a Socket Mode websocket announced by `apps.connections.open`.
//!
//! ```ignore
//! let slack = FakeSlack::start().await;
//! // point SlackClientHyperConnector::with_slack_api_url at format!("{}/api", slack.base_url())
//! slack.wait_connected(WAIT).await;
//! let alice = slack.user("U0ALICE", "alice");
//! let ts = slack.app_mention(CHANNEL_ID, &alice, "<@U0BOT> hello").await;
//! let reply = slack
//!     .wait_until(WAIT, "a threaded reply", |s| {
//!         s.messages(CHANNEL_ID).into_iter().find(|m| m.thread_ts.as_deref() == Some(&ts))
//!     })
//!     .await;
//! ```
//!
//! # Layout
//! - this file: [`FakeSlack`]: starting, configuring and inspecting what the client did.
//! - `drive.rs`: what people do: mentions, messages, clicks, submissions, slash commands, and
//!   Slack's own redeliveries and disconnects.
//! - `state.rs`: the ledger behind one lock: workspace, calls, connections, queued envelopes.
//! - `web_api.rs`: routes, argument parsing (form, JSON, query), 429 answers, the upload URL.
//! - `methods.rs`: each Web API method.
//! - `socket.rs`: the Socket Mode websocket: hello, envelopes to one connection, acks, disconnect.
//! - `events.rs`: JSON builders of complete Slack payloads.

mod drive;
mod events;
mod methods;
mod socket;
mod state;
mod web_api;

use std::sync::Arc;
use std::time::Duration;

use hmac::{KeyInit, Mac};
use serde_json::Value;

pub use events::event_callback_json;
use state::{Failure, Shared};

/// The fake workspace's team id.
pub const TEAM_ID: &str = "T0FAKE";
/// The bot scopes of the README's app manifest: what the fake's token has unless a test
/// grants fewer ([`FakeSlack::grant_scopes`]).
pub const MANIFEST_SCOPES: [&str; 13] = [
    "app_mentions:read",
    "chat:write",
    "channels:history",
    "channels:read",
    "groups:history",
    "groups:read",
    "im:history",
    "im:write",
    "files:write",
    "reactions:write",
    "users:read",
    "usergroups:read",
    "commands",
];

/// The bot user the client authenticates as (`auth.test`); mentions look like `<@U0BOT>`.
pub const BOT_USER_ID: &str = "U0BOT";
/// A public channel that always exists (`#general`).
pub const CHANNEL_ID: &str = "C0GENERAL";

/// A human in the fake workspace; events are sent as this user. Users passed to any event are
/// known to `users.info` afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackUser {
    /// `U…` id.
    pub id: String,
    /// The handle (`name` / `username`).
    pub name: String,
}

/// A message as it currently stands in a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeSlackMessage {
    /// Its timestamp id.
    pub ts: String,
    /// The thread's root ts for replies.
    pub thread_ts: Option<String>,
    /// Who posted it: a user id, or [`BOT_USER_ID`].
    pub user: String,
    /// The `text` (or `markdown_text`) last set.
    pub text: String,
    /// The blocks last set (JSON), `Null` if none were sent.
    pub blocks: Value,
    /// How many times `chat.update` changed it.
    pub edits: usize,
    /// For `chat.postEphemeral`: the only user who sees it.
    pub ephemeral_for: Option<String>,
    /// Reaction names on it now (`reactions.add`, less `reactions.remove`).
    pub reactions: Vec<String>,
}

/// An uploaded file: filename, bytes, channel and thread it was shared to.
pub type UploadedFile = (String, Vec<u8>, Option<String>, Option<String>);

/// Stops the server when the last [`FakeSlack`] handle is dropped.
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.cancel();
    }
}

/// A running fake Slack. Cheap to clone; the server stops when the last clone is dropped.
#[derive(Clone)]
pub struct FakeSlack {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
}

impl std::fmt::Debug for FakeSlack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSlack")
            .field("base_url", &self.shared.base_url)
            .finish()
    }
}

impl FakeSlack {
    /// Binds 127.0.0.1 on a free port and serves.
    ///
    /// # Panics
    /// If no local port can be bound.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake slack: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fake slack: local address");
        let shared = Arc::new(Shared::new(format!("http://{addr}")));
        let app = web_api::router(Arc::clone(&shared));
        let stop = shared.stop.clone();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await });
            let _ = serve.await;
        });
        let stop = Arc::new(StopOnDrop(Arc::clone(&shared)));
        Self {
            shared,
            _stop: stop,
        }
    }

    /// `http://127.0.0.1:PORT`; the Web API URL is this plus `/api`.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// Waits until a Socket Mode connection is open and was sent `hello`.
    ///
    /// # Panics
    /// On timeout.
    pub async fn wait_connected(&self, timeout: Duration) {
        self.wait_until(timeout, "a Socket Mode connection", |s| {
            (!s.shared.ledger().connections.is_empty()).then_some(())
        })
        .await;
    }

    /// Socket Mode connections open now (each node opens up to two).
    pub fn open_connections(&self) -> usize {
        let mut ledger = self.shared.ledger();
        ledger.connections.retain(|c| !c.outbound.is_closed());
        ledger.connections.len()
    }

    /// From now on every envelope goes to every open connection, each copy with its own
    /// envelope id, instead of to one: the same event, click or command reaching several
    /// nodes (or one node's several connections), as redeliveries and several Socket Mode
    /// connections make happen on Slack.
    pub fn fan_out(&self, on: bool) {
        self.shared.ledger().fan_out = on;
    }

    /// From now on each envelope goes to one open connection picked at random from `seed`
    /// (reproducibly), not to the oldest, as Slack spreads envelopes over an app's
    /// connections; and an event whose connection closes before acknowledging it (its node
    /// was killed) is sent again to another, as Slack retries an unacknowledged event.
    pub fn spread(&self, seed: u64) {
        self.shared.ledger().spread = Some(seed | 1);
    }

    /// Websocket connections opened so far (reconnects count).
    pub fn connection_count(&self) -> usize {
        self.shared.ledger().connection_count
    }

    /// Registers a user (so `users.info` knows them) and returns it.
    pub fn user(&self, id: &str, name: &str) -> SlackUser {
        let user = SlackUser {
            id: id.to_owned(),
            name: name.to_owned(),
        };
        self.remember(&user);
        user
    }

    fn remember(&self, user: &SlackUser) {
        self.shared
            .ledger()
            .users
            .insert(user.id.clone(), user.name.clone());
    }

    /// Registers a user whose profile shows `display` instead of their handle `name`.
    pub fn user_showing(&self, id: &str, name: &str, display: &str) -> SlackUser {
        let user = self.user(id, name);
        self.shared
            .ledger()
            .display_names
            .insert(id.to_owned(), display.to_owned());
        user
    }

    /// Sets the members `usergroups.users.list` answers for `id`.
    pub fn set_usergroup(&self, id: &str, members: &[&str]) {
        let members = members.iter().map(|m| (*m).to_owned()).collect();
        self.shared
            .ledger()
            .usergroups
            .insert(id.to_owned(), members);
    }

    /// The DM channel (`D…`) with `user_id`, created on first use (as `conversations.open` does).
    pub fn dm_channel(&self, user_id: &str) -> String {
        self.shared.ledger().dm_channel(user_id)
    }

    /// Envelope ids acknowledged, in order.
    pub fn acks(&self) -> Vec<String> {
        self.shared
            .ledger()
            .acks
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The `payload` of the ack of `envelope_id` (a slash command reply, a `response_action`).
    pub fn ack_payload(&self, envelope_id: &str) -> Option<Value> {
        let ledger = self.shared.ledger();
        ledger
            .acks
            .iter()
            .find(|(id, _)| id == envelope_id)
            .and_then(|(_, p)| p.clone())
    }

    /// Every envelope sent (or queued) so far, in order.
    pub fn envelopes(&self) -> Vec<Value> {
        self.shared.ledger().envelopes.clone()
    }

    /// From now on `hook` is called with the channel, the thread's root ts (`None` at the top
    /// level) and the text of every visible message the bot posts or updates, as it stands
    /// after the change: a load harness's way to see an answer appear without polling
    /// [`FakeSlack::messages`]. It runs under the fake's lock: it must be quick and must not
    /// call the fake.
    pub fn on_bot_text(&self, hook: impl Fn(&str, Option<&str>, &str) + Send + Sync + 'static) {
        self.shared.ledger().bot_text_hook = Some(Arc::new(hook));
    }

    /// The arguments of each call to `method`, in order, including calls answered with 429. Form
    /// bodies and queries become JSON objects; JSON strings in `blocks`, `view`, … are parsed.
    /// Posts to response URLs are recorded as `response_url`.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        let ledger = self.shared.ledger();
        ledger
            .calls
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, a)| a.clone())
            .collect()
    }

    /// How many calls each method got so far (429 answers included), without copying their
    /// arguments: what a load harness divides by its turns.
    pub fn call_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for (method, _) in &self.shared.ledger().calls {
            *counts.entry(method.clone()).or_default() += 1;
        }
        counts
    }

    /// The messages of `channel` as they stand now (deleted ones are gone), oldest first.
    pub fn messages(&self, channel: &str) -> Vec<FakeSlackMessage> {
        self.shared
            .ledger()
            .channels
            .get(channel)
            .cloned()
            .unwrap_or_default()
    }

    /// Views as `views.open` returned them (with `id` and `hash`), in order.
    pub fn opened_views(&self) -> Vec<Value> {
        self.shared.ledger().opened_views.clone()
    }

    /// The current state of view `id` (after any `views.update`).
    pub fn view(&self, id: &str) -> Option<Value> {
        self.shared.ledger().views.get(id).cloned()
    }

    /// Files whose bytes were uploaded: filename, bytes, and the channel and thread
    /// `files.completeUploadExternal` shared them to (`None` before that).
    pub fn uploaded_files(&self) -> Vec<UploadedFile> {
        let ledger = self.shared.ledger();
        ledger
            .files
            .iter()
            .filter_map(|f| {
                let bytes = f.bytes.clone()?;
                Some((
                    f.filename.clone(),
                    bytes,
                    f.channel.clone(),
                    f.thread_ts.clone(),
                ))
            })
            .collect()
    }

    /// The next `times` calls of `method` answer HTTP 429 with `Retry-After: retry_after_secs`
    /// and `{"ok":false,"error":"ratelimited"}`.
    pub fn fail_next(&self, method: &str, times: usize, retry_after_secs: u64) {
        let failure = Failure {
            times,
            retry_after_secs,
        };
        self.shared
            .ledger()
            .failures
            .insert(method.to_owned(), failure);
    }

    /// The bot scopes every answer's `x-oauth-scopes` header names from now on (by default
    /// [`MANIFEST_SCOPES`], what the README's manifest asks for).
    pub fn grant_scopes(&self, scopes: &[&str]) {
        self.shared.ledger().scopes = Some(scopes.iter().map(|s| (*s).to_owned()).collect());
    }

    /// From now on `method` answers `missing_scope`, as for an app installed without the
    /// scope it needs.
    pub fn withhold_scope(&self, method: &str) {
        self.shared.ledger().unscoped.insert(method.to_owned());
    }

    /// From now on a call of `method` whose arguments contain `needle` answers
    /// `{"ok":false,"error":error}` (e.g. `invalid_blocks` for a card Slack will not show).
    pub fn refuse_calls_containing(&self, method: &str, needle: &str, error: &str) {
        self.shared
            .ledger()
            .refused
            .push((method.to_owned(), needle.to_owned(), error.to_owned()));
    }

    /// Polls `f` every 20 ms until it returns `Some`.
    ///
    /// # Panics
    /// After `timeout`, with `timed out waiting for {what}` and the recent calls.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut f: impl FnMut(&Self) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(found) = f(self) {
                return found;
            }
            if tokio::time::Instant::now() >= deadline {
                let ledger = self.shared.ledger();
                panic!(
                    "timed out waiting for {what}\nrecent Web API calls:\n{}\nacks: {:?}\nopen connections: {}",
                    ledger.recent_calls(20),
                    ledger.acks.iter().map(|(id, _)| id).collect::<Vec<_>>(),
                    ledger.connections.len(),
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The `X-Slack-Signature` Slack sends with an Events API (HTTP) request:
/// `v0=` + hex(HMAC-SHA256(secret, `v0:{timestamp}:{body}`)). Send it with
/// `X-Slack-Request-Timestamp: {timestamp}`.
pub fn sign(signing_secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(signing_secret.as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("v0={hex}")
}

#[cfg(test)]
mod tests;
