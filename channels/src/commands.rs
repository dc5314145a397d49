//! The chat commands, from one table. Discord registers each entry as a slash command with
//! its options; Slack exposes them as subcommands of one slash command (`/sandpiper ask …`),
//! filling the options from the words in order. Both parse into the same [`Command`].

pub mod account;
pub mod answers;
pub mod connectors;
pub mod console_link;
pub mod grants;
pub mod usage;
pub mod watches;

use std::collections::HashMap;

/// Where a command was typed.
#[derive(Debug, Clone, Copy)]
pub struct Where<'a> {
    /// The workstream of the thread, when typed in one the agent answers in.
    pub workstream: Option<&'a str>,
    /// How commands are typed on this platform (`/`, `/sandpiper `).
    pub prefix: &'a str,
    /// Whether the person administers the bot here (Discord: Administrator or an
    /// `admin_roles` role; Slack: an `admin_usergroups` member): deleting global memories,
    /// cancelling another person's watches, seeing MCP servers' errors and stderr.
    pub admin: bool,
    /// Whether the person holds an approver role or group here (Discord `approver_roles`,
    /// Slack `approver_usergroups`): compacting a thread they do not own.
    pub approver: bool,
}

/// One option of a command (all options are text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionSpec {
    /// Name (Discord option name).
    pub name: &'static str,
    /// What to type.
    pub description: &'static str,
    /// Whether it must be given.
    pub required: bool,
    /// The allowed values, when limited.
    pub choices: &'static [&'static str],
}

/// One command.
#[derive(Debug, Clone, Copy)]
pub struct CommandSpec {
    /// Name (`ask` → `/ask` on Discord, `/sandpiper ask` on Slack).
    pub name: &'static str,
    /// One line for the platform's command picker.
    pub description: &'static str,
    /// Its options; on Slack the last one takes the rest of the text.
    pub options: &'static [OptionSpec],
    /// Builds the command from its options.
    parse: fn(&Args) -> Result<Command, CommandError>,
}

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Start a thread with a prompt.
    Ask {
        /// The prompt.
        prompt: String,
    },
    /// Cancel the running turn in this thread.
    Stop,
    /// Workstream id, model, tokens used, tools always allowed.
    Status,
    /// Archive the thread and end its workstream (owner or admin).
    Close,
    /// Summarise the older part of this thread's conversation now (owner or approver).
    Compact,
    /// The model this thread answers with; with a name, switch it (owner or approver).
    Model {
        /// One of the models offered (`[model] model` and `choices`).
        name: Option<String>,
    },
    /// Join identities across platforms: without a code, get one; with one, redeem it.
    Link {
        /// A code from another platform.
        code: Option<String>,
    },
    /// The memories you can see here, or delete one.
    Memory {
        /// `list` or `delete`.
        action: MemoryAction,
    },
    /// The MCP servers, or refresh them.
    Mcp {
        /// `list` or `refresh [server]`.
        action: McpAction,
    },
    /// Which MCP servers this thread (or its channel) may use: show or change.
    Connectors {
        /// `show`, `set`, `none` or `clear`.
        action: ConnectorsAction,
        /// The thread's tier or its channel's.
        scope: PolicyScope,
    },
    /// This thread's watches: list them, cancel or resume one.
    Watch {
        /// `list`, `cancel NAME` or `resume NAME`.
        action: WatchAction,
    },
    /// This thread's always-allow grants: list them, or take some back (owner or admin).
    Grants {
        /// `list` or `revoke <tool|pattern|all>`.
        action: crate::commands::grants::GrantsAction,
    },
    /// The tokens the model used: yours, this thread's or this channel's, over a period.
    Usage {
        /// Whose.
        scope: crate::commands::usage::UsageScope,
        /// Since when.
        period: crate::commands::usage::Period,
    },
    /// The daily budgets here, or (admins) change one.
    Budget {
        /// Show, or set a person's or this thread's.
        action: crate::commands::usage::BudgetAction,
    },
    /// A one-time sign-in link to the status page, sent to the person alone.
    Console,
    /// What the commands are.
    Help,
}

/// `/watch` actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchAction {
    /// Name, command, interval, polls so far, next poll and condition of each.
    List,
    /// Cancel the watch with this name or id prefix.
    Cancel(String),
    /// Let a paused watch go on.
    Resume(String),
}

/// `/connectors` actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectorsAction {
    /// The effective set and the tier it came from.
    Show,
    /// Allow only these servers.
    Set(Vec<String>),
    /// Allow no server at all.
    None,
    /// The tier says nothing any more.
    Clear,
}

