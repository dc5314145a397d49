//! Notifications on a gateway node, the same for every platform: delivering what
//! `POST /v1/api/notify` received ([`Notifier`]), and taking a reply to a delivered
//! notification back into the workstream that sent it ([`continue_from_reply`]).
//!
//! What differs per platform (opening a DM, posting, neutralising mentions, which channels
//! the bot works in) is behind [`NotifyPlatform`]; Discord and Slack implement it in their
//! own modules.

use std::sync::Arc;

use sandpiper_agent::notify::{ChannelType, NotifyInputError, NotifyRequest, Target, TargetStatus};
use sandpiper_agent::store::notifications::SentNotification;
use sandpiper_agent::store::{Store, StoreError};

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
    store: Store,
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
    /// A notifier over `platforms` (the connected ones).
    pub fn new(store: Store, platforms: Vec<Arc<dyn NotifyPlatform>>) -> Self {
        Self { store, platforms }
    }

    /// The platforms it can post to.
    pub fn platforms(&self) -> Vec<ChannelType> {
        self.platforms.iter().map(|p| p.platform()).collect()
    }

    fn platform(&self, kind: ChannelType) -> Option<&Arc<dyn NotifyPlatform>> {
        self.platforms.iter().find(|p| p.platform() == kind)
    }

    /// Delivers `request`: to every Discord and Slack identity of a user (a DM each), or to
    /// one channel. Each delivered message is recorded with the sending workstream, so a
    /// reply can continue it.
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
                let sent = p.post(&id, title, &request.message).await;
                Ok(vec![
                    self.settle(label, platform, &id, sent, request, None).await,
                ])
            }
            Target::User(name) => {
                let user =
                    self.store.user_by_username(&name).await?.ok_or_else(|| {
                        DeliverError::NotFound(format!("there is no user `{name}`"))
                    })?;
                let identities = self.store.identities_of(&user.id).await?;
                let mut results = Vec::new();
                for (platform_name, platform_user) in &identities {
                    let Some(platform) = ChannelType::parse(platform_name) else {
                        continue;
                    };
                    let label = format!("{platform}:@{name}");
                    let Some(p) = self.platform(platform) else {
                        results.push(not_connected(label, platform));
                        continue;
                    };
                    let posted = match p.open_dm(platform_user).await {
                        Ok(dm) => p
                            .post(&dm, title, &request.message)
                            .await
                            .map(|message| (dm, message)),
                        Err(e) => Err(e),
                    };
                    let status = match posted {
                        Ok((dm, message)) => {
                            self.settle(label, platform, &dm, Ok(message), request, Some(&user.id))
                                .await
                        }
                        Err(e) => {
                            self.settle(label, platform, "", Err(e), request, None)
                                .await
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

    /// The status of one post; a delivered one is recorded for replies (a failure to record
    /// is logged: the person got the message either way).
    async fn settle(
        &self,
        label: String,
        platform: ChannelType,
        channel: &str,
        posted: Result<String, PostError>,
        request: &NotifyRequest,
        recipient: Option<&str>,
    ) -> TargetStatus {
        let message_id = match posted {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(target = %label, error = %e, "notification not delivered");
                return TargetStatus::failed(label, e);
            }
        };
        if let Some(workstream) = &request.workstream {
            let sent = SentNotification {
                platform: platform.as_str().to_owned(),
                channel: channel.to_owned(),
                message_id,
                workstream: workstream.clone(),
                recipient: recipient.map(str::to_owned),
            };
            if let Err(e) = self.store.record_notification(&sent).await {
                tracing::warn!(target = %label, error = %e, "a delivered notification was not recorded; a reply to it will not continue its thread");
            }
        }
        TargetStatus::sent(label)
    }
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
    /// The sandpiper user who wrote it.
    pub author: &'a str,
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
    /// Queued in the workstream that sent the notification.
    Continued {
        /// That workstream.
        workstream: String,
    },
    /// It answers a notification, but its workstream cannot take it now (no channel on this
    /// node runs it, or its queue is full); the text says why, for the person.
    Refused(String),
}

/// If `reply` answers a delivered notification, queues it as a turn in the workstream that
/// sent it (through `starters`, so it shows in that thread). Taken even where DMs are off:
/// the person was notified from that workstream.
pub async fn continue_from_reply(
    store: &Store,
    starters: &Starters,
    reply: Reply<'_>,
) -> Result<ReplyOutcome, StoreError> {
    let Some(sent) = store
        .notification(reply.platform.as_str(), reply.channel, reply.replied_to)
        .await?
    else {
        return Ok(ReplyOutcome::NotANotification);
    };
    let text = reply.text.trim();
    if text.is_empty() {
        return Ok(ReplyOutcome::Refused("Your reply is empty.".into()));
    }
    let turn = OutsideTurn {
        workstream: sent.workstream.clone(),
        work: Work::Message {
            author: Some(reply.author.to_owned()),
            text: format!(
                "[{} replied to your notification, in a {} DM]\n{text}",
                reply.username, reply.platform
            ),
            shown: Some(format!(
                "↩️ {} replied to a notification from this thread: {}",
                reply.username,
                crate::visible::cut(text, 5, 300)
            )),
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
