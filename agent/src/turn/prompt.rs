//! The system message: who the agent is, the working directory and how to use tools — only
//! what changes rarely, so it is the same byte for byte from one call to the next (see
//! [`crate::turn::request`]). What changes per call is the [`context_note`].

use std::path::Path;

use chrono::{DateTime, Local};

use crate::model::ToolSchema;

/// Builds the system message of a workstream: the same until its working directory, its
/// tools or the operator's extra text change.
pub fn system_prompt(workdir: &Path, tools: &[ToolSchema], extra: Option<&str>) -> String {
    let mut s = String::with_capacity(2048);
    s.push_str(
        "You are sandpiper, an engineering assistant working with a team in a chat thread. \
         Each thread is a persistent workstream: earlier messages in it are your memory of \
         the work so far.\n\n",
    );
    s.push_str(&format!(
        "Your working directory is {}; relative paths resolve against it.\n\
         The newest message may end with a <context> note from sandpiper (the time, memories \
         relevant to the conversation, hints); it is not from the person.\n",
        workdir.display()
    ));
    if tools.is_empty() {
        s.push_str("\nYou have no tools in this conversation: answer from what you know.\n");
    } else {
        s.push_str(
            "\nHow to use your tools:\n\
             - Call tools with a JSON object of arguments. Several independent calls may go in \
             one response; they run in parallel.\n\
             - Read before you change: use read_file (and search) to look, then edit_file for \
             small changes or write_file for new files. edit_file needs an exact, unique match.\n\
             - bash runs in the working directory with a timeout; its output streams to the \
             thread. Prefer non-interactive commands.\n\
             - read_file and search run unasked inside the working directory; outside it they \
             need a person's approval, so keep your work there.\n\
             - Calls that change things may need a person's approval. If a call is denied, \
             read the reason given and adjust instead of retrying the same call.\n\
             - Tool errors are for you to fix: read the message and try again differently.\n",
        );
        s.push_str("\nTools: ");
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        s.push_str(&names.join(", "));
        s.push('\n');
    }
    s.push_str(
        "\nAnswer concisely in Markdown. When you finish a task, say what you did and what \
         you verified.\n",
    );
    if let Some(extra) = extra {
        s.push('\n');
        s.push_str(extra);
        s.push('\n');
    }
    s
}

/// The note a model call adds to the newest message: the time when a turn starts (`now`),
/// the relevant memories not shown yet and the nudges due, each block already rendered.
/// `None` when there is nothing to say.
pub fn context_note(now: Option<DateTime<Local>>, memories: &str, nudges: &str) -> Option<String> {
    if now.is_none() && memories.is_empty() && nudges.is_empty() {
        return None;
    }
    let mut s = String::from("\n\n<context>\n");
    if let Some(now) = now {
        s.push_str(&format!("It is {}.\n", now.format("%A, %Y-%m-%d %H:%M %Z")));
    }
    s.push_str(memories.trim_start_matches('\n'));
    s.push_str(nudges.trim_start_matches('\n'));
    s.push_str("</context>");
    Some(s)
}

/// Resources listed in the system message.
pub const MAX_RESOURCES_SHOWN: usize = 50;
/// Prompts listed in the system message.
pub const MAX_PROMPTS_SHOWN: usize = 30;

/// The `<mcp-resources>` and `<mcp-prompts>` blocks, or an empty string when there are none.
pub fn mcp_catalog(catalog: &crate::mcp::McpCatalog) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let resources: Vec<String> = catalog
        .resources
        .iter()
        .map(|r| {
            let about = r.description.as_deref().unwrap_or(r.name.as_str());
            format!("{} {about}", r.uri)
        })
        .chain(catalog.templates.iter().map(|t| {
            let about = t.description.as_deref().unwrap_or(t.name.as_str());
            format!("{} {about} (template)", t.uri_template)
        }))
        .take(MAX_RESOURCES_SHOWN)
        .collect();
    if !resources.is_empty() {
        s.push_str("\n<mcp-resources>\n");
        for line in &resources {
            let _ = writeln!(s, "{line}");
        }
        s.push_str("</mcp-resources>\nUse read_resource(uri='...') to access the resources listed above.\n");
    }
    if !catalog.prompts.is_empty() {
        s.push_str("\n<mcp-prompts>\n");
        for p in catalog.prompts.iter().take(MAX_PROMPTS_SHOWN) {
            let _ = write!(s, "mcp__{}__{}", p.server, p.name);
            if let Some(d) = &p.description {
                let _ = write!(s, " — {d}");
            }
            if !p.arguments.is_empty() {
                let args: Vec<String> = p
                    .arguments
                    .iter()
                    .map(|a| {
                        if a.required {
                            format!("{}*", a.name)
                        } else {
                            a.name.clone()
                        }
                    })
                    .collect();
                let _ = write!(s, " (arguments: {})", args.join(", "));
            }
            s.push('\n');
        }
        s.push_str("</mcp-prompts>\nUse use_prompt(name='...', arguments={...}) to expand one (* marks required arguments).\n");
    }
    s.push_str(&mcp_not_ready(&catalog.unavailable));
    s
}

