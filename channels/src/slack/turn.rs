//! A turn in a Slack thread: the job that runs in the workstream's lane, the
//! [`Surface`] the stream renderer draws on, and the [`Approver`] that posts approval cards
//! and waits for clicks.

use std::sync::Arc;
use std::time::Duration;

use sandpiper_agent::agent::{ResumeRequest, TurnRequest};
use sandpiper_agent::protocol::{ApprovalItem, Approver, Decision, TurnEvent, TurnSink};
use tokio_util::sync::CancellationToken;

use super::blocks;
use super::client::Content;
use super::{Ctx, spawn};
use crate::card::{ApprovalCard, MAX_ROWS};
use crate::stream::{self, Post, StreamSink, Surface, SurfaceError};
use crate::turns::{QueueFull, Queued};

/// Characters of Markdown per answer message (each becomes one or more sections after the
/// conversion to mrkdwn; Slack allows 3,000 per section).
const ANSWER_LIMIT: usize = 2900;
/// How long a card waits for the store to record a timeout or cancellation before giving up
/// on re-rendering it.
const REFRESH_FOR: Duration = Duration::from_secs(10);

/// A Slack thread the agent answers in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Thread {
    pub team: String,
    pub channel: String,
    pub thread_ts: String,
}

impl Thread {
    /// The workstream key: `slack:<team>:<channel>:<thread_ts>`.
    pub(super) fn key(&self) -> String {
        format!("slack:{}:{}:{}", self.team, self.channel, self.thread_ts)
    }

    /// The thread a workstream key names.
    pub(super) fn parse(key: &str) -> Option<Thread> {
        let mut parts = key.strip_prefix("slack:")?.splitn(3, ':');
        let (team, channel, thread_ts) = (parts.next()?, parts.next()?, parts.next()?);
        (!team.is_empty() && !channel.is_empty() && !thread_ts.is_empty()).then(|| Thread {
            team: team.to_owned(),
            channel: channel.to_owned(),
            thread_ts: thread_ts.to_owned(),
        })
    }
}

/// What a lane job does.
pub(crate) enum Work {
    /// Answer a message.
    Message {
        /// Sandpiper user id of the author.
        author: String,
        /// The message, as typed.
        text: String,
        /// The message's ts, where the working reaction goes while the turn runs.
        ts: String,
    },
    /// Resume a turn a restart interrupted (every dangling call is now decided).
    Resume {
        /// Sandpiper user id of who started it.
        author: Option<String>,
    },
}

/// Queues `work` in the thread's lane. When it has to wait, `notify` (a Slack user) is told.
pub(crate) async fn submit(ctx: &Arc<Ctx>, thread: Thread, work: Work, notify: Option<&str>) {
    let key = thread.key();
    let job_ctx = ctx.clone();
    let job_thread = thread.clone();
    let job: crate::turns::Job = Box::new(move |cancel| {
        // The lane is a tracked task, dropped (not cancelled) at shutdown with the turn it
        // runs: a turn waiting for approval stays resumable.
        Box::pin(async move { run(&job_ctx, &job_thread, work, cancel).await })
    });
    let told = match ctx.queue.submit(&key, job) {
        Ok(Queued::Now) => return,
        Ok(Queued::Behind(n)) => format!(
            "I'm still working on the previous message in this thread; I'll answer yours next ({n} waiting)."
        ),
        Err(QueueFull) => QueueFull.to_string(),
    };
    if let Some(user) = notify
        && let Err(e) = ctx
            .api
            .ephemeral(&thread.channel, user, Some(&thread.thread_ts), &told)
            .await
    {
        tracing::warn!(error = %e, "telling the user their message waits failed");
    }
}

