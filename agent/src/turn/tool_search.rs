//! Dynamic tool search: with many external (MCP) tools connected, offer the built-in tools
//! and let the model find the rest on demand instead of sending every schema on every call.
//!
//! - [`is_active`] decides from `tools.search` and the total tool count.
//! - [`ToolCatalog`] holds the tools of an agent (built-ins first, then deferrable external
//!   ones) and their [`ToolSearchIndex`]; it is rebuilt whenever the external tools change.
//! - [`ToolCatalogView::offered`] is what one model call gets: built-ins and expanded tools
//!   plainly; the other deferrable tools either flagged `defer_loading` (providers with native
//!   search) or left out behind the synthetic [`TOOL_SEARCH`] tool (client-side search).
//! - [`TurnTools`] applies the configuration and the connector policy to one turn (tools of
//!   servers the policy refuses are neither offered nor indexed): what to offer, whether the pipeline
//!   answers `tool_search`, what to expand after a batch.
//! - [`run_tool_search`] answers a `tool_search` call and names the tools to expand. Expanded
//!   tools stay visible in the workstream for good, so the model never loses a tool it found.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::json;

use crate::bm25::Bm25Index;
use crate::config::{Capabilities, ToolSearchMode, ToolsConfig};
use crate::connectors::{Effective, is_tool_allowed};
use crate::model::{Message, ToolCall, ToolSchema};
use crate::tools::parse_arguments;

/// Name of the synthetic client-side search tool.
pub const TOOL_SEARCH: &str = "tool_search";

/// Whether tool search is on for `total_tools` (built-in + external) tools: `auto` turns it on
/// from `threshold` tools.
pub fn is_active(mode: ToolSearchMode, total_tools: usize, threshold: usize) -> bool {
    match mode {
        ToolSearchMode::On => true,
        ToolSearchMode::Off => false,
        ToolSearchMode::Auto => total_tools >= threshold,
    }
}

/// A BM25 index over the names and descriptions of deferrable tools.
///
/// Built in one go (about 17 ms per 10k tools), so it is simply rebuilt with the catalog.
#[derive(Debug, Clone, Default)]
pub struct ToolSearchIndex {
    index: Bm25Index<String>,
    /// Name → first line of the description, for search results.
    summaries: HashMap<String, String>,
}

impl ToolSearchIndex {
    /// Indexes `tools` by name and description.
    pub fn build(tools: &[ToolSchema]) -> Self {
        let index = Bm25Index::build_fields(
            tools
                .iter()
                .map(|t| (t.name.clone(), [t.name.as_str(), t.description.as_str()])),
        );
        let summaries = tools
            .iter()
            .map(|t| (t.name.clone(), first_line(&t.description)))
            .collect();
        Self { index, summaries }
    }

    /// Names of the best `max` matches for `query`, best first.
    pub fn search(&self, query: &str, max: usize) -> Vec<String> {
        let hits = self.index.search(query, max).into_iter();
        hits.map(|(name, _)| name).collect()
    }

    /// Whether `name` is an indexed (deferrable) tool.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// How many tools are indexed.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no tools are indexed.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn summary(&self, name: &str) -> &str {
        self.summaries.get(name).map_or("", String::as_str)
    }
}

/// Every tool an agent can offer: built-ins first, then deferrable external tools, with the
/// search index over the latter. Immutable; replaced as a whole when external tools change.
#[derive(Debug, Clone, Default)]
pub struct ToolCatalog {
    tools: Vec<ToolSchema>,
    builtin: HashSet<String>,
    index: ToolSearchIndex,
    /// Estimated tokens of the external tools' schemas (4 bytes a token), counted once.
    external_tokens: u64,
}

impl ToolCatalog {
    /// A catalog of `builtin` tools and `external` ones. An external tool named like a
    /// built-in (or like [`TOOL_SEARCH`]) is dropped with a warning: built-ins win.
    pub fn new(builtin: &[ToolSchema], external: Vec<ToolSchema>) -> Self {
        let names: HashSet<String> = builtin.iter().map(|t| t.name.clone()).collect();
        let mut tools = builtin.to_vec();
        let mut seen = names.clone();
        for tool in external {
            if tool.name == TOOL_SEARCH || !seen.insert(tool.name.clone()) {
                tracing::warn!(tool = %tool.name, "external tool name already taken; ignored");
                continue;
            }
            tools.push(tool);
        }
        let index = ToolSearchIndex::build(&tools[builtin.len()..]);
        let external_tokens =
            crate::turn::context::estimate::tools_bytes(&tools[builtin.len()..]) / 4;
        Self {
            tools,
            builtin: names,
            index,
            external_tokens,
        }
    }

