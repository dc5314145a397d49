//! The chat commands at the console: the same table as Discord and Slack
//! ([`crate::commands::COMMANDS`]) and the same answers ([`crate::commands::answers`],
//! [`crate::commands::connectors`]), plus `/quit`. A command never reaches the model; an unknown one
//! says so and lists them; `//` starts a message with a literal slash.

use sandpiper_agent::Agent;
use sandpiper_agent::protocol::TurnSink;

use crate::commands::account::Person;
use crate::commands::answers::Where;
use crate::commands::{COMMANDS, Command, CommandError};

/// How commands are typed here.
const PREFIX: &str = "/";

/// Commands of the console's own, beside the shared table.
const LEAVE: &[(&str, &str)] = &[
    (
        "workstreams",
        "List the console's workstreams (`sandpiper chat --resume NAME` continues one)",
    ),
    ("quit", "Leave the console (also Ctrl-D)"),
];

/// How long `/console` waits to learn whether the status page is served.
const PAGE_PROBE: std::time::Duration = std::time::Duration::from_millis(500);

/// Shared commands that mean nothing at a terminal of one workstream.
const NOT_HERE: &[&str] = &["ask"];

/// What a typed line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry<'a> {
    /// Blank: nothing is sent.
    Nothing,
    /// A message for the model.
    Message(String),
    /// A command: the text after the `/`.
    Command(&'a str),
}

/// Reads a line: `/word …` is a command (a word of letters, so `/etc/hosts is gone` is a
/// message), `//…` a message starting with `/`, anything else a message.
pub(super) fn entry(line: &str) -> Entry<'_> {
    let text = line.trim();
    if text.is_empty() {
        return Entry::Nothing;
    }
    if let Some(rest) = text.strip_prefix("//") {
        return Entry::Message(format!("/{rest}"));
    }
    if let Some(rest) = text.strip_prefix(PREFIX) {
        let word = rest.split(char::is_whitespace).next().unwrap_or_default();
        if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphabetic() || c == '-') {
            return Entry::Command(rest);
        }
    }
    Entry::Message(text.to_owned())
}

/// Every command name Tab completes.
pub fn command_names() -> Vec<String> {
    COMMANDS
        .iter()
        .map(|c| c.name)
        .filter(|n| !NOT_HERE.contains(n))
        .chain(LEAVE.iter().map(|(n, _)| *n))
        .map(str::to_owned)
        .collect()
}

/// What a command came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Done {
    /// Text to show; the conversation goes on.
    Answer(String),
    /// A message for the model after all (`/ask`).
    Send(String),
    /// Leave the console, after showing this.
    Leave(Option<String>),
}

/// The console's commands in one workstream.
pub(super) struct ConsoleCommands<'a> {
    pub(super) agent: &'a Agent,
    /// The workstream key.
    pub(super) key: &'a str,
    /// The person's sandpiper user id.
    pub(super) user_id: &'a str,
    /// The person's OS user name (their console identity).
    pub(super) os_user: &'a str,
    /// Where a command that takes long shows that it works (`/compact` on a small model).
    pub(super) progress: &'a dyn TurnSink,
}

impl ConsoleCommands<'_> {
    /// Runs the command typed as `/text`.
    pub(super) async fn run(&self, text: &str) -> Done {
        let name = text.split(char::is_whitespace).next().unwrap_or_default();
        match name.to_ascii_lowercase().as_str() {
            "quit" | "exit" => return Done::Leave(None),
            "workstreams" => return Done::Answer(self.workstreams().await),
            _ => {}
        }
        let cmd = match Command::from_text(text) {
            Ok(cmd) => cmd,
            Err(CommandError::Unknown(name)) => return Done::Answer(unknown(&name)),
            Err(CommandError::Usage(usage)) => return Done::Answer(usage),
        };
        // The person at the terminal runs sandpiper and holds its database: they
        // administer it here.
        let at = Where {
            workstream: Some(self.key),
            prefix: PREFIX,
            admin: true,
            approver: true,
        };
        let person: Person = super::identity(self.os_user);
        match cmd {
            Command::Help => Done::Answer(help()),
            Command::Ask { prompt } => Done::Send(prompt),
            Command::Stop => Done::Answer(
                "Nothing is running. Ctrl-C stops a running turn; `/stop` as the answer to an \
                 approval question stops its turn."
                    .into(),
            ),
            Command::Close => self.close().await,
            Command::Console => Done::Answer(self.page_link(person).await),
            // The person at the terminal may compact (see `at`); it shows while it works, as
            // in a turn.
            Command::Compact => Done::Answer(
                crate::commands::answers::compact_now(self.agent, self.key, self.progress).await,
            ),
            Command::Connectors { action, scope } => {
                let at = crate::commands::connectors::At {
                    workstream: Some(self.key),
                    channel: None,
                    user_id: self.user_id,
                    admin: true,
                    prefix: PREFIX,
                };
                Done::Answer(
                    crate::commands::connectors::answer(self.agent, &action, scope, at).await,
                )
            }
            cmd => match crate::commands::answers::answer(self.agent, &cmd, person, at).await {
                Some(text) => Done::Answer(unfence(&text)),
                None => Done::Answer(unknown(name)),
            },
        }
    }

    /// `/console`: a sign-in link only when the status page is served (`sandpiper serve`
    /// on `[server] listen`: `chat` does not serve it); otherwise how to start it.
    async fn page_link(&self, person: Person<'_>) -> String {
        let mut addr = self.agent.config().server.listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let probe = tokio::net::TcpStream::connect(addr);
        let serving = tokio::time::timeout(PAGE_PROBE, probe)
            .await
            .is_ok_and(|c| c.is_ok());
        if serving {
            return crate::commands::console_link::answer(self.agent, person, true).await;
        }
        format!(
            "The status page is not running: nothing answers on {addr}, and `sandpiper chat` \
             does not serve it. Start it with `sandpiper serve` (same config), then type \
             /console again, or run `sandpiper console-link` for a sign-in link."
        )
    }

    /// `/workstreams`: the console's workstreams, this one marked.
    async fn workstreams(&self) -> String {
        match self.agent.console_workstreams().await {
            Ok(all) => super::workstreams::list(&all, self.key.strip_prefix("console:")),
            Err(e) => format!("Could not list them: {e}"),
        }
    }

    /// `/close`: the workstream ends, and so does the console.
    async fn close(&self) -> Done {
        if let Err(e) = self.agent.close_workstream(self.key).await {
            return Done::Answer(format!("Could not close it: {e}"));
        }
        tracing::info!(
            workstream = self.key,
            by = self.user_id,
            "workstream closed"
        );
        Done::Leave(Some(format!(
            "🔒 Closed `{}`. This workstream has ended; `sandpiper chat --workstream NAME` \
             starts another (`--list` lists them).",
            self.key
        )))
    }
}

