//! Built-in tools: one file per tool, one registration table ([`default_tools`]).
//!
//! A tool's metadata (name, description, parameters, `agent`, `task_agent`, `auto_approve`,
//! `primary_key`) lives in `tools/<name>.json` at the workspace root, embedded at build time;
//! the Rust side declares the typed arguments ([`Tool::Args`]) and implements [`Tool::prepare`]
//! (validate and parse them into the [`Tool::Call`] to run, build the header and preview, say
//! whether this call asks even though the tool is auto-approved) and [`Tool::execute`], which
//! runs that call. The registry and the pipeline hold tools as [`DynTool`], which deserializes
//! the JSON arguments once and keeps the prepared call for `execute`.
//!
//! The sub-agent tools (`task`, `plan`) act in the turn rather than on files: they declare
//! [`Tool::IN_TURN`] and get the turn ([`InTurn`]: the agent, the thread's sink and approver)
//! in [`Tool::execute_in_turn`].

mod args;
pub(crate) mod bash;
mod dyn_tool;
mod edit_file;
mod man;
mod math;
mod mcp_call;
mod memory;
pub mod notify;
pub mod path_policy;
mod plan;
mod read_file;
mod read_resource;
mod recall;
mod registry;
mod search;
mod services;
mod subagent_tool;
mod task;
mod use_prompt;
mod watch;
mod web_fetch;
mod web_search;
mod write_file;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::config::{Capabilities, ToolsConfig};
use crate::model::ImagePart;
use crate::output::{ceil_char_boundary, floor_char_boundary};

pub use crate::output::truncate_output;

pub use args::{ArgsError, parse_arguments, validate_arguments, wire_arguments};
pub use dyn_tool::{DynTool, ReadyCall, deserialize_args};
pub use mcp_call::McpCall;
pub use path_policy::PathPolicy;
pub use plan::{LONG_PLAN_CHARS, plan_file};
pub use registry::{RegistryError, ToolRegistry, ToolSpec, default_tools};
pub use services::ToolServices;
pub use web_fetch::{AddressClass, Refusal, SsrfPolicy};

/// What `prepare` decided about a call: how to show it, and whether this particular call asks.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// One line naming the call, e.g. `bash: ls -la`.
    pub header: String,
    /// A longer preview (the command, the diff, the file content), may be empty.
    pub preview: String,
    /// Whether this call must be approved even though the tool's JSON says
    /// `auto_approve: true` (a read outside the working directory, a global memory). It can
    /// only raise the JSON's default, never lower it: the pipeline asks when
    /// `!spec.auto_approve || ask` ([`needs_approval`]).
    pub ask: bool,
}

/// Whether a call needs a person's approval by the tool's own rules, before session-wide
/// overrides (`--yes`, always-allow grants): the JSON's `auto_approve` is the default and a
/// call may only raise it. The single place this rule is decided.
pub fn needs_approval(auto_approve: bool, prepared: &Prepared) -> bool {
    !auto_approve || prepared.ask
}

/// What a tool produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// Text for the model.
    pub text: String,
    /// Images for the model (only when the model supports vision).
    pub images: Vec<ImagePart>,
    /// The tool ran but reports failure (non-zero exit, ...); shown as an error in channels.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }
}

/// Why a tool call failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model should see this and can recover (bad arguments, file not found, ...).
    #[error("{0}")]
    Model(String),
    /// The call was cancelled (`/stop`, Ctrl-C, shutdown).
    #[error("cancelled")]
    Cancelled,
    /// The turn cannot go on (the store is gone): it ends with this error, which the person
    /// sees; the model never does (it could not recover, and would only retry).
    #[error("{0}")]
    Fatal(String),
}

impl ToolError {
    /// A model-visible error.
    pub fn model(msg: impl Into<String>) -> Self {
        Self::Model(msg.into())
    }

    /// A store error met while the tool `what` worked: an empty search query is the model's
    /// to fix; anything else (the database away, a corrupt row) ends the turn.
    pub fn store(what: &str, e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::EmptyQuery(_) => Self::Model(e.to_string()),
            other => Self::Fatal(format!("{what}: {other}")),
        }
    }
}

/// Receives streamed output of a running tool (bash lines).
pub trait OutputSink: Send + Sync {
    /// One chunk of output, usually one line with its newline.
    fn chunk(&self, text: &str);
}

/// An [`OutputSink`] that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOutput;

impl OutputSink for NoOutput {
    fn chunk(&self, _text: &str) {}
}

/// The set of files read in a workstream (edit_file refuses files that were not read first).
/// Shared by the calls of one batch, which may run in parallel.
#[derive(Debug, Clone, Default)]
pub struct FilesRead(Arc<Mutex<HashSet<PathBuf>>>);

