//! Notifications on a gateway node, the same for every platform: delivering what
//! `POST /v1/api/notify` received ([`Notifier`]), and taking a reply to a delivered
//! notification back into the workstream that sent it ([`continue_from_reply`]).
//!
//! What differs per platform (opening a DM, posting, neutralising mentions, which channels
//! the bot works in) is behind [`NotifyPlatform`]; Discord and Slack implement it in their
//! own modules.

use std::sync::Arc;

use sandpiper_agent::StoreError;
use sandpiper_agent::notify::SentNotification;
use sandpiper_agent::notify::{
    ChannelType, Ledger, NotifyInputError, NotifyRequest, RECIPIENT_WINDOW_MS, Target,
    TargetStatus, attribution, within_limits,
};
use sandpiper_agent::people::User;
use sandpiper_agent::people::{NotOnePerson, People};
use sandpiper_agent::store::now_ms;

use crate::thread::{OutsideTurn, Starters, Work};

/// Why a platform could not post (shown per target as `failed: <reason>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PostError(pub String);

/// What a platform does for notifications.
#[async_trait::async_trait]
pub trait NotifyPlatform: Send + Sync {
    /// Which platform this is.
    fn platform(&self) -> ChannelType;

    /// Whether the bot works in `channel` (`[discord] channels`, `[slack] channels`): a
    /// notification to any other channel is refused.
    fn listens_in(&self, channel: &str) -> bool;

    /// The DM channel with the platform user `user`, opened if needed.
    async fn open_dm(&self, user: &str) -> Result<String, PostError>;

    /// Posts a notification in `channel`, mentions neutralised and `title` as a bold prefix;
    /// returns the message id (Discord) or ts (Slack).
    async fn post(
        &self,
        channel: &str,
        title: Option<&str>,
        message: &str,
    ) -> Result<String, PostError>;
}

