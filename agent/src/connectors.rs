//! Connector policy: which MCP servers ("connectors") a turn may use, declared per tier and
//! resolved into one effective allowlist (`reference/connector-policy.md`, made stricter).
//!
//! - Tiers, most specific first: the **task** (a background job: a watch's turns, a `task`
//!   sub-agent run), the **workstream** (a thread), the **channel** the thread lives in, and a
//!   named **project** from config that groups channels.
//! - Each tier holds `Option<Vec<String>>`: `None` says nothing (unrestricted), `Some([])`
//!   allows no connector at all and is never silently widened.
//! - The effective set is the **intersection** of every tier that declared something: a lower
//!   tier may only narrow what a higher one allows, so a thread cannot re-enable a connector its
//!   channel banned. (The reference lets the most specific declared tier win outright.)
//! - [`is_tool_allowed`] decides one tool name: `mcp__<server>__<tool>` is gated by `<server>`;
//!   built-ins and names that are not well-formed MCP names always pass (they reach no server).
//!
//! Everything here is pure; where the tiers come from (the store, the turn request, config) is
//! [`crate::turn::agent`]'s and the pipeline's business.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;

use crate::config::{ProjectConfig, project_connectors};
use crate::mcp::TOOL_PREFIX;
use crate::store::{Store, StoreError};

/// A policy tier, as shown to people (`/connectors`, the HTTP `source` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// A background job (watch, task sub-agent).
    Task,
    /// The thread.
    Workstream,
    /// The channel the thread lives in.
    Channel,
    /// A named project in config grouping channels.
    Project,
    /// No tier declared anything: every connector is allowed.
    All,
}

impl Tier {
    /// The word people see.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Task => "task",
            Tier::Workstream => "workstream",
            Tier::Channel => "channel",
            Tier::Project => "project",
            Tier::All => "all",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What each tier declared; `None` = the tier says nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tiers {
    /// The background job's selection (set by the job, not stored with the thread).
    pub task: Option<Vec<String>>,
    /// The thread's selection.
    pub workstream: Option<Vec<String>>,
    /// The parent channel's selection.
    pub channel: Option<Vec<String>>,
    /// The config project's selection (a project that lists the parent channel).
    pub project: Option<Vec<String>>,
}

/// The resolved policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Effective {
    /// Servers allowed; `None` = unrestricted.
    pub allowed: Option<BTreeSet<String>>,
    /// The most specific tier that declared something ([`Tier::All`] when none did).
    pub source: Tier,
    /// Every tier that declared something, most specific first (all of them narrowed).
    pub declared: Vec<Tier>,
}

impl Effective {
    /// No tier declared anything.
    pub fn unrestricted() -> Self {
        Self {
            allowed: None,
            source: Tier::All,
            declared: Vec::new(),
        }
    }

    /// Nothing allowed: what a turn offers when the policy cannot be read (fail closed).
    pub fn closed() -> Self {
        Self {
            allowed: Some(BTreeSet::new()),
            source: Tier::All,
            declared: Vec::new(),
        }
    }

    /// Whether `server` may be used.
    pub fn allows_server(&self, server: &str) -> bool {
        self.allowed.as_ref().is_none_or(|set| set.contains(server))
    }

    /// Whether some tier restricts the connectors (a selection exists).
    pub fn is_restricted(&self) -> bool {
        self.allowed.is_some()
    }

    /// `github, jira`, `none` or `all`, for people.
    pub fn describe(&self) -> String {
        match &self.allowed {
            None => "all".into(),
            Some(set) if set.is_empty() => "none".into(),
            Some(set) => set.iter().cloned().collect::<Vec<_>>().join(", "),
        }
    }
}

/// Resolves the effective set: the intersection of every declared tier.
pub fn resolve(tiers: &Tiers) -> Effective {
    let ordered = [
        (Tier::Task, &tiers.task),
        (Tier::Workstream, &tiers.workstream),
        (Tier::Channel, &tiers.channel),
        (Tier::Project, &tiers.project),
    ];
    let mut effective = Effective::unrestricted();
    for (tier, declared) in ordered {
        let Some(ids) = declared else { continue };
        let ids: BTreeSet<String> = ids.iter().map(|s| s.trim().to_owned()).collect();
        effective.allowed = Some(match effective.allowed.take() {
            None => ids,
            Some(so_far) => so_far.intersection(&ids).cloned().collect(),
        });
        if effective.declared.is_empty() {
            effective.source = tier;
        }
        effective.declared.push(tier);
    }
    effective
}

