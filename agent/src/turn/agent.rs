//! The turn loop: load the workstream, stream the model, run tool batches through the
//! [`batch`](crate::turn::batch), and loop until the model answers without tool calls.
//!
//! Each model call is offered the tools of the agent's [`ToolCatalog`] as the workstream sees
//! them (see [`tool_search`](crate::turn::tool_search)): with tool search active, deferred tools
//! appear once `tool_search` found them or the model called them by name. This loop serves
//! the top-level conversation only; sub-agents ([`crate::turn::subagent`]) run their own loop in
//! `subagent`, with their scoped tool sets unsearched.
//!
//! The loop itself, step by step, is in `run` (load, build the request, stream, commit,
//! run the batch); this file holds the agent, its entry points and how a turn is reported.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connectors::{ConnectorScope, ConnectorView};
use crate::mcp::McpManager;
use crate::metrics::TurnEnd;
use crate::model::{ChatModel, Message, ModelError, ToolCall, ToolSchema};
use crate::process::env::ChildEnv;
use crate::protocol::{Approver, TurnEvent, TurnSink};
use crate::store::{Store, StoreError};
use crate::tools::{PathPolicy, RegistryError, ToolRegistry};
use crate::turn::memory::MemoryIndex;
use crate::turn::tool_search::ToolCatalog;
use crate::turn_limits::{TurnLimits, TurnPermit};
use crate::workstream::{WorkdirLayout, Workstream, Workstreams};

mod facts;
mod fit;
pub mod models;
mod run;
mod subagent;

pub use fit::Compaction;

