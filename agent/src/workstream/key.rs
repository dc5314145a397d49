//! What a workstream key names, typed: a Discord thread (or channel), a Slack thread (or
//! channel), a console session, a conversation started on the status page, or a sub-agent's
//! child of another workstream. The stored
//! string format is the one keys have always had, so every existing row still parses;
//! [`WorkstreamKey`] is written with `Display` and read with `FromStr`, and nothing else
//! builds or splits a key by hand.

use std::fmt;
use std::str::FromStr;

/// A workstream (or a channel, for the channel tier of connector policy).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WorkstreamKey {
    /// `discord:<id>`: a thread, a DM, or (as a channel tier) the channel threads hang off.
    Discord {
        /// The Discord channel (thread) id.
        channel: u64,
    },
    /// `slack:<team>:<channel>:<thread_ts>`: a Slack thread.
    Slack {
        /// The workspace.
        team: String,
        /// The channel the thread is in.
        channel: String,
        /// The thread's root message.
        thread_ts: String,
    },
    /// `slack:<team>:<channel>`: a Slack channel (the channel tier of connector policy).
    SlackChannel {
        /// The workspace.
        team: String,
        /// The channel.
        channel: String,
    },
    /// `console:<name>`: a terminal session's workstream.
    Console {
        /// The session's name (`default` unless chosen).
        name: String,
    },
    /// `web:<id>`: a conversation started on the status page; it shows only there.
    Web {
        /// Its id (random, chosen when the page started it).
        id: String,
    },
    /// `<parent>/<tool>:<call id>`: the workstream of a sub-agent a tool call started.
    Child {
        /// The workstream whose call started it.
        parent: Box<WorkstreamKey>,
        /// The tool that started it (`task`, `plan`).
        tool: String,
        /// The tool call's id.
        call_id: String,
    },
}

/// The platform a workstream lives on; a sub-agent's child lives on its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyPlatform {
    /// `discord:…`
    Discord,
    /// `slack:…`
    Slack,
    /// `console:…`
    Console,
    /// `web:…`
    Web,
}

impl KeyPlatform {
    /// How every key of the platform starts, its children's included.
    pub const fn prefix(self) -> &'static str {
        match self {
            KeyPlatform::Discord => "discord:",
            KeyPlatform::Slack => "slack:",
            KeyPlatform::Console => "console:",
            KeyPlatform::Web => "web:",
        }
    }
}

/// Which workstreams a runner polls, by key: every workstream of a platform (a Discord or
/// Slack node's), or one workstream (the console's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPattern {
    /// Every workstream on this platform, sub-agents' children included.
    Platform(KeyPlatform),
    /// This workstream.
    Exact(WorkstreamKey),
}

impl KeyPattern {
    /// Whether `key` is one of these workstreams.
    pub fn matches(&self, key: &str) -> bool {
        match self {
            KeyPattern::Platform(p) => key.starts_with(p.prefix()),
            KeyPattern::Exact(k) => key.parse::<WorkstreamKey>().is_ok_and(|key| key == *k),
        }
    }
}

/// A key that names nothing sandpiper makes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a workstream key")]
pub struct BadKey(pub String);

impl WorkstreamKey {
    /// A Slack thread's key.
    pub fn slack(team: &str, channel: &str, thread_ts: &str) -> Self {
        WorkstreamKey::Slack {
            team: team.to_owned(),
            channel: channel.to_owned(),
            thread_ts: thread_ts.to_owned(),
        }
    }

    /// The console session `name`'s key.
    pub fn console(name: &str) -> Self {
        WorkstreamKey::Console {
            name: name.to_owned(),
        }
    }

    /// A new conversation for the status page, with a random id.
    pub fn new_web() -> Self {
        WorkstreamKey::Web {
            id: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// The child workstream of the sub-agent that `tool`'s call `call_id` starts here.
    pub fn child(&self, tool: &str, call_id: &str) -> Self {
        WorkstreamKey::Child {
            parent: Box::new(self.clone()),
            tool: tool.to_owned(),
            call_id: call_id.to_owned(),
        }
    }

    /// The channel the key names by itself: a Slack thread's channel. Discord thread keys do
    /// not carry theirs (the adapter records the parent when it opens the thread); a child
    /// has its parent's.
    pub fn channel(&self) -> Option<WorkstreamKey> {
        match self {
            WorkstreamKey::Slack { team, channel, .. } => Some(WorkstreamKey::SlackChannel {
                team: team.clone(),
                channel: channel.clone(),
            }),
            WorkstreamKey::Child { parent, .. } => parent.channel(),
            _ => None,
        }
    }

    /// The platform the workstream lives on.
    pub fn platform(&self) -> KeyPlatform {
        match self {
            WorkstreamKey::Discord { .. } => KeyPlatform::Discord,
            WorkstreamKey::Slack { .. } | WorkstreamKey::SlackChannel { .. } => KeyPlatform::Slack,
            WorkstreamKey::Console { .. } => KeyPlatform::Console,
            WorkstreamKey::Web { .. } => KeyPlatform::Web,
            WorkstreamKey::Child { parent, .. } => parent.platform(),
        }
    }

    /// The workstream a sub-agent's child belongs to, at the top (itself for the others).
    pub fn root(&self) -> &WorkstreamKey {
        match self {
            WorkstreamKey::Child { parent, .. } => parent.root(),
            other => other,
        }
    }
}

impl fmt::Display for WorkstreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkstreamKey::Discord { channel } => write!(f, "discord:{channel}"),
            WorkstreamKey::Slack {
                team,
                channel,
                thread_ts,
            } => write!(f, "slack:{team}:{channel}:{thread_ts}"),
            WorkstreamKey::SlackChannel { team, channel } => write!(f, "slack:{team}:{channel}"),
            WorkstreamKey::Console { name } => write!(f, "console:{name}"),
            WorkstreamKey::Web { id } => write!(f, "web:{id}"),
            WorkstreamKey::Child {
                parent,
                tool,
                call_id,
            } => write!(f, "{parent}/{tool}:{call_id}"),
        }
    }
}