/// The server an `mcp__<server>__<tool>` name addresses: split on the first two `__`, so a
/// tool whose own name contains `__` keeps it. `None` for built-ins and malformed names.
pub fn server_of(tool_name: &str) -> Option<&str> {
    let rest = tool_name.strip_prefix(TOOL_PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some(server)
}

/// Whether a call to `tool_name` is allowed. Only well-formed MCP names are gated; built-ins
/// reach no server, and a malformed `mcp__` name matches no catalog tool (it fails as unknown).
pub fn is_tool_allowed(tool_name: &str, effective: &Effective) -> bool {
    server_of(tool_name).is_none_or(|server| effective.allows_server(server))
}

impl Effective {
    /// The MCP catalog as a turn under this policy sees it: only allowed servers' tools,
    /// resources, templates and prompts.
    pub fn restrict(&self, catalog: &crate::mcp::McpCatalog) -> crate::mcp::McpCatalog {
        catalog.only(|server| self.allows_server(server))
    }
}

/// The tool result a refused call gets.
pub fn refusal(server: &str) -> String {
    format!("Connector {server} is not enabled for this task")
}

/// The channel a workstream key names by itself: Slack keys carry it
/// (`slack:<team>:<channel>:<thread_ts>` → `slack:<team>:<channel>`); Discord thread keys do
/// not (the adapter records the parent when it opens the thread).
pub fn channel_from_key(key: &str) -> Option<String> {
    let key: crate::workstream::key::WorkstreamKey = key.parse().ok()?;
    key.channel().map(|c| c.to_string())
}

/// Parses a user's list (`github, jira` or `github jira`): trimmed, deduplicated, sorted.
pub fn parse_list(text: &str) -> Vec<String> {
    let set: BTreeSet<String> = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    set.into_iter().collect()
}

/// Where a turn's tiers come from besides the store: the task tier its job set, and the
/// projects of config. Carried by [`crate::tools::ToolContext`] so the dispatcher can resolve
/// the policy fresh for every call.
#[derive(Debug, Clone, Default)]
pub struct ConnectorScope {
    /// The task tier: set by background jobs (watches, task sub-agents); `None` for chat turns.
    pub task: Option<Vec<String>>,
    /// `[[projects]]` from config.
    pub projects: Arc<Vec<ProjectConfig>>,
}

/// A workstream's policy with the tiers it came from, for `/connectors` and the HTTP API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorView {
    /// What each tier declared.
    pub tiers: Tiers,
    /// The channel the workstream lives in, when known.
    pub channel: Option<String>,
    /// Whether the workstream exists.
    pub exists: bool,
    /// The resolved policy.
    pub effective: Effective,
}

impl ConnectorScope {
    /// The tiers of `workstream` as stored now, plus this scope's task and project tiers.
    pub async fn view(&self, store: &Store, workstream: &str) -> Result<ConnectorView, StoreError> {
        let stored = store.connector_tiers(workstream).await?;
        let project = stored
            .channel
            .as_deref()
            .and_then(|c| project_connectors(&self.projects, c));
        let tiers = Tiers {
            task: self.task.clone(),
            workstream: stored.workstream,
            channel: stored.channel_ids,
            project,
        };
        Ok(ConnectorView {
            effective: resolve(&tiers),
            tiers,
            channel: stored.channel,
            exists: stored.exists,
        })
    }

    /// The effective policy of `workstream`, read fresh from the store. An error must refuse
    /// MCP calls (fail closed), never run them unrestricted.
    pub async fn effective(
        &self,
        store: &Store,
        workstream: &str,
    ) -> Result<Effective, StoreError> {
        Ok(self.view(store, workstream).await?.effective)
    }

    /// A channel's own policy: its stored tier and the projects that list it.
    pub async fn channel_view(
        &self,
        store: &Store,
        channel: &str,
    ) -> Result<ConnectorView, StoreError> {
        let tiers = Tiers {
            channel: store.channel_connectors(channel).await?,
            project: project_connectors(&self.projects, channel),
            ..Tiers::default()
        };
        Ok(ConnectorView {
            effective: resolve(&tiers),
            tiers,
            channel: Some(channel.to_owned()),
            exists: true,
        })
    }
}

#[cfg(test)]
mod tests;
