//! The `watch` tool: create, list and cancel this workstream's watches (see
//! [`crate::watch`]). `create` asks a person, like bash, since the command runs unattended
//! every interval; `list` does not; `cancel` asks unless the thread's owner asked for it (the
//! rule of `/watch cancel`). Every limit is checked in `prepare`, so a bad
//! watch is refused with a clear error before anyone is asked: an empty or blocklisted
//! command, a name that cannot be typed in `/watch cancel`, an interval outside 10 s – 24 h,
//! a `stop_on` outside the language (with its position), a `max_polls` out of range. The name
//! and count limits are the store's, checked when the watch is stored.

use serde::Deserialize;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::store::watches::NewWatch;
use crate::watch::{self, Spec};

/// The `watch` tool.
#[derive(Debug, Default)]
pub(super) struct WatchTool;

/// The arguments of `tools/watch.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    action: String,
    command: Option<String>,
    poll_every: Option<String>,
    stop_on: Option<String>,
    name: Option<String>,
    max_polls: Option<i64>,
}

/// A validated call.
#[derive(Debug)]
pub(super) enum Action {
    Create(Spec),
    List,
    Cancel(String),
}

fn parse(args: &Args) -> Result<Action, ToolError> {
    match args.action.as_str() {
        "create" => {
            let command = args.command.as_deref().ok_or_else(|| {
                ToolError::model("create needs `command`: the shell command to poll")
            })?;
            super::bash::check_command(command)?;
            let name = args.name.as_deref().ok_or_else(|| {
                ToolError::model("create needs `name`: a short name such as `pr-review`")
            })?;
            let spec = Spec::new(
                name,
                command,
                args.poll_every.as_deref(),
                args.stop_on.as_deref(),
                args.max_polls,
            )
            .map_err(|e| ToolError::model(e.to_string()))?;
            Ok(Action::Create(spec))
        }
        "list" => Ok(Action::List),
        "cancel" => match args.name.as_deref().map(str::trim) {
            Some(name) if !name.is_empty() => Ok(Action::Cancel(name.to_owned())),
            _ => Err(ToolError::model(
                "cancel needs `name`: the watch's name or the start of its id (see list)",
            )),
        },
        other => Err(ToolError::model(format!(
            "`action` must be create, list or cancel, not `{other}`"
        ))),
    }
}

/// Whether the message being answered is the thread owner's: only then does cancelling a
/// watch go ahead unasked. Anyone else's message (a participant, a stranger, a watch or a
/// notification with no person behind it) asks, and the card is decided by the owner or an
/// approver, as `/watch cancel` is the owner's or an admin's. The agent cannot tell an admin
/// from anyone else, so an admin's request asks too (the admin may approve it).
fn asked_by_owner(ctx: &ToolContext) -> bool {
    ctx.user_id.is_some() && ctx.user_id == ctx.thread_owner
}

#[async_trait::async_trait]
impl Tool for WatchTool {
    type Args = Args;
    type Call = Action;
    const USAGE: &'static str = "send {\"action\": \"create\", \"name\": \"ci\", \"command\": \"gh run list -L1 --json status\", \"stop_on\": \"data[0][\\\"status\\\"] == \\\"completed\\\"\"}";
    const ASKS_FOR: Option<&'static str> = Some(
        "create (its command runs unattended, like bash); cancel, unless the thread's owner asked",
    );

    fn name(&self) -> &'static str {
        "watch"
    }

    fn prepare(&self, args: Args, ctx: &ToolContext) -> Result<(Prepared, Action), ToolError> {
        let action = parse(&args)?;
        let prepared = match &action {
            Action::Create(spec) => Prepared {
                header: format!("watch: {}", spec.summary()),
                preview: spec.preview(),
                ask: true,
            },
            Action::List => Prepared {
                header: "watch: list".into(),
                preview: String::new(),
                ask: false,
            },
            Action::Cancel(name) => Prepared {
                header: format!("watch: cancel {name}"),
                preview: String::new(),
                ask: !asked_by_owner(ctx),
            },
        };
        Ok((prepared, action))
    }

    async fn execute(
        &self,
        action: &Action,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let store = ctx.store()?;
        let model_error = |e: &dyn std::fmt::Display| ToolError::model(e.to_string());
        match action {
            Action::Create(spec) => {
                let new = NewWatch {
                    workstream: ctx.workstream.clone(),
                    name: spec.name.clone(),
                    command: spec.command.clone(),
                    poll_every_ms: spec.poll_every_ms(),
                    stop_on: spec.stop_on.clone(),
                    max_polls: spec.max_polls,
                    created_by: ctx.user_id.clone(),
                };
                let created = store
                    .create_watch(&new)
                    .await
                    .map_err(|e| model_error(&e))?;
                tracing::info!(
                    workstream = %ctx.workstream,
                    watch = %created.id,
                    name = %new.name,
                    "watch created"
                );
                Ok(ToolOutput::text(format!(
                    "watch `{}` created (id {}): {}. The first poll runs now; when it fires, \
                     its result arrives in this thread as a message.",
                    new.name,
                    watch::short_id(&created.id),
                    spec.summary()
                )))
            }
            Action::List => {
                let watches = store
                    .watches_of(&ctx.workstream)
                    .await
                    .map_err(|e| model_error(&e))?;
                Ok(ToolOutput::text(watch::list_text(
                    &watches,
                    crate::store::now_ms(),
                )))
            }
            Action::Cancel(which) => {
                let cancelled = store
                    .cancel_watch(&ctx.workstream, which)
                    .await
                    .map_err(|e| model_error(&e))?;
                Ok(ToolOutput::text(format!(
                    "watch `{}` cancelled after {} poll(s)",
                    cancelled.watch.name, cancelled.polls
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests;
