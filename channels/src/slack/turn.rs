//! A turn in a Slack thread: queuing it in the workstream's lane (with the working reaction on
//! the message it answers), the thread as the stream renderer's [`Surface`] and the card
//! approver's [`CardSurface`], and Slack's [`TurnStarter`]. The turn itself runs in
//! [`thread::run`], the same as on every platform.

use sandpiper_agent::workstream::WorkstreamKey;
use std::sync::Arc;

use sandpiper_agent::workstream::KeyPattern;
use sandpiper_agent::workstream::KeyPlatform;

use super::Ctx;
use super::blocks;
use super::client::Content;
use crate::approver::CardSurface;
use crate::card::ApprovalCard;
use crate::stream::{Post, Surface, SurfaceError};
use crate::thread::{self, OutsideTurn, StartError, TurnPlace, TurnStarter, Work};
use crate::turns::{QueueFull, Queued, showing_progress};

/// Characters of Markdown per answer message (each becomes one or more sections after the
/// conversion to mrkdwn; Slack allows 3,000 per section).
const ANSWER_LIMIT: usize = 2900;

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
        WorkstreamKey::slack(&self.team, &self.channel, &self.thread_ts).to_string()
    }

    /// The thread a workstream key names.
    pub(super) fn parse(key: &str) -> Option<Thread> {
        match key.parse().ok()? {
            WorkstreamKey::Slack {
                team,
                channel,
                thread_ts,
            } => Some(Thread {
                team,
                channel,
                thread_ts,
            }),
            _ => None,
        }
    }
}

/// Queues `work` in the thread's lane. `working_on` is the message it answers (the working
/// reaction goes there while the turn runs).
pub(crate) fn enqueue(
    ctx: &Arc<Ctx>,
    thread: Thread,
    work: Work,
    working_on: Option<String>,
) -> Result<Queued, QueueFull> {
    let at = work.place();
    let (key, job, handover) = lane_job(ctx, thread, work, working_on);
    ctx.queue.submit_handing_over(&key, job, at, handover)
}

/// The lane job of `work` in `thread`, with its workstream and handover.
fn lane_job(
    ctx: &Arc<Ctx>,
    thread: Thread,
    work: Work,
    working_on: Option<String>,
) -> (String, crate::turns::Job, Option<String>) {
    let (place, surface) = ThreadSurface::open(ctx, thread);
    let key = place.workstream.clone();
    let handover = thread::handover(&key, &work);
    let job: crate::turns::Job = Box::new(move |start| {
        // The lane is a tracked task, dropped (not cancelled) at shutdown with the turn it
        // runs: a turn waiting for approval stays resumable.
        Box::pin(async move {
            let ctx = surface.ctx.clone();
            let channel = surface.thread.channel.clone();
            let turn = thread::run(&place, surface, work, start);
            let Some(ts) = working_on else {
                turn.await;
                return;
            };
            let (_, shown) = showing_progress(turn, Working::show(&ctx, &channel, &ts)).await;
            if let Some(Some(working)) = shown {
                working.clear(&ctx).await;
            }
        })
    });
    (key, job, handover)
}

/// Queues a person's message; when it is still waiting after [`crate::turns::SHOW_PROGRESS_AFTER`],
/// `notify` (a Slack user) is told.
pub(crate) fn submit(
    ctx: &Arc<Ctx>,
    thread: Thread,
    work: Work,
    working_on: Option<String>,
    notify: Option<&str>,
) {
    let (channel, thread_ts) = (thread.channel.clone(), thread.thread_ts.clone());
    let at = work.place();
    let (key, job, handover) = lane_job(ctx, thread, work, working_on);
    let Some(user) = notify.map(str::to_owned) else {
        // Nobody to tell: no watch on the job's start, no task waiting out the grace.
        let _ = ctx.queue.submit_handing_over(&key, job, at, handover);
        return;
    };
    let told = ctx.clone();
    let _ = ctx
        .queue
        .submit_telling(&key, job, at, handover, move |held| async move {
            let text = match held {
                Ok(n) => format!(
                    "I'm still working on the previous message in this thread; I'll answer yours next ({n} waiting)."
                ),
                Err(full) => full.to_string(),
            };
            if let Err(e) = told
                .api
                .ephemeral(&channel, &user, Some(&thread_ts), &text)
                .await
            {
                tracing::warn!(error = %e, "telling the user their message waits failed");
            }
        });
}

/// [`TurnStarter`] for `slack:<team>:<channel>:<thread_ts>` workstreams.
pub(crate) struct Starter(pub(crate) Arc<Ctx>);

impl TurnStarter for Starter {
    fn keys(&self) -> KeyPattern {
        KeyPattern::Platform(KeyPlatform::Slack)
    }

    fn start(&self, turn: OutsideTurn) -> Result<Queued, StartError> {
        let thread = Thread::parse(&turn.workstream)
            .ok_or_else(|| StartError::NoChannel(turn.workstream.clone()))?;
        Ok(enqueue(&self.0, thread, turn.work, None)?)
    }

    fn stop(&self, workstream: &str) -> bool {
        self.0.queue.stop(workstream)
    }
}

/// The reaction on the message a turn answers, Slack's stand-in for a typing indicator
/// (bots get none): shown once the turn has run for [`crate::turns::SHOW_PROGRESS_AFTER`], taken off when
/// it ends. A workspace that did
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

/// A thread as the stream renderer and the card approver see it.
pub(crate) struct ThreadSurface {
    ctx: Arc<Ctx>,
    thread: Thread,
}

impl ThreadSurface {
    /// Where `thread`'s turns run, and the thread as a surface.
    pub(crate) fn open(ctx: &Arc<Ctx>, thread: Thread) -> (TurnPlace, Arc<ThreadSurface>) {
        let place = TurnPlace {
            agent: ctx.agent.clone(),
            workstream: thread.key(),
            interval: ctx.config.stream_interval,
            tasks: ctx.tasks.clone(),
        };
        let surface = Arc::new(ThreadSurface {
            ctx: ctx.clone(),
            thread,
        });
        (place, surface)
    }
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

#[async_trait::async_trait]
impl CardSurface for ThreadSurface {
    async fn post_card(&self, card: &ApprovalCard) -> Result<String, SurfaceError> {
        let content = blocks::card(card, &self.ctx.timeout_text());
        self.ctx
            .api
            .post(&self.thread.channel, Some(&self.thread.thread_ts), &content)
            .await
            .map_err(|e| SurfaceError(e.to_string()))
    }

    async fn replace_card(&self, id: &str, card: &ApprovalCard) -> Result<(), SurfaceError> {
        let content: Content = blocks::card(card, &self.ctx.timeout_text());
        self.ctx
            .api
            .update(&self.thread.channel, id, &content)
            .await
            .map_err(|e| SurfaceError(e.to_string()))
    }

    fn approver_roles(&self) -> Vec<String> {
        self.ctx.config.approver_usergroups.clone()
    }
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