    /// The catalog without the external tools connector policy refuses: they are neither
    /// offered nor found by tool search. Built-ins stay.
    pub fn restricted(&self, policy: &Effective) -> Self {
        let builtin_count = self.builtin.len().min(self.tools.len());
        let (builtin, external) = self.tools.split_at(builtin_count);
        let allowed = external
            .iter()
            .filter(|t| is_tool_allowed(&t.name, policy))
            .cloned()
            .collect();
        Self::new(builtin, allowed)
    }

    /// Whether some tool comes from an MCP server (the tools connector policy can refuse).
    pub fn has_connector_tools(&self) -> bool {
        let builtin_count = self.builtin.len().min(self.tools.len());
        self.tools[builtin_count..]
            .iter()
            .any(|t| crate::connectors::server_of(&t.name).is_some())
    }

    /// Estimated tokens of the external (deferrable) tools' schemas.
    pub fn external_tokens(&self) -> u64 {
        self.external_tokens
    }

    /// Every tool, built-ins first.
    pub fn tools(&self) -> &[ToolSchema] {
        &self.tools
    }

    /// The index over the deferrable (external) tools.
    pub fn index(&self) -> &ToolSearchIndex {
        &self.index
    }

    /// The catalog as seen by one workstream.
    pub fn view<'a>(
        &'a self,
        expanded: &'a Expanded,
        active: bool,
        native: bool,
    ) -> ToolCatalogView<'a> {
        ToolCatalogView {
            tools: &self.tools,
            builtin: &self.builtin,
            expanded,
            active,
            native,
        }
    }
}

/// One workstream's view of the tools, from which each model call's tool list is computed.
#[derive(Debug, Clone, Copy)]
pub struct ToolCatalogView<'a> {
    /// Every tool, built-ins first, then deferrable ones.
    pub tools: &'a [ToolSchema],
    /// Names of the built-in tools (always visible).
    pub builtin: &'a HashSet<String>,
    /// Deferrable tools the workstream has found; visible for good.
    pub expanded: &'a Expanded,
    /// Whether tool search is on (see [`is_active`]).
    pub active: bool,
    /// Whether the provider searches deferred tools itself.
    pub native: bool,
}

impl ToolCatalogView<'_> {
    /// Whether `name` is a deferrable tool that is currently hidden from the model.
    pub fn is_deferred(&self, name: &str) -> bool {
        self.active && !self.builtin.contains(name) && !self.expanded.contains(name)
    }

    /// The tools to send, in an order that only grows: all of them when search is off;
    /// otherwise, with client-side search, the tools that are never deferred in catalog
    /// order, `tool_search` while something is left to find, then the tools it found in the
    /// order they were found (a newly found tool is appended, never sorted in among the
    /// others, so the request's tool list keeps its prefix); with native search, every tool
    /// in catalog order, the deferred ones flagged `defer_loading`.
    pub fn offered(&self) -> Vec<ToolSchema> {
        if !self.active || self.native {
            return self
                .tools
                .iter()
                .map(|tool| ToolSchema {
                    defer_loading: self.is_deferred(&tool.name),
                    ..tool.clone()
                })
                .collect();
        }
        let mut out: Vec<ToolSchema> = self
            .tools
            .iter()
            .filter(|t| self.builtin.contains(&t.name))
            .cloned()
            .collect();
        if self.tools.iter().any(|t| self.is_deferred(&t.name)) {
            out.push(tool_search_schema());
        }
        let found = self
            .expanded
            .iter()
            .filter_map(|name| self.tools.iter().find(|t| &t.name == name));
        out.extend(found.map(|t| ToolSchema {
            defer_loading: false,
            ..t.clone()
        }));
        out
    }
}

