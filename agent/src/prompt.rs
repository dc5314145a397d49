//! The system message: who the agent is, the date, the working directory and how to use tools.

use std::path::Path;

use chrono::{DateTime, Local};

use crate::model::ToolSchema;

/// Builds the system message for one turn.
pub fn system_prompt(
    now: DateTime<Local>,
    workdir: &Path,
    tools: &[ToolSchema],
    extra: Option<&str>,
) -> String {
    let mut s = String::with_capacity(2048);
    s.push_str(
        "You are sandpiper, an engineering assistant working with a team in a chat thread. \
         Each thread is a persistent workstream: earlier messages in it are your memory of \
         the work so far.\n\n",
    );
    s.push_str(&format!(
        "Today is {} ({}).\nYour working directory is {}; relative paths resolve against it.\n",
        now.format("%A, %Y-%m-%d"),
        now.format("%H:%M %Z"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn prompt_names_date_workdir_and_tools() {
        let now = Local.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let tools = [ToolSchema {
            name: "bash".into(),
            description: "d".into(),
            parameters: serde_json::json!({}),
            defer_loading: false,
        }];
        let p = system_prompt(now, Path::new("/srv/app"), &tools, Some("Be brief."));
        assert!(p.contains("2026-11-29"), "{p}");
        assert!(p.contains("/srv/app"));
        assert!(p.contains("Tools: bash"));
        assert!(p.ends_with("Be brief.\n"));
        let none = system_prompt(now, Path::new("/"), &[], None);
        assert!(none.contains("no tools"));
    }
}
