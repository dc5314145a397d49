//! Answers to the informational chat commands (`status`, `link`, `memory`, `mcp`, `help`),
//! the same text on every platform. Commands that act on a thread (`ask`, `stop`, `close`)
//! belong to each platform's adapter.

use std::fmt::Write as _;

use sandpiper_agent::Agent;

use crate::commands::account::{self, Person};
use crate::commands::{Command, McpAction, MemoryAction, help};
use crate::permissions::{self, Standing, Steering};

pub use super::Where;

/// The text answer to an informational command; `None` for the thread commands.
pub async fn answer(
    agent: &Agent,
    cmd: &Command,
    who: Person<'_>,
    at: Where<'_>,
) -> Option<String> {
    let people = agent.people();
    let text = match cmd {
        Command::Ask { .. } | Command::Stop | Command::Close | Command::Connectors { .. } => {
            return None;
        }
        Command::Watch { action } => {
            let user = match account::user_id(&people, who).await {
                Ok(id) => id,
                Err(e) => return Some(format!("watch: {e}")),
            };
            let at = crate::commands::watches::At {
                workstream: at.workstream,
                user_id: &user,
                admin: at.admin,
                prefix: at.prefix,
            };
            crate::commands::watches::answer(agent, action, at).await
        }
        Command::Grants { action } => crate::commands::grants::answer(agent, action, who, at).await,
        Command::Help => help(at.prefix),
        Command::Usage { scope, period } => {
            crate::commands::usage::usage(agent, who, at, *scope, *period).await
        }
        Command::Budget { action } => crate::commands::usage::budget(agent, who, at, action).await,
        Command::Console => crate::commands::console_link::answer(agent, who, at.admin).await,
        Command::Compact => match at.workstream {
            None => format!("Use {}compact inside a thread I answer in.", at.prefix),
            Some(ws) => compact(agent, who, ws, at).await,
        },
        Command::Model { name } => match at.workstream {
            None => format!("Use {}model inside a thread I answer in.", at.prefix),
            Some(ws) => model(agent, who, ws, at, name.as_deref()).await,
        },
        Command::Status => match at.workstream {
            None => format!("Use {}status inside a thread I answer in.", at.prefix),
            Some(ws) => status(agent, ws).await,
        },
        Command::Link { code } => account::link(&people, who, code.as_deref(), false)
            .await
            .unwrap_or_else(|e| format!("link failed: {e}")),
        Command::Memory { action } => {
            let ws = at.workstream.unwrap_or("none");
            let result = match action {
                MemoryAction::List => account::memory_list(&people, who, ws).await,
                MemoryAction::Delete { name } => {
                    account::memory_delete(&people, who, ws, name, None, at.admin).await
                }
            };
            match result {
                Ok(t) if matches!(action, MemoryAction::List) => format!("```\n{}```", t),
                Ok(t) => t,
                Err(e) => format!("memory: {e}"),
            }
        }
        Command::Mcp { action } => {
            let text = match action {
                McpAction::List => mcp_list(agent.mcp(), at.admin),
                McpAction::Refresh { server } => {
                    mcp_refresh(&agent.mcp().refresh(server.as_deref()).await, at.admin)
                }
            };
            format!("```\n{text}```")
        }
    };
    Some(text)
}

/// The `status` answer for `workstream`.
pub async fn status(agent: &Agent, workstream: &str) -> String {
    let status = match agent.status(workstream).await {
        Ok(Some(s)) => s,
        Ok(None) => return format!("No workstream `{workstream}` yet."),
        Err(e) => return format!("status failed: {e}"),
    };
    let owner = match &status.owner {
        Some(id) => agent.people().public_name_of(id).await,
        None => "nobody".into(),
    };
    let allowed = if status.always_allowed.is_empty() {
        "none".to_owned()
    } else {
        status.always_allowed.join(", ")
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Workstream `{}`{}",
        status.key,
        if status.closed { " (closed)" } else { "" }
    );
    let _ = writeln!(out, "Owner: {owner}");
    let _ = writeln!(out, "Model: {}", status.model);
    let window = &status.context_window;
    let used = status.context_tokens;
    let percent = (used * 100).checked_div(window.tokens).unwrap_or(0);
    let _ = writeln!(
        out,
        "Context: {used} of {} tokens ({percent}%), window from {}{}",
        window.tokens,
        window.source,
        match status.compacted_messages {
            0 => String::new(),
            n => format!("; {} compacted", count(n, "older message")),
        }
    );
    let _ = writeln!(
        out,
        "Tokens used: {} in / {} out",
        status.tokens_in, status.tokens_out
    );
    let _ = writeln!(out, "Prompt cache: {}", cache_share(&status));
    let _ = writeln!(out, "Always allowed: {allowed}");
    let _ = write!(out, "Messages: {}", status.messages);
    out
}

