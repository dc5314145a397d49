//! The status page as a place to talk (issue 44): a signed-in person writes into a workstream
//! from the page ([`write_away`]), and starts conversations that live on the page alone
//! (`web:<id>`, [`start_on_page`]).
//!
//! Writing from the page is writing in the thread, from elsewhere: the same rule decides
//! ([`may_talk_away`]: the thread's own [`may_talk`](crate::permissions::may_talk), and the
//! person takes part in it), the message goes into the workstream's lane on its platform
//! ([`Starters`]: the same order, queue limit and handover to the node that owns it), and the
//! turn runs as any other (its approvals, audit, budgets and message limit are the agent's).
//! A Discord or Slack thread shows the message first ("alice (from the page): …") and the
//! answer posts there as usual.
//!
//! A `web:<id>` workstream's turns run in this module's lanes ([`WebChannel`]) and draw
//! nothing anywhere: the page reads the running turn from the agent's activity and the
//! conversation from the store. Its approval cards are the page's pending approvals, decided
//! there by the thread's rules ([`crate::membership::decide_away`]: its owner).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use sandpiper_agent::workstream::{KeyPattern, KeyPlatform, WorkstreamKey};
use sandpiper_agent::{Agent, AgentError};
use tokio_util::sync::CancellationToken;

use crate::approver::CardSurface;
use crate::card::ApprovalCard;
use crate::config::ThreadAccess;
use crate::membership::Membership;
use crate::permissions::{Refusal, Standing, may_talk_away};
use crate::stream::{Post, Surface, SurfaceError};
use crate::tasks::{Drained, Tasks};
use crate::thread::{self, OutsideTurn, StartError, Starters, TurnPlace, TurnStarter, Work};
use crate::turns::{Place, QueueFull, Queued, TurnQueue};

/// Who may talk in a page's own conversation: its owner (nobody else can join it: a
/// stranger is refused, so nobody else ever takes part).
const WEB_ACCESS: ThreadAccess = ThreadAccess::Owner;

/// Why a message from the page was not taken; the text is for the person, and nothing was
/// sent (they keep what they wrote).
#[derive(Debug, thiserror::Error)]
pub enum WriteRefusal {
    /// Nothing but blanks.
    #[error("Write something first: the message is empty.")]
    Empty,
    /// Over `agent.max_message_bytes`, the limit of a message in chat.
    #[error("{}", AgentError::MessageTooLarge { size: *size, limit: *limit })]
    TooLarge {
        /// Its size in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// No workstream with this key (or a sub-agent's, which only its parent's turn writes to).
    #[error("There is no workstream here to write to.")]
    Unknown,
    /// The thread's rules say no (closed, not theirs, not in it).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// This node has no connection to the thread's platform.
    #[error(
        "This node is not connected to {0}, so it cannot post there; nothing was sent. Write \
         in the thread itself, or try again when the connection is back."
    )]
    NoPlatform(String),
    /// The thread's lane is full.
    #[error("{0}; nothing was sent.")]
    QueueFull(#[from] QueueFull),
    /// The database did not answer.
    #[error("The database did not answer ({0}); nothing was sent. Try again in a moment.")]
    Store(String),
}

impl From<sandpiper_agent::StoreError> for WriteRefusal {
    fn from(e: sandpiper_agent::StoreError) -> Self {
        WriteRefusal::Store(e.to_string())
    }
}

impl From<StartError> for WriteRefusal {
    fn from(e: StartError) -> Self {
        match e {
            StartError::NoChannel(key) => WriteRefusal::NoPlatform(platform_name(&key).to_owned()),
            StartError::QueueFull(full) => WriteRefusal::QueueFull(full),
        }
    }
}

fn platform_name(key: &str) -> &str {
    key.split_once(':').map_or(key, |(p, _)| p)
}

/// A message a signed-in person wrote on the page.
#[derive(Debug, Clone)]
pub struct PageMessage<'a> {
    /// The workstream written to.
    pub workstream: &'a str,
    /// The sandpiper user who wrote it.
    pub user_id: &'a str,
    /// What they wrote.
    pub text: &'a str,
    /// When the page received it (unix ms): its place in the thread ([`Place::at`]).
    pub received_ms: u64,
}