/// A Slack id or timestamp part: not empty, no separator.
fn part(s: &str) -> Option<String> {
    (!s.is_empty() && !s.contains(':') && !s.contains('/')).then(|| s.to_owned())
}

/// `<parent>/<tool>:<call id>` when the tail is a sub-agent's and the head is a key.
fn child(key: &str) -> Option<WorkstreamKey> {
    let (parent, tail) = key.rsplit_once('/')?;
    let (tool, call_id) = tail.split_once(':')?;
    let is_tool = !tool.is_empty() && tool.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    if !is_tool || call_id.is_empty() {
        return None;
    }
    Some(WorkstreamKey::Child {
        parent: Box::new(parent.parse().ok()?),
        tool: tool.to_owned(),
        call_id: call_id.to_owned(),
    })
}

impl FromStr for WorkstreamKey {
    type Err = BadKey;

    fn from_str(key: &str) -> Result<Self, Self::Err> {
        let bad = || BadKey(key.to_owned());
        if let Some(child) = child(key) {
            return Ok(child);
        }
        let (platform, rest) = key.split_once(':').ok_or_else(bad)?;
        match platform {
            "discord" => {
                let channel = rest.parse::<std::num::NonZeroU64>().map_err(|_| bad())?;
                Ok(WorkstreamKey::Discord {
                    channel: channel.get(),
                })
            }
            "slack" => {
                let mut parts = rest.split(':');
                match (parts.next(), parts.next(), parts.next(), parts.next()) {
                    (Some(team), Some(channel), Some(ts), None) => Ok(WorkstreamKey::Slack {
                        team: part(team).ok_or_else(bad)?,
                        channel: part(channel).ok_or_else(bad)?,
                        thread_ts: part(ts).ok_or_else(bad)?,
                    }),
                    (Some(team), Some(channel), None, None) => Ok(WorkstreamKey::SlackChannel {
                        team: part(team).ok_or_else(bad)?,
                        channel: part(channel).ok_or_else(bad)?,
                    }),
                    _ => Err(bad()),
                }
            }
            "console" if !rest.is_empty() => Ok(WorkstreamKey::console(rest)),
            "web" => Ok(WorkstreamKey::Web {
                id: part(rest).ok_or_else(bad)?,
            }),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn every_key_starts_with_its_platforms_prefix() {
        for key in [
            "discord:1",
            "slack:T1:C2:1.5",
            "slack:T1:C2",
            "console:default",
            "web:3f2a",
            "discord:1/task:c",
            "slack:T1:C2:1.5/plan:p/task:c",
        ] {
            let parsed: WorkstreamKey = key.parse().unwrap();
            assert!(key.starts_with(parsed.platform().prefix()), "{key}");
        }
        let child: WorkstreamKey = "console:x/task:c".parse().unwrap();
        assert_eq!(child.platform(), KeyPlatform::Console);
    }

    #[test]
    fn every_stored_format_reads_back_as_written() {
        let keys = [
            "discord:123456789012345678",
            "slack:T1:C2:1700000000.000100",
            "slack:T1:C2",
            "console:default",
            "console:alice laptop",
            "web:0c1d2e3f",
            "web:0c1d/task:c1",
            "discord:1/task:call_7",
            "slack:T1:C2:1.5/plan:toolu_01/task:c2",
        ];
        for key in keys {
            let parsed: WorkstreamKey = key.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(parsed.to_string(), key);
        }
        let child: WorkstreamKey = "discord:1/task:c7"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            child,
            WorkstreamKey::Discord { channel: 1 }.child("task", "c7")
        );
        assert_eq!(child.root(), &WorkstreamKey::Discord { channel: 1 });
    }

    #[test]
    fn a_slack_thread_names_its_channel_and_nothing_else_does() {
        let channel = |k: &str| {
            k.parse::<WorkstreamKey>()
                .ok()
                .and_then(|k| k.channel())
                .map(|c| c.to_string())
        };
        assert_eq!(
            channel("slack:T1:C2:1700000000.000100"),
            Some("slack:T1:C2".into())
        );
        assert_eq!(
            channel("slack:T1:C2:1.5/task:c1"),
            Some("slack:T1:C2".into())
        );
        assert_eq!(channel("slack:T1:C2"), None);
        assert_eq!(channel("discord:123"), None);
        assert_eq!(channel("console:default"), None);
    }

    #[test]
    fn malformed_keys_are_refused() {
        for key in [
            "",
            "discord:",
            "discord:0",
            "discord:abc",
            "slack:T1",
            "slack:T1::1.5",
            "slack:T1:C2:1.5:extra",
            "console:",
            "web:",
            "web:a:b",
            "nowhere",
        ] {
            assert_eq!(
                key.parse::<WorkstreamKey>(),
                Err(BadKey(key.into())),
                "{key}"
            );
        }
    }
}
