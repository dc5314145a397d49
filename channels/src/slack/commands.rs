//! `/sandpiper <subcommand> …`: the shared command table ([`Command::from_text`]) with Slack
//! answers. Parse errors and `help` are answered in the acknowledgement itself; everything
//! else runs in the background and answers with an ephemeral message.
//!
//! Slack does not say which thread a slash command was typed in, so the thread commands act on
//! the channel: `stop` stops every running turn there that the caller may stop; `status`,
//! `close`, `memory` use the channel's most recent thread. The **Stop** button on a live
//! answer stops exactly that thread.

use std::sync::Arc;

use sandpiper_agent::workstream::WorkstreamKey;
use slack_morphism::prelude::*;

use super::events::converse;
use super::mrkdwn::{escape, from_markdown, unescape};
use super::turn::Thread;
use super::{Ctx, take_on};
use crate::commands::account::Person;
use crate::commands::answers::{self, Where};
use crate::commands::{Command, ConnectorsAction, MemoryAction, PolicyScope, WatchAction, help};

/// Acknowledges a command: `Some(text)` is the immediate (ephemeral) reply; the rest is done in
/// the background.
pub(crate) fn ack(ctx: &Arc<Ctx>, event: SlackCommandEvent) -> Option<String> {
    if let Err(closed) = ctx.admits(&event.channel_id.0) {
        // The acknowledgement's text is shown only to the person who typed the command.
        tracing::info!(channel = %event.channel_id.0, user = %event.user_id.0, %closed, "command refused");
        return Some(escape(&format!("🚫 {closed}")));
    }
    let text = event.text.clone().unwrap_or_default();
    let command = match Command::from_text(&text) {
        Ok(Command::Help) => return Some(from_markdown(&help(&ctx.prefix()))),
        Ok(c) => c,
        Err(e) => return Some(escape(&e.to_string())),
    };
    let job_ctx = ctx.clone();
    match take_on(ctx, async move { run(&job_ctx, event, command).await }) {
        Ok(()) => None,
        Err(stopping) => Some(escape(&format!("⏳ {stopping}: send the command again."))),
    }
}

async fn run(ctx: &Arc<Ctx>, event: SlackCommandEvent, command: Command) {
    let team = event.team_id.0;
    let channel = event.channel_id.0;
    let user = event.user_id.0;
    let reply = match command {
        Command::Ask { prompt } => {
            ask(ctx, &team, &channel, &user, &prompt).await;
            return;
        }
        Command::Stop => stop(ctx, &team, &channel, &user).await,
        Command::Close => close(ctx, &team, &channel, &user).await,
        Command::Connectors { action, scope } => {
            connectors(ctx, &team, &channel, &user, &action, scope).await
        }
        other => {
            let workstream = latest(ctx, &team, &channel).await;
            let names = ctx.api.names(&user).await;
            let who: Person<'_> = names.identity(&user);
            // Only asked when it matters: deleting a memory, changing a watch.
            let deleting = matches!(
                other,
                Command::Memory {
                    action: MemoryAction::Delete { .. }
                } | Command::Watch {
                    action: WatchAction::Cancel(_) | WatchAction::Resume(_)
                } | Command::Grants {
                    action: crate::commands::grants::GrantsAction::Revoke(_)
                }
            );
            // Group memberships are asked only of the commands whose answer depends on them:
            // `mcp` shows servers' errors and stderr to admins only; usage, budgets,
            // compaction and switching the model go by role.
            let by_role = matches!(
                other,
                Command::Compact
                    | Command::Model { name: Some(_) }
                    | Command::Usage { .. }
                    | Command::Budget { .. }
            );
            let admin = (deleting || by_role || matches!(other, Command::Mcp { .. }))
                && !ctx
                    .api
                    .groups_of(&user, &ctx.config.admin_usergroups)
                    .await
                    .is_empty();
            let approver = by_role
                && !ctx
                    .api
                    .groups_of(&user, &ctx.config.approver_usergroups)
                    .await
                    .is_empty();
            let at = Where {
                workstream: workstream.as_deref(),
                prefix: &ctx.prefix(),
                admin,
                approver,
            };
            answers::answer(&ctx.agent, &other, who, at)
                .await
                .map(|t| from_markdown(&t))
                .unwrap_or_default()
        }
    };
    if reply.is_empty() {
        return;
    }
    if let Err(e) = ctx.api.ephemeral(&channel, &user, None, &reply).await {
        tracing::warn!(error = %e, "answering a slash command failed");
    }
}

/// `ask`: a message in the channel names the question; the answer goes into its thread.
async fn ask(ctx: &Arc<Ctx>, team: &str, channel: &str, user: &str, prompt: &str) {
    let text = format!("<@{user}> asked: {}", escape(&unescape(prompt)));
    let root = match ctx
        .api
        .post(channel, None, &super::client::Content::text(text))
        .await
    {
        Ok(ts) => ts,
        Err(e) => {
            tracing::warn!(error = %e, "posting the question failed");
            return;
        }
    };
    let thread = Thread {
        team: team.to_owned(),
        channel: channel.to_owned(),
        thread_ts: root.clone(),
    };
    converse(ctx, thread, user, &root, prompt, true).await;
}

