//! One turn in named steps, as the module doc of [`crate::turn::agent`] tells it: load the turn
//! ([`Agent::load_turn`]), then for each model call build the request
//! ([`Agent::build_request`]), stream the answer ([`Agent::stream`]), commit it
//! ([`Agent::commit`]) and run the batch of tool calls it asked for ([`Agent::run_batch`]).

use std::time::Instant;

use futures::StreamExt;

use super::models::ModelChoice;
use super::{Agent, AgentError, TurnOutcome, TurnRequest};
use crate::connectors::{ConnectorScope, Effective};
use crate::model::{
    AssembledResponse, CacheKey, ChatModel, ChatRequest, Message, ModelError, ResponseAssembler,
    Role, ToolCall, ToolSchema,
};
use crate::protocol::{Approver, TurnEvent, TurnSink};
use crate::store::StoreError;
use crate::store::memories::{Scope, Visibility};
use crate::store::usage::ModelCall;
use crate::tools::ToolContext;
use crate::turn::batch::Batch;
use crate::turn::nudge::Signals;
use crate::turn::prompt::system_prompt;
use crate::turn::request::{Note, PersonalNote};
use crate::turn::tool_search::TurnTools;
use crate::workstream::Workstream;

/// A turn that has waited this long for MCP servers to start says what it waits for.
const SHOW_STARTUP_WAIT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// What a turn carries from one model call to the next.
struct TurnState {
    /// The tools offered, refreshed when the catalog or the connector policy changes mid-turn.
    tools: TurnTools,
    /// Where the connector policy's task and project tiers come from.
    scope: ConnectorScope,
    /// The connector policy read when the turn was loaded, for the first model call: read
    /// again there it could not have changed in between (a query saved per turn). Taken by
    /// that call, or dropped when a resumed batch ran first (it may have waited long).
    loaded_policy: Option<Effective>,
    /// The system message (the same for every call until the tools or the policy change).
    base_system: String,
    /// Whose memories the turn may see.
    visibility: Visibility,
    /// The names of the tools the system message lists (it is made again when they change).
    offered_names: Option<Vec<String>>,
    /// Whether the last batch had a denial (a nudge signal).
    denied: bool,
    /// Whether the conversation resumes after a restart or a long pause (a nudge signal).
    resumed: bool,
    /// The answer before this turn's message (a nudge signal).
    previous_answer: Option<String>,
    outcome: TurnOutcome,
}

impl Agent {
    /// The turn loop. `resume` carries the dangling calls of an interrupted turn and the
    /// approver holding their stored decisions; otherwise `req.text` opens a new turn.
    pub(super) async fn turn(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        resume: Option<(Vec<ToolCall>, &dyn Approver)>,
        task_connectors: Option<Vec<String>>,
    ) -> Result<TurnOutcome, AgentError> {
        self.inner.metrics.turn();
        let scope = self.connector_scope(task_connectors);
        let mut st = self.load_turn(ws, req, resume.is_none(), scope).await?;
        if let Some((calls, approver)) = resume {
            tracing::info!(workstream = %ws.key, calls = calls.len(), "resuming an interrupted turn");
            st.outcome.tool_calls += calls.len();
            st.loaded_policy = None;
            st.denied = self
                .run_batch(ws, req, &mut st.tools, &st.scope, &calls, approver)
                .await?;
            if req.cancel.is_cancelled() {
                st.outcome.cancelled = true;
                ws.last_turn_end = Some(Instant::now());
                return Ok(st.outcome);
            }
        }
        loop {
            if st.outcome.rounds >= self.inner.config.agent.max_rounds {
                st.outcome.hit_round_limit = true;
                req.sink.event(TurnEvent::Notice(format!(
                    "stopped after {} model calls in one turn (agent.max_rounds); say \"continue\" to go on",
                    st.outcome.rounds
                )));
                break;
            }
            let first_call = st.outcome.rounds == 0;
            st.outcome.rounds += 1;
            let (system, offered) = self.build_request(ws, req, &mut st, first_call).await?;
            let Some(response) = self.model_call(ws, req, &system, &offered).await? else {
                st.outcome.cancelled = true;
                break;
            };
            st.outcome.usage.add(response.usage);
            let charged_to = ws.charged_to.clone();
            let calls = self
                .commit(ws, charged_to.as_deref(), response, &mut st.outcome)
                .await?;
            if calls.is_empty() {
                break;
            }
            st.outcome.tool_calls += calls.len();
            st.denied = self
                .run_batch(ws, req, &mut st.tools, &st.scope, &calls, req.approver)
                .await?;
            if req.cancel.is_cancelled() {
                st.outcome.cancelled = true;
                break;
            }
        }
        ws.last_turn_end = Some(Instant::now());
        ws.last_turn_usage = st.outcome.usage;
        Ok(st.outcome)
    }