async fn run(ctx: &Arc<Ctx>, thread: &Thread, work: Work, cancel: CancellationToken) {
    let key = thread.key();
    let surface = Arc::new(ThreadSurface {
        ctx: ctx.clone(),
        thread: thread.clone(),
    });
    let (sink, renderer) = stream::start(surface, ctx.config.stream_interval, &ctx.tasks);
    let approver = CardApprover {
        ctx: ctx.clone(),
        thread: thread.clone(),
        sink: sink.clone(),
    };
    let working = match &work {
        Work::Message { ts, .. } => Working::show(ctx, &thread.channel, ts).await,
        Work::Resume { .. } => None,
    };
    let result = match work {
        Work::Message { author, text, .. } => ctx
            .agent
            .run_turn(TurnRequest {
                workstream: &key,
                author: Some(&author),
                text,
                sink: &sink,
                approver: &approver,
                cancel,
            })
            .await
            .map(|_| ()),
        Work::Resume { author } => ctx
            .agent
            .resume_turn(ResumeRequest {
                workstream: &key,
                author: author.as_deref(),
                sink: &sink,
                approver: &approver,
                cancel,
            })
            .await
            .map(|_| ()),
    };
    if let Err(e) = result {
        tracing::warn!(workstream = %key, error = %e, "slack turn failed");
    }
    // Ends the renderer when the agent had nothing to say (nothing to resume, an early error);
    // ignored when the turn already said it was over.
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    let mut renderer = renderer;
    tokio::select! {
        _ = &mut renderer => {}
        () = ctx.tasks.shutdown().cancelled() => renderer.abort(),
    }
    if let Some(working) = working {
        working.clear(ctx).await;
    }
}

/// The reaction on the message a turn answers, Slack's stand-in for a typing indicator
/// (bots get none): shown when the turn starts, taken off when it ends. A workspace that did
/// not grant `reactions:write` just goes without; the turn never depends on it.
struct Working {
    channel: String,
    ts: String,
}

impl Working {
    async fn show(ctx: &Ctx, channel: &str, ts: &str) -> Option<Working> {
        let name = ctx.config.working_reaction.as_str();
        if name.is_empty() {
            return None;
        }
        match ctx.api.react(channel, ts, name, true).await {
            Ok(()) => Some(Working {
                channel: channel.to_owned(),
                ts: ts.to_owned(),
            }),
            Err(e) => {
                tracing::debug!(error = %e, reaction = name, "cannot show the working reaction");
                None
            }
        }
    }

    async fn clear(self, ctx: &Ctx) {
        let name = ctx.config.working_reaction.as_str();
        if let Err(e) = ctx.api.react(&self.channel, &self.ts, name, false).await {
            tracing::debug!(error = %e, reaction = name, "cannot take the working reaction off");
        }
    }
}

/// A thread as the stream renderer sees it.
struct ThreadSurface {
    ctx: Arc<Ctx>,
    thread: Thread,
}

#[async_trait::async_trait]
impl Surface for ThreadSurface {
    fn limit(&self) -> usize {
        ANSWER_LIMIT
    }

    async fn post(&self, post: &Post) -> Result<String, SurfaceError> {
        let content = blocks::post(post, &self.thread.key());
        self.ctx
            .api
            .post(&self.thread.channel, Some(&self.thread.thread_ts), &content)
            .await
            .map_err(|e| SurfaceError(e.to_string()))
    }

    async fn edit(&self, id: &str, post: &Post) -> Result<(), SurfaceError> {
        let content = blocks::post(post, &self.thread.key());
        self.ctx
            .api
            .update(&self.thread.channel, id, &content)
            .await
            .map_err(|e| SurfaceError(e.to_string()))
    }

    async fn upload(
        &self,
        filename: &str,
        body: Vec<u8>,
        comment: &str,
    ) -> Result<(), SurfaceError> {
        let comment = super::mrkdwn::from_markdown(comment);
        self.ctx
            .api
            .upload(
                &self.thread.channel,
                &self.thread.thread_ts,
                filename,
                body,
                &comment,
            )
            .await
            .map_err(|e| SurfaceError(e.to_string()))
    }
}