/// The share of prompt tokens the provider served from its cache: the last turn's and the
/// thread's.
fn cache_share(status: &sandpiper_agent::turn::agent::WorkstreamStatus) -> String {
    let last = &status.last_turn;
    let last = match (last.cached_tokens * 100).checked_div(last.input_tokens) {
        Some(p) => format!(
            "{p}% of the last turn's {} prompt tokens",
            last.input_tokens
        ),
        None => "no turn since it was loaded".to_owned(),
    };
    let thread = &status.counted;
    match thread.cache_percent() {
        Some(p) => format!(
            "{last}; {p}% of the thread's {} over {} model calls",
            thread.input_tokens, thread.calls
        ),
        None => last,
    }
}

/// Why `who` may not steer `workstream` ([`permissions::may_steer`]), as the answer to give;
/// `None` when they may.
async fn steering_refused(
    agent: &Agent,
    who: Person<'_>,
    workstream: &str,
    at: Where<'_>,
    what: Steering,
) -> Option<String> {
    let user = match account::user_id(&agent.people(), who).await {
        Ok(id) => id,
        Err(e) => return Some(format!("{}: {e}", what.command())),
    };
    let owner = match agent.workstream(workstream).await {
        Ok(Some(info)) => info.owner,
        Ok(None) => return Some(format!("No workstream `{workstream}` yet.")),
        Err(e) => return Some(format!("{} failed: {e}", what.command())),
    };
    let standing = Standing {
        owner: owner.as_deref() == Some(user.as_str()),
        approver: at.approver,
        admin: at.admin,
    };
    permissions::may_steer(what, standing)
        .err()
        .map(|refusal| refusal.to_string())
}

async fn compact(agent: &Agent, who: Person<'_>, workstream: &str, at: Where<'_>) -> String {
    if let Some(refused) = steering_refused(agent, who, workstream, at, Steering::Compact).await {
        return refused;
    }
    // Answered when done: a command's answer is one reply, and Discord shows its deferred
    // response as "thinking…" meanwhile.
    compact_now(agent, workstream, &sandpiper_agent::protocol::NullSink).await
}

/// `model`: the model this thread answers with and the ones it may switch to; `model NAME`
/// switches it (its owner, an approver or an admin).
async fn model(
    agent: &Agent,
    who: Person<'_>,
    workstream: &str,
    at: Where<'_>,
    name: Option<&str>,
) -> String {
    let Some(name) = name else {
        let current = match agent.model_of(workstream).await {
            Ok(model) => model,
            Err(e) => return format!("model failed: {e}"),
        };
        return models_shown(&current, &agent.models_offered(), at.prefix);
    };
    if let Some(refused) = steering_refused(agent, who, workstream, at, Steering::Model).await {
        return refused;
    }
    match agent.choose_model(workstream, name).await {
        Ok(()) => format!("This thread answers with `{name}` from its next message on."),
        Err(sandpiper_agent::AgentError::NotAChoice(e)) => format!("🚫 {e}."),
        Err(e) => format!("model failed: {e}"),
    }
}

