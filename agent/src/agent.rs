//! The turn loop: load the workstream, stream the model, run tool batches through the
//! [`pipeline`](crate::pipeline), and loop until the model answers without tool calls.
//!
//! Each model call is offered the tools of the agent's [`ToolCatalog`] as the workstream sees
//! them (see [`tool_search`](crate::tool_search)): with tool search active, deferred tools
//! appear once `tool_search` found them or the model called them by name. This loop serves
//! the top-level conversation only; sub-agents would get their scoped tool sets unsearched.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::child_env::ChildEnv;
use crate::config::Config;
use crate::mcp::McpManager;
use crate::memory::MemoryIndex;
use crate::model::{
    ChatModel, ChatRequest, Message, ModelError, ResponseAssembler, Role, ToolCall, ToolSchema,
};
use crate::nudge::Signals;
use crate::pipeline::Batch;
use crate::prompt::system_prompt;
use crate::protocol::{Approver, TurnEvent, TurnSink};
use crate::store::memories::Visibility;
use crate::store::{Store, StoreError};
use crate::tool_search::{ToolCatalog, TurnTools};
use crate::tools::{PathPolicy, RegistryError, ToolContext, ToolRegistry};
use crate::turn_limits::{TurnLimits, TurnPermit};
use crate::workstream::{WorkdirLayout, Workstream, Workstreams};

/// What the agent learns from the process it runs in rather than from its config.
pub struct Host<'a> {
    /// Files no tool may read or change, asked or not, besides the database files (which the
    /// agent knows from its config): the config file sandpiper was started with, an MCP config
    /// file. They may hold tokens, and an approver cannot see what a read would post.
    pub protected_files: Vec<PathBuf>,
    /// The environment whose allow-listed part tools' processes start from (see
    /// [`crate::child_env`]); tests plant secrets here to show they never reach a tool.
    pub env: &'a dyn crate::config::Env,
}

impl Default for Host<'static> {
    /// This process's environment, and no protected files beyond the database.
    fn default() -> Self {
        Self {
            protected_files: Vec::new(),
            env: &crate::config::ProcessEnv,
        }
    }
}

/// Why a turn could not run. The channel shows it to the user.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The database failed; what was committed before stays.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The model failed (after retries) or sent garbage.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The tool registry is inconsistent (a start-up error).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The user's message is larger than `agent.max_message_bytes`; nothing was stored.
    #[error(
        "your message is {size} bytes; the limit is {limit} bytes (agent.max_message_bytes). \
         Attach large content as a file in the working directory and ask me to read it"
    )]
    MessageTooLarge {
        /// Size of the message.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// One user message to answer.
pub struct TurnRequest<'a> {
    /// Workstream key (`console:default`, `discord:<thread>`, ...).
    pub workstream: &'a str,
    /// Who sent the message: a sandpiper user id (see `Store::user_for_identity`). Becomes
    /// the owner of a new workstream, is recorded on the message, and selects the `user`
    /// memory scope.
    pub author: Option<&'a str>,
    /// The message.
    pub text: String,
    /// Where events go.
    pub sink: &'a dyn TurnSink,
    /// Who decides approvals.
    pub approver: &'a dyn Approver,
    /// Cancelled by `/stop`, Ctrl-C or shutdown.
    pub cancel: CancellationToken,
}

/// Continue a turn that a restart interrupted while it waited for approval (see
/// [`resume`](crate::resume)).
pub struct ResumeRequest<'a> {
    /// Workstream key.
    pub workstream: &'a str,
    /// Who started the interrupted turn (selects the `user` memory scope).
    pub author: Option<&'a str>,
    /// Where events go.
    pub sink: &'a dyn TurnSink,
    /// Who decides approvals of later tool calls in the resumed turn.
    pub approver: &'a dyn Approver,
    /// Cancelled by `/stop` or shutdown.
    pub cancel: CancellationToken,
}