/// Which tier `/connectors` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyScope {
    /// The thread (workstream).
    Thread,
    /// The thread's parent channel (or the channel the command was typed in).
    Channel,
}

/// `/memory` actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryAction {
    /// List what this thread and person can see.
    List,
    /// Delete a memory by name.
    Delete {
        /// The memory's name.
        name: String,
    },
}

/// `/mcp` actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpAction {
    /// Each server with its state and tools.
    List,
    /// Re-list tools, resources and prompts, reconnecting disconnected servers: one server
    /// when named (the one whose tools just changed), else all.
    Refresh {
        /// Only this server.
        server: Option<String>,
    },
}

/// Why a command could not be parsed; the message is for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// No such command.
    #[error("unknown command `{0}`; try `help`")]
    Unknown(String),
    /// A required option is missing or a value is not allowed.
    #[error("{0}")]
    Usage(String),
}

/// Option values by name.
#[derive(Debug, Default)]
struct Args(HashMap<String, String>);

impl Args {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
    }
}

const PROMPT: OptionSpec = OptionSpec {
    name: "prompt",
    description: "what to ask",
    required: true,
    choices: &[],
};

/// Every command, in the order help lists them.
pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "ask",
        description: "Start a thread with the agent",
        options: &[PROMPT],
        parse: |a| {
            let prompt = a.get("prompt").ok_or_else(|| {
                CommandError::Usage("ask needs a prompt: ask <what to ask>".into())
            })?;
            Ok(Command::Ask {
                prompt: prompt.to_owned(),
            })
        },
    },
    CommandSpec {
        name: "stop",
        description: "Stop the agent's running turn in this thread",
        options: &[],
        parse: |_| Ok(Command::Stop),
    },
    CommandSpec {
        name: "status",
        description: "This thread's workstream: model, context in use, tokens, tools always allowed",
        options: &[],
        parse: |_| Ok(Command::Status),
    },
    CommandSpec {
        name: "compact",
        description: "Summarise the older part of this thread so it fits the model (owner or approver)",
        options: &[],
        parse: |_| Ok(Command::Compact),
    },
    CommandSpec {
        name: "model",
        description: "Show this thread's model, or switch it to another one offered (owner or approver)",
        options: &[OptionSpec {
            name: "name",
            description: "The model to answer with from now on",
            required: false,
            choices: &[],
        }],
        parse: |args| {
            Ok(Command::Model {
                name: args.get("name").map(str::to_owned),
            })
        },
    },
    CommandSpec {
        name: "close",
        description: "Archive this thread and end its workstream (owner or admin)",
        options: &[],
        parse: |_| Ok(Command::Close),
    },
    CommandSpec {
        name: "link",
        description: "Link your accounts across Discord, Slack and the terminal",
        options: &[OptionSpec {
            name: "code",
            description: "a code from your other account (leave empty to get one)",
            required: false,
            choices: &[],
        }],
        parse: |a| {
            Ok(Command::Link {
                code: a.get("code").map(str::to_owned),
            })
        },
    },
    CommandSpec {
        name: "memory",
        description: "List the memories you can see here, or delete one",
        options: &[
            OptionSpec {
                name: "action",
                description: "list or delete",
                required: false,
                choices: &["list", "delete"],
            },
            OptionSpec {
                name: "name",
                description: "the memory to delete",
                required: false,
                choices: &[],
            },
        ],
        parse: |a| match (a.get("action").unwrap_or("list"), a.get("name")) {
            ("list", _) => Ok(Command::Memory {
                action: MemoryAction::List,
            }),
            ("delete", Some(name)) => Ok(Command::Memory {
                action: MemoryAction::Delete {
                    name: name.to_owned(),
                },
            }),
            ("delete", None) => Err(CommandError::Usage(
                "memory delete needs the memory's name".into(),
            )),
            (other, _) => Err(CommandError::Usage(format!(
                "memory: `{other}` is not an action; use list or delete"
            ))),
        },
    },
    CommandSpec {
        name: "mcp",
        description: "The MCP servers and their tools, or refresh one or all of them",
        options: &[
            OptionSpec {
                name: "action",
                description: "list or refresh",
                required: false,
                choices: &["list", "refresh"],
            },
            OptionSpec {
                name: "server",
                description: "the server to refresh (leave empty for all)",
                required: false,
                choices: &[],
            },
        ],
        parse: |a| match (a.get("action").unwrap_or("list"), a.get("server")) {
            ("list", None) => Ok(Command::Mcp {
                action: McpAction::List,
            }),
            ("list", Some(_)) => Err(CommandError::Usage(
                "mcp list takes no server; use mcp refresh <server> to refresh one".into(),
            )),
            ("refresh", server) => Ok(Command::Mcp {
                action: McpAction::Refresh {
                    server: server.map(str::to_owned),
                },
            }),
            (other, _) => Err(CommandError::Usage(format!(
                "mcp: `{other}` is not an action; use list or refresh [server]"
            ))),
        },
    },
    CommandSpec {
        name: "connectors",
        description: "Which MCP servers this thread or channel may use: show, set, none, clear",
        options: &[
            OptionSpec {
                name: "action",
                description: "show, set, none (no server) or clear (no restriction)",
                required: false,
                choices: &["show", "set", "none", "clear"],
            },
            OptionSpec {
                name: "servers",
                description: "for set: server names, comma-separated",
                required: false,
                choices: &[],
            },
            OptionSpec {
                name: "scope",
                description: "thread (default) or channel (the parent channel; admins only)",
                required: false,
                choices: &["thread", "channel"],
            },
        ],
        parse: parse_connectors,
    },
    CommandSpec {
        name: "watch",
        description: "This thread's watches: list them, cancel or resume one",
        options: &[
            OptionSpec {
                name: "action",
                description: "list, cancel or resume",
                required: false,
                choices: &["list", "cancel", "resume"],
            },
            OptionSpec {
                name: "name",
                description: "the watch's name (or the start of its id)",
                required: false,
                choices: &[],
            },
        ],
        parse: |a| {
            let action = match (a.get("action").unwrap_or("list"), a.get("name")) {
                ("list", None) => WatchAction::List,
                ("cancel", Some(name)) => WatchAction::Cancel(name.to_owned()),
                ("resume", Some(name)) => WatchAction::Resume(name.to_owned()),
                ("list", Some(_)) => {
                    return Err(CommandError::Usage("watch list takes no name".into()));
                }
                (action @ ("cancel" | "resume"), None) => {
                    return Err(CommandError::Usage(format!(
                        "watch {action} needs the watch's name: watch {action} <name>"
                    )));
                }
                (other, _) => {
                    return Err(CommandError::Usage(format!(
                        "watch: `{other}` is not an action; use list, cancel <name> or resume <name>"
                    )));
                }
            };
            Ok(Command::Watch { action })
        },
    },
    CommandSpec {
        name: "grants",
        description: "What is always allowed in this thread, or take it back (owner or admin)",
        options: &[
            OptionSpec {
                name: "action",
                description: "list or revoke",
                required: false,
                choices: &["list", "revoke"],
            },
            OptionSpec {
                name: "what",
                description: "for revoke: a tool, a command pattern, or all",
                required: false,
                choices: &[],
            },
        ],
        parse: |a| crate::commands::grants::parse(a.get("action"), a.get("what")),
    },
    CommandSpec {
        name: "usage",
        description: "Tokens the model used: yours, this thread's or this channel's",
        options: &[
            OptionSpec {
                name: "scope",
                description: "me (default), thread, or channel (approvers and admins)",
                required: false,
                choices: &["me", "thread", "channel"],
            },
            OptionSpec {
                name: "period",
                description: "today (default), 7d, 30d or month",
                required: false,
                choices: &["today", "7d", "30d", "month"],
            },
        ],
        parse: |a| crate::commands::usage::parse_usage(a.get("scope"), a.get("period")),
    },
    CommandSpec {
        name: "budget",
        description: "The daily budgets here; admins set one: budget <thread|channel|username> <tokens|$|off>",
        options: &[
            OptionSpec {
                name: "target",
                description: "thread, channel, or a person's sandpiper username (admins only)",
                required: false,
                choices: &[],
            },
            OptionSpec {
                name: "cap",
                description: "tokens per day, dollars per day ($5), or off to lift the caps",
                required: false,
                choices: &[],
            },
        ],
        parse: |a| crate::commands::usage::parse_budget(a.get("target"), a.get("cap")),
    },
    CommandSpec {
        name: "console",
        description: "A one-time link that signs you in to the status page",
        options: &[],
        parse: |_| Ok(Command::Console),
    },
    CommandSpec {
        name: "help",
        description: "What the commands do",
        options: &[],
        parse: |_| Ok(Command::Help),
    },
];