impl FilesRead {
    /// Records that `path` (absolute) was read.
    pub fn record(&self, path: &Path) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(normalize(path));
        }
    }

    /// Whether `path` (absolute) was read.
    pub fn contains(&self, path: &Path) -> bool {
        self.0
            .lock()
            .map(|set| set.contains(&normalize(path)))
            .unwrap_or(false)
    }

    /// All recorded paths (for persistence).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.0
            .lock()
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Lexically normalizes a path (`a/./b/../c` → `a/c`) without touching the file system.
pub fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// What a tool may use while preparing and running.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The workstream's working directory; relative paths resolve against it.
    pub workdir: PathBuf,
    /// Which paths tools may read unasked, only with approval, or never.
    pub paths: Arc<PathPolicy>,
    /// Tool settings (timeouts, caps).
    pub config: Arc<ToolsConfig>,
    /// What the model can take (vision).
    pub capabilities: Capabilities,
    /// Files read in this workstream.
    pub files_read: FilesRead,
    /// Cancelled when the turn is stopped; long-running tools must watch it.
    pub cancel: CancellationToken,
    /// The workstream the call belongs to.
    pub workstream: String,
    /// The user whose message is being answered (a sandpiper user id), when known.
    pub user_id: Option<String>,
    /// Who the turn's model calls are charged to (see [`crate::workstream::Workstream`]'s
    /// `charged_to`): `user_id`, or the person who set up a watch's or a notification's turn.
    pub charged_to: Option<String>,
    /// The workstream's owner (who started the thread), when known: where a rule says "the
    /// owner or an admin" (cancelling a watch), the owner's own call needs no approval.
    pub thread_owner: Option<String>,
    /// The store, for tools that keep data (memory, recall). `None` in file-tool unit tests.
    pub store: Option<crate::store::Store>,
    /// Connected MCP servers (read_resource, use_prompt). `None` when none are configured.
    pub mcp: Option<std::sync::Arc<crate::mcp::McpManager>>,
    /// The whole environment of processes tools start (bash, man): never sandpiper's own.
    pub child_env: Arc<crate::process::env::ChildEnv>,
    /// Settings and the model for web_fetch, web_search and math.
    pub services: Arc<ToolServices>,
    /// The task and project tiers of connector policy; the pipeline resolves the policy from
    /// them and the store before every MCP call.
    pub connectors: crate::connectors::ConnectorScope,
    /// The turn's count of notifications (at most [`notify::MAX_PER_TURN`] succeed).
    pub notify_budget: notify::NotifyBudget,
    /// The node's counters (tool calls by tool and outcome).
    pub metrics: crate::metrics::Metrics,
}

impl ToolContext {
    /// Resolves a path argument against the working directory, normalized.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            normalize(p)
        } else {
            normalize(&self.workdir.join(p))
        }
    }

    /// A context for unit tests, rooted at `workdir`.
    pub fn for_test(workdir: &Path) -> Self {
        Self {
            workdir: workdir.to_owned(),
            paths: Arc::new(PathPolicy::default()),
            config: Arc::new(ToolsConfig::default()),
            capabilities: Capabilities::default(),
            files_read: FilesRead::default(),
            cancel: CancellationToken::new(),
            workstream: "test:workstream".into(),
            user_id: None,
            charged_to: None,
            thread_owner: None,
            store: None,
            mcp: None,
            child_env: Arc::new(crate::process::env::ChildEnv::for_tools(
                &crate::config::ProcessEnv,
                &ToolsConfig::default(),
            )),
            services: Arc::default(),
            connectors: crate::connectors::ConnectorScope::default(),
            notify_budget: notify::NotifyBudget::default(),
            metrics: crate::metrics::Metrics::default(),
        }
    }

    /// The MCP servers, or an error for the model when none are configured.
    pub fn mcp(&self) -> Result<&crate::mcp::McpManager, ToolError> {
        self.mcp
            .as_deref()
            .ok_or_else(|| ToolError::model("no MCP servers are configured"))
    }

    /// The store, or an error for the model when this context has none.
    pub fn store(&self) -> Result<&crate::store::Store, ToolError> {
        self.store
            .as_ref()
            .ok_or_else(|| ToolError::model("this tool needs storage, which is not available here"))
    }
}

/// The turn a call runs in, for the tools that act in it rather than only on files and
/// services: the sub-agents (`task`, `plan`) show their progress in the thread, ask its people
/// through the turn's approver and run model calls of their own through the agent. The
/// pipeline gives it to tools that declare [`Tool::IN_TURN`], and only to top-level calls: a
/// sub-agent's own calls get none, so sub-agents cannot start sub-agents.
pub struct InTurn<'a> {
    /// The agent the turn runs in.
    pub agent: &'a crate::Agent,
    /// The call being run.
    pub call_id: &'a str,
    /// Where the turn's events go (the thread).
    pub sink: &'a dyn crate::protocol::TurnSink,
    /// Who decides the turn's approvals and reviews (the turn's own, also when the call was
    /// approved from stored decisions after a restart).
    pub approver: &'a dyn crate::protocol::Approver,
    /// Who started the turn.
    pub requested_by: Option<&'a str>,
}

