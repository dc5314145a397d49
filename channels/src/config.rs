//! `[discord]` and `[slack]`: which chat platforms `sandpiper serve` connects to, and their
//! rules (where the bot listens, who may approve, how fast answers stream). They live in the
//! same file as the agent's sections ([`sandpiper_agent::config`]), which accepts and ignores
//! them; [`ChannelsConfig::load`] reads them from there, with the same errors (key, line,
//! file) and the same environment seam.

use std::path::Path;
use std::time::Duration;

use sandpiper_agent::config::{ConfigError, ConfigSource, Env, Secret, duration};
use serde::{Deserialize, Serialize};

/// The chat channels' sections of the configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelsConfig {
    /// The Discord channel.
    pub discord: DiscordConfig,
    /// The Slack channel.
    pub slack: SlackConfig,
}

impl ChannelsConfig {
    /// Reads `[discord]` and `[slack]` from the file the agent's configuration came from
    /// (defaults when there is none), then the platform secrets from `env`.
    pub fn load(source: &ConfigSource, env: &dyn Env) -> Result<Self, ConfigError> {
        let mut config = match source {
            ConfigSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                Self::from_toml(&text, path)?
            }
            ConfigSource::Defaults => Self::default(),
        };
        config.apply_env(env);
        config.discord.apply_shards_env(env)?;
        Ok(config)
    }

    /// Parses the `[discord]` and `[slack]` sections of TOML text (the rest is the agent's);
    /// `path` is named in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })
    }

    /// Reads the platform secrets and URL overrides from the environment.
    pub fn apply_env(&mut self, env: &dyn Env) {
        let (discord, slack) = (&mut self.discord, &mut self.slack);
        discord.token = env.var(&discord.token_env).map(Secret::new);
        if let Some(base) = env.var("SANDPIPER_DISCORD_API_BASE") {
            discord.api_base_url = base;
        }
        slack.bot_token = env.var(&slack.bot_token_env).map(Secret::new);
        slack.app_token = env.var(&slack.app_token_env).map(Secret::new);
        slack.signing_secret = env.var(&slack.signing_secret_env).map(Secret::new);
        if let Some(base) = env.var("SANDPIPER_SLACK_API_BASE") {
            slack.api_base_url = base;
        }
    }

    /// The sections as TOML, secrets redacted (for `config check`).
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// Who may talk to the agent in a thread it answers in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadAccess {
    /// The thread's owner and anyone else in the thread.
    #[default]
    Anyone,
    /// Only the person who started the thread.
    Owner,
}

/// `[discord]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscordConfig {
    /// Environment variable holding the bot token (default `DISCORD_TOKEN`).
    pub token_env: String,
    /// The bot token, read from `token_env`; Discord is off without it.
    #[serde(skip_deserializing)]
    pub token: Option<Secret>,
    /// Channel ids where the bot listens; empty: every channel it can see.
    pub channels: Vec<u64>,
    /// Register slash commands in this guild only (instant) instead of globally. Discord ids
    /// are never 0, so `guild = 0` is refused when the file is read.
    pub guild: Option<std::num::NonZeroU64>,
    /// Who may talk in a thread: `anyone` (default) or `owner`.
    pub thread_access: ThreadAccess,
    /// Role ids whose members may decide any approval (besides the thread's owner).
    pub approver_roles: Vec<String>,
    /// Role ids whose members administer the bot here (delete global memories, change
    /// channel settings).
    pub admin_roles: Vec<String>,
    /// Whether the bot answers direct messages (off by default: a DM is outside `channels`).
    pub dms: bool,
    /// REST base URL. **Meant for testing** (a fake Discord); env `SANDPIPER_DISCORD_API_BASE`.
    /// With an override, every request goes there and the gateway URL comes from its
    /// `/api/v10/gateway` answer.
    pub api_base_url: String,
    /// Least time between two edits of a streamed message.
    #[serde(with = "duration")]
    pub stream_interval: Duration,
    /// Requests per second the bot sends in all, across every thread (Discord allows 50).
    pub requests_per_second: u32,
    /// The gateway shards this node runs, `"FIRST-LAST/TOTAL"` (`"0-1/4"`: shards 0 and 1 of
    /// 4) or `"ID/TOTAL"`; every node of a bot names the same total and together they cover
    /// every shard once. Unset: this node runs the bot's only shard. Env
    /// `SANDPIPER_DISCORD_SHARDS` overrides it, so nodes can share one file.
    pub shards: Option<ShardRange>,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            token_env: "DISCORD_TOKEN".into(),
            token: None,
            channels: Vec::new(),
            guild: None,
            thread_access: ThreadAccess::Anyone,
            approver_roles: Vec::new(),
            admin_roles: Vec::new(),
            dms: false,
            api_base_url: DISCORD_API_BASE.into(),
            stream_interval: Duration::from_millis(1500),
            requests_per_second: 40,
            shards: None,
        }
    }
}