/// `connectors [action] [servers] [scope]`. On Slack the servers and the scope share the rest
/// of the text, so a trailing `channel` or `thread` word is the scope there.
fn parse_connectors(a: &Args) -> Result<Command, CommandError> {
    let mut words: Vec<&str> = [a.get("servers"), a.get("scope")]
        .into_iter()
        .flatten()
        .flat_map(str::split_whitespace)
        .collect();
    let scope = match words.last().copied() {
        Some(w) if w.eq_ignore_ascii_case("channel") => {
            words.pop();
            PolicyScope::Channel
        }
        Some(w) if w.eq_ignore_ascii_case("thread") => {
            words.pop();
            PolicyScope::Thread
        }
        _ => PolicyScope::Thread,
    };
    let servers = sandpiper_agent::connectors::parse_list(&words.join(" "));
    let action = match a.get("action").unwrap_or("show") {
        "show" | "list" if servers.is_empty() => ConnectorsAction::Show,
        "set" if !servers.is_empty() => ConnectorsAction::Set(servers),
        "set" => {
            return Err(CommandError::Usage(
                "connectors set needs server names: connectors set github,jira [channel]; \
                 use connectors none to allow no server"
                    .into(),
            ));
        }
        "none" if servers.is_empty() => ConnectorsAction::None,
        "clear" if servers.is_empty() => ConnectorsAction::Clear,
        other @ ("show" | "list" | "none" | "clear") => {
            return Err(CommandError::Usage(format!(
                "connectors {other} takes no server names (only `channel` or `thread`)"
            )));
        }
        other => {
            return Err(CommandError::Usage(format!(
                "connectors: `{other}` is not an action; use show, set a,b, none or clear"
            )));
        }
    };
    Ok(Command::Connectors { action, scope })
}