/// The answer to `model` without a name.
fn models_shown(current: &str, offered: &[String], prefix: &str) -> String {
    let others: Vec<String> = offered
        .iter()
        .filter(|m| *m != current)
        .map(|m| format!("`{m}`"))
        .collect();
    if others.is_empty() {
        return format!(
            "This thread answers with `{current}`, the only model offered here (an operator \
             offers more with `[model] choices`)."
        );
    }
    format!(
        "This thread answers with `{current}`. Switch with {prefix}model NAME: {}.",
        others.join(", ")
    )
}

/// Compacts `workstream` now and says what came of it (the permission is the caller's);
/// `progress` shows that it compacts while the model summarises.
pub async fn compact_now(
    agent: &Agent,
    workstream: &str,
    progress: &dyn sandpiper_agent::protocol::TurnSink,
) -> String {
    match agent.compact_now(workstream, progress).await {
        Ok(None) => "A turn is running in this thread; compact it when the turn has ended.".into(),
        Ok(Some((done, window))) if done.changed() => done.describe(window.tokens),
        Ok(Some(_)) => "Nothing to compact: this thread is only its last turn.".into(),
        Err(e) => format!("compact failed: {e}"),
    }
}

/// The stderr lines `mcp list` shows of a server that is not connected.
const MCP_STDERR_SHOWN: usize = 10;

/// What a server wrote to stderr and the text of its errors may hold secrets (a server that
/// prints its database URL when it fails): only an admin is shown them, in the private answer
/// a command gets; everyone else sees the state.
const MCP_DETAILS_FOR_ADMINS: &str = "an admin sees why";

/// `mcp list`: each server with its state and tools, and for an `admin`, its last error and,
/// when it is down, its last stderr lines.
pub fn mcp_list(mcp: &sandpiper_agent::mcp::McpManager, admin: bool) -> String {
    let status = mcp.status();
    if status.is_empty() {
        return "no MCP servers configured ([mcp.servers.NAME] or --mcp-config FILE)\n".into();
    }
    let catalog = mcp.catalog();
    let mut out = String::new();
    for s in &status {
        let state = s.state.as_str().replace('_', " ");
        let _ = write!(
            out,
            "{} ({state}): {}, {}, {}",
            s.name,
            count(s.tools, "tool"),
            count(s.resources, "resource"),
            count(s.prompts, "prompt")
        );
        match (&s.error, admin) {
            (Some(e), true) => {
                let _ = write!(out, " — {e}");
            }
            (Some(_), false) => {
                let _ = write!(out, " — {MCP_DETAILS_FOR_ADMINS}");
            }
            (None, _) => {}
        }
        out.push('\n');
        // Why a server is down is usually in what it last wrote to stderr.
        if admin && !s.connected && !s.stderr_tail.is_empty() {
            let _ = writeln!(out, "  last stderr lines:");
            for line in s.stderr_tail.iter().rev().take(MCP_STDERR_SHOWN).rev() {
                let _ = writeln!(out, "    {line}");
            }
        }
        for t in catalog.tools.iter().filter(|t| t.server == s.name) {
            let first = t.description.lines().next().unwrap_or_default();
            let _ = writeln!(out, "  {}  {first}", t.full_name);
        }
    }
    out
}

/// `mcp refresh`: what each server added and removed, and for an `admin`, why one failed.
pub fn mcp_refresh(reports: &[sandpiper_agent::mcp::RefreshReport], admin: bool) -> String {
    let mut out = String::new();
    for r in reports {
        match &r.error {
            Some(e) if admin => {
                let _ = writeln!(out, "{}: error: {e}", r.server);
            }
            Some(_) => {
                let _ = writeln!(out, "{}: failed ({MCP_DETAILS_FOR_ADMINS})", r.server);
            }
            None if r.added.is_empty() && r.removed.is_empty() => {
                let _ = writeln!(out, "{}: no changes", r.server);
            }
            None => {
                let _ = writeln!(
                    out,
                    "{}: added [{}], removed [{}]",
                    r.server,
                    r.added.join(", "),
                    r.removed.join(", ")
                );
            }
        }
    }
    if out.is_empty() {
        out.push_str("no MCP servers configured\n");
    }
    out
}

/// `1 tool`, `2 tools`.
fn count(n: usize, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}
