//! The `memory` tool: save, search, list and delete typed, scoped memories.
//!
//! Scope isolation is the store's job ([`Visibility`]): this tool only ever passes the
//! workstream and the user of the turn it runs in, so another user's memories cannot be named,
//! listed, searched, counted or deleted from here.
//!
//! A global memory is injected into every user's prompt in every thread, so saving or
//! deleting one asks a person (the card shows the text); workstream and user scope do not.
//! A delete that names no scope may hit a global memory, so it asks too.

use std::fmt::Write as _;

use serde::Deserialize;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::store::memories::{Memory, NewMemory, Scope, Visibility};

/// Largest memory content, in bytes.
pub(super) const MAX_CONTENT_BYTES: usize = 32 * 1024;
const MAX_NAME_CHARS: usize = 64;
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;
const KINDS: [&str; 4] = ["user", "project", "feedback", "reference"];

/// The `memory` tool.
#[derive(Debug, Default)]
pub(super) struct MemoryTool;

/// The arguments of `tools/memory.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    action: String,
    name: Option<String>,
    content: Option<String>,
    description: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    scope: Option<String>,
    query: Option<String>,
    limit: Option<i64>,
}

/// A validated call.
#[derive(Debug)]
pub(super) enum Action {
    Save {
        name: String,
        content: String,
        description: Option<String>,
        kind: Option<String>,
        scope: Scope,
    },
    Search {
        query: String,
        limit: usize,
    },
    List {
        limit: usize,
    },
    Delete {
        name: String,
        scope: Option<Scope>,
    },
}

fn parse(args: &Args) -> Result<Action, ToolError> {
    let a = args;
    let limit = match a.limit {
        None => DEFAULT_LIMIT,
        Some(n) if n < 1 => return Err(ToolError::model("`limit` must be at least 1")),
        Some(n) => usize::try_from(n).unwrap_or(MAX_LIMIT).min(MAX_LIMIT),
    };
    let scope = a
        .scope
        .as_deref()
        .map(|s| {
            Scope::parse(s).ok_or_else(|| {
                ToolError::model(format!(
                    "`scope` must be global, workstream or user, not `{s}`"
                ))
            })
        })
        .transpose()?;
    match a.action.as_str() {
        "save" => {
            let name = valid_name(a.name.clone())?;
            let content = a
                .content
                .clone()
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| {
                    ToolError::model("save needs `content`: what should be remembered")
                })?;
            if content.len() > MAX_CONTENT_BYTES {
                return Err(ToolError::model(format!(
                    "`content` is {} bytes; a memory holds at most {MAX_CONTENT_BYTES} bytes \
                     (32 KB). Save a summary, or split it into several memories",
                    content.len()
                )));
            }
            if let Some(k) = a.kind.as_deref()
                && !KINDS.contains(&k)
            {
                return Err(ToolError::model(format!(
                    "`type` must be one of user, project, feedback, reference, not `{k}`"
                )));
            }
            Ok(Action::Save {
                name,
                content,
                description: a.description.clone().filter(|d| !d.trim().is_empty()),
                kind: a.kind.clone(),
                scope: scope.unwrap_or(Scope::Global),
            })
        }
        "search" => {
            let query = a
                .query
                .clone()
                .or_else(|| a.name.clone())
                .filter(|q| !q.trim().is_empty())
                .ok_or_else(|| ToolError::model("search needs `query`"))?;
            Ok(Action::Search { query, limit })
        }
        "list" => Ok(Action::List { limit }),
        "delete" => Ok(Action::Delete {
            name: valid_name(a.name.clone())?,
            scope,
        }),
        other => Err(ToolError::model(format!(
            "unknown action `{other}`; use save, search, delete or list"
        ))),
    }
}

fn valid_name(name: Option<String>) -> Result<String, ToolError> {
    let name = name.ok_or_else(|| ToolError::model("this action needs `name`"))?;
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(name)
    } else {
        Err(ToolError::model(format!(
            "`name` must be snake_case (a-z, 0-9, _; starting with a letter; at most \
             {MAX_NAME_CHARS} characters), e.g. `deploy_command`; got `{name}`"
        )))
    }
}