    /// Load: the turn's tools and base system message, and for a new turn (`new_message`)
    /// the user's message appended after closing the calls an interrupted turn left.
    async fn load_turn(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        new_message: bool,
        scope: ConnectorScope,
    ) -> Result<TurnState, AgentError> {
        let inner = &self.inner;
        let config = &inner.config;
        let previous_answer = ws
            .history
            .last()
            .filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
            .map(|m| m.content.clone());
        let resumed = (ws.resumed && ws.turns_since_load == 0)
            || ws
                .last_turn_end
                .is_some_and(|t| t.elapsed() >= crate::turn::nudge::LONG_PAUSE);
        self.await_mcp_startup(req).await;
        ws.model = inner.store.chosen_model(&ws.key).await?;
        let policy = self.offer_policy(&scope, &ws.key).await;
        if !config.model.capabilities.supports_tools && policy.is_restricted() {
            // Honest, and never a silent switch to another model: the selection cannot apply.
            req.sink.event(TurnEvent::Notice(tool_support_notice(
                self.model_for(ws).name(),
                &policy,
            )));
        }
        let tools = TurnTools::new(
            self.catalog(),
            &inner.tools_config,
            config.model.capabilities,
            policy.clone(),
        );
        if ws.turns_since_load == 0 {
            ws.expanded_tools.extend(tools.replay(&ws.history));
        }
        ws.turns_since_load += 1;
        // The notify rate limit counts per turn.
        ws.notify_budget = Default::default();
        if new_message {
            self.close_dangling(ws).await?;
            ws.append(&inner.store, Message::user(req.text.clone()), req.author)
                .await?;
        }
        ws.notes.speak(req.author);
        let visibility = Visibility {
            workstream: ws.key.clone(),
            user_id: req.author.map(str::to_owned),
        };
        inner.memories.sync(&inner.store, false).await?;
        Ok(TurnState {
            tools,
            scope,
            loaded_policy: Some(policy),
            base_system: String::new(),
            visibility,
            offered_names: None,
            denied: false,
            resumed,
            previous_answer,
            outcome: TurnOutcome::default(),
        })
    }

    /// A turn that starts while MCP servers are still making their first connection waits
    /// for them (up to `[mcp] startup_timeout` after start), so the first message after a
    /// start is offered their tools; the person is told which ones it goes on without.
    async fn await_mcp_startup(&self, req: &TurnRequest<'_>) {
        let mcp = &self.inner.mcp;
        let waiting = mcp.await_startup();
        tokio::pin!(waiting);
        let outcome = tokio::select! {
            outcome = &mut waiting => outcome,
            () = req.cancel.cancelled() => return,
            () = tokio::time::sleep(SHOW_STARTUP_WAIT_AFTER) => {
                let line = crate::turn::prompt::mcp_waiting_notice(&mcp.starting(), mcp.startup_left());
                req.sink.event(TurnEvent::Notice(line));
                tokio::select! {
                    outcome = waiting => outcome,
                    () = req.cancel.cancelled() => return,
                }
            }
        };
        let Some(unavailable) = outcome else {
            return;
        };
        // The follower task may not have seen the servers' listings yet.
        self.inner.offer_mcp_tools();
        if let Some(notice) = crate::turn::prompt::mcp_startup_notice(&unavailable) {
            req.sink.event(TurnEvent::Notice(notice));
        }
    }

    /// Build the request of one model call: the stable system message and the tools offered
    /// (re-read if servers changed them mid-turn), and the context note of the newest
    /// message when this call is the first to send it: the time when the turn starts, the
    /// relevant memories no kept note shows yet, and the nudges due.
    async fn build_request(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        st: &mut TurnState,
        first_call: bool,
    ) -> Result<(String, Vec<ToolSchema>), AgentError> {
        let inner = &self.inner;
        let newest = ws.history.len().saturating_sub(1);
        if !ws.history.is_empty() && !ws.notes.has(newest) {
            let note = self.context_note(ws, req, st, first_call).await?;
            ws.notes.attach(newest, note);
        }
        // Servers may add or remove tools, and people may change the connector policy,
        // mid-turn: the next model call sees the change.
        let current = self.catalog();
        let policy = match st.loaded_policy.take() {
            Some(policy) => policy,
            None => self.offer_policy(&st.scope, &ws.key).await,
        };
        let policy_changed = st.tools.policy() != &policy;
        if !st.tools.uses(&current) || policy_changed {
            st.tools = TurnTools::new(
                current,
                &inner.tools_config,
                inner.config.model.capabilities,
                policy,
            );
        }
        let offered = st.tools.offered(&ws.expanded_tools);
        let same_names = st
            .offered_names
            .as_ref()
            .is_some_and(|listed| listed.iter().eq(offered.iter().map(|t| &t.name)));
        if policy_changed || !same_names {
            st.base_system = self.base_system(ws, &st.tools);
            st.offered_names = Some(offered.iter().map(|t| t.name.clone()).collect());
        }
        Ok((st.base_system.clone(), offered))
    }

