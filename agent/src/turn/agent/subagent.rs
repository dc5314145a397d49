//! A sub-agent's loop (see [`crate::turn::subagent`]): the turn loop's steps (stream, commit, run a
//! batch) with the sub-agent's own history, scoped tools, limits and status line.

use std::collections::BTreeSet;

use super::run::ensure_workdir;
use super::{Agent, AgentError, TurnOutcome, TurnRequest};
use crate::connectors::{ConnectorScope, is_tool_allowed};
use crate::model::{Message, ToolSchema};
use crate::protocol::SubAgentPhase;
use crate::tools::ToolContext;
use crate::turn::batch::{Batch, Nested};
use crate::turn::prompt::system_prompt;
use crate::turn::subagent::{StatusSink, SubAgentJob, SubAgentOutcome, SubAgentStop, child_key};

impl Agent {
    /// Runs a sub-agent to completion inside the parent's call `job.turn.call_id`: its job
    /// becomes the first message of its own workstream ([`child_key`]); it loops like a turn
    /// until it answers without tool calls, hits `[agent] task_max_rounds` or
    /// `task_max_tokens`, or the parent's call is stopped. Errors are the turn's kind: the
    /// store or the model failed.
    pub async fn run_subagent(&self, job: SubAgentJob<'_>) -> Result<SubAgentOutcome, AgentError> {
        let inner = &self.inner;
        let config = &inner.config;
        let turn = job.turn;
        let parent = job.ctx.workstream.as_str();
        let key = child_key(&parent.parse()?, job.kind, turn.call_id).to_string();
        let handle = inner.workstreams.get(&key, turn.requested_by).await?;
        let mut ws = handle.lock().await;
        // It works on the parent's files, in the parent's directory.
        ws.workdir = job.ctx.workdir.clone();
        ws.charged_to = job.ctx.charged_to.clone();
        // It answers with the model its thread was switched to.
        ws.model = inner.store.chosen_model(parent).await?;
        let names = job.kind.builtin_tools(&inner.registry);
        let label = format!("{}: {}", job.kind.tool(), job.title);
        let status = StatusSink::new(turn.sink, turn.call_id, job.kind, &job.title);
        let cancel = job.ctx.cancel.child_token();
        let req = TurnRequest {
            workstream: &key,
            author: turn.requested_by,
            text: job.prompt.clone(),
            sink: &status,
            approver: turn.approver,
            cancel: cancel.clone(),
        };
        tracing::info!(workstream = parent, subagent = %key, tool = job.kind.tool(), "sub-agent starts");
        // The same call run again (resumed after a restart) continues its stored history.
        self.close_dangling(&mut ws).await?;
        ws.append(
            &inner.store,
            Message::user(job.prompt.clone()),
            turn.requested_by,
        )
        .await?;
        let offered = self
            .subagent_tools(&names, parent, &job.ctx.connectors)
            .await;
        let mut system = system_prompt(
            &ws.workdir,
            &offered,
            config.agent.system_prompt_extra.as_deref(),
        );
        system.push_str(job.kind.brief());
        // One sub-agent's calls share this system message; it is made once, so the time fits.
        system.push_str(&format!(
            "\nIt is {}.\n",
            chrono::Local::now().format("%A, %Y-%m-%d %H:%M %Z")
        ));
        let mut outcome = TurnOutcome::default();
        let mut tokens = 0u64;
        let mut stopped = None;
        loop {
            if outcome.rounds >= config.agent.task_max_rounds {
                stopped = Some(SubAgentStop::Rounds(outcome.rounds));
                break;
            }
            if tokens >= config.agent.task_max_tokens {
                stopped = Some(SubAgentStop::Tokens(tokens));
                break;
            }
            outcome.rounds += 1;
            status.step(outcome.rounds);
            let Some(response) = self.model_call(&mut ws, &req, &system, &offered).await? else {
                outcome.cancelled = true;
                break;
            };
            tokens += response.usage.input_tokens + response.usage.output_tokens;
            let calls = self
                .commit(
                    &mut ws,
                    job.ctx.charged_to.as_deref(),
                    response,
                    &mut outcome,
                )
                .await?;
            if calls.is_empty() {
                break;
            }
            outcome.tool_calls += calls.len();
            ensure_workdir(&ws.workdir).await;
            let batch = Batch {
                registry: &inner.registry,
                store: &inner.store,
                tool_ctx: ToolContext {
                    cancel: cancel.child_token(),
                    files_read: ws.files_read.clone(),
                    ..job.ctx.clone()
                },
                workstream: &key,
                first_seq: ws.next_seq(),
                requested_by: turn.requested_by,
                auto_approve: config.approval.auto_approve,
                approval_timeout: config.approval.timeout,
                max_parallel: config.tools.max_parallel,
                max_output_bytes: self.output_bytes(&ws).await,
                sink: &status,
                approver: turn.approver,
                tool_search: None,
                turn: None,
                nested: Some(Nested {
                    thread: parent,
                    label: &label,
                    parent_call: turn.call_id,
                    tools: &names,
                }),
            };
            let done = batch.run(&calls).await?;
            ws.history.extend(done.results);
            if cancel.is_cancelled() {
                outcome.cancelled = true;
                break;
            }
        }
        let result = SubAgentOutcome {
            text: outcome.text,
            rounds: outcome.rounds,
            tool_calls: outcome.tool_calls,
            tokens,
            stopped,
            cancelled: outcome.cancelled,
        };
        status.end(if result.finished() {
            SubAgentPhase::Done
        } else {
            SubAgentPhase::Stopped
        });
        tracing::info!(
            workstream = parent,
            subagent = %key,
            rounds = result.rounds,
            tool_calls = result.tool_calls,
            tokens = result.tokens,
            stopped = ?result.stopped,
            cancelled = result.cancelled,
            "sub-agent ended"
        );
        Ok(result)
    }

    /// What a sub-agent is offered: its built-ins (registry order) and the MCP tools the
    /// parent thread's connector policy allows, none deferred (sub-agents do not search).
    async fn subagent_tools(
        &self,
        builtin: &BTreeSet<String>,
        thread: &str,
        scope: &ConnectorScope,
    ) -> Vec<ToolSchema> {
        if !self.inner.config.model.capabilities.supports_tools {
            return Vec::new();
        }
        let policy = self.offer_policy(scope, thread).await;
        let registry = &self.inner.registry;
        let catalog = self.catalog();
        catalog
            .tools()
            .iter()
            .filter(|t| match registry.get(&t.name) {
                Some(_) => builtin.contains(&t.name),
                None => is_tool_allowed(&t.name, &policy),
            })
            .map(|t| ToolSchema {
                defer_loading: false,
                ..t.clone()
            })
            .collect()
    }
}