/// Why a notification was not delivered at all; the endpoint maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    /// The request is malformed: 400.
    #[error(transparent)]
    BadRequest(#[from] NotifyInputError),
    /// No such user, or one with no Discord or Slack identity: 404.
    #[error("{0}")]
    NotFound(String),
    /// The database failed: 500; the caller may try another gateway.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Delivers notifications to the platforms this node is connected to. Cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    people: People,
    ledger: Ledger,
    platforms: Vec<Arc<dyn NotifyPlatform>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field(
                "platforms",
                &self
                    .platforms
                    .iter()
                    .map(|p| p.platform())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Notifier {
    /// A notifier over `platforms` (the connected ones), finding recipients among `people`
    /// and recording what it delivered in `ledger`.
    pub fn new(people: People, ledger: Ledger, platforms: Vec<Arc<dyn NotifyPlatform>>) -> Self {
        Self {
            people,
            ledger,
            platforms,
        }
    }

    /// The platforms it can post to.
    pub fn platforms(&self) -> Vec<ChannelType> {
        self.platforms.iter().map(|p| p.platform()).collect()
    }

    fn platform(&self, kind: ChannelType) -> Option<&Arc<dyn NotifyPlatform>> {
        self.platforms.iter().find(|p| p.platform() == kind)
    }

    /// Delivers `request`: to every Discord and Slack identity of a user (a DM each), or to
    /// one channel, each message opened by who asked and from which thread
    /// ([`attribution`]). Each delivered message is recorded with the sending workstream, the
    /// account it went to and who asked, so that account's reply can continue it and the
    /// hourly limits count it. A channel that is another workstream's thread is refused, and
    /// so is a notification past the hourly limits ([`within_limits`]), which count across
    /// threads.
    pub async fn deliver(
        &self,
        request: &NotifyRequest,
    ) -> Result<Vec<TargetStatus>, DeliverError> {
        let target = request.target()?;
        let title = request
            .title
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let message = format!("{}\n{}", attribution(request), request.message);
        let out = Outgoing {
            request,
            title,
            message: &message,
        };
        match target {
            Target::Channel { platform, id } => {
                let label = format!("{platform}:{id}");
                let Some(p) = self.platform(platform) else {
                    return Ok(vec![not_connected(label, platform)]);
                };
                if !p.listens_in(&id) {
                    return Ok(vec![TargetStatus::failed(
                        label,
                        "I don't work in that channel, so I don't post there",
                    )]);
                }
                if let Some(why) = self.other_thread(platform, &id, request).await? {
                    return Ok(vec![TargetStatus::failed(label, why)]);
                }
                Ok(vec![self.send(p, label, &id, None, &out).await?])
            }
            Target::User(name) => {
                let user = self.recipient(&name, request).await?;
                let identities = self.people.identities(&user.id).await?;
                let mut results = Vec::new();
                for identity in &identities {
                    let platform_user = &identity.platform_user_id;
                    let Some(platform) = ChannelType::parse(&identity.platform) else {
                        continue;
                    };
                    let label = format!("{platform}:@{name}");
                    let Some(p) = self.platform(platform) else {
                        results.push(not_connected(label, platform));
                        continue;
                    };
                    let status = match p.open_dm(platform_user).await {
                        Ok(dm) => {
                            let to = Recipient {
                                user: &user.id,
                                account: platform_user,
                            };
                            self.send(p, label, &dm, Some(to), &out).await?
                        }
                        Err(e) => {
                            tracing::warn!(target = %label, error = %e, "notification not delivered");
                            TargetStatus::failed(label, e)
                        }
                    };
                    results.push(status);
                }
                if results.is_empty() {
                    return Err(DeliverError::NotFound(format!(
                        "`{name}` has no linked Discord or Slack identity"
                    )));
                }
                Ok(results)
            }
        }
    }

    /// The user a notification to `name` is for: the one the tool resolved (by id, so a
    /// rename in between cannot redirect it), or the one person the name names.
    async fn recipient(&self, name: &str, request: &NotifyRequest) -> Result<User, DeliverError> {
        let nobody = || DeliverError::NotFound(format!("there is no user `{name}`"));
        match &request.user_id {
            Some(id) => self.people.user(id).await?.ok_or_else(nobody),
            None => match self.people.one_named(name).await? {
                Ok(user) => Ok(user),
                Err(NotOnePerson::Nobody(_)) => Err(nobody()),
                Err(several) => Err(DeliverError::NotFound(several.to_string())),
            },
        }
    }

    /// Why `channel` is not the sender's to post in: it is the thread of another workstream
    /// (a Discord thread is a channel; a Slack thread is not, so only Discord can be).
    async fn other_thread(
        &self,
        platform: ChannelType,
        channel: &str,
        request: &NotifyRequest,
    ) -> Result<Option<String>, StoreError> {
        if platform != ChannelType::Discord {
            return Ok(None);
        }
        let Ok(channel) = channel.parse::<u64>() else {
            return Ok(None);
        };
        let key = sandpiper_agent::workstream::WorkstreamKey::Discord { channel }.to_string();
        if request.workstream.as_deref() == Some(key.as_str()) {
            return Ok(None);
        }
        Ok(self.ledger.is_workstream(&key).await?.then(|| {
            "that channel is another workstream's thread; a notification never posts into \
             another thread (notify the person instead)"
                .to_owned()
        }))
    }

    /// Posts one notification in `channel` unless it is past the hourly limits
    /// ([`within_limits`]: the recipient's share from everyone, the requester's across their
    /// threads), and records it for replies and the limits (a failure to record is logged:
    /// the person got the message either way).
    async fn send(
        &self,
        p: &Arc<dyn NotifyPlatform>,
        label: String,
        channel: &str,
        to: Option<Recipient<'_>>,
        out: &Outgoing<'_>,
    ) -> Result<TargetStatus, StoreError> {
        let platform = p.platform();
        let requester = out.request.requester();
        let since = now_ms() - RECIPIENT_WINDOW_MS;
        let recent = self
            .ledger
            .recent(platform.as_str(), channel, requester.as_ref(), since)
            .await?;
        if let Err(refusal) = within_limits(recent, requester.as_ref()) {
            tracing::info!(target = %label, workstream = ?out.request.workstream,
                requested_by = ?out.request.requested_by, to_recipient = recent.to_recipient,
                by_requester = recent.by_requester, "notification refused: hourly limit");
            return Ok(TargetStatus::failed(label, refusal));
        }
        let message_id = match p.post(channel, out.title, out.message).await {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(target = %label, error = %e, "notification not delivered");
                return Ok(TargetStatus::failed(label, e));
            }
        };
        if let Some(workstream) = &out.request.workstream {
            let sent = SentNotification {
                platform: platform.as_str().to_owned(),
                channel: channel.to_owned(),
                message_id,
                workstream: workstream.clone(),
                recipient: to.as_ref().map(|t| t.user.to_owned()),
                recipient_account: to.as_ref().map(|t| t.account.to_owned()),
                requester: out.request.requested_by.clone(),
                charged_to: out.request.charged_to.clone(),
            };
            if let Err(e) = self.ledger.record(&sent).await {
                tracing::warn!(target = %label, error = %e, "a delivered notification was not recorded; a reply to it will not continue its thread");
            }
        }
        Ok(TargetStatus::sent(label))
    }
}

/// What is posted, the same for every target of one request.
struct Outgoing<'a> {
    request: &'a NotifyRequest,
    title: Option<&'a str>,
    /// The attribution line and the message.
    message: &'a str,
}

/// The person a DM is for: their user and the account it goes to.
struct Recipient<'a> {
    user: &'a str,
    account: &'a str,
}

fn not_connected(label: String, platform: ChannelType) -> TargetStatus {
    TargetStatus::failed(
        label,
        format!("{platform} is not connected on this gateway"),
    )
}

/// A person's reply to a message in a DM, as a platform saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    /// Where it was written.
    pub platform: ChannelType,
    /// The DM channel.
    pub channel: &'a str,
    /// The message it answers (Discord: the referenced message; Slack: the thread's ts).
    pub replied_to: &'a str,
    /// The platform account that wrote it (its platform user id).
    pub account: &'a str,
    /// Their username, for the note shown in the thread.
    pub username: &'a str,
    /// What they wrote.
    pub text: &'a str,
}