/// Discord's real REST base.
pub const DISCORD_API_BASE: &str = "https://discord.com";
/// Slack's real Web API base.
pub const SLACK_API_BASE: &str = "https://slack.com/api";

impl DiscordConfig {
    /// Whether requests go somewhere other than Discord (a test double).
    pub fn overridden(&self) -> bool {
        self.api_base_url.trim_end_matches('/') != DISCORD_API_BASE
    }

    /// Reads `SANDPIPER_DISCORD_SHARDS` (same form as `shards`), refusing a bad range with
    /// the variable's name.
    pub fn apply_shards_env(&mut self, env: &dyn Env) -> Result<(), ConfigError> {
        let Some(text) = env.var(SHARDS_ENV) else {
            return Ok(());
        };
        let range = text
            .parse()
            .map_err(|e: ShardRangeError| ConfigError::Invalid {
                key: "discord.shards".into(),
                source_name: SHARDS_ENV.into(),
                message: e.to_string(),
            })?;
        self.shards = Some(range);
        Ok(())
    }
}

/// The environment variable that overrides `[discord] shards`.
pub const SHARDS_ENV: &str = "SANDPIPER_DISCORD_SHARDS";

/// Which of a bot's gateway shards one node runs: `first..=last` of `total`. Discord sends a
/// guild's events to shard `(guild_id >> 22) % total` (DMs to shard 0), so nodes that split
/// the shards between them split the guilds. Written `"FIRST-LAST/TOTAL"` or `"ID/TOTAL"`;
/// checked when the file is read (never a panic or a silent gap at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ShardRange {
    first: u32,
    last: u32,
    total: u32,
}

/// Why a shard range was refused. The operator fixes `[discord] shards`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardRangeError {
    /// Not `FIRST-LAST/TOTAL` or `ID/TOTAL` with whole numbers.
    #[error("`{0}` is not a shard range: write FIRST-LAST/TOTAL (\"0-1/4\") or ID/TOTAL (\"2/4\")")]
    Syntax(String),
    /// A bot has at least one shard.
    #[error("the shard total must be at least 1")]
    NoShards,
    /// The range runs backwards.
    #[error("the first shard ({first}) comes after the last ({last})")]
    Backwards {
        /// First shard named.
        first: u32,
        /// Last shard named.
        last: u32,
    },
    /// Shards are numbered from 0 to `total - 1`.
    #[error("shard {last} does not exist among {total} shards (they are numbered 0 to {})", .total.saturating_sub(1))]
    OutOfRange {
        /// The highest shard named.
        last: u32,
        /// The total.
        total: u32,
    },
}

impl ShardRange {
    /// Shards `first..=last` of `total`, checked.
    pub fn new(first: u32, last: u32, total: u32) -> Result<Self, ShardRangeError> {
        if total == 0 {
            return Err(ShardRangeError::NoShards);
        }
        if first > last {
            return Err(ShardRangeError::Backwards { first, last });
        }
        if last >= total {
            return Err(ShardRangeError::OutOfRange { last, total });
        }
        Ok(Self { first, last, total })
    }

    /// The first shard this node runs.
    pub fn first(&self) -> u32 {
        self.first
    }

    /// The last shard this node runs (inclusive).
    pub fn last(&self) -> u32 {
        self.last
    }

    /// How many shards the bot has across all nodes.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Whether this node runs shard `id`.
    pub fn contains(&self, id: u32) -> bool {
        (self.first..=self.last).contains(&id)
    }
}