/// Where messages from the page go: every platform's lanes on this node, and the platforms
/// asked how their threads are open ([`Membership::thread_access`]).
#[derive(Clone)]
pub struct PageDesk {
    /// The agent.
    pub agent: Agent,
    /// Every platform's [`TurnStarter`], the page's own among them.
    pub starters: Starters,
    /// The chat platforms this node is connected to.
    pub platforms: Vec<Arc<dyn Membership>>,
}

impl std::fmt::Debug for PageDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageDesk").finish_non_exhaustive()
    }
}

impl PageDesk {
    /// The message's text, trimmed, when it may be sent at all (not empty, within the limit
    /// of a message in chat).
    pub fn checked<'t>(&self, text: &'t str) -> Result<&'t str, WriteRefusal> {
        let text = text.trim();
        let limit = self.agent.config().agent.max_message_bytes;
        match text.len() {
            0 => Err(WriteRefusal::Empty),
            size if size > limit => Err(WriteRefusal::TooLarge { size, limit }),
            _ => Ok(text),
        }
    }

    /// How threads of `key` are open to talk.
    fn access(&self, key: &WorkstreamKey) -> Result<ThreadAccess, WriteRefusal> {
        let platform = key.platform();
        if platform == KeyPlatform::Web {
            return Ok(WEB_ACCESS);
        }
        self.platforms
            .iter()
            .find(|p| p.platform() == platform)
            .map(|p| p.thread_access())
            .ok_or_else(|| {
                WriteRefusal::NoPlatform(platform.prefix().trim_end_matches(':').to_owned())
            })
    }

    /// Writes `msg` into its workstream, by the thread's rules for that person; where it
    /// landed in the lane.
    pub async fn write_away(&self, msg: PageMessage<'_>) -> Result<Queued, WriteRefusal> {
        let text = self.checked(msg.text)?;
        let key: WorkstreamKey = msg.workstream.parse().map_err(|_| WriteRefusal::Unknown)?;
        if matches!(key, WorkstreamKey::Child { .. }) {
            return Err(WriteRefusal::Unknown);
        }
        let info = self
            .agent
            .workstream(msg.workstream)
            .await?
            .ok_or(WriteRefusal::Unknown)?;
        if info.closed {
            return Err(Refusal::ThreadClosed.into());
        }
        let access = self.access(&key)?;
        let owner = info.owner.as_deref();
        let who = Standing {
            owner: owner == Some(msg.user_id),
            ..Standing::default()
        };
        let takes_part = who.owner || self.agent.wrote_in(msg.workstream, msg.user_id).await?;
        let owner_name = match owner {
            Some(id) if !who.owner => Some(self.agent.people().public_name_of(id).await),
            _ => None,
        };
        if let Err(refusal) = may_talk_away(access, who, takes_part, owner_name.as_deref()) {
            tracing::info!(workstream = msg.workstream, user = msg.user_id, %refusal, "a message from the page was refused");
            return Err(refusal.into());
        }
        // A thread shows who wrote from the page; the page's own conversation shows the
        // stored message itself.
        let shown = match key.platform() {
            KeyPlatform::Web => None,
            _ => {
                let name = self.agent.people().public_name_of(msg.user_id).await;
                Some(format!("{name} (from the page): {text}"))
            }
        };
        let work = Work::Message {
            author: Some(msg.user_id.to_owned()),
            text: text.to_owned(),
            shown,
            place: Some(Place::at(
                UNIX_EPOCH + Duration::from_millis(msg.received_ms),
            )),
            charged_to: None,
        };
        let queued = self.starters.start(OutsideTurn {
            workstream: msg.workstream.to_owned(),
            work,
        })?;
        tracing::info!(workstream = msg.workstream, user = msg.user_id, queued = ?queued, "a message from the page");
        Ok(queued)
    }

    /// Starts a conversation on the page owned by `msg.user_id` (its `workstream` is
    /// ignored) with `msg` as its first message; its key. Nothing is made when the message
    /// could not be sent.
    pub async fn start_on_page(&self, msg: PageMessage<'_>) -> Result<String, WriteRefusal> {
        self.checked(msg.text)?;
        let key = WorkstreamKey::new_web().to_string();
        self.agent
            .open_workstream(&key, Some(msg.user_id), None)
            .await?;
        let first = PageMessage {
            workstream: &key,
            ..msg
        };
        match self.write_away(first).await {
            Ok(_) => {
                tracing::info!(workstream = %key, user = msg.user_id, "a conversation started on the page");
                Ok(key)
            }
            Err(e) => {
                // Nothing ran in it: it is not left behind as an empty conversation.
                if let Err(closed) = self.agent.close_workstream(&key).await {
                    tracing::warn!(workstream = %key, error = %closed, "could not close an unused page conversation");
                }
                Err(e)
            }
        }
    }
}

