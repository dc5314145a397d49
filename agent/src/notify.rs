//! What a notification is, on the wire between the notify tool and a gateway's
//! `POST /v1/api/notify`: the tool's parameters as JSON (plus the sending workstream, so a
//! reply can continue it, the user the tool resolved the username to, and who asked), checked
//! the same way on both sides, and the per-target answer. [`attribution`] is the line every
//! notification starts with, so the person reading it knows who asked and from which thread.

mod ledger;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::store::users::is_typed_name;

/// A delivered notification, as the [`Ledger`] hands it back.
pub use crate::store::notifications::SentNotification;
pub use ledger::Ledger;

/// Longest notification text, in characters.
pub const MAX_MESSAGE_CHARS: usize = 2000;
/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest `channel_id`.
const MAX_CHANNEL_ID_LEN: usize = 64;
/// Most notifications one account or channel receives per [`RECIPIENT_WINDOW_MS`], from all
/// threads and people together: nobody can flood someone by opening more threads.
pub const MAX_PER_RECIPIENT: i64 = 10;
/// Most notifications one person's turns deliver per [`RECIPIENT_WINDOW_MS`], from all their
/// threads and to anyone (a turn no person started counts against its thread instead).
pub const MAX_PER_REQUESTER: i64 = 20;
/// The window [`MAX_PER_RECIPIENT`] and [`MAX_PER_REQUESTER`] count in: an hour.
pub const RECIPIENT_WINDOW_MS: i64 = 60 * 60 * 1000;

/// The platforms a notification can go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelType {
    /// Discord (channel ids are numbers).
    Discord,
    /// Slack (channel ids like `C0123ABC`).
    Slack,
}

impl ChannelType {
    /// Every platform, in the order a user's identities are notified.
    pub const ALL: [ChannelType; 2] = [ChannelType::Discord, ChannelType::Slack];

    /// The platform name, as in identities and workstream keys.
    pub const fn as_str(self) -> &'static str {
        match self {
            ChannelType::Discord => "discord",
            ChannelType::Slack => "slack",
        }
    }

    /// The platform named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ChannelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of `POST /v1/api/notify`: the notify tool's parameters, and the workstream that
/// sent it (replies to the notification continue it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyRequest {
    /// Plain text, at most [`MAX_MESSAGE_CHARS`].
    pub message: String,
    /// A short title, shown as a bold prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A sandpiper username: every linked Discord and Slack identity gets a DM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// `discord` or `slack`, with `channel_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_type: Option<String>,
    /// A channel on that platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    /// The workstream that sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workstream: Option<String>,
    /// The id of the user the tool resolved `username` to: the gateway delivers to that
    /// user's own accounts, whatever the name means by the time it arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The person whose turn sent it, as records name them (`None`: no person, a watch's
    /// turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Who the turn that sent it was charged to (a sandpiper user id): a reply to it
    /// continues the thread at their charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charged_to: Option<String>,
}

/// The first line of every delivered notification: who asked for it and from which thread,
/// so nobody mistakes a thread's message for the bot's own, or one person's for another's.
pub fn attribution(request: &NotifyRequest) -> String {
    match (
        request.requested_by.as_deref(),
        request.workstream.as_deref(),
    ) {
        (Some(who), Some(thread)) => format!("[sandpiper, asked by {who} in thread {thread}]"),
        (None, Some(thread)) => format!("[sandpiper, from thread {thread}]"),
        (Some(who), None) => format!("[sandpiper, asked by {who}]"),
        (None, None) => "[sandpiper]".to_owned(),
    }
}

/// Who a notification counts against besides its recipient ([`MAX_PER_REQUESTER`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requester {
    /// The person whose turn asked for it (their username), in whichever thread.
    Person(String),
    /// A turn no person started (a watch's): its thread.
    Thread(String),
}

impl NotifyRequest {
    /// Who this request counts against; `None` for one that names neither a person nor a
    /// thread.
    pub fn requester(&self) -> Option<Requester> {
        match (&self.requested_by, &self.workstream) {
            (Some(person), _) => Some(Requester::Person(person.clone())),
            (None, Some(thread)) => Some(Requester::Thread(thread.clone())),
            (None, None) => None,
        }
    }
}

/// How many notifications went out within the last [`RECIPIENT_WINDOW_MS`], as the limits
/// count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recent {
    /// To this recipient (an account's DM or a channel), from anyone.
    pub to_recipient: i64,
    /// By this request's [`Requester`], to anyone.
    pub by_requester: i64,
}

/// Why a notification is not sent now; the text is the tool's answer to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateRefusal {
    /// The recipient got its hour's share.
    #[error(
        "not sent: {0} notifications went there within the hour, from all threads together \
         (at most {MAX_PER_RECIPIENT}); wait, or tell the person in one message"
    )]
    Recipient(i64),
    /// The person who asked used their hour's share.
    #[error(
        "not sent: {1} asked for {0} notifications within the hour, across their threads (at \
         most {MAX_PER_REQUESTER}); wait, or combine what is left into one message"
    )]
    Person(i64, String),
    /// A thread nobody asked in (a watch's) used its hour's share.
    #[error(
        "not sent: this thread has sent {0} notifications within the hour (at most \
         {MAX_PER_REQUESTER}); wait, or combine what is left into one message"
    )]
    Thread(i64),
}