/// What `/status` shows about a workstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkstreamStatus {
    /// Workstream key.
    pub key: String,
    /// Who started it (sandpiper user id).
    pub owner: Option<String>,
    /// The model answering.
    pub model: String,
    /// Prompt tokens used so far.
    pub tokens_in: u64,
    /// Completion tokens used so far.
    pub tokens_out: u64,
    /// Tools always allowed here, sorted.
    pub always_allowed: Vec<String>,
    /// Messages in its history.
    pub messages: usize,
    /// Whether it was closed.
    pub closed: bool,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TurnOutcome {
    /// The final answer text.
    pub text: String,
    /// Model calls made.
    pub rounds: u32,
    /// Tool calls made.
    pub tool_calls: usize,
    /// Whether it was cancelled.
    pub cancelled: bool,
    /// Whether it stopped at `agent.max_rounds`.
    pub hit_round_limit: bool,
}

/// The agent: configuration, model, tools, storage and live workstreams.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    tools_config: Arc<crate::config::ToolsConfig>,
    model: Arc<dyn ChatModel>,
    registry: ToolRegistry,
    /// Built-in and external tools; swapped whole by [`Agent::set_external_tools`].
    catalog: RwLock<Arc<ToolCatalog>>,
    store: Store,
    workstreams: Workstreams,
    /// What the file tools may read unasked, only with approval, or never.
    paths: Arc<PathPolicy>,
    memories: MemoryIndex,
    mcp: Arc<McpManager>,
    /// The environment of processes tools start, built once from sandpiper's own.
    child_env: Arc<crate::child_env::ChildEnv>,
    /// Settings and the model for web_fetch, web_search and math.
    services: Arc<crate::tools::ToolServices>,
    /// Places of running turns (`agent.max_concurrent_turns`, `agent.max_turns_per_user`).
    limits: TurnLimits,
}

impl Inner {
    fn set_external_tools(&self, tools: Vec<ToolSchema>) {
        let catalog = Arc::new(ToolCatalog::new(self.registry.tools(), tools));
        match self.catalog.write() {
            Ok(mut slot) => *slot = catalog,
            Err(poisoned) => *poisoned.into_inner() = catalog,
        }
    }
}