/// An answer that is one code block (the chat platforms' lists) as plain lines.
fn unfence(text: &str) -> String {
    let trimmed = text.trim_end();
    match trimmed
        .strip_prefix("```\n")
        .and_then(|t| t.strip_suffix("```"))
    {
        Some(inner) if !inner.contains("```") => inner.to_owned(),
        _ => text.to_owned(),
    }
}

/// `n thing` or `n things`.
pub(super) fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

fn unknown(name: &str) -> String {
    let names: Vec<String> = command_names().iter().map(|n| format!("/{n}")).collect();
    format!(
        "Unknown command `/{name}`; nothing was sent. Commands: {}. To send a message that \
         starts with a slash, begin it with `//`.",
        names.join(" ")
    )
}

/// `/help` at the console.
fn help() -> String {
    let mut rows: Vec<(String, &str)> = COMMANDS
        .iter()
        .filter(|c| !NOT_HERE.contains(&c.name))
        .map(|c| {
            let opts: Vec<String> = c
                .options
                .iter()
                .map(|o| {
                    if o.required {
                        format!("<{}>", o.name)
                    } else {
                        format!("[{}]", o.name)
                    }
                })
                .collect();
            let usage = format!("{PREFIX}{} {}", c.name, opts.join(" "));
            (usage.trim_end().to_owned(), c.description)
        })
        .collect();
    rows.extend(LEAVE.iter().map(|(n, d)| (format!("{PREFIX}{n}"), *d)));
    let width = rows.iter().map(|(u, _)| u.len()).max().unwrap_or(0);
    let mut out = String::from("Commands (never sent to the model):\n");
    for (usage, description) in rows {
        out.push_str(&format!("  {usage:<width$}  {description}\n"));
    }
    out.push_str(
        "\nA message that starts with a slash: begin it with `//`. Tab completes a command.\n\
         Keys: Enter sends; Alt-Enter or a trailing `\\` adds a line; a paste is one message; \
         Up/Down and Ctrl-R search earlier messages; what is typed during a turn is sent when it \
         ends; Ctrl-C clears the line or stops a running turn; Ctrl-D leaves.\n\
         Approvals: y (yes), n (no), a (always, for this tool in this workstream), p (always, \
         for what the card's narrower button offers: the command's pattern, the MCP server); plan \
         reviews: y (accept), n (reject), c, <note> (change). Text after a comma is passed to \
         the model.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn lines_are_commands_messages_or_nothing() {
        assert_eq!(entry("  "), Entry::Nothing);
        assert_eq!(entry("/help"), Entry::Command("help"));
        assert_eq!(entry(" /mcp refresh gh "), Entry::Command("mcp refresh gh"));
        assert_eq!(entry("//help me"), Entry::Message("/help me".into()));
        assert_eq!(
            entry("/etc/hosts is empty"),
            Entry::Message("/etc/hosts is empty".into())
        );
        assert_eq!(entry("why?"), Entry::Message("why?".into()));
        assert_eq!(entry("/"), Entry::Message("/".into()));
    }

    #[test]
    fn help_lists_the_shared_commands_and_quit_but_not_ask() {
        let text = help();
        for name in [
            "/status",
            "/stop",
            "/memory",
            "/mcp",
            "/watch",
            "/connectors",
            "/link",
            "/close",
            "/quit",
        ] {
            assert!(
                text.contains(&format!("  {name}")),
                "{name} missing:\n{text}"
            );
        }
        assert!(!text.contains("/ask"), "{text}");
        assert!(command_names().contains(&"quit".to_owned()));
    }

    #[test]
    fn a_fenced_list_is_shown_plain() {
        assert_eq!(unfence("```\na\nb\n```"), "a\nb\n");
        assert_eq!(unfence("no fence"), "no fence");
        assert_eq!(count(1, "message"), "1 message");
        assert_eq!(count(2, "message"), "2 messages");
    }
}