/// The hourly limits, the same on every gateway: a recipient gets at most
/// [`MAX_PER_RECIPIENT`], and a requester sends at most [`MAX_PER_REQUESTER`], whatever
/// threads they come from.
pub fn within_limits(recent: Recent, requester: Option<&Requester>) -> Result<(), RateRefusal> {
    if recent.to_recipient >= MAX_PER_RECIPIENT {
        return Err(RateRefusal::Recipient(recent.to_recipient));
    }
    match requester {
        Some(Requester::Person(name)) if recent.by_requester >= MAX_PER_REQUESTER => {
            Err(RateRefusal::Person(recent.by_requester, name.clone()))
        }
        Some(Requester::Thread(_)) if recent.by_requester >= MAX_PER_REQUESTER => {
            Err(RateRefusal::Thread(recent.by_requester))
        }
        _ => Ok(()),
    }
}

/// Who a notification is for, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A person: a DM on each platform they linked.
    User(String),
    /// A channel on one platform.
    Channel {
        /// The platform.
        platform: ChannelType,
        /// The channel id.
        id: String,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::User(name) => write!(f, "@{name}"),
            Target::Channel { platform, id } => write!(f, "{platform}:{id}"),
        }
    }
}

/// Why a notification request is malformed: said to the model (tool) or the caller (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotifyInputError {
    /// The message is empty.
    #[error("`message` is empty: say what the notification should tell")]
    EmptyMessage,
    /// The message is too long.
    #[error("`message` has {0} characters; the limit is {MAX_MESSAGE_CHARS}")]
    MessageTooLong(usize),
    /// The title is too long.
    #[error("`title` has {0} characters; the limit is {MAX_TITLE_CHARS}")]
    TitleTooLong(usize),
    /// Both a username and a channel, or neither.
    #[error(
        "give either `username` (a person: a DM on each platform they linked) or \
         `channel_type` with `channel_id` (a channel), not both and not neither"
    )]
    TargetChoice,
    /// `channel_type` without `channel_id` or the other way round.
    #[error("`channel_type` and `channel_id` go together: give both")]
    HalfChannel,
    /// An unknown platform.
    #[error("`channel_type` must be `discord` or `slack`, not `{0}`")]
    BadChannelType(String),
    /// A channel id that cannot be one.
    #[error("`{0}` is not a {1} channel id")]
    BadChannelId(String, ChannelType),
    /// A username that cannot be one.
    #[error(
        "`{0}` is not a valid username (a-z, 0-9, `_`, `.`, `-`, in any case; at most 32 characters; a legacy Discord name may end in `#1234`)"
    )]
    BadUsername(String),
}

impl NotifyRequest {
    /// Checks the request and says who it is for.
    pub fn target(&self) -> Result<Target, NotifyInputError> {
        let chars = self.message.chars().count();
        if self.message.trim().is_empty() {
            return Err(NotifyInputError::EmptyMessage);
        }
        if chars > MAX_MESSAGE_CHARS {
            return Err(NotifyInputError::MessageTooLong(chars));
        }
        if let Some(title) = &self.title {
            let n = title.chars().count();
            if n > MAX_TITLE_CHARS {
                return Err(NotifyInputError::TitleTooLong(n));
            }
        }
        let blank = |s: &Option<String>| s.as_deref().is_none_or(|s| s.trim().is_empty());
        match (
            blank(&self.username),
            blank(&self.channel_type),
            blank(&self.channel_id),
        ) {
            (false, true, true) => {
                let name = self.username.as_deref().unwrap_or_default().trim();
                let name = name.strip_prefix('@').unwrap_or(name);
                if !is_typed_name(name) {
                    return Err(NotifyInputError::BadUsername(name.to_owned()));
                }
                Ok(Target::User(name.to_owned()))
            }
            (true, false, false) => {
                let kind = self.channel_type.as_deref().unwrap_or_default().trim();
                let platform = ChannelType::parse(&kind.to_ascii_lowercase())
                    .ok_or_else(|| NotifyInputError::BadChannelType(kind.to_owned()))?;
                let id = self.channel_id.as_deref().unwrap_or_default().trim();
                if !channel_id_ok(platform, id) {
                    return Err(NotifyInputError::BadChannelId(id.to_owned(), platform));
                }
                Ok(Target::Channel {
                    platform,
                    id: id.to_owned(),
                })
            }
            (true, true, true) | (false, _, _) => Err(NotifyInputError::TargetChoice),
            _ => Err(NotifyInputError::HalfChannel),
        }
    }
}

