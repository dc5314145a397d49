//! What tests hand in and read back: users they play, messages, threads, recorded requests and
//! the failures they inject. Plain data, compared whole in assertions.

use serde_json::Value;

use super::state;

/// Someone in the guild, played by the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeUser {
    /// The user's id (any value other than [`BOT_ID`](super::BOT_ID)).
    pub id: u64,
    /// The username (unique on Discord), shown too unless `global_name` is set.
    pub name: String,
    /// The display name shown instead of the username (anyone may pick any).
    pub global_name: Option<String>,
    /// Role ids the member holds; the fake's guild lists every role some member holds.
    pub roles: Vec<u64>,
    /// Holds the Administrator permission (in the `permissions` interactions carry).
    pub admin: bool,
}

impl FakeUser {
    /// A member with no roles.
    pub fn new(id: u64, name: &str) -> Self {
        Self {
            id,
            name: name.to_owned(),
            global_name: None,
            roles: Vec::new(),
            admin: false,
        }
    }

    /// The same member showing `display` as their display name.
    #[must_use]
    pub fn showing(mut self, display: &str) -> Self {
        self.global_name = Some(display.to_owned());
        self
    }

    /// The same member with the Administrator permission.
    #[must_use]
    pub fn as_admin(mut self) -> Self {
        self.admin = true;
        self
    }

    /// The same member holding `roles`.
    #[must_use]
    pub fn with_roles(mut self, roles: &[u64]) -> Self {
        self.roles = roles.to_vec();
        self
    }
}

/// A message as it stands now (after edits), in a channel or thread.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeMessage {
    /// Its snowflake.
    pub id: u64,
    /// The channel or thread it is in.
    pub channel_id: u64,
    /// Who wrote it ([`BOT_ID`](super::BOT_ID) for the bot's messages and interaction responses).
    pub author_id: u64,
    /// The text.
    pub content: String,
    /// The embeds as last sent (a JSON array).
    pub embeds: Value,
    /// The component rows as last sent (a JSON array).
    pub components: Value,
    /// Uploaded files: `(filename, bytes)`.
    pub attachments: Vec<(String, Vec<u8>)>,
    /// How many times it was edited.
    pub edits: usize,
    /// Message flags; 64 is ephemeral (see [`FakeMessage::is_ephemeral`]).
    pub flags: u64,
    /// `allowed_mentions` as last sent (`Null` if never).
    pub allowed_mentions: Value,
    /// The message it replies to (`message_reference`).
    pub reply_to: Option<u64>,
    /// The interaction whose response or follow-up this is.
    pub interaction_id: Option<u64>,
    /// Emoji the bot reacted with.
    pub reactions: Vec<String>,
}

impl FakeMessage {
    /// Only the invoking user would see it (an ephemeral interaction response).
    pub fn is_ephemeral(&self) -> bool {
        self.flags & state::EPHEMERAL != 0
    }
}

/// A thread the bot started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeThread {
    /// Its id; equal to the starter message's id when started from a message.
    pub id: u64,
    /// The text channel it hangs off.
    pub parent_id: u64,
    /// Its name.
    pub name: String,
    /// The message it was started from, if any.
    pub starter_message_id: Option<u64>,
    /// Archived (posting unarchives it unless locked).
    pub archived: bool,
    /// Locked.
    pub locked: bool,
    /// Channel type: 11 public, 12 private.
    pub kind: u8,
    /// Who created it.
    pub owner_id: u64,
    /// The bot is a member (it created or joined it).
    pub bot_joined: bool,
}

/// One REST call the bot made.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, e.g. `/api/v10/channels/1/messages`.
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The JSON body, or the `payload_json` part of a multipart body; `Null` if none.
    pub body: Value,
    /// Uploaded files: `(filename, bytes)`.
    pub files: Vec<(String, Vec<u8>)>,
    /// The status the fake answered.
    pub status: u16,
}

/// How [`FakeDiscord::fail_next`](super::FakeDiscord::fail_next) fails a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// 429 with Discord's body and `retry-after`/`x-ratelimit-*` headers.
    RateLimited {
        /// Seconds until the bot may retry.
        retry_after: f64,
        /// A global (rather than per-route) limit.
        global: bool,
    },
    /// This status with a Discord JSON error body.
    Status(u16),
}