/// The lanes of the page's own conversations (`web:<id>`).
#[derive(Debug, Clone)]
pub struct WebChannel {
    agent: Agent,
    queue: TurnQueue,
    tasks: Tasks,
}

impl WebChannel {
    /// Lanes for the page's conversations until `shutdown` (then [`WebChannel::join`]).
    pub fn start(agent: Agent, shutdown: CancellationToken) -> Self {
        let tasks = Tasks::new(shutdown);
        let queue = crate::turns::settling(&agent, tasks.clone());
        Self {
            agent,
            queue,
            tasks,
        }
    }

    /// Starts turns in the page's conversations (a message from the page, a watch firing,
    /// a handover from another node).
    pub fn starter(&self) -> Arc<dyn TurnStarter> {
        Arc::new(self.clone())
    }

    /// Waits until shutdown begins, then drains the lanes as every platform does
    /// ([`thread::drain`]).
    pub async fn join(&self, grace: Duration) -> Drained {
        self.tasks.shutdown().cancelled().await;
        thread::drain(&self.agent, &self.queue, &self.tasks, grace).await
    }
}

impl TurnStarter for WebChannel {
    fn keys(&self) -> KeyPattern {
        KeyPattern::Platform(KeyPlatform::Web)
    }

    fn start(&self, turn: OutsideTurn) -> Result<Queued, StartError> {
        let place = TurnPlace {
            agent: self.agent.clone(),
            workstream: turn.workstream.clone(),
            // Nothing is drawn: the renderer's pace costs nothing.
            interval: Duration::from_millis(100),
            tasks: self.tasks.clone(),
        };
        let handover = thread::handover(&turn.workstream, &turn.work);
        let at = turn.work.place();
        let work = turn.work;
        let job: crate::turns::Job = Box::new(move |start| {
            Box::pin(async move {
                thread::run(&place, Arc::new(PageThread::default()), work, start).await;
            })
        });
        Ok(self
            .queue
            .submit_handing_over(&turn.workstream, job, at, handover)?)
    }

    fn stop(&self, workstream: &str) -> bool {
        self.queue.stop(workstream)
    }
}

/// A page conversation's thread: it draws nothing (the page reads the turn itself) and its
/// cards are the page's list of pending approvals.
#[derive(Debug, Default)]
struct PageThread {
    posted: AtomicU64,
}

impl PageThread {
    fn id(&self) -> String {
        self.posted.fetch_add(1, Ordering::Relaxed).to_string()
    }
}

#[async_trait::async_trait]
impl Surface for PageThread {
    fn limit(&self) -> usize {
        // One piece per answer: nothing is split for a platform.
        1 << 20
    }

    async fn post(&self, _post: &Post) -> Result<String, SurfaceError> {
        Ok(self.id())
    }

    async fn edit(&self, _id: &str, _post: &Post) -> Result<(), SurfaceError> {
        Ok(())
    }

    async fn upload(&self, _: &str, _: Vec<u8>, _: &str) -> Result<(), SurfaceError> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl CardSurface for PageThread {
    async fn post_card(&self, _card: &ApprovalCard) -> Result<String, SurfaceError> {
        Ok(self.id())
    }

    async fn replace_card(&self, _id: &str, _card: &ApprovalCard) -> Result<(), SurfaceError> {
        Ok(())
    }
}