/// Discord ids are numbers; Slack ids are upper-case letters and digits.
fn channel_id_ok(platform: ChannelType, id: &str) -> bool {
    if id.is_empty() || id.len() > MAX_CHANNEL_ID_LEN {
        return false;
    }
    match platform {
        ChannelType::Discord => id.parse::<u64>().is_ok_and(|n| n > 0),
        ChannelType::Slack => id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()),
    }
}

/// How one target fared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetStatus {
    /// `discord:<channel>`, `slack:<channel>`, or a person's identity (`discord:@alice`).
    pub target: String,
    /// `sent`, or `failed: <reason>`.
    pub status: String,
}

impl TargetStatus {
    /// Delivered.
    pub fn sent(target: impl Into<String>) -> Self {
        Self {
            target: target.into(),
            status: "sent".into(),
        }
    }

    /// Not delivered, and why.
    pub fn failed(target: impl Into<String>, reason: impl fmt::Display) -> Self {
        Self {
            target: target.into(),
            status: format!("failed: {reason}"),
        }
    }

    /// Whether it was delivered.
    pub fn is_sent(&self) -> bool {
        self.status == "sent"
    }
}

/// The answer of `POST /v1/api/notify` (200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyResponse {
    /// Per target, in delivery order.
    pub results: Vec<TargetStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_hourly_limits_count_the_recipient_and_the_requester() {
        let recent = |to_recipient, by_requester| Recent {
            to_recipient,
            by_requester,
        };
        let bob = Requester::Person("bob".into());
        let watch = Requester::Thread("discord:1".into());
        assert_eq!(within_limits(recent(9, 19), Some(&bob)), Ok(()));
        assert_eq!(
            within_limits(recent(10, 0), Some(&bob)),
            Err(RateRefusal::Recipient(10))
        );
        assert_eq!(
            within_limits(recent(0, 20), Some(&bob)),
            Err(RateRefusal::Person(20, "bob".into()))
        );
        assert_eq!(
            within_limits(recent(0, 20), Some(&watch)),
            Err(RateRefusal::Thread(20))
        );
        assert_eq!(within_limits(recent(0, 20), None), Ok(()));
        let asked = NotifyRequest {
            requested_by: Some("bob".into()),
            workstream: Some("discord:1".into()),
            ..Default::default()
        };
        assert_eq!(asked.requester(), Some(bob));
        let by_watch = NotifyRequest {
            requested_by: None,
            ..asked
        };
        assert_eq!(by_watch.requester(), Some(watch));
    }

    fn req(f: impl FnOnce(&mut NotifyRequest)) -> Result<Target, NotifyInputError> {
        let mut r = NotifyRequest {
            message: "build is green".into(),
            ..Default::default()
        };
        f(&mut r);
        r.target()
    }

    #[test]
    fn exactly_one_kind_of_target() {
        assert_eq!(
            req(|r| r.username = Some("@alice".into())),
            Ok(Target::User("alice".into()))
        );
        assert_eq!(
            req(|r| {
                r.channel_type = Some("Slack".into());
                r.channel_id = Some("C0123".into());
            }),
            Ok(Target::Channel {
                platform: ChannelType::Slack,
                id: "C0123".into()
            })
        );
        assert_eq!(req(|_| {}), Err(NotifyInputError::TargetChoice));
        assert_eq!(
            req(|r| {
                r.username = Some("alice".into());
                r.channel_type = Some("discord".into());
                r.channel_id = Some("1".into());
            }),
            Err(NotifyInputError::TargetChoice)
        );
        assert_eq!(
            req(|r| r.channel_type = Some("discord".into())),
            Err(NotifyInputError::HalfChannel)
        );
        assert_eq!(
            req(|r| {
                r.channel_type = Some("teams".into());
                r.channel_id = Some("1".into());
            }),
            Err(NotifyInputError::BadChannelType("teams".into()))
        );
        assert_eq!(
            req(|r| {
                r.channel_type = Some("discord".into());
                r.channel_id = Some("general".into());
            }),
            Err(NotifyInputError::BadChannelId(
                "general".into(),
                ChannelType::Discord
            ))
        );
        assert_eq!(
            req(|r| r.username = Some("Bad Name".into())),
            Err(NotifyInputError::BadUsername("Bad Name".into()))
        );
    }

    #[test]
    fn the_message_is_bounded() {
        let user = |r: &mut NotifyRequest| r.username = Some("alice".into());
        assert_eq!(
            req(|r| {
                user(r);
                r.message = " ".into();
            }),
            Err(NotifyInputError::EmptyMessage)
        );
        assert_eq!(
            req(|r| {
                user(r);
                r.message = "é".repeat(2000);
            }),
            Ok(Target::User("alice".into()))
        );
        assert_eq!(
            req(|r| {
                user(r);
                r.message = "x".repeat(2001);
            }),
            Err(NotifyInputError::MessageTooLong(2001))
        );
    }
}