impl std::str::FromStr for ShardRange {
    type Err = ShardRangeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || ShardRangeError::Syntax(text.to_owned());
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| syntax());
        let (shards, total) = text.split_once('/').ok_or_else(syntax)?;
        let (first, last) = match shards.split_once('-') {
            Some((first, last)) => (number(first)?, number(last)?),
            None => (number(shards)?, number(shards)?),
        };
        Self::new(first, last, number(total)?)
    }
}

impl TryFrom<String> for ShardRange {
    type Error = ShardRangeError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl std::fmt::Display for ShardRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.first == self.last {
            write!(f, "{}/{}", self.first, self.total)
        } else {
            write!(f, "{}-{}/{}", self.first, self.last, self.total)
        }
    }
}

impl From<ShardRange> for String {
    fn from(range: ShardRange) -> String {
        range.to_string()
    }
}

/// How Slack delivers events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlackMode {
    /// Socket Mode: sandpiper opens a websocket; no public URL needed.
    #[default]
    Socket,
    /// Events API: Slack posts to `/slack/events` and `/slack/interactions` on `[server] listen`.
    Events,
}

/// `[slack]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlackConfig {
    /// Environment variable holding the bot token, `xoxb-…` (default `SLACK_BOT_TOKEN`).
    pub bot_token_env: String,
    /// Environment variable holding the app-level token, `xapp-…` (default `SLACK_APP_TOKEN`).
    pub app_token_env: String,
    /// Environment variable holding the signing secret (default `SLACK_SIGNING_SECRET`).
    pub signing_secret_env: String,
    /// The bot token; Slack is off without it.
    #[serde(skip_deserializing)]
    pub bot_token: Option<Secret>,
    /// The app token (Socket Mode).
    #[serde(skip_deserializing)]
    pub app_token: Option<Secret>,
    /// The signing secret (Events API mode).
    #[serde(skip_deserializing)]
    pub signing_secret: Option<Secret>,
    /// `socket` (default) or `events`.
    pub mode: SlackMode,
    /// Channel ids where the bot answers mentions; empty: every channel it is in.
    pub channels: Vec<String>,
    /// Who may talk in a thread: `anyone` (default) or `owner`.
    pub thread_access: ThreadAccess,
    /// User group ids whose members may decide any approval (besides the thread's owner).
    pub approver_usergroups: Vec<String>,
    /// User group ids whose members administer the bot here (delete global memories,
    /// change channel settings).
    pub admin_usergroups: Vec<String>,
    /// Whether the bot answers direct messages (off by default: a DM is outside `channels`).
    pub dms: bool,
    /// The slash command (default `/sandpiper`).
    pub command: String,
    /// Web API base URL. **Meant for testing** (a fake Slack); env `SANDPIPER_SLACK_API_BASE`.
    pub api_base_url: String,
    /// Least time between two edits of a streamed message.
    #[serde(with = "duration")]
    pub stream_interval: Duration,
    /// Emoji put on a message while the agent works on it (Slack shows bots no typing
    /// indicator); removed when the turn ends. Empty: none. Needs the `reactions:write` scope.
    pub working_reaction: String,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            signing_secret_env: "SLACK_SIGNING_SECRET".into(),
            bot_token: None,
            app_token: None,
            signing_secret: None,
            mode: SlackMode::Socket,
            channels: Vec::new(),
            thread_access: ThreadAccess::Anyone,
            approver_usergroups: Vec::new(),
            admin_usergroups: Vec::new(),
            dms: false,
            command: "/sandpiper".into(),
            api_base_url: SLACK_API_BASE.into(),
            stream_interval: Duration::from_millis(1500),
            working_reaction: "hourglass_flowing_sand".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_example_file_parses_and_says_what_the_defaults_are() {
        let text = include_str!("../../sandpiper.example.toml");
        let parsed = ChannelsConfig::from_toml(text, Path::new("sandpiper.example.toml")).unwrap();
        let defaults = ChannelsConfig::default();
        assert_eq!(
            parsed.slack.working_reaction,
            defaults.slack.working_reaction
        );
        assert_eq!(parsed.slack.stream_interval, defaults.slack.stream_interval);
        assert_eq!(
            parsed.discord.stream_interval,
            defaults.discord.stream_interval
        );
        assert_eq!(parsed.slack.command, defaults.slack.command);
        assert_eq!(parsed.discord.dms, defaults.discord.dms);
        assert_eq!(parsed.slack.dms, defaults.slack.dms);
    }

    #[test]
    fn a_bad_key_names_itself_and_the_file_and_secrets_come_from_the_environment() {
        let err = ChannelsConfig::from_toml("[discord]\ntokn_env = \"X\"\n", Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("s.toml") && err.contains("tokn_env"), "{err}");
        let mut config = ChannelsConfig::from_toml(
            "[model]\nmodel = \"m\"\n[slack]\nbot_token_env = \"MY_SLACK\"\n",
            Path::new("s.toml"),
        )
        .unwrap();
        config.apply_env(&[("MY_SLACK", "xoxb-1"), ("DISCORD_TOKEN", "d")]);
        assert_eq!(config.slack.bot_token, Some(Secret::new("xoxb-1")));
        assert_eq!(config.discord.token, Some(Secret::new("d")));
        assert!(!config.to_redacted_toml().contains("xoxb-1"));
    }

    #[test]
    fn guild_zero_is_refused_with_its_key_not_a_panic_at_start() {
        let err = ChannelsConfig::from_toml("[discord]\nguild = 0\n", Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("s.toml") && err.contains("guild") && err.contains("nonzero"),
            "{err}"
        );
        let ok = ChannelsConfig::from_toml("[discord]\nguild = 42\n", Path::new("s.toml")).unwrap();
        assert_eq!(ok.discord.guild.map(std::num::NonZeroU64::get), Some(42));
    }

    #[test]
    fn shard_ranges_read_both_forms_and_round_trip() {
        let config = |text: &str| ChannelsConfig::from_toml(text, Path::new("s.toml"));
        let two = config("[discord]\nshards = \"0-1/4\"\n").unwrap();
        assert_eq!(two.discord.shards, Some(ShardRange::new(0, 1, 4).unwrap()));
        let one = config("[discord]\nshards = \" 3 / 4 \"\n").unwrap();
        assert_eq!(one.discord.shards, Some(ShardRange::new(3, 3, 4).unwrap()));
        assert!(
            one.discord
                .shards
                .is_some_and(|r| r.contains(3) && !r.contains(2))
        );
        assert_eq!(ChannelsConfig::default().discord.shards, None);
        // What `config check` prints reads back the same.
        let again = config(&two.to_redacted_toml()).unwrap();
        assert_eq!(again.discord.shards, two.discord.shards);
        assert!(two.to_redacted_toml().contains("shards = \"0-1/4\""));
    }

    #[test]
    fn a_bad_shard_range_is_refused_with_its_key_and_why() {
        let cases = [
            ("2/2", ShardRangeError::OutOfRange { last: 2, total: 2 }),
            ("1-4/4", ShardRangeError::OutOfRange { last: 4, total: 4 }),
            ("0/0", ShardRangeError::NoShards),
            ("3-1/4", ShardRangeError::Backwards { first: 3, last: 1 }),
            ("0-1", ShardRangeError::Syntax("0-1".into())),
            ("a-b/4", ShardRangeError::Syntax("a-b/4".into())),
            ("-1/4", ShardRangeError::Syntax("-1/4".into())),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<ShardRange>(), Err(want.clone()), "{text}");
            let err = ChannelsConfig::from_toml(
                &format!("[discord]\nshards = \"{text}\"\n"),
                Path::new("s.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("s.toml") && err.contains("shards") && err.contains(&want.to_string()),
                "{text}: {err}"
            );
        }
        let err = ChannelsConfig::from_toml("[discord]\nshards = 2\n", Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("shards"), "{err}");
    }

    #[test]
    fn the_environment_picks_this_nodes_shards_and_a_bad_one_names_the_variable() {
        let mut discord = DiscordConfig::default();
        discord.apply_shards_env(&[(SHARDS_ENV, "1/2")]).unwrap();
        assert_eq!(discord.shards, Some(ShardRange::new(1, 1, 2).unwrap()));
        let err = discord
            .apply_shards_env(&[(SHARDS_ENV, "2/2")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(SHARDS_ENV)
                && err.contains("discord.shards")
                && err.contains("numbered 0 to 1"),
            "{err}"
        );
    }
}