/// The deferrable tools a workstream has found, in the order it found them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expanded {
    names: Vec<String>,
}

impl Expanded {
    /// Whether `name` was found.
    pub fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// Records `name` as found (after the others), unless it already was.
    pub fn insert(&mut self, name: String) {
        if !self.contains(&name) {
            self.names.push(name);
        }
    }

    /// The found tools, first found first.
    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.names.iter()
    }

    /// How many were found.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

impl Extend<String> for Expanded {
    fn extend<I: IntoIterator<Item = String>>(&mut self, names: I) {
        for name in names {
            self.insert(name);
        }
    }
}

impl FromIterator<String> for Expanded {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        let mut expanded = Self::default();
        expanded.extend(names);
        expanded
    }
}

impl IntoIterator for Expanded {
    type Item = String;
    type IntoIter = std::vec::IntoIter<String>;

    fn into_iter(self) -> Self::IntoIter {
        self.names.into_iter()
    }
}

impl<const N: usize> From<[String; N]> for Expanded {
    fn from(names: [String; N]) -> Self {
        names.into_iter().collect()
    }
}

/// The tools of one turn: the agent's catalog and how tool search applies to its model.
/// Only the top-level turn loop uses it; sub-agents get scoped tool sets without search.
#[derive(Debug, Clone)]
pub struct TurnTools {
    /// The agent's catalog this view was built from.
    source: Arc<ToolCatalog>,
    /// The connector policy it applies.
    policy: Effective,
    /// `source` as the policy lets this turn see it.
    catalog: Arc<ToolCatalog>,
    supports_tools: bool,
    active: bool,
    native: bool,
    max_results: usize,
}

impl TurnTools {
    /// Whether this turn's view was built from `catalog` (a changed catalog is picked up on
    /// the next model call).
    pub fn uses(&self, catalog: &Arc<ToolCatalog>) -> bool {
        Arc::ptr_eq(&self.source, catalog)
    }

    /// The connector policy this view applies (rebuild when it changed).
    pub fn policy(&self) -> &Effective {
        &self.policy
    }

    /// Decides activation from `tools.search` and the catalog's size, after connector policy
    /// removed the tools of servers this turn may not use.
    pub fn new(
        source: Arc<ToolCatalog>,
        config: &ToolsConfig,
        caps: Capabilities,
        policy: Effective,
    ) -> Self {
        let catalog = if policy.is_restricted() {
            Arc::new(source.restricted(&policy))
        } else {
            source.clone()
        };
        let total = catalog.tools().len();
        // In auto mode the schemas' size counts as well as their number: a few MCP servers
        // with large schemas would otherwise fill a small context window.
        let by_size = config.search == ToolSearchMode::Auto
            && config
                .search_threshold_tokens
                .is_some_and(|t| catalog.external_tokens() >= t);
        Self {
            supports_tools: caps.supports_tools,
            active: caps.supports_tools
                && (by_size || is_active(config.search, total, config.search_threshold)),
            native: caps.native_tool_search,
            max_results: config.search_max_results,
            source,
            policy,
            catalog,
        }
    }

    /// What one model call is offered, given the workstream's expanded tools; nothing when
    /// the model has no tools.
    pub fn offered(&self, expanded: &Expanded) -> Vec<ToolSchema> {
        if !self.supports_tools {
            return Vec::new();
        }
        let view = self.catalog.view(expanded, self.active, self.native);
        view.offered()
    }

    /// What answers `tool_search` calls, when search is active and client-side.
    pub fn client_search(&self) -> Option<ClientToolSearch<'_>> {
        (self.active && !self.native).then(|| ClientToolSearch {
            index: self.catalog.index(),
            max_results: self.max_results,
        })
    }

    /// The expansions a reloaded workstream's history implies (see [`replay_expansions`]).
    pub fn replay(&self, history: &[Message]) -> Expanded {
        if !self.active {
            return Expanded::default();
        }
        replay_expansions(history, self.catalog.index(), self.max_results)
    }

    /// Records a batch's expansions: the tools its searches `found`, and deferrable tools
    /// among `calls`. A deferred tool called by its exact name runs like any other (dispatch
    /// does not look at visibility) and is offered from then on, as if it had been found; it
    /// also keeps native providers consistent, since their search blocks are not kept.
    pub fn expand(&self, expanded: &mut Expanded, found: Vec<String>, calls: &[ToolCall]) {
        expanded.extend(found);
        let index = self.catalog.index();
        let called = calls.iter().filter(|c| index.contains(&c.name));
        expanded.extend(called.map(|c| c.name.clone()));
    }
}