/// `connectors`: the channel's most recent thread (Slack does not say which thread a command
/// was typed in), or with `channel` the channel itself.
async fn connectors(
    ctx: &Arc<Ctx>,
    team: &str,
    channel: &str,
    user: &str,
    action: &ConnectorsAction,
    scope: PolicyScope,
) -> String {
    let Some(me) = ctx.person(user).await else {
        return "connectors: cannot look up who you are right now; try again.".into();
    };
    let workstream = latest(ctx, team, channel).await;
    let admin = !ctx
        .api
        .groups_of(user, &ctx.config.admin_usergroups)
        .await
        .is_empty();
    let channel_key = WorkstreamKey::SlackChannel {
        team: team.to_owned(),
        channel: channel.to_owned(),
    }
    .to_string();
    let at = crate::commands::connectors::At {
        workstream: workstream.as_deref(),
        channel: Some(&channel_key),
        user_id: &me.id,
        admin,
        prefix: &ctx.prefix(),
    };
    from_markdown(&crate::commands::connectors::answer(&ctx.agent, action, scope, at).await)
}

/// `stop`: every running turn in the channel the caller may stop.
async fn stop(ctx: &Arc<Ctx>, team: &str, channel: &str, user: &str) -> String {
    let mut stopped = 0;
    for key in channel_workstreams(ctx, team, channel).await {
        // A turn may run here or on the node that owns the thread.
        if !ctx.queue.is_busy(&key) && !ctx.agent.runs_elsewhere(&key).await {
            continue;
        }
        let allowed = ctx.standing(user, &key).await.is_some_and(|(_, who)| {
            crate::permissions::may_stop(ctx.config.thread_access, who).is_ok()
        });
        if allowed && crate::thread::stop_anywhere(&ctx.agent, &key, |k| ctx.queue.stop(k)).await {
            stopped += 1;
        }
    }
    match stopped {
        0 => "Nothing of yours is running in this channel.".into(),
        1 => "Stopped.".into(),
        n => format!("Stopped {n} running turns."),
    }
}

/// `close`: ends the channel's most recent open thread (its owner or an admin).
async fn close(ctx: &Arc<Ctx>, team: &str, channel: &str, user: &str) -> String {
    let Some(key) = latest(ctx, team, channel).await else {
        return "There is no open thread of mine in this channel.".into();
    };
    let Some((me, who)) = ctx.standing(user, &key).await else {
        return "close: cannot look up who you are right now; try again.".into();
    };
    if let Err(refusal) = crate::permissions::may_close(who) {
        return escape(&refusal.to_string());
    }
    crate::thread::stop_anywhere(&ctx.agent, &key, |k| ctx.queue.stop(k)).await;
    if let Err(e) = ctx.agent.close_workstream(&key).await {
        return format!("Could not close it: {e}");
    }
    let name = ctx.agent.people().public_name_of(&me.id).await;
    if let Some(thread) = Thread::parse(&key) {
        let note = format!(
            ":lock: Closed by {}. Mention me in the channel to start a new thread.",
            escape(&name)
        );
        let content = super::client::Content::text(note);
        if let Err(e) = ctx
            .api
            .post(&thread.channel, Some(&thread.thread_ts), &content)
            .await
        {
            tracing::warn!(error = %e, "posting the close note failed");
        }
    }
    format!("Closed `{key}`.")
}

/// The workstreams of a channel, oldest thread first.
async fn channel_workstreams(ctx: &Ctx, team: &str, channel: &str) -> Vec<String> {
    let keys = match ctx.agent.workstream_keys().await {
        Ok(keys) => keys,
        Err(e) => {
            tracing::warn!(error = %e, "listing workstreams failed");
            Vec::new()
        }
    };
    let mut threads: Vec<(String, (u64, u64))> = keys
        .into_iter()
        .filter_map(|key| match key.parse().ok()? {
            WorkstreamKey::Slack {
                team: t,
                channel: c,
                thread_ts,
            } if t == team && c == channel => Some((key, ts_order(&thread_ts))),
            _ => None,
        })
        .collect();
    threads.sort_by_key(|(_, order)| *order);
    threads.into_iter().map(|(key, _)| key).collect()
}

/// The channel's most recent thread whose workstream is still open.
async fn latest(ctx: &Ctx, team: &str, channel: &str) -> Option<String> {
    for key in channel_workstreams(ctx, team, channel)
        .await
        .into_iter()
        .rev()
    {
        if let Ok(Some(info)) = ctx.agent.workstream(&key).await
            && !info.closed
        {
            return Some(key);
        }
    }
    None
}

/// Slack timestamps (`1700000000.000100`) in time order.
fn ts_order(ts: &str) -> (u64, u64) {
    let (secs, micros) = ts.split_once('.').unwrap_or((ts, "0"));
    (secs.parse().unwrap_or(0), micros.parse().unwrap_or(0))
}