/// What became of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyOutcome {
    /// It answers no notification: the platform's ordinary DM rules apply.
    NotANotification,
    /// It answers a notification sent to another account: nothing runs, and the author is
    /// told so privately (the text says it).
    NotForYou(String),
    /// Queued in the workstream that sent the notification.
    Continued {
        /// That workstream.
        workstream: String,
    },
    /// It answers a notification, but its workstream cannot take it now (no channel on this
    /// node runs it, or its queue is full); the text says why, for the person.
    Refused(String),
}

/// Why a reply to a notification does not continue its workstream; the text is for the
/// person who wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyRefusal {
    /// The reply came from another account than the one the notification was sent to (or
    /// the notification went to a channel, or was recorded before accounts were).
    #[error(
        "This notification was not sent to you, so your reply goes nowhere: only the person \
         it was sent to can answer it."
    )]
    NotForYou,
    /// Nothing but spaces.
    #[error("Your reply is empty.")]
    Empty,
}

/// The rule for a reply to a notification, the same on every platform: only the account it
/// was sent to may answer, with something.
pub fn may_answer(sent: &SentNotification, account: &str, text: &str) -> Result<(), ReplyRefusal> {
    if sent.recipient_account.as_deref() != Some(account) {
        return Err(ReplyRefusal::NotForYou);
    }
    if text.trim().is_empty() {
        return Err(ReplyRefusal::Empty);
    }
    Ok(())
}

/// If `reply` answers a delivered notification, queues it as a turn in the workstream that
/// sent it (through `starters`, so it shows in that thread). Taken even where DMs are off:
/// the person was notified from that workstream. Only the account the notification was sent
/// to may answer ([`may_answer`]); and the turn has no author, so answering never widens
/// what its writer's `recall` or `user` memories reach: the thread does not become one they
/// took part in, and their memories do not enter it. It is charged to whoever the turn that
/// asked for the notification was charged to.
pub async fn continue_from_reply(
    ledger: &Ledger,
    starters: &Starters,
    reply: Reply<'_>,
) -> Result<ReplyOutcome, StoreError> {
    let Some(sent) = ledger
        .find(reply.platform.as_str(), reply.channel, reply.replied_to)
        .await?
    else {
        return Ok(ReplyOutcome::NotANotification);
    };
    match may_answer(&sent, reply.account, reply.text) {
        Ok(()) => {}
        Err(ReplyRefusal::NotForYou) => {
            tracing::warn!(workstream = %sent.workstream, platform = %reply.platform, account = reply.account, "a reply to a notification sent to another account was refused");
            return Ok(ReplyOutcome::NotForYou(ReplyRefusal::NotForYou.to_string()));
        }
        Err(e) => return Ok(ReplyOutcome::Refused(e.to_string())),
    }
    let text = reply.text.trim();
    let turn = OutsideTurn {
        workstream: sent.workstream.clone(),
        work: Work::Message {
            author: None,
            text: format!(
                "[{} replied to your notification, in a {} DM]\n{text}",
                reply.username, reply.platform
            ),
            shown: Some(format!(
                "↩️ {} replied to a notification from this thread: {}",
                reply.username,
                crate::visible::cut(text, 5, 300)
            )),
            place: None,
            charged_to: sent.charged_to.clone(),
        },
    };
    match starters.start(turn) {
        Ok(_) => {
            tracing::info!(workstream = %sent.workstream, platform = %reply.platform, "a reply to a notification continues its workstream");
            Ok(ReplyOutcome::Continued {
                workstream: sent.workstream,
            })
        }
        Err(e) => {
            tracing::warn!(workstream = %sent.workstream, error = %e, "a reply to a notification was not taken");
            Ok(ReplyOutcome::Refused(format!(
                "I could not take your reply into its thread: {e}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_the_account_notified_may_answer() {
        let sent = |account: Option<&str>| SentNotification {
            platform: "discord".into(),
            channel: "7".into(),
            message_id: "8".into(),
            workstream: "discord:1".into(),
            recipient: account.map(|_| "user-1".to_owned()),
            recipient_account: account.map(str::to_owned),
            requester: None,
            charged_to: None,
        };
        let cases = [
            (sent(Some("42")), "42", "on it", Ok(())),
            (
                sent(Some("42")),
                "43",
                "on it",
                Err(ReplyRefusal::NotForYou),
            ),
            // A channel post, or a row from before accounts were recorded: nobody's.
            (sent(None), "42", "on it", Err(ReplyRefusal::NotForYou)),
            (sent(Some("42")), "42", "  ", Err(ReplyRefusal::Empty)),
            // A stranger learns nothing, not even that the text was empty.
            (sent(Some("42")), "43", "", Err(ReplyRefusal::NotForYou)),
        ];
        for (sent, account, text, expected) in cases {
            assert_eq!(
                may_answer(&sent, account, text),
                expected,
                "{account} {text:?}"
            );
        }
    }
}