/// What answers `tool_search` calls: the index over deferrable tools and the result cap.
#[derive(Debug, Clone, Copy)]
pub struct ClientToolSearch<'a> {
    /// The deferrable tools.
    pub index: &'a ToolSearchIndex,
    /// `tools.search_max_results`.
    pub max_results: usize,
}

/// The synthetic search tool offered when the provider has no native tool search.
pub fn tool_search_schema() -> ToolSchema {
    ToolSchema {
        name: TOOL_SEARCH.into(),
        description: "Finds more tools by keyword. Only some tools are listed; others (for \
                      example external services such as GitHub or Jira) are available on \
                      request. Describe what you want to do in a few words, e.g. \"create \
                      github issue\"; the matching tools are returned and can be called from \
                      then on."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Keywords describing the action or service, e.g. \"list jira tickets\"."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Most tools to return (capped by the server's setting)."
                }
            },
            "required": ["query"]
        }).into(),
        defer_loading: false,
    }
}

/// The answer to one `tool_search` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSearchOutcome {
    /// The query as understood (empty when missing), for the call's header.
    pub query: String,
    /// The tool result text for the model.
    pub text: String,
    /// Whether the call itself was malformed (no query).
    pub is_error: bool,
    /// Tools to add to the workstream's visible set.
    pub expand: Vec<String>,
}

/// Answers a `tool_search` call with raw `arguments` (a JSON object, or a bare query string),
/// returning at most `max_results` tools (the model may ask for fewer).
pub fn run_tool_search(
    index: &ToolSearchIndex,
    arguments: &str,
    max_results: usize,
) -> ToolSearchOutcome {
    let args = parse_arguments(arguments, Some("query")).unwrap_or_default();
    let query = args["query"].as_str().map(str::trim).unwrap_or_default();
    if query.is_empty() {
        return ToolSearchOutcome {
            query: String::new(),
            text: "error: tool_search needs a `query`: a few keywords describing what you want \
                   to do, e.g. {\"query\": \"create github issue\"}"
                .into(),
            is_error: true,
            expand: Vec::new(),
        };
    }
    let asked = args["max_results"]
        .as_u64()
        .map_or(max_results, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let names = index.search(query, asked.clamp(1, max_results.max(1)));
    if names.is_empty() {
        return ToolSearchOutcome {
            query: query.to_owned(),
            text: format!(
                "No tools match \"{query}\". Try other keywords: the service name (github, \
                 jira, ...) or the action (create, list, search, ...)."
            ),
            is_error: false,
            expand: Vec::new(),
        };
    }
    let mut text = format!(
        "Found {} tool{} for \"{query}\"; you can call {} from now on:\n",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        if names.len() == 1 { "it" } else { "them" },
    );
    for name in &names {
        let summary = index.summary(name);
        if summary.is_empty() {
            text.push_str(&format!("- {name}\n"));
        } else {
            text.push_str(&format!("- {name}: {summary}\n"));
        }
    }
    ToolSearchOutcome {
        query: query.to_owned(),
        text,
        is_error: false,
        expand: names,
    }
}

/// The deferrable tools a workstream's history shows it has used or found: every tool it
/// called, and what its `tool_search` calls find again (the search is deterministic). Used
/// when a workstream is reloaded, so expansions outlive eviction and restarts.
pub fn replay_expansions(
    history: &[Message],
    index: &ToolSearchIndex,
    max_results: usize,
) -> Expanded {
    let mut found = Expanded::default();
    for call in history.iter().flat_map(|m| &m.tool_calls) {
        if call.name == TOOL_SEARCH {
            found.extend(run_tool_search(index, &call.arguments, max_results).expand);
        } else if index.contains(&call.name) {
            found.insert(call.name.clone());
        }
    }
    found
}

/// The first non-blank line of `text`, trimmed.
fn first_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    line.unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests;