fn spec(name: &str) -> Result<&'static CommandSpec, CommandError> {
    COMMANDS
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| CommandError::Unknown(name.to_owned()))
}

impl Command {
    /// From a command name and named options (Discord slash commands).
    pub fn from_options(name: &str, options: &[(String, String)]) -> Result<Self, CommandError> {
        let spec = spec(name)?;
        let args = Args(options.iter().cloned().collect());
        (spec.parse)(&args)
    }

    /// From the text after the slash command (Slack: `ask why is CI red`). Words fill the
    /// options in order; the last option takes the rest. Empty text is `help`.
    pub fn from_text(text: &str) -> Result<Self, CommandError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Command::Help);
        }
        let (name, mut rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let spec = spec(name)?;
        let mut args = Args::default();
        for (i, opt) in spec.options.iter().enumerate() {
            rest = rest.trim_start();
            if rest.is_empty() {
                break;
            }
            let value = if i + 1 == spec.options.len() {
                std::mem::take(&mut rest)
            } else {
                let (word, after) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                rest = after;
                word
            };
            args.0.insert(opt.name.to_owned(), value.to_owned());
        }
        (spec.parse)(&args)
    }
}

/// The help text, `prefix` being how commands are typed (`/` on Discord, `/sandpiper ` on
/// Slack).
pub fn help(prefix: &str) -> String {
    let mut out = String::from("Commands:\n");
    for c in COMMANDS {
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
        let usage = format!("{prefix}{} {}", c.name, opts.join(" "));
        out.push_str(&format!("• `{}` — {}\n", usage.trim_end(), c.description));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn slack_text_and_discord_options_parse_to_the_same_commands() {
        assert_eq!(
            Command::from_text("ask why is  CI red?").unwrap(),
            Command::Ask {
                prompt: "why is  CI red?".into()
            }
        );
        assert_eq!(
            Command::from_options("ask", &[("prompt".into(), "why is  CI red?".into())]).unwrap(),
            Command::from_text("ask why is  CI red?").unwrap()
        );
        assert_eq!(
            Command::from_text("memory delete deploy-notes").unwrap(),
            Command::Memory {
                action: MemoryAction::Delete {
                    name: "deploy-notes".into()
                }
            }
        );
        assert_eq!(Command::from_text("").unwrap(), Command::Help);
        assert_eq!(
            Command::from_text("LINK abc123").unwrap(),
            Command::Link {
                code: Some("abc123".into())
            }
        );
        assert_eq!(
            Command::from_text("mcp refresh").unwrap(),
            Command::Mcp {
                action: McpAction::Refresh { server: None }
            }
        );
        assert_eq!(
            Command::from_text("mcp refresh  github ").unwrap(),
            Command::Mcp {
                action: McpAction::Refresh {
                    server: Some("github".into())
                }
            }
        );
        assert_eq!(
            Command::from_options(
                "mcp",
                &[
                    ("action".into(), "refresh".into()),
                    ("server".into(), "github".into())
                ]
            )
            .unwrap(),
            Command::from_text("mcp refresh github").unwrap()
        );
        assert_eq!(
            Command::from_text("mcp").unwrap(),
            Command::Mcp {
                action: McpAction::List
            }
        );
    }

    #[test]
    fn connectors_parse_the_same_on_slack_and_discord() {
        let set = |scope| Command::Connectors {
            action: ConnectorsAction::Set(vec!["github".into(), "jira".into()]),
            scope,
        };
        assert_eq!(
            Command::from_text("connectors set github,jira").unwrap(),
            set(PolicyScope::Thread)
        );
        assert_eq!(
            Command::from_text("connectors set github, jira channel").unwrap(),
            set(PolicyScope::Channel)
        );
        assert_eq!(
            Command::from_options(
                "connectors",
                &[
                    ("action".into(), "set".into()),
                    ("servers".into(), "jira,github".into()),
                    ("scope".into(), "channel".into())
                ]
            )
            .unwrap(),
            set(PolicyScope::Channel)
        );
        assert_eq!(
            Command::from_text("connectors").unwrap(),
            Command::Connectors {
                action: ConnectorsAction::Show,
                scope: PolicyScope::Thread
            }
        );
        assert_eq!(
            Command::from_text("connectors none channel").unwrap(),
            Command::Connectors {
                action: ConnectorsAction::None,
                scope: PolicyScope::Channel
            }
        );
        assert_eq!(
            Command::from_text("connectors clear").unwrap(),
            Command::Connectors {
                action: ConnectorsAction::Clear,
                scope: PolicyScope::Thread
            }
        );
        assert!(matches!(
            Command::from_text("connectors set"),
            Err(CommandError::Usage(m)) if m.contains("connectors none")
        ));
        assert!(matches!(
            Command::from_text("connectors none github"),
            Err(CommandError::Usage(_))
        ));
        assert!(matches!(
            Command::from_text("connectors allow github"),
            Err(CommandError::Usage(_))
        ));
    }

    #[test]
    fn bad_commands_say_what_is_wrong() {
        assert_eq!(
            Command::from_text("launch rockets"),
            Err(CommandError::Unknown("launch".into()))
        );
        assert!(
            matches!(Command::from_text("ask"), Err(CommandError::Usage(m)) if m.contains("prompt"))
        );
        assert!(matches!(
            Command::from_text("memory shred x"),
            Err(CommandError::Usage(_))
        ));
        assert_eq!(
            Command::from_text("mcp list github"),
            Err(CommandError::Usage(
                "mcp list takes no server; use mcp refresh <server> to refresh one".into()
            ))
        );
        assert!(matches!(
            Command::from_text("mcp reload github"),
            Err(CommandError::Usage(m)) if m.contains("refresh [server]")
        ));
    }

    #[test]
    fn every_command_has_a_unique_short_name_and_discord_sized_descriptions() {
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
        for c in COMMANDS {
            assert!(
                c.name.len() <= 32 && c.description.len() <= 100,
                "{}",
                c.name
            );
        }
        assert!(help("/").contains("`/ask <prompt>`"));
        assert!(help("/").contains("`/mcp [action] [server]`"));
    }

    #[test]
    fn watch_parses_the_same_on_both_platforms() {
        let opts = |a: &str, n: &str| {
            vec![
                ("action".to_owned(), a.to_owned()),
                ("name".to_owned(), n.to_owned()),
            ]
        };
        assert_eq!(
            Command::from_text("watch").unwrap(),
            Command::Watch {
                action: WatchAction::List
            }
        );
        assert_eq!(
            Command::from_text("watch cancel pr-review").unwrap(),
            Command::from_options("watch", &opts("cancel", "pr-review")).unwrap()
        );
        assert_eq!(
            Command::from_text("watch resume ci").unwrap(),
            Command::Watch {
                action: WatchAction::Resume("ci".into())
            }
        );
        assert_eq!(
            Command::from_text("watch cancel"),
            Err(CommandError::Usage(
                "watch cancel needs the watch's name: watch cancel <name>".into()
            ))
        );
        assert!(matches!(
            Command::from_text("watch stop ci"),
            Err(CommandError::Usage(m)) if m.contains("list, cancel <name> or resume <name>")
        ));
    }
}