/// The MCP catalog's tools as function schemas (`mcp__{server}__{tool}`).
fn mcp_tool_schemas(mcp: &McpManager) -> Vec<ToolSchema> {
    mcp.catalog()
        .tools
        .iter()
        .map(|t| ToolSchema {
            name: t.full_name.clone(),
            description: format!("[MCP: {}] {}", t.server, t.description),
            parameters: t.input_schema.clone(),
            defer_loading: false,
        })
        .collect()
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.inner.model.model_name())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Builds an agent with the built-in tools.
    pub fn new(
        config: Config,
        model: Arc<dyn ChatModel>,
        store: Store,
    ) -> Result<Self, AgentError> {
        Self::with_mcp(config, model, store, McpManager::empty())
    }

    /// Builds an agent that also offers the tools, resources and prompts of `mcp`'s servers,
    /// following its catalog as servers add and remove tools. Tools' processes get the
    /// allow-listed part of this process's environment (see [`crate::child_env`]).
    pub fn with_mcp(
        config: Config,
        model: Arc<dyn ChatModel>,
        store: Store,
        mcp: Arc<McpManager>,
    ) -> Result<Self, AgentError> {
        Self::with_host(config, model, store, mcp, Host::default())
    }

    /// [`Agent::with_mcp`] with what it learns from the process it runs in given explicitly
    /// (the binary's config file to protect; in tests, an environment with planted secrets).
    pub fn with_host(
        config: Config,
        model: Arc<dyn ChatModel>,
        store: Store,
        mcp: Arc<McpManager>,
        host: Host<'_>,
    ) -> Result<Self, AgentError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let layout = WorkdirLayout::new(
            config.tools.workdir.as_deref(),
            config.tools.workdir_mode,
            &cwd,
        );
        let mut protected = crate::tools::path_policy::database_files(&config.database.url);
        protected.extend(host.protected_files);
        let paths = Arc::new(PathPolicy::build(&config.tools, &protected));
        let child_env = ChildEnv::for_tools(host.env, &config.tools);
        let workstreams = Workstreams::new(store.clone(), layout, config.agent.workstream_cache);
        let registry = ToolRegistry::builtin()?;
        let catalog = ToolCatalog::new(registry.tools(), mcp_tool_schemas(&mcp));
        let limits = TurnLimits::new(
            config.agent.max_concurrent_turns,
            config.agent.max_turns_per_user,
        );
        let agent = Self {
            inner: Arc::new(Inner {
                tools_config: Arc::new(config.tools.clone()),
                services: Arc::new(crate::tools::ToolServices {
                    web: config.web.clone(),
                    math: config.math.clone(),
                    model: Some(model.clone()),
                }),
                config,
                model,
                registry,
                catalog: RwLock::new(Arc::new(catalog)),
                store,
                workstreams,
                paths,
                memories: MemoryIndex::default(),
                mcp,
                child_env: Arc::new(child_env),
                limits,
            }),
        };
        agent.follow_mcp_catalog();
        Ok(agent)
    }

    /// The connected MCP servers.
    pub fn mcp(&self) -> &Arc<McpManager> {
        &self.inner.mcp
    }

    /// Offers the MCP catalog's tools again whenever it changes (copy-on-write: a running
    /// turn keeps the tools it started with). The task ends when the agent is dropped.
    fn follow_mcp_catalog(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        let mut generation = self.inner.mcp.generation();
        runtime.spawn(async move {
            while generation.changed().await.is_ok() {
                let Some(inner) = weak.upgrade() else { break };
                inner.set_external_tools(mcp_tool_schemas(&inner.mcp));
            }
        });
    }

    /// The configuration in effect.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The tool registry.
    pub fn registry(&self) -> &ToolRegistry {
        &self.inner.registry
    }

    /// Replaces the external (MCP) tools offered after the built-ins. They are deferrable:
    /// with tool search active the model finds them with `tool_search` (or the provider's
    /// native search). Turns already running keep the tools they started with; workstreams
    /// keep the tools they expanded.
    pub fn set_external_tools(&self, tools: Vec<ToolSchema>) {
        self.inner.set_external_tools(tools);
    }

    /// The tools in effect: built-ins, then external ones.
    pub fn catalog(&self) -> Arc<ToolCatalog> {
        match self.inner.catalog.read() {
            Ok(slot) => Arc::clone(&slot),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Drops a workstream from memory; it is reloaded from the store when next used.
    pub fn forget(&self, workstream: &str) {
        self.inner.workstreams.evict(workstream);
    }

    /// A workstream's history (loading it if needed).
    pub async fn history(&self, workstream: &str) -> Result<Vec<Message>, AgentError> {
        let handle = self.inner.workstreams.get(workstream, None).await?;
        let ws = handle.lock().await;
        Ok(ws.history.clone())
    }

    /// What `/status` shows, or `None` for an unknown workstream.
    pub async fn status(&self, workstream: &str) -> Result<Option<WorkstreamStatus>, AgentError> {
        let store = &self.inner.store;
        let Some(info) = store.workstream(workstream).await? else {
            return Ok(None);
        };
        let mut always_allowed = store.grants(workstream).await?;
        always_allowed.sort();
        let messages = self.history(workstream).await?.len();
        Ok(Some(WorkstreamStatus {
            key: info.row.key,
            owner: info.row.owner,
            model: self.inner.model.model_name().to_owned(),
            tokens_in: info.tokens_in,
            tokens_out: info.tokens_out,
            always_allowed,
            messages,
            closed: info.closed_at.is_some(),
        }))
    }

    /// Resumes a turn interrupted while it waited for approval: runs the dangling tool calls
    /// with the decisions stored for them, then lets the model go on as in a normal turn.
    /// Does nothing (and returns `None`) when nothing is dangling.
    pub async fn resume_turn(
        &self,
        req: ResumeRequest<'_>,
    ) -> Result<Option<TurnOutcome>, AgentError> {
        let handle = self
            .inner
            .workstreams
            .get(req.workstream, None)
            .await
            .inspect_err(|e| req.sink.event(TurnEvent::Error(e.to_string())))?;
        if crate::resume::unanswered_calls(&handle.lock().await.history).is_empty() {
            return Ok(None);
        }
        // The place is taken without holding the workstream, so `/status` answers meanwhile.
        let Some(_permit) = self
            .take_place(req.workstream, req.author, req.sink, &req.cancel)
            .await
        else {
            return Ok(Some(TurnOutcome {
                cancelled: true,
                ..TurnOutcome::default()
            }));
        };
        let mut ws = handle.lock().await;
        let dangling = crate::resume::unanswered_calls(&ws.history);
        if dangling.is_empty() {
            return Ok(None);
        }
        let stored = crate::resume::StoredDecisions::new(self.inner.store.clone(), req.workstream);
        let turn = TurnRequest {
            workstream: req.workstream,
            author: req.author,
            text: String::new(),
            sink: req.sink,
            approver: req.approver,
            cancel: req.cancel,
        };
        let result = self.turn(&mut ws, &turn, Some((dangling, &stored))).await;
        self.report(&turn, result, ws).map(Some)
    }

    /// Answers one user message. Turns in one workstream run one at a time, in arrival order.
    /// Every message is committed before it is shown; on cancellation or error what was done
    /// stays recorded.
    pub async fn run_turn(&self, req: TurnRequest<'_>) -> Result<TurnOutcome, AgentError> {
        let inner = &self.inner;
        let limit = inner.config.agent.max_message_bytes;
        if req.text.len() > limit {
            let e = AgentError::MessageTooLarge {
                size: req.text.len(),
                limit,
            };
            req.sink.event(TurnEvent::Error(e.to_string()));
            return Err(e);
        }
        let Some(_permit) = self
            .take_place(req.workstream, req.author, req.sink, &req.cancel)
            .await
        else {
            return Ok(TurnOutcome {
                cancelled: true,
                ..TurnOutcome::default()
            });
        };
        // A workstream that cannot be loaded (the database is away) is said, not just logged.
        let handle = inner
            .workstreams
            .get(req.workstream, req.author)
            .await
            .inspect_err(|e| req.sink.event(TurnEvent::Error(e.to_string())))?;
        let mut ws = handle.lock().await;
        let result = self.turn(&mut ws, &req, None).await;
        self.report(&req, result, ws)
    }

    /// Takes a place for a turn under `agent.max_concurrent_turns` and
    /// `agent.max_turns_per_user`, telling the thread when it has to wait. `None` when the
    /// turn was stopped while waiting; the sink has then been told the turn is over.
    async fn take_place(
        &self,
        workstream: &str,
        author: Option<&str>,
        sink: &dyn TurnSink,
        cancel: &CancellationToken,
    ) -> Option<TurnPermit> {
        let permit = self
            .inner
            .limits
            .acquire(author, cancel, |wait| {
                tracing::info!(workstream, %wait, "turn waits for a place");
                sink.event(TurnEvent::Waiting(wait));
            })
            .await;
        if permit.is_none() {
            tracing::info!(workstream, "turn stopped while waiting for a place");
            sink.event(TurnEvent::TurnComplete {
                text: String::new(),
                cancelled: true,
            });
        }
        permit
    }

    /// Tells the sink how a turn ended and logs it.
    fn report(
        &self,
        req: &TurnRequest<'_>,
        result: Result<TurnOutcome, AgentError>,
        ws: tokio::sync::MutexGuard<'_, Workstream>,
    ) -> Result<TurnOutcome, AgentError> {
        let inner = &self.inner;
        match &result {
            Ok(outcome) => {
                tracing::info!(
                    workstream = req.workstream,
                    rounds = outcome.rounds,
                    tool_calls = outcome.tool_calls,
                    cancelled = outcome.cancelled,
                    "turn complete"
                );
                req.sink.event(TurnEvent::TurnComplete {
                    text: outcome.text.clone(),
                    cancelled: outcome.cancelled,
                });
            }
            Err(e) => {
                tracing::warn!(workstream = req.workstream, error = %e, "turn failed");
                if matches!(e, AgentError::Store(_)) {
                    // Memory may be ahead of or behind the database: reload next time.
                    drop(ws);
                    inner.workstreams.evict(req.workstream);
                }
                req.sink.event(TurnEvent::Error(e.to_string()));
            }
        }
        result
    }

    /// The turn loop. `resume` carries the dangling calls of an interrupted turn and the
    /// approver holding their stored decisions; otherwise `req.text` opens a new turn.
    async fn turn(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        resume: Option<(Vec<ToolCall>, &dyn Approver)>,
    ) -> Result<TurnOutcome, AgentError> {
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
                .is_some_and(|t| t.elapsed() >= crate::nudge::LONG_PAUSE);
        let mut tools = TurnTools::new(
            self.catalog(),
            &inner.tools_config,
            config.model.capabilities,
        );
        if ws.turns_since_load == 0 {
            ws.expanded_tools.extend(tools.replay(&ws.history));
        }
        ws.turns_since_load += 1;
        if resume.is_none() {
            self.close_dangling(ws).await?;
            ws.append(&inner.store, Message::user(req.text.clone()), req.author)
                .await?;
        }
        let mut base_system = system_prompt(
            chrono::Local::now(),
            &ws.workdir,
            &tools.offered(&ws.expanded_tools),
            config.agent.system_prompt_extra.as_deref(),
        );
        base_system.push_str(&crate::prompt::mcp_catalog(&inner.mcp.catalog()));
        let visibility = Visibility {
            workstream: ws.key.clone(),
            user_id: req.author.map(str::to_owned),
        };
        inner.memories.sync(&inner.store, false).await?;
        let mut injected: HashSet<String> = HashSet::new();
        let mut denied = false;
        let mut outcome = TurnOutcome::default();
        if let Some((calls, approver)) = resume {
            tracing::info!(workstream = %ws.key, calls = calls.len(), "resuming an interrupted turn");
            outcome.tool_calls += calls.len();
            denied = self
                .run_batch(ws, req, &mut tools, &calls, approver)
                .await?;
            if req.cancel.is_cancelled() {
                outcome.cancelled = true;
                ws.last_turn_end = Some(Instant::now());
                return Ok(outcome);
            }
        }
        loop {
            if outcome.rounds >= config.agent.max_rounds {
                outcome.hit_round_limit = true;
                req.sink.event(TurnEvent::Notice(format!(
                    "stopped after {} model calls in one turn (agent.max_rounds); say \"continue\" to go on",
                    outcome.rounds
                )));
                break;
            }
            let first_call = outcome.rounds == 0;
            outcome.rounds += 1;
            let relevant = inner.memories.relevant(&visibility, &ws.history);
            let new_ids: Vec<&str> = relevant
                .iter()
                .filter(|m| !injected.contains(&m.id))
                .map(|m| m.id.as_str())
                .collect();
            if !new_ids.is_empty() {
                inner.store.touch_memories(&new_ids).await?;
                injected.extend(new_ids.iter().map(|s| (*s).to_owned()));
            }
            let signals = Signals {
                new_user_message: first_call.then_some(req.text.as_str()),
                denied,
                resumed: first_call && resumed,
                previous_answer: previous_answer.as_deref().filter(|_| first_call),
            };
            let nudges = crate::nudge::due(&mut ws.nudges, &signals, Instant::now());
            let system = format!(
                "{base_system}{}{}",
                crate::memory::render(&relevant),
                crate::nudge::render(&nudges)
            );
            // Servers may add or remove tools mid-turn: the next model call sees the change.
            let current = self.catalog();
            if !tools.uses(&current) {
                tools = TurnTools::new(current, &inner.tools_config, config.model.capabilities);
            }
            let offered = tools.offered(&ws.expanded_tools);
            let request = ChatRequest {
                system: &system,
                messages: &ws.history,
                tools: &offered,
            };
            let mut assembler = ResponseAssembler::default();
            let streamed = tokio::select! {
                r = stream_into(inner.model.as_ref(), request, &mut assembler, req.sink) => Some(r),
                () = req.cancel.cancelled() => None,
            };
            match streamed {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    self.keep_partial(ws, &assembler, "[the model's answer broke off]")
                        .await?;
                    return Err(e.into());
                }
                None => {
                    self.keep_partial(ws, &assembler, "[stopped]").await?;
                    outcome.cancelled = true;
                    break;
                }
            }
            let response = assembler.finish();
            let mut message = Message::assistant(response.text.clone());
            message.tool_calls = response.tool_calls;
            let calls = message.tool_calls.clone();
            ws.append(&inner.store, message, None).await?;
            // Bookkeeping: a count that fails to update is logged, never worth the answer.
            let usage = &response.usage;
            if *usage != crate::model::Usage::default()
                && let Err(e) = inner
                    .store
                    .add_usage(&ws.key, usage.input_tokens, usage.output_tokens)
                    .await
            {
                tracing::warn!(workstream = %ws.key, error = %e, "token usage not recorded");
            }
            outcome.text = response.text;
            if calls.is_empty() {
                break;
            }
            outcome.tool_calls += calls.len();
            denied = self
                .run_batch(ws, req, &mut tools, &calls, req.approver)
                .await?;
            if req.cancel.is_cancelled() {
                outcome.cancelled = true;
                break;
            }
        }
        ws.last_turn_end = Some(Instant::now());
        Ok(outcome)
    }

    /// Prepares, approves and executes one batch of calls; returns whether anything was denied.
    async fn run_batch(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        tools: &mut TurnTools,
        calls: &[ToolCall],
        approver: &dyn Approver,
    ) -> Result<bool, AgentError> {
        let inner = &self.inner;
        let config = &inner.config;
        ensure_workdir(&ws.workdir).await;
        let batch = Batch {
            registry: &inner.registry,
            store: &inner.store,
            tool_ctx: ToolContext {
                workdir: ws.workdir.clone(),
                paths: inner.paths.clone(),
                config: inner.tools_config.clone(),
                capabilities: config.model.capabilities,
                files_read: ws.files_read.clone(),
                cancel: req.cancel.child_token(),
                workstream: ws.key.clone(),
                user_id: req.author.map(str::to_owned),
                store: Some(inner.store.clone()),
                mcp: Some(inner.mcp.clone()),
                child_env: inner.child_env.clone(),
                services: inner.services.clone(),
            },
            workstream: &ws.key,
            first_seq: ws.next_seq(),
            requested_by: req.author,
            auto_approve: config.approval.auto_approve,
            grants: &ws.grants,
            approval_timeout: config.approval.timeout,
            max_parallel: config.tools.max_parallel,
            max_output_bytes: config.tools.max_output_bytes,
            sink: req.sink,
            approver,
            tool_search: tools.client_search(),
        };
        let done = batch.run(calls).await?;
        tools.expand(&mut ws.expanded_tools, done.expanded, calls);
        if calls.iter().any(|c| c.name == "memory") {
            inner.memories.sync(&inner.store, true).await?;
        }
        ws.history.extend(done.results);
        ws.grants.extend(done.new_grants);
        Ok(done.denied)
    }

    /// A new message arrived while tool calls of an interrupted turn still wait: they will not
    /// run. Each gets a result saying so (the model needs one per call), and their pending
    /// requests are closed so late clicks say the turn is gone.
    async fn close_dangling(&self, ws: &mut Workstream) -> Result<(), StoreError> {
        let dangling = crate::resume::unanswered_calls(&ws.history);
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
        self.inner
            .store
            .close_pending_approvals(&ws.key, crate::store::approvals::ApprovalStatus::Cancelled)
            .await?;
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
async fn ensure_workdir(dir: &std::path::Path) {
    if let Err(e) = tokio::fs::create_dir_all(dir).await {
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