/// What the agent learns from the process it runs in rather than from its config.
pub struct Host<'a> {
    /// Files no tool may read or change, asked or not, besides the database files (which the
    /// agent knows from its config): the config file sandpiper was started with, an MCP config
    /// file. They may hold tokens, and an approver cannot see what a read would post.
    pub protected_files: Vec<PathBuf>,
    /// The environment whose allow-listed part tools' processes start from (see
    /// [`crate::process::env`]); tests plant secrets here to show they never reach a tool.
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
    /// Even the fixed part of a request (the system message and the tool schemas) leaves no
    /// room for the conversation in the model's context window. Configuration must change.
    #[error("{}", too_small_text(window, *fixed, *tools, *first))]
    ContextTooSmall {
        /// The window in force.
        window: crate::turn::context::ContextWindow,
        /// Estimated tokens of the system message and the tools.
        fixed: u64,
        /// Tools offered.
        tools: usize,
        /// Whether this is the first time the workstream is told (the advice is given then).
        first: bool,
    },
    /// The server still said the context is full after the conversation was compacted.
    #[error(
        "the model server says this request does not fit its context window ({window}) even \
         after compacting the conversation: {server}. If the server's window is smaller than \
         that, set [model] context_window to what it really is"
    )]
    ContextFull {
        /// The window in force.
        window: crate::turn::context::ContextWindow,
        /// The server's error.
        server: String,
    },
    /// The server refused the conversation's history even after it was compacted.
    #[error(
        "the model server refused this conversation's history even after compacting it: \
         {message}. Your next message starts from the compacted conversation"
    )]
    HistoryRefused {
        /// The server's words.
        message: String,
    },
    /// `/model NAME` named a model this sandpiper does not offer.
    #[error(transparent)]
    NotAChoice(#[from] models::NotAChoice),
    /// A sub-agent was asked for in a workstream whose key names nothing sandpiper makes (its
    /// child could not be named); the parent's model is told, nothing else changes.
    #[error("a sub-agent cannot run here: {0}")]
    BadKey(#[from] crate::workstream::key::BadKey),
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
    /// A daily token budget of the person or the thread is used up; nothing was stored and
    /// the model was not called. Show it: it says when the budget resets and who may raise it.
    #[error(transparent)]
    OverBudget(#[from] crate::budget::BudgetRefusal),
}

fn too_small_text(
    window: &crate::turn::context::ContextWindow,
    fixed: u64,
    tools: usize,
    first: bool,
) -> String {
    if !first {
        return format!(
            "this request still does not fit the model's context window of {} tokens (see above)",
            window.tokens
        );
    }
    format!(
        "the model's context window is too small for this conversation: {window}, and the \
         system message with {tools} tool schemas alone takes about {fixed} tokens, leaving no \
         room for the messages and an answer. Raise [model] context_window if the server allows \
         a larger window (llama.cpp: --ctx-size), turn tool search on ([tools] search = \"on\"), \
         or offer fewer tools (fewer MCP servers, or a connector selection with /connectors)"
    )
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
/// [`resume`](crate::approvals::resume)).
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
    /// Prompt tokens of its last request (the server's count when it gave one).
    pub context_tokens: u64,
    /// The model's context window.
    pub context_window: crate::turn::context::ContextWindow,
    /// Messages summarised in its checkpoint rather than sent verbatim.
    pub compacted_messages: usize,
    /// The tokens of the last turn answered since it was loaded.
    pub last_turn: crate::model::Usage,
    /// Every model call of the thread so far (its sub-agents' included).
    pub counted: crate::store::usage::UsageTotals,
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
    /// The tokens its model calls used, as the provider reported them (summed over calls).
    pub usage: crate::model::Usage,
}

/// The agent: configuration, model, tools, storage and live workstreams.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    tools_config: Arc<crate::config::ToolsConfig>,
    /// The configured model and the ones threads switched to.
    models: models::Models,
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
    child_env: Arc<crate::process::env::ChildEnv>,
    /// Settings and the model for web_fetch, web_search and math.
    services: Arc<crate::tools::ToolServices>,
    /// Places of running turns (`agent.max_concurrent_turns`, `agent.max_turns_per_user`).
    limits: TurnLimits,
    /// Approval requests running turns wait on.
    live: crate::approvals::LiveApprovals,
    /// `[[projects]]`: the project tier of connector policy.
    projects: Arc<Vec<crate::config::ProjectConfig>>,
    /// Counters for `GET /metrics`.
    metrics: crate::metrics::Metrics,
    /// What running turns are doing now (the status page).
    activity: crate::activity::Activity,
    /// Membership of a cluster of nodes, once `serve` joined one (see [`crate::cluster`]).
    cluster: std::sync::OnceLock<crate::cluster::Cluster>,
    /// The wall clock of the context notes.
    clock: crate::turn::clock::Clock,
    /// The bytes-per-token ratio of this model's requests.
    gauge: crate::turn::context::TokenGauge,
}

impl Inner {
    /// Offers the MCP catalog's tools as they are now.
    fn offer_mcp_tools(&self) {
        self.set_external_tools(mcp_tool_schemas(&self.mcp));
    }

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
            parameters: std::sync::Arc::new(t.input_schema.clone()),
            defer_loading: false,
        })
        .collect()
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.inner.models.default().name())
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
    /// allow-listed part of this process's environment (see [`crate::process::env`]).
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
        let confinement = crate::process::confine::Confinement::probe(&protected);
        crate::process::confine::log_report(&confinement);
        let child_env = ChildEnv::for_tools(host.env, &config.tools).confined(confinement);
        // A weak secret is refused at `serve`'s start; here it only leaves notify unset.
        let service_key = crate::service_jwt::ServiceKey::from_env(&config.auth, host.env)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "notify is off: the service token secret is unusable");
                None
            });
        let workstreams = Workstreams::new(store.clone(), layout, config.agent.workstream_cache);
        let registry = ToolRegistry::builtin()?;
        // Subscribed before the first tool list is read: a server that lists meanwhile (they
        // connect in the background) is seen as a change.
        let generation = mcp.generation();
        let catalog = ToolCatalog::new(registry.tools(), mcp_tool_schemas(&mcp));
        let limits = TurnLimits::new(
            config.agent.max_concurrent_turns,
            config.agent.max_turns_per_user,
        );
        let agent = Self {
            inner: Arc::new(Inner {
                tools_config: Arc::new(config.tools.clone()),
                projects: Arc::new(config.projects.clone()),
                services: Arc::new(crate::tools::ToolServices {
                    web: config.web.clone(),
                    math: config.math.clone(),
                    model: Some(model.clone()),
                    service_key,
                    gateways: Default::default(),
                }),
                models: models::Models::new(&config.model, model),
                config,
                registry,
                catalog: RwLock::new(Arc::new(catalog)),
                store,
                workstreams,
                paths,
                memories: MemoryIndex::default(),
                mcp,
                child_env: Arc::new(child_env),
                limits,
                live: crate::approvals::LiveApprovals::default(),
                metrics: crate::metrics::Metrics::default(),
                activity: crate::activity::Activity::default(),
                cluster: std::sync::OnceLock::new(),
                clock: Default::default(),
                gauge: crate::turn::context::TokenGauge::default(),
            }),
        };
        agent.follow_mcp_catalog(generation);
        Ok(agent)
    }

    /// The connected MCP servers.
    pub fn mcp(&self) -> &Arc<McpManager> {
        &self.inner.mcp
    }

    /// Offers the MCP catalog's tools again whenever it changes (copy-on-write: a running
    /// turn keeps the tools it started with). The task ends when the agent is dropped.
    fn follow_mcp_catalog(&self, mut generation: tokio::sync::watch::Receiver<u64>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            while generation.changed().await.is_ok() {
                let Some(inner) = weak.upgrade() else { break };
                inner.offer_mcp_tools();
            }
        });
    }

    pub(crate) fn cluster_slot(&self) -> &std::sync::OnceLock<crate::cluster::Cluster> {
        &self.inner.cluster
    }

    /// This node's counters (`GET /metrics`); the channels add their API retries.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.inner.metrics
    }

    /// The wall clock the context notes read (tests move it forward).
    pub fn clock(&self) -> &crate::turn::clock::Clock {
        &self.inner.clock
    }

    /// What this node's running turns are doing now (the status page watches it).
    pub fn activity(&self) -> &crate::activity::Activity {
        &self.inner.activity
    }

    /// Workstreams held in memory now.
    pub fn live_workstreams(&self) -> usize {
        self.inner.workstreams.len()
    }

    /// The configuration in effect.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Approval requests running turns wait on: a card approver registers its requests
    /// here, and [`Agent::decide`] delivers clicks.
    pub fn live(&self) -> &crate::approvals::LiveApprovals {
        &self.inner.live
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

    /// Where connector policy's task and project tiers come from for a turn.
    pub(crate) fn connector_scope(&self, task: Option<Vec<String>>) -> ConnectorScope {
        ConnectorScope {
            task,
            projects: self.inner.projects.clone(),
        }
    }

    /// A workstream's connector policy and the tiers it came from (`/connectors`, HTTP).
    pub async fn workstream_connectors(
        &self,
        workstream: &str,
    ) -> Result<ConnectorView, StoreError> {
        self.connector_scope(None)
            .view(&self.inner.store, workstream)
            .await
    }

    /// A channel's connector policy (`discord:<id>`, `slack:<team>:<channel>`).
    pub async fn channel_connectors(&self, channel: &str) -> Result<ConnectorView, StoreError> {
        self.connector_scope(None)
            .channel_view(&self.inner.store, channel)
            .await
    }

    /// A tool context for work in workstream `key` outside a turn (a watch's poll): its
    /// working directory (created when missing), the tools' settings and clean environment,
    /// and no person behind it.
    pub(crate) async fn background_context(
        &self,
        key: &str,
        cancel: CancellationToken,
    ) -> crate::tools::ToolContext {
        let inner = &self.inner;
        let workdir = inner.workstreams.workdir(key);
        run::ensure_workdir(&workdir).await;
        crate::tools::ToolContext {
            workdir,
            paths: inner.paths.clone(),
            config: inner.tools_config.clone(),
            capabilities: inner.config.model.capabilities,
            files_read: crate::tools::FilesRead::default(),
            cancel,
            workstream: key.to_owned(),
            user_id: None,
            charged_to: None,
            thread_owner: None,
            store: Some(inner.store.clone()),
            mcp: Some(inner.mcp.clone()),
            child_env: inner.child_env.clone(),
            services: inner.services.clone(),
            connectors: ConnectorScope::default(),
            notify_budget: Default::default(),
            metrics: inner.metrics.clone(),
        }
    }

    /// Whether workstream `key` was closed (`/close`): no turn runs in it any more, from a
    /// person, a watch, a notification reply or a resumed approval.
    pub async fn is_closed(&self, key: &str) -> Result<bool, AgentError> {
        Ok(self.inner.store.is_closed(key).await?)
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

    /// The models a thread may answer with (`/model`), the configured one first.
    pub fn models_offered(&self) -> Vec<String> {
        let offered = self.inner.models.offered();
        offered.into_iter().map(str::to_owned).collect()
    }

    /// The model `workstream` answers with (the configured one unless `/model` switched it).
    pub async fn model_of(&self, workstream: &str) -> Result<String, AgentError> {
        let chosen = self.inner.store.chosen_model(workstream).await?;
        Ok(self.inner.models.of(chosen.as_deref()).name().to_owned())
    }

    /// `/model NAME`: `workstream` answers with `name` from its next turn on, on every node;
    /// the configured model's name switches it back. A name not offered changes nothing.
    /// Who may switch is the caller's to check.
    pub async fn choose_model(&self, workstream: &str, name: &str) -> Result<(), AgentError> {
        let models = &self.inner.models;
        models.check(name)?;
        let chosen = Some(name).filter(|n| *n != models.default_name());
        self.inner.store.choose_model(workstream, chosen).await?;
        tracing::info!(workstream, model = name, "the thread's model was switched");
        Ok(())
    }

    /// What `/status` shows, or `None` for an unknown workstream.
    pub async fn status(&self, workstream: &str) -> Result<Option<WorkstreamStatus>, AgentError> {
        let store = &self.inner.store;
        let Some(info) = store.workstream(workstream).await? else {
            return Ok(None);
        };
        let mut always_allowed = store.grants(workstream).await?;
        always_allowed.sort();
        let (messages, context_tokens, compacted_messages, last_turn) = {
            let handle = self.inner.workstreams.get(workstream, None).await?;
            let ws = handle.lock().await;
            (
                ws.history.len(),
                ws.context.last_prompt_tokens,
                ws.context.start,
                ws.last_turn_usage,
            )
        };
        let thread = crate::store::usage::thread_of(workstream);
        let counted = self
            .inner
            .store
            .usage(crate::store::usage::UsageOf::Thread(&thread), 0)
            .await?;
        let model = self.inner.models.of(info.model.as_deref());
        let context_window = self.window_of(&model).await;
        Ok(Some(WorkstreamStatus {
            key: info.row.key,
            owner: info.row.owner,
            model: model.name().to_owned(),
            tokens_in: info.tokens_in,
            tokens_out: info.tokens_out,
            always_allowed,
            messages,
            closed: info.closed_at.is_some(),
            context_tokens,
            context_window,
            compacted_messages,
            last_turn,
            counted,
        }))
    }

    /// Resumes a turn interrupted while it waited for approval: runs the dangling tool calls
    /// with the decisions stored for them, then lets the model go on as in a normal turn.
    /// Does nothing (and returns `None`) when nothing is dangling.
    pub async fn resume_turn(
        &self,
        req: ResumeRequest<'_>,
    ) -> Result<Option<TurnOutcome>, AgentError> {
        let observed = self.inner.activity.observe(req.workstream, req.sink);
        let req = ResumeRequest {
            sink: &observed,
            ..req
        };
        let handle = self
            .inner
            .workstreams
            .get(req.workstream, None)
            .await
            .inspect_err(|e| req.sink.event(TurnEvent::Error(e.to_string())))?;
        if crate::approvals::resume::unanswered_calls(&handle.lock().await.history).is_empty() {
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
        let dangling = crate::approvals::resume::unanswered_calls(&ws.history);
        if dangling.is_empty() {
            return Ok(None);
        }
        let charged_before = self.charged_before(req.workstream, &dangling).await?;
        ws.charged_to = charged_before.or_else(|| req.author.map(str::to_owned));
        let stored = crate::approvals::resume::StoredDecisions::new(
            self.inner.store.clone(),
            req.workstream,
        );
        let turn = TurnRequest {
            workstream: req.workstream,
            author: req.author,
            text: String::new(),
            sink: req.sink,
            approver: req.approver,
            cancel: req.cancel,
        };
        self.mark_turn(req.workstream, true).await;
        let result = self
            .turn(&mut ws, &turn, Some((dangling, &stored)), None)
            .await;
        self.mark_turn(req.workstream, false).await;
        self.report(&turn, result, ws).map(Some)
    }

    /// Who the interrupted turn whose calls `dangling` are was charged to, as its approval
    /// requests recorded it: a watch's turn stays its setter's when it resumes, whoever
    /// pressed Resume and whichever node took the thread over.
    async fn charged_before(
        &self,
        workstream: &str,
        dangling: &[ToolCall],
    ) -> Result<Option<String>, StoreError> {
        for call in dangling {
            if let Some(asked) = self
                .inner
                .store
                .approval_for_call(workstream, &call.id)
                .await?
            {
                return Ok(asked.charged_to.or(asked.requested_by));
            }
        }
        Ok(None)
    }

    /// Answers one user message. Turns in one workstream run one at a time, in arrival order.
    /// Every message is committed before it is shown; on cancellation or error what was done
    /// stays recorded.
    pub async fn run_turn(&self, req: TurnRequest<'_>) -> Result<TurnOutcome, AgentError> {
        self.run_task_turn(req, None).await
    }

    /// [`Agent::run_turn`] with the task tier of connector policy set: `Some(list)` narrows
    /// the servers the turn may use, `Some([])` allows none, `None` (what `run_turn` passes)
    /// leaves the thread's own policy.
    pub async fn run_task_turn(
        &self,
        req: TurnRequest<'_>,
        task_connectors: Option<Vec<String>>,
    ) -> Result<TurnOutcome, AgentError> {
        self.run_charged(req, task_connectors, None).await
    }

    /// [`Agent::run_turn`] for a turn no person's message started (a watch that fired, a
    /// reply to a notification): its model calls count against the budgets of `charged_to`
    /// (the person who set it up), and are their usage, though the turn has no author.
    pub async fn run_turn_charged_to(
        &self,
        req: TurnRequest<'_>,
        charged_to: Option<&str>,
    ) -> Result<TurnOutcome, AgentError> {
        self.run_charged(req, None, charged_to).await
    }

    async fn run_charged(
        &self,
        req: TurnRequest<'_>,
        task_connectors: Option<Vec<String>>,
        charged_to: Option<&str>,
    ) -> Result<TurnOutcome, AgentError> {
        let inner = &self.inner;
        let payer = charged_to.or(req.author);
        let observed = inner.activity.observe(req.workstream, req.sink);
        let req = TurnRequest {
            sink: &observed,
            ..req
        };
        let limit = inner.config.agent.max_message_bytes;
        if req.text.len() > limit {
            let e = AgentError::MessageTooLarge {
                size: req.text.len(),
                limit,
            };
            req.sink.event(TurnEvent::Error(e.to_string()));
            return Err(e);
        }
        let budgets = match self.starting_budgets(req.workstream, payer).await {
            Ok(budgets) => budgets,
            Err(e) => {
                req.sink.event(TurnEvent::Error(e.to_string()));
                return Err(e);
            }
        };
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
        ws.charged_to = payer.map(str::to_owned);
        self.mark_turn(req.workstream, true).await;
        // Every line the turn logs names it: the workstream and the turn's first message.
        let span = tracing::info_span!("turn", workstream = %req.workstream, turn = ws.next_seq());
        let result =
            tracing::Instrument::instrument(self.turn(&mut ws, &req, None, task_connectors), span)
                .await;
        self.mark_turn(req.workstream, false).await;
        self.warn_budgets(&req, payer, &budgets).await;
        self.report(&req, result, ws)
    }

    /// The budgets a new turn of `author` in `workstream` starts under; an error when one is
    /// used up (the turn is then not started) or cannot be read.
    async fn starting_budgets(
        &self,
        workstream: &str,
        author: Option<&str>,
    ) -> Result<Vec<crate::budget::Standing>, AgentError> {
        let now = crate::store::now_ms();
        let standings = self.budgets(workstream, author, now).await?;
        match crate::budget::refusal(&standings, now) {
            Some(refusal) => {
                tracing::info!(workstream, author, budget = ?refusal.scope, unit = ?refusal.unit, used = refusal.used, cap = refusal.cap, "turn refused: budget used up");
                Err(refusal.into())
            }
            None => Ok(standings),
        }
    }

    /// The budgets that apply to a turn of `person` in `workstream`'s thread today.
    pub async fn budgets(
        &self,
        workstream: &str,
        person: Option<&str>,
        now: i64,
    ) -> Result<Vec<crate::budget::Standing>, StoreError> {
        let thread = crate::store::usage::thread_of(workstream);
        let rules = crate::budget::Rules {
            config: &self.inner.config.budgets,
            prices: &self.inner.config.usage.prices,
        };
        crate::budget::standings(
            &self.inner.store,
            rules,
            &thread,
            person,
            crate::budget::Day::of(now),
        )
        .await
    }

    /// Tells the thread when the turn took a budget past [`crate::budget::WARN_PERCENT`].
    async fn warn_budgets(
        &self,
        req: &TurnRequest<'_>,
        payer: Option<&str>,
        before: &[crate::budget::Standing],
    ) {
        if before.iter().all(|s| s.cap.is_none()) {
            return;
        }
        let after = match self
            .budgets(req.workstream, payer, crate::store::now_ms())
            .await
        {
            Ok(after) => after,
            Err(e) => {
                tracing::warn!(workstream = req.workstream, error = %e, "budgets unreadable after the turn");
                return;
            }
        };
        for (before, after) in before.iter().zip(&after) {
            if let Some(line) = crate::budget::warning(before, after) {
                req.sink.event(TurnEvent::Notice(line));
            }
        }
    }

    /// In a cluster, marks a turn running in `workstream` (or no longer): a turn whose end is
    /// never marked (the process died) is found and said to be interrupted by whoever takes
    /// the workstream over.
    async fn mark_turn(&self, workstream: &str, running: bool) {
        if let Some(cluster) = self.cluster() {
            cluster.mark_turn(workstream, running).await;
        }
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
        inner.metrics.turn_ended(match &result {
            Ok(o) if o.cancelled => TurnEnd::Stopped,
            Ok(o) if o.hit_round_limit => TurnEnd::Interrupted,
            Ok(_) => TurnEnd::Completed,
            Err(_) => TurnEnd::Failed,
        });
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
}