/// Posts approval cards into the thread and waits for clicks (decided in
/// [`interactions`](super::interactions), delivered through [`LiveApprovals`](crate::live)).
struct CardApprover {
    ctx: Arc<Ctx>,
    thread: Thread,
    sink: StreamSink,
}

#[async_trait::async_trait]
impl Approver for CardApprover {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        // The card goes below the tool lines it is about.
        self.sink.settle().await;
        let ids: Vec<String> = items.iter().map(|i| i.request_id.clone()).collect();
        let waiters = self.ctx.live.register(&ids);
        let key = self.thread.key();
        let mut refresh = CardRefresh {
            ctx: self.ctx.clone(),
            channel: self.thread.channel.clone(),
            cards: Vec::new(),
            armed: true,
        };
        for chunk in items.chunks(MAX_ROWS) {
            let card = ApprovalCard::pending(chunk, &key);
            let content = blocks::card(&card, &self.ctx.timeout_text());
            match self
                .ctx
                .api
                .post(&self.thread.channel, Some(&self.thread.thread_ts), &content)
                .await
            {
                Ok(ts) => refresh
                    .cards
                    .push((ts, chunk.iter().map(|i| i.request_id.clone()).collect())),
                Err(e) => tracing::warn!(error = %e, "posting an approval card failed"),
            }
        }
        let decisions = waiters.all().await;
        // Every decision came from a click, which already updated its card.
        refresh.armed = false;
        decisions
    }
}

/// When the turn stops waiting without every click (timeout, `/stop`), re-renders its cards
/// from the store once the pipeline has recorded why.
struct CardRefresh {
    ctx: Arc<Ctx>,
    channel: String,
    cards: Vec<(String, Vec<String>)>,
    armed: bool,
}

impl Drop for CardRefresh {
    fn drop(&mut self) {
        if !self.armed || self.cards.is_empty() {
            return;
        }
        let ctx = self.ctx.clone();
        let channel = std::mem::take(&mut self.channel);
        let cards = std::mem::take(&mut self.cards);
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        spawn(&self.ctx, async move {
            let deadline = tokio::time::Instant::now() + REFRESH_FOR;
            let mut left = cards;
            while !left.is_empty() && tokio::time::Instant::now() < deadline {
                let mut waiting = Vec::new();
                for (ts, ids) in left {
                    match load_card(&ctx, &ids).await {
                        Some(card) if !card.any_pending() => {
                            update_card(&ctx, &channel, &ts, &card).await;
                        }
                        _ => waiting.push((ts, ids)),
                    }
                }
                left = waiting;
                if !left.is_empty() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
    }
}

/// The card of `ids` as stored now.
pub(crate) async fn load_card(ctx: &Ctx, ids: &[String]) -> Option<ApprovalCard> {
    let mut rows = Vec::with_capacity(ids.len());
    for id in ids {
        match ctx.agent.store().get_approval(id).await {
            Ok(Some(record)) => rows.push(record),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading an approval request failed");
                return None;
            }
        }
    }
    (!rows.is_empty()).then_some(ApprovalCard { rows })
}

/// Replaces the card message `ts` with `card`.
pub(crate) async fn update_card(ctx: &Ctx, channel: &str, ts: &str, card: &ApprovalCard) {
    let content: Content = blocks::card(card, &ctx.timeout_text());
    if let Err(e) = ctx.api.update(channel, ts, &content).await {
        tracing::warn!(error = %e, "updating an approval card failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let t = Thread {
            team: "T1".into(),
            channel: "C1".into(),
            thread_ts: "1700000000.000100".into(),
        };
        assert_eq!(t.key(), "slack:T1:C1:1700000000.000100");
        assert_eq!(Thread::parse(&t.key()), Some(t));
        assert_eq!(Thread::parse("discord:1"), None);
        assert_eq!(Thread::parse("slack:T1:C1:"), None);
    }
}