    /// The note for the newest message: the time when the turn starts, the relevant memories
    /// no kept note shows the speaker yet (their own in the personal part), and the nudges due.
    async fn context_note(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        st: &TurnState,
        first_call: bool,
    ) -> Result<Note, AgentError> {
        let inner = &self.inner;
        let (personal, shared): (Vec<_>, Vec<_>) = {
            let shown = ws.notes.shown_memories(ws.context.start);
            inner
                .memories
                .relevant(&st.visibility, &ws.history)
                .into_iter()
                .filter(|m| !shown.contains(m.id.as_str()))
                .partition(|m| m.scope == Scope::User)
        };
        let ids = |ms: &[std::sync::Arc<crate::store::memories::Memory>]| -> Vec<String> {
            ms.iter().map(|m| m.id.clone()).collect()
        };
        let touched: Vec<&str> = shared
            .iter()
            .chain(&personal)
            .map(|m| m.id.as_str())
            .collect();
        if !touched.is_empty() {
            inner.store.touch_memories(&touched).await?;
        }
        let signals = Signals {
            new_user_message: first_call.then_some(req.text.as_str()),
            denied: st.denied,
            resumed: first_call && st.resumed,
            previous_answer: st.previous_answer.as_deref().filter(|_| first_call),
        };
        let nudges = crate::turn::nudge::due(&mut ws.nudges, &signals, Instant::now());
        let text = crate::turn::prompt::context_note(
            first_call.then(|| inner.clock.now()),
            &crate::turn::memory::render(&shared),
            &crate::turn::nudge::render(&nudges),
        );
        let personal_text =
            crate::turn::prompt::context_note(None, &crate::turn::memory::render(&personal), "");
        Ok(Note {
            text: text.unwrap_or_default(),
            memories: ids(&shared),
            personal: personal_text
                .zip(req.author)
                .map(|(text, user)| PersonalNote {
                    user: user.to_owned(),
                    text,
                    memories: ids(&personal),
                }),
        })
    }

    /// The connector policy for what a model call is offered. Unreadable, it offers no MCP
    /// server (fail closed) and the turn goes on with the built-ins; the dispatcher then
    /// refuses MCP calls with the reason.
    ///
    /// With no MCP server there is nothing a policy could hide, and a model that calls tools
    /// needs no notice about it, so the store is not asked (two reads a tool turn fewer); the
    /// first server that appears brings the read back on the next model call.
    pub(super) async fn offer_policy(&self, scope: &ConnectorScope, workstream: &str) -> Effective {
        let capabilities = self.inner.config.model.capabilities;
        if capabilities.supports_tools
            && self.inner.mcp.catalog().is_empty()
            && !self.catalog().has_connector_tools()
        {
            return Effective::unrestricted();
        }
        match scope.effective(&self.inner.store, workstream).await {
            Ok(policy) => policy,
            Err(e) => {
                tracing::warn!(workstream, error = %e, "connector policy unreadable: no MCP server offered");
                Effective::closed()
            }
        }
    }

    /// The system message: the prompt naming the tools offered, and the MCP resources and
    /// prompts of the servers connector policy allows.
    fn base_system(&self, ws: &Workstream, tools: &TurnTools) -> String {
        let config = &self.inner.config;
        let mut base = system_prompt(
            &ws.workdir,
            &tools.offered(&ws.expanded_tools),
            config.agent.system_prompt_extra.as_deref(),
        );
        let catalog = self.inner.mcp.catalog();
        let policy = tools.policy();
        if policy.is_restricted() {
            base.push_str(&crate::turn::prompt::mcp_catalog(
                &policy.restrict(&catalog),
            ));
        } else {
            base.push_str(&crate::turn::prompt::mcp_catalog(&catalog));
        }
        base
    }