/// The line naming MCP servers whose tools are missing from this turn (still connecting, or
/// failing and retried), so the model can tell the person instead of guessing. Empty when
/// every server is ready. Names and states only: a server's error may quote secrets.
pub fn mcp_not_ready(unavailable: &[crate::mcp::UnavailableServer]) -> String {
    if unavailable.is_empty() {
        return String::new();
    }
    format!(
        "\nMCP servers not ready yet, so their tools are not offered in this turn: {}. If the \
         person needs one of them, say so.\n",
        servers_with_why(unavailable)
    )
}

/// The line a turn shows the person when servers it waited for at start-up are not ready:
/// it goes on without their tools. `None` when every one connected.
pub fn mcp_startup_notice(unavailable: &[crate::mcp::UnavailableServer]) -> Option<String> {
    (!unavailable.is_empty()).then(|| {
        format!(
            "⏳ Going on without the tools of MCP {} {} (`/mcp` shows how servers stand).",
            if unavailable.len() == 1 {
                "server"
            } else {
                "servers"
            },
            servers_with_why(unavailable)
        )
    })
}

/// The line a turn shows while it waits for MCP servers to start.
pub fn mcp_waiting_notice(starting: &[String], left: std::time::Duration) -> String {
    format!(
        "⏳ Waiting for MCP {} {} to connect (at most {} s more)…",
        if starting.len() == 1 {
            "server"
        } else {
            "servers"
        },
        starting.join(", "),
        left.as_secs().max(1)
    )
}

/// `github (still connecting), jira (not reachable, retrying)`: names and states only, since
/// a server's error may quote secrets.
fn servers_with_why(unavailable: &[crate::mcp::UnavailableServer]) -> String {
    let named: Vec<String> = unavailable
        .iter()
        .map(|u| {
            let why = match u.state {
                crate::mcp::ServerState::Connecting => "still connecting",
                crate::mcp::ServerState::Invalid => "misconfigured",
                _ => "not reachable, retrying",
            };
            format!("{} ({why})", u.server)
        })
        .collect();
    named.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn servers_not_ready_are_named_with_why() {
        use crate::mcp::{McpCatalog, ServerState, UnavailableServer};
        assert_eq!(mcp_catalog(&McpCatalog::default()), "");
        let catalog = McpCatalog {
            unavailable: vec![
                UnavailableServer {
                    server: "github".into(),
                    state: ServerState::Connecting,
                },
                UnavailableServer {
                    server: "jira".into(),
                    state: ServerState::Failed,
                },
            ],
            ..McpCatalog::default()
        };
        assert_eq!(
            mcp_catalog(&catalog),
            "\nMCP servers not ready yet, so their tools are not offered in this turn: github \
             (still connecting), jira (not reachable, retrying). If the person needs one of them, \
             say so.\n"
        );
    }

    #[test]
    fn the_person_hears_what_a_turn_waits_for_and_goes_on_without() {
        use crate::mcp::{ServerState, UnavailableServer};
        let waiting =
            mcp_waiting_notice(&["fs".to_owned()], std::time::Duration::from_millis(8500));
        assert_eq!(
            waiting,
            "⏳ Waiting for MCP server fs to connect (at most 8 s more)…"
        );
        assert_eq!(mcp_startup_notice(&[]), None);
        let missing = [
            UnavailableServer {
                server: "fs".into(),
                state: ServerState::Connecting,
            },
            UnavailableServer {
                server: "gh".into(),
                state: ServerState::Failed,
            },
        ];
        assert_eq!(
            mcp_startup_notice(&missing).as_deref(),
            Some(
                "⏳ Going on without the tools of MCP servers fs (still connecting), gh (not \
                 reachable, retrying) (`/mcp` shows how servers stand)."
            )
        );
    }

    #[test]
    fn prompt_names_workdir_and_tools_and_no_time() {
        let tools = [ToolSchema {
            name: "bash".into(),
            description: "d".into(),
            parameters: serde_json::json!({}).into(),
            defer_loading: false,
        }];
        let p = system_prompt(Path::new("/srv/app"), &tools, Some("Be brief."));
        assert!(p.contains("/srv/app"));
        assert!(p.contains("Tools: bash"));
        assert!(p.ends_with("Be brief.\n"));
        assert!(!p.contains(&chrono::Local::now().format("%Y-%m-%d").to_string()));
        let none = system_prompt(Path::new("/"), &[], None);
        assert!(none.contains("no tools"));
    }

    #[test]
    fn the_context_note_carries_the_time_memories_and_nudges() {
        let now = Local.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        assert_eq!(context_note(None, "", ""), None);
        let note = context_note(Some(now), "\n<memories>\nm\n</memories>\n", "").expect("a note");
        assert!(
            note.starts_with("\n\n<context>\nIt is Sunday, 2026-11-29 12:00"),
            "{note}"
        );
        assert!(
            note.ends_with("<memories>\nm\n</memories>\n</context>"),
            "{note}"
        );
        let nudge = context_note(None, "", "\n<nudges>\n- n\n</nudges>\n").expect("a note");
        assert_eq!(nudge, "\n\n<context>\n<nudges>\n- n\n</nudges>\n</context>");
    }
}