#[async_trait::async_trait]
impl Tool for MemoryTool {
    type Args = Args;
    type Call = Action;
    const ASKS_FOR: Option<&'static str> =
        Some("saves and deletes at global scope (and deletes with no scope)");

    fn name(&self) -> &'static str {
        "memory"
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, Action), ToolError> {
        let action = parse(&args)?;
        let (header, preview, ask) = match &action {
            Action::Save {
                name,
                content,
                description,
                scope,
                ..
            } => {
                let preview = match description {
                    Some(d) => format!("{d}\n\n{content}"),
                    None => content.clone(),
                };
                let header = format!("memory: save {name} ({})", scope.as_str());
                (header, preview, *scope == Scope::Global)
            }
            Action::Search { query, .. } => {
                (format!("memory: search \"{query}\""), String::new(), false)
            }
            Action::List { .. } => ("memory: list".into(), String::new(), false),
            Action::Delete { name, scope } => {
                let header = match scope {
                    Some(scope) => format!("memory: delete {name} ({})", scope.as_str()),
                    None => format!("memory: delete {name} (any scope)"),
                };
                let global = scope.is_none_or(|s| s == Scope::Global);
                (header, String::new(), global)
            }
        };
        let prepared = Prepared {
            header,
            preview,
            ask,
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
        let vis = Visibility {
            workstream: ctx.workstream.clone(),
            user_id: ctx.user_id.clone(),
        };
        let failed = |e| ToolError::store("memory", e);
        let text = match action {
            Action::Save {
                name,
                content,
                description,
                kind,
                scope,
            } => {
                let scope = *scope;
                if vis.scope_id(scope).is_none() {
                    return Err(ToolError::model(
                        "scope `user` needs to know who is speaking, and this turn has no user; \
                         use global or workstream",
                    ));
                }
                let new = store
                    .save_memory(
                        &vis,
                        &NewMemory {
                            name,
                            scope,
                            kind: kind.as_deref(),
                            description: description.as_deref(),
                            content,
                            created_by: ctx.user_id.as_deref(),
                        },
                    )
                    .await
                    .map_err(failed)?;
                let verb = if new { "saved" } else { "updated" };
                format!("{verb} memory `{name}` ({} scope)", scope.as_str())
            }
            Action::Search { query, limit } => {
                let found = store
                    .search_memories(&vis, query, *limit)
                    .await
                    .map_err(failed)?;
                touch(store, &found).await;
                if found.is_empty() {
                    format!("no memories match \"{query}\"")
                } else {
                    render(&found, true)
                }
            }
            Action::List { limit } => {
                let found = store.visible_memories(&vis, *limit).await.map_err(failed)?;
                touch(store, &found).await;
                if found.is_empty() {
                    "no memories yet".into()
                } else {
                    render(&found, false)
                }
            }
            Action::Delete { name, scope } => {
                let found = store
                    .delete_memory(&vis, name, *scope)
                    .await
                    .map_err(failed)?;
                match found.as_slice() {
                    [] => return Err(ToolError::model(format!("no memory named `{name}`"))),
                    [m] => format!("deleted memory `{name}` ({} scope)", m.scope.as_str()),
                    several => {
                        let scopes: Vec<&str> = several.iter().map(|m| m.scope.as_str()).collect();
                        return Err(ToolError::model(format!(
                            "`{name}` exists in several scopes ({}); say which with `scope`",
                            scopes.join(", ")
                        )));
                    }
                }
            }
        };
        Ok(ToolOutput::text(text))
    }
}

async fn touch(store: &crate::store::Store, found: &[Memory]) {
    let ids: Vec<&str> = found.iter().map(|m| m.id.as_str()).collect();
    if let Err(e) = store.touch_memories(&ids).await {
        tracing::warn!(error = %e, "cannot record memory access");
    }
}

/// One block per memory; `full` includes the content.
pub(super) fn render(found: &[Memory], full: bool) -> String {
    let mut out = String::new();
    for m in found {
        let _ = write!(out, "- {} [{}, {}]", m.name, m.kind, m.scope.as_str());
        if let Some(d) = &m.description {
            let _ = write!(out, ": {d}");
        }
        out.push('\n');
        if full {
            for line in m.content.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