impl std::fmt::Debug for InTurn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InTurn")
            .field("call_id", &self.call_id)
            .field("requested_by", &self.requested_by)
            .finish_non_exhaustive()
    }
}

/// One tool. Metadata comes from its JSON file; this is the behaviour. Held as
/// [`DynTool`], which parses the JSON arguments into [`Tool::Args`] once per call and keeps
/// the [`Tool::Call`] `prepare` made for `execute`.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The arguments, as the JSON file's `parameters` describe them (a unit test checks that
    /// every property of the schema is a field here).
    type Args: serde::de::DeserializeOwned + Send + Sync + 'static;

    /// The call as [`Tool::prepare`] checked it and [`Tool::execute`] runs it: the arguments
    /// themselves for most tools, their parsed form where parsing is work or can fail (a
    /// regex, a URL, a clamped limit). Parsed once, so `execute` runs what was shown for
    /// approval and never repeats the checks with a chance to decide otherwise.
    type Call: Send + Sync + 'static;

    /// A hint appended to the model-visible error when the arguments do not deserialize,
    /// e.g. `send {"command": "<bash command>"}`.
    const USAGE: &'static str = "";

    /// For a tool whose JSON says `auto_approve: true`: which calls ask anyway (the cases
    /// where `prepare` sets [`Prepared::ask`]), as `sandpiper tools` prints it. `None` when
    /// no call raises the default.
    const ASKS_FOR: Option<&'static str> = None;

    /// The name, equal to the JSON file's `name`.
    fn name(&self) -> &'static str;

    /// Checks the (already schema-validated, deserialized) arguments, describes the call and
    /// hands on the [`Tool::Call`] to run. Errors here go to the model and the call does not
    /// run.
    fn prepare(
        &self,
        args: Self::Args,
        ctx: &ToolContext,
    ) -> Result<(Prepared, Self::Call), ToolError>;

    /// Runs the call `prepare` made. Streamed output goes to `sink`.
    async fn execute(
        &self,
        call: &Self::Call,
        prepared: &Prepared,
        ctx: &ToolContext,
        sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError>;

    /// Whether the tool acts in the turn ([`InTurn`]): it is run with
    /// [`Tool::execute_in_turn`], and when the turn is stopped it winds itself down (closing
    /// what it asked, stopping what it started) and the pipeline waits for that, briefly.
    const IN_TURN: bool = false;

    /// Runs the call with the turn it belongs to. Tools that declare [`Tool::IN_TURN`]
    /// implement it; by default it is [`Tool::execute`].
    async fn execute_in_turn(
        &self,
        call: &Self::Call,
        prepared: &Prepared,
        ctx: &ToolContext,
        sink: &dyn OutputSink,
        _turn: &InTurn<'_>,
    ) -> Result<ToolOutput, ToolError> {
        self.execute(call, prepared, ctx, sink).await
    }
}

/// Prepares `tool` from JSON arguments as the pipeline does (for unit tests of one tool).
#[cfg(test)]
pub(crate) fn prepare_json<T: Tool>(
    tool: T,
    args: serde_json::Value,
    ctx: &ToolContext,
) -> Result<ReadyCall, ToolError> {
    Arc::new(tool).prepare_value(args, ctx)
}

/// Whether the built-in tool `name` asks for this prepared call, by its JSON's `auto_approve`
/// and the call's own [`Prepared::ask`] (for unit tests of one tool).
#[cfg(test)]
pub(crate) fn asks(name: &str, prepared: &Prepared) -> bool {
    let registry = ToolRegistry::builtin().expect("the built-in registry builds");
    let spec = &registry.get(name).expect("a built-in tool").spec;
    needs_approval(spec.auto_approve, prepared)
}

/// Typed arguments from JSON, for unit tests of a tool's checks.
#[cfg(test)]
pub(crate) fn typed<A: serde::de::DeserializeOwned>(args: serde_json::Value) -> A {
    serde_json::from_value(args).expect("test arguments deserialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_may_raise_the_json_default_but_never_lower_it() {
        let call = |ask| Prepared {
            header: String::new(),
            preview: String::new(),
            ask,
        };
        assert!(
            needs_approval(false, &call(false)),
            "auto_approve: false always asks"
        );
        assert!(needs_approval(false, &call(true)));
        assert!(!needs_approval(true, &call(false)));
        assert!(
            needs_approval(true, &call(true)),
            "a call raises the default"
        );
    }

    #[test]
    fn resolve_is_relative_to_workdir() {
        let ctx = ToolContext::for_test(Path::new("/srv/work"));
        assert_eq!(ctx.resolve("a/../b.txt"), PathBuf::from("/srv/work/b.txt"));
        assert_eq!(ctx.resolve("/etc/./hosts"), PathBuf::from("/etc/hosts"));
    }
}
