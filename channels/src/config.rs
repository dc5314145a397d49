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
}