    /// Stream one model call into the thread. `None` when the turn was stopped; a broken-off
    /// answer is an error. Either way the text shown so far is kept in the history.
    pub(super) async fn stream(
        &self,
        model: &ModelChoice,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        system: &str,
        offered: &[ToolSchema],
        max_tokens: Option<u32>,
    ) -> Result<Option<AssembledResponse>, AgentError> {
        let request = ChatRequest {
            system,
            messages: &ws.request_messages(),
            tools: offered,
            max_tokens,
            cache_key: Some(CacheKey::Conversation(&ws.key)),
        };
        let mut assembler = ResponseAssembler::default();
        let started = Instant::now();
        let streamed = tokio::select! {
            r = stream_into(model.client.as_ref(), request, &mut assembler, req.sink) => Some(r),
            () = req.cancel.cancelled() => None,
        };
        self.inner.metrics.model_call_ended(
            model.name(),
            streamed.as_ref().map(Result::is_ok),
            started.elapsed(),
        );
        match streamed {
            Some(Ok(())) => Ok(Some(assembler.finish())),
            Some(Err(e)) => {
                self.keep_partial(ws, &assembler, "[the model's answer broke off]")
                    .await?;
                Err(e.into())
            }
            None => {
                self.keep_partial(ws, &assembler, "[stopped]").await?;
                Ok(None)
            }
        }
    }

    /// Commit the model's answer to the history (and its token usage); returns the tool
    /// calls it asked for and keeps its text as the turn's answer so far.
    pub(super) async fn commit(
        &self,
        ws: &mut Workstream,
        person: Option<&str>,
        response: AssembledResponse,
        outcome: &mut TurnOutcome,
    ) -> Result<Vec<ToolCall>, AgentError> {
        let mut message = Message::assistant(response.text.clone());
        message.tool_calls = response.tool_calls;
        let calls = message.tool_calls.clone();
        let model = self.model_for(ws);
        let call = ModelCall::new(&ws.key, person, model.name(), response.usage);
        // The answer and its token usage in one statement (one round trip per model call).
        self.inner
            .store
            .append_answer(&ws.key, ws.next_seq(), &message, &call)
            .await?;
        self.inner.metrics.tokens(model.name(), &response.usage);
        ws.history.push(message);
        outcome.text = response.text;
        Ok(calls)
    }

    /// Counts a model call that appends no message (a compaction's summary): stored for
    /// `/usage` and budgets, and in the metrics. A store error is logged: the call was made.
    pub(super) async fn count_call(&self, call: ModelCall<'_>) {
        self.inner.metrics.tokens(call.model, &call.usage);
        if call.usage == crate::model::Usage::default() {
            return;
        }
        if let Err(e) = self.inner.store.record_usage(&call).await {
            tracing::warn!(thread = %call.thread, error = %e, "the tokens of a model call could not be counted");
        }
    }

    /// Prepares, approves and executes one batch of calls; returns whether anything was denied.
    async fn run_batch(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        tools: &mut TurnTools,
        scope: &ConnectorScope,
        calls: &[ToolCall],
        approver: &dyn Approver,
    ) -> Result<bool, AgentError> {
        let inner = &self.inner;
        let config = &inner.config;
        let max_output_bytes = self.output_bytes(ws).await;
        ensure_workdir(&ws.workdir).await;
        let batch = Batch {
            registry: &inner.registry,
            store: &inner.store,
            tool_ctx: ToolContext {
                workdir: ws.workdir.clone(),
                paths: inner.paths.clone(),
                config: self.tools_config_for_window(max_output_bytes),
                capabilities: config.model.capabilities,
                files_read: ws.files_read.clone(),
                cancel: req.cancel.child_token(),
                workstream: ws.key.clone(),
                user_id: req.author.map(str::to_owned),
                charged_to: ws.charged_to.clone(),
                thread_owner: ws.owner.clone(),
                store: Some(inner.store.clone()),
                mcp: Some(inner.mcp.clone()),
                child_env: inner.child_env.clone(),
                services: inner.services.clone(),
                connectors: scope.clone(),
                notify_budget: ws.notify_budget.clone(),
                metrics: inner.metrics.clone(),
            },
            workstream: &ws.key,
            first_seq: ws.next_seq(),
            requested_by: req.author,
            auto_approve: config.approval.auto_approve,
            approval_timeout: config.approval.timeout,
            max_parallel: config.tools.max_parallel,
            max_output_bytes,
            sink: req.sink,
            approver,
            tool_search: tools.client_search(),
            turn: Some(crate::turn::batch::TurnLink {
                agent: self,
                approver: req.approver,
            }),
            nested: None,
        };
        let done = batch.run(calls).await?;
        tools.expand(&mut ws.expanded_tools, done.expanded, calls);
        if calls.iter().any(|c| c.name == "memory") {
            inner.memories.sync(&inner.store, true).await?;
        }
        ws.history.extend(done.results);
        Ok(done.denied)
    }

    /// The most bytes of one tool's output the model sees: `[tools] max_output_bytes`, but
    /// never more than half the context window of the model `ws` answers with.
    pub(super) async fn output_bytes(&self, ws: &Workstream) -> usize {
        let window = self.window_of(&self.model_for(ws)).await;
        let half = (window.tokens as f64 * self.inner.gauge.bytes_per_token() / 2.0) as usize;
        self.inner.config.tools.max_output_bytes.min(half.max(1024))
    }

    /// The tools' settings with `max_output_bytes` as the output cap, so a tool cuts its own
    /// output (and says how large it was in all) to what the window allows, rather than
    /// having its cut cut again.
    fn tools_config_for_window(
        &self,
        max_output_bytes: usize,
    ) -> std::sync::Arc<crate::config::ToolsConfig> {
        let config = &self.inner.tools_config;
        if config.max_output_bytes <= max_output_bytes {
            return config.clone();
        }
        std::sync::Arc::new(crate::config::ToolsConfig {
            max_output_bytes,
            ..(**config).clone()
        })
    }

    /// A new message arrived while tool calls of an interrupted turn still wait: they will not
    /// run. Each gets a result saying so (the model needs one per call), and their pending
    /// requests are closed so late clicks say the turn is gone.
    pub(super) async fn close_dangling(&self, ws: &mut Workstream) -> Result<(), StoreError> {
        let dangling = crate::approvals::resume::unanswered_calls(&ws.history);
        if dangling.is_empty() {
            return Ok(());
        }
        tracing::info!(workstream = %ws.key, calls = dangling.len(), "closing calls of an interrupted turn");
        for call in dangling {
            let text = "not run: sandpiper restarted before this call was decided or finished, \
                        and the conversation moved on";
            ws.append(
                &self.inner.store,
                Message::tool_result(&call.id, &call.name, text),
                None,
            )
            .await?;
        }
        let change = crate::approvals::ledger::Change::CancelPending {
            workstream: &ws.key,
            cause: crate::store::audit::CancelCause::NewMessage,
        };
        crate::approvals::ledger::record(&self.inner.store, change).await?;
        Ok(())
    }

    /// Records the text streamed before an interruption, so the history shows what the user saw.
    async fn keep_partial(
        &self,
        ws: &mut Workstream,
        assembler: &ResponseAssembler,
        note: &str,
    ) -> Result<(), StoreError> {
        if assembler.text().trim().is_empty() {
            return Ok(());
        }
        let text = format!("{}\n{note}", assembler.text());
        ws.append(&self.inner.store, Message::assistant(text), None)
            .await
    }
}

/// Creates a workstream's working directory on first use. A failure is logged, not fatal:
/// the tools that need the directory then say what is wrong.
///
/// Done in place rather than on tokio's blocking pool: once the directory exists this is
/// one `stat`, far cheaper than handing the call to another thread and waking back up on
/// every batch of every turn.
pub(super) async fn ensure_workdir(dir: &std::path::Path) {
    if let Err(e) = std::fs::create_dir_all(dir) {
        tracing::warn!(workdir = %dir.display(), error = %e, "cannot create the working directory");
    }
}

async fn stream_into(
    model: &dyn ChatModel,
    request: ChatRequest<'_>,
    assembler: &mut ResponseAssembler,
    sink: &dyn TurnSink,
) -> Result<(), ModelError> {
    let mut stream = model.stream(request).await?;
    let mut done = false;
    while let Some(event) = stream.next().await {
        let event = event?;
        if let crate::model::ModelEvent::TextDelta(t) = &event {
            sink.event(TurnEvent::TextDelta(t.clone()));
        }
        done |= matches!(event, crate::model::ModelEvent::Done { .. });
        assembler.push(&event);
    }
    if done {
        Ok(())
    } else {
        Err(ModelError::Protocol(
            "the response ended before it was complete".into(),
        ))
    }
}

/// What a workstream with a connector selection is told when its model cannot call tools.
fn tool_support_notice(model: &str, policy: &Effective) -> String {
    format!(
        "Note: the model {model} cannot call tools (supports_tools = false), so this answer \
         comes from the model alone: the connector selection of this thread ({}, from the {} \
         tier) is not used.",
        policy.describe(),
        policy.source
    )
}
