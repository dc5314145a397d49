//! Typed configuration, loaded once from TOML and the environment and passed down explicitly.
//!
//! Precedence: `--config FILE`, else `$SANDPIPER_CONFIG`, else `./sandpiper.toml`, else
//! `~/.config/sandpiper/config.toml`, else built-in defaults. Environment overrides are applied
//! last ([`ENV_OVERRIDES`]). Relative paths in the file are relative to its directory. Unknown
//! keys and bad values are errors that name the key and the file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod log;
mod mcp;
mod overrides;
mod paths;
pub use paths::{sqlite_path, sqlite_url_under};
mod projects;
mod redact;
mod server;
mod web;
pub use log::{LogConfig, LogFormat};
pub(crate) use mcp::read_mcp_json;
pub use mcp::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REFRESH_INTERVAL,
    DEFAULT_STARTUP_TIMEOUT, McpConfig, McpServerConfig, parse_mcp_json,
};
pub use overrides::{ENV_OVERRIDES, EnvOverride, env_overrides};
pub use projects::{ProjectConfig, project_connectors};
pub use redact::{redact_url, scrub_url};

/// `base` with `path` appended to its path, keeping its query (and fragment) after it.
pub fn with_path(base: &str, path: &str) -> String {
    let split = base.find(['?', '#']).unwrap_or(base.len());
    let (head, query) = base.split_at(split);
    format!("{}{path}{query}", head.trim_end_matches('/'))
}
pub use server::ServerConfig;
pub use web::{MathConfig, TAVILY_API_BASE, WebConfig};

/// Why the configuration could not be loaded. Shown to the operator at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys or bad values.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message, which names the key, line and column.
        message: String,
    },
    /// A value (from the file or the environment) is out of range or inconsistent.
    #[error("invalid config value `{key}` (from {source_name}): {message}")]
    Invalid {
        /// Dotted key, e.g. `model.provider`.
        key: String,
        /// Where the value came from: a file path or an environment variable.
        source_name: String,
        /// What is wrong.
        message: String,
    },
}

/// A secret string (API key, token). Never printed: `Debug` and `Serialize` redact it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that needs it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where workstreams and messages are stored.
    pub database: DatabaseConfig,
    /// The chat model.
    pub model: ModelConfig,
    /// Who approves tool calls and how long to wait.
    pub approval: ApprovalConfig,
    /// Built-in tool settings.
    pub tools: ToolsConfig,
    /// Turn loop limits.
    pub agent: AgentConfig,
    /// The HTTP endpoints of `sandpiper serve`.
    pub server: ServerConfig,
    /// MCP servers whose tools, resources and prompts the agent uses.
    pub mcp: McpConfig,
    /// `[discord]`: the Discord channel's (`sandpiper_channels::config`), which reads it from
    /// the same file; accepted here, never looked into.
    #[serde(default, skip_serializing, rename = "discord")]
    _discord: Option<serde::de::IgnoredAny>,
    /// `[slack]`: the Slack channel's, like `[discord]`.
    #[serde(default, skip_serializing, rename = "slack")]
    _slack: Option<serde::de::IgnoredAny>,
    /// web_fetch and web_search.
    pub web: WebConfig,
    /// The Python sandbox of the `math` tool.
    pub math: MathConfig,
    /// Named groups of channels with a connector selection (`[[projects]]`).
    pub projects: Vec<ProjectConfig>,
    /// Service tokens for the admin HTTP API.
    pub auth: AuthConfig,
    /// The watch runner.
    pub watch: WatchConfig,
    /// Several nodes on one database: workstream leases.
    pub cluster: ClusterConfig,
    /// How the log is written.
    pub log: LogConfig,
    /// The audit trail of approval events.
    pub audit: AuditConfig,
    /// Daily caps in tokens or money per person, thread and channel.
    pub budgets: BudgetsConfig,
    /// What model calls cost (`[usage.prices]`).
    pub usage: UsageConfig,
}

/// `[usage]`: what the model's tokens cost, so that `/usage`, `sandpiper usage` and money
/// budgets can speak in money.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// Per model name (as `[model] model` names it): dollars per million prompt tokens,
    /// cached prompt tokens and answer tokens. A model without a price shows no money.
    pub prices: crate::price::Prices,
}

/// `[budgets]`: the tokens (prompt, cached included, and answer) or the money (at
/// `[usage.prices]`) the model may use per day (UTC), counted in the database (see
/// [`crate::budget`]). None by default; an admin changes one person's, one thread's or one
/// channel's in chat with `/budget`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// Tokens one person's turns may use per day, in all threads together.
    pub person_daily_tokens: Option<u64>,
    /// Tokens one thread may use per day (its sub-agents included), whoever asks.
    pub thread_daily_tokens: Option<u64>,
    /// Tokens the threads of one channel may use per day together.
    pub channel_daily_tokens: Option<u64>,
    /// Dollars one person's turns may cost per day.
    pub person_daily_cost: Option<crate::price::Money>,
    /// Dollars one thread may cost per day.
    pub thread_daily_cost: Option<crate::price::Money>,
    /// Dollars the threads of one channel may cost per day together.
    pub channel_daily_cost: Option<crate::price::Money>,
}

/// `[audit]`: how long the audit trail keeps its rows (see [`crate::store::audit`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Rows older than this many days are pruned at start and then daily; `0` keeps them
    /// forever. Default 365.
    pub retention_days: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            retention_days: 365,
        }
    }
}

impl AuditConfig {
    /// The oldest time (unix ms) a row is kept at `now`; `None` when rows are kept forever.
    pub fn keep_after(&self, now_ms: i64) -> Option<i64> {
        (self.retention_days > 0)
            .then(|| now_ms - i64::from(self.retention_days) * 24 * 60 * 60 * 1000)
    }
}

/// `[cluster]`: how nodes sharing one PostgreSQL split the workstreams (see
/// [`crate::cluster`]). On SQLite there is one node and the lease only marks running turns.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// How long a workstream's lease lasts without renewal: after a node dies, another takes
    /// its workstreams over this long after its last heartbeat. Renewed every third of it.
    #[serde(with = "duration")]
    pub lease: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(15),
        }
    }
}

/// `[watch]`: how the runner looks for due watches.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchConfig {
    /// How often the runner looks for due watches.
    #[serde(with = "duration")]
    pub tick: Duration,
    /// Polls running at once.
    pub max_parallel: usize,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(5),
            max_parallel: 4,
        }
    }
}

/// `[auth]`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The environment variable holding the HS256 secret of service JWTs (at least 32 bytes);
    /// `SANDPIPER_JWT_SECRET` when unset. Without a secret the admin API answers 401.
    pub jwt_secret_env: Option<String>,
}

impl AuthConfig {
    /// The variable the secret is read from.
    pub fn effective_secret_env(&self) -> &str {
        self.jwt_secret_env
            .as_deref()
            .unwrap_or("SANDPIPER_JWT_SECRET")
    }
}

/// `[database]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `sqlite://FILE` (created if missing) or `postgres://...`.
    pub url: String,
    /// Pool size.
    pub max_connections: u32,
    /// How long an operation waits for a connection while the database is away (a restart,
    /// a failover) before it fails and the user is told.
    #[serde(with = "duration")]
    pub acquire_timeout: Duration,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://sandpiper.db".into(),
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

/// Which wire protocol the model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama, NIM).
    #[default]
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "openai" => Some(Self::Openai),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }
}

/// `[model] output_limit_field`: the name of the output limit in a chat completions request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputLimitField {
    /// `max_tokens`: llama.cpp, vLLM, Ollama and most compatible servers.
    MaxTokens,
    /// `max_completion_tokens`: OpenAI's own API.
    MaxCompletionTokens,
}

/// `[model]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Wire protocol.
    pub provider: Provider,
    /// API base, e.g. `https://api.openai.com/v1` (OpenAI: `/chat/completions` is appended)
    /// or `https://api.anthropic.com` (Anthropic: `/v1/messages` is appended). Default: the
    /// provider's public API.
    pub base_url: Option<String>,
    /// Model name sent to the provider.
    pub model: String,
    /// Other models of the same provider and endpoint a thread may switch to with
    /// `/model NAME` (its owner, an approver or an admin). Empty: the thread keeps `model`.
    /// `context_window` is `model`'s; a choice's window is asked of the server, else the
    /// known default for its family.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// Name of the environment variable holding the API key. Default: `OPENAI_API_KEY`, or
    /// `ANTHROPIC_API_KEY` for anthropic.
    pub api_key_env: Option<String>,
    /// The API key, read from `api_key_env` at load time. Never read from the file.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Secret>,
    /// Timeout for one model call (connect, then the whole stream), e.g. `"5m"` or `300`.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Retries on connection errors, 429 and 5xx.
    pub max_retries: u32,
    /// Most tokens of one answer. Every request sends it (OpenAI-compatible servers as
    /// `max_tokens` or `max_completion_tokens`, Anthropic as `max_tokens`), lowered to what
    /// the context window leaves after the prompt. Unset: see [`ModelConfig::output_cap`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The model's context window in tokens. Unset: the server is asked (llama.cpp's
    /// `/props`, `max_model_len` or `context_length` in `/v1/models`), else a known default
    /// for the provider and model family (see [`crate::turn::context::window`]).
    pub context_window: Option<u64>,
    /// The request field that carries the output limit on OpenAI-compatible servers. Unset:
    /// `max_completion_tokens` for api.openai.com (its reasoning models refuse the other),
    /// `max_tokens` for every other server (llama.cpp, vLLM, Ollama, ...).
    pub output_limit_field: Option<OutputLimitField>,
    /// Sampling temperature; provider default when unset.
    pub temperature: Option<f32>,
    /// What the model can do.
    pub capabilities: Capabilities,
}

/// The most tokens of one answer when `[model] max_tokens` is unset and the window is large.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Windows smaller than this get a quarter of the window as their unset output limit.
const SMALL_WINDOW: u64 = 32_768;

impl ModelConfig {
    /// The most tokens of one answer with a context window of `window` tokens: `max_tokens`
    /// when configured; else [`DEFAULT_MAX_TOKENS`], or a quarter of the window when it is
    /// small (under 32k), so that a small local model's first "hello" does not write for
    /// minutes.
    pub fn output_cap(&self, window: u64) -> u32 {
        self.max_tokens.unwrap_or_else(|| {
            if window < SMALL_WINDOW {
                u32::try_from(window / 4)
                    .unwrap_or(DEFAULT_MAX_TOKENS)
                    .max(1)
            } else {
                DEFAULT_MAX_TOKENS
            }
        })
    }

    /// The base URL in effect (configured or the provider's default), without a trailing `/`.
    pub fn effective_base_url(&self) -> String {
        let url = self
            .base_url
            .clone()
            .unwrap_or_else(|| match self.provider {
                Provider::Openai => "https://api.openai.com/v1".into(),
                Provider::Anthropic => "https://api.anthropic.com".into(),
            });
        url.trim_end_matches('/').to_owned()
    }

    /// The URL of `path` (`/chat/completions`, `/models`) under the base URL: the path goes
    /// before the base's query, which a gateway may need on every request
    /// (`…/deployments/d?api-version=…`).
    pub fn url_of(&self, path: &str) -> String {
        with_path(&self.effective_base_url(), path)
    }

    /// [`Self::effective_base_url`] as logs, `doctor` and `config check` show it: its userinfo
    /// and query values redacted ([`redact_url`]).
    pub fn shown_base_url(&self) -> String {
        redact_url(&self.effective_base_url())
    }

    /// The output limit's field in effect (see [`ModelConfig::output_limit_field`]).
    pub fn effective_output_limit_field(&self) -> OutputLimitField {
        self.output_limit_field.unwrap_or_else(|| {
            if self
                .effective_base_url()
                .starts_with("https://api.openai.com")
            {
                OutputLimitField::MaxCompletionTokens
            } else {
                OutputLimitField::MaxTokens
            }
        })
    }

    /// The API key variable in effect.
    pub fn effective_api_key_env(&self) -> String {
        self.api_key_env
            .clone()
            .unwrap_or_else(|| match self.provider {
                Provider::Openai => "OPENAI_API_KEY".into(),
                Provider::Anthropic => "ANTHROPIC_API_KEY".into(),
            })
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            provider: Provider::Openai,
            base_url: None,
            model: "gpt-4.1-mini".into(),
            choices: Vec::new(),
            api_key_env: None,
            api_key: None,
            timeout: Duration::from_secs(300),
            max_retries: 4,
            max_tokens: None,
            context_window: None,
            output_limit_field: None,
            temperature: None,
            capabilities: Capabilities::default(),
        }
    }
}

/// `[model.capabilities]`
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Capabilities {
    /// The model accepts function tools. When false no tools are offered.
    pub supports_tools: bool,
    /// The model accepts images (read_file sends images instead of a description). On by
    /// default because both providers' APIs (OpenAI chat completions, Anthropic Messages)
    /// take images; set it false for a text-only model behind an OpenAI-compatible server
    /// (many llama.cpp/vLLM models), which would otherwise reject the request.
    pub supports_vision: bool,
    /// The provider searches deferred tools itself (`defer_loading`): Anthropic's
    /// `tool_search_tool_bm25_20251119` server tool, OpenAI's hosted tool search. When false
    /// and tool search is active, sandpiper offers its own `tool_search` tool instead.
    pub native_tool_search: bool,
    /// The provider searches the web itself: on Anthropic the `web_search` tool is replaced
    /// by the server-side `web_search_20250305` tool, on OpenAI search models by
    /// `web_search_options`; otherwise `web_search` calls the Tavily API.
    pub native_web_search: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            supports_tools: true,
            supports_vision: true,
            native_tool_search: false,
            native_web_search: false,
        }
    }
}

/// `[approval]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalConfig {
    /// Approve every tool call without asking (the `--yes` flag sets it too).
    pub auto_approve: bool,
    /// How long an approval may wait before it counts as denied; `0` waits forever.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Tools that even a workstream's owner may not approve without an approver role (for
    /// servers where anyone may open a thread), e.g. `["bash"]`.
    pub require_approver_for: Vec<String>,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            auto_approve: false,
            timeout: Duration::from_secs(30 * 60),
            require_approver_for: Vec::new(),
        }
    }
}

/// `[tools]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Root of the workstreams' working directories (default `./workstreams`). Each
    /// workstream works in `<workdir>/<safe workstream name>` unless `workdir_mode = "shared"`.
    pub workdir: Option<PathBuf>,
    /// `per_workstream` (default): each workstream has its own directory under `workdir`;
    /// `shared`: every workstream works in `workdir` itself (one checkout for the team).
    pub workdir_mode: WorkdirMode,
    /// Paths never readable through tools, asked or not (`~` is the home directory; a `*`
    /// matches one path component). The config file and the database are always denied.
    pub deny_read: Vec<String>,
    /// Variables set for bash, man and stdio MCP servers, on top of the allow-list.
    pub env: std::collections::BTreeMap<String, String>,
    /// Variables of sandpiper's own environment passed to bash and man by name (e.g.
    /// `GITHUB_TOKEN`); nothing else of it reaches a tool beyond the allow-list.
    pub pass_env: Vec<String>,
    /// bash timeout, e.g. `"120s"`.
    #[serde(with = "duration")]
    pub bash_timeout: Duration,
    /// Cap on a tool's output sent to the model, in bytes; the rest is cut with a note.
    pub max_output_bytes: usize,
    /// Cap on the number of matches the `search` tool returns.
    pub search_max_matches: usize,
    /// How many tool calls of one batch run at once.
    pub max_parallel: usize,
    /// Dynamic tool search: defer external (MCP) tools and let the model search for them.
    pub search: ToolSearchMode,
    /// With `search = "auto"`: the total tool count (built-in + external) that turns it on.
    pub search_threshold: usize,
    /// With `search = "auto"`: the external tools' schemas, in tokens (about 4 bytes each),
    /// that turn it on whatever their number. Unset: only the count counts.
    pub search_threshold_tokens: Option<u64>,
    /// Most tools one search returns (and makes visible).
    pub search_max_results: usize,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            workdir: None,
            workdir_mode: WorkdirMode::PerWorkstream,
            deny_read: DEFAULT_DENY_READ.iter().map(|s| (*s).to_owned()).collect(),
            env: Default::default(),
            pass_env: Vec::new(),
            bash_timeout: Duration::from_secs(120),
            max_output_bytes: 64 * 1024,
            search_max_matches: 200,
            max_parallel: 4,
            search: ToolSearchMode::Auto,
            search_threshold: 20,
            search_threshold_tokens: Some(8_000),
            search_max_results: 5,
        }
    }
}

/// Paths no tool may read by default.
pub const DEFAULT_DENY_READ: &[&str] = &["~/.ssh", "/proc/*/environ", "/etc/shadow"];

/// `tools.workdir_mode`: whether workstreams share one working directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkdirMode {
    /// `<workdir>/<safe workstream name>`, created on first use.
    #[default]
    PerWorkstream,
    /// Every workstream works in `workdir` itself.
    Shared,
}

/// `tools.search`: when external tools are deferred behind a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSearchMode {
    /// On when the total tool count reaches `search_threshold`.
    #[default]
    Auto,
    /// Always on (as soon as there is anything to defer).
    On,
    /// Never: every tool is offered on every call.
    Off,
}

impl std::str::FromStr for ToolSearchMode {
    type Err = String;

    /// Parses `auto`, `on` or `off` (the CLI flag's values).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            _ => Err(format!(
                "`{s}` is not a tool search mode; use auto, on or off"
            )),
        }
    }
}

/// `[agent]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Maximum model calls in one turn.
    pub max_rounds: u32,
    /// How many workstreams stay in memory before the least recently used is evicted (an
    /// evicted one is reloaded from the store on its next message). An idle one holds about
    /// 11 KiB of heap after ten short turns; what stays resident also depends on how many
    /// turns ran at once before (docs/benchmarks.md, "Load").
    pub workstream_cache: usize,
    /// Extra text appended to the system prompt.
    pub system_prompt_extra: Option<String>,
    /// Largest user message accepted, in bytes; a larger one is refused with a clear error
    /// and nothing is stored.
    pub max_message_bytes: usize,
    /// Turns running at once across all workstreams; further turns wait (and say so).
    pub max_concurrent_turns: usize,
    /// Turns one person's messages may have running at once across workstreams.
    pub max_turns_per_user: usize,
    /// Most model calls one sub-agent (`task`, `plan`) makes before it is stopped.
    pub task_max_rounds: u32,
    /// Most tokens (prompt plus completion, summed over its model calls) one sub-agent may
    /// use; it is stopped before the next model call once it has used this many.
    pub task_max_tokens: u64,
    /// Share of the context window a request may fill before the conversation is compacted
    /// (older turns summarised, old large tool outputs shortened); the answer's room is kept
    /// free as well. Between 0.1 and 0.95.
    pub compact_threshold: f64,
    /// How long, in milliseconds, a message waits for ones sent with it before its turn
    /// starts (what remains of it since the message was sent), so messages sent together but
    /// delivered a moment apart (another connection, another node) are answered in the order
    /// they were sent. 0: start at once.
    pub settle_ms: u64,
}

impl AgentConfig {
    /// [`AgentConfig::settle_ms`].
    pub fn settle(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.settle_ms)
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_rounds: 50,
            workstream_cache: 10_000,
            system_prompt_extra: None,
            max_message_bytes: 256 * 1024,
            max_concurrent_turns: 16,
            max_turns_per_user: 4,
            task_max_rounds: 30,
            task_max_tokens: 400_000,
            compact_threshold: 0.8,
            settle_ms: 40,
        }
    }
}

/// The database file's name in [`data_dir`].
pub const DATABASE_FILE: &str = "sandpiper.db";

/// sandpiper's own data directory: `$XDG_DATA_HOME/sandpiper`, else
/// `~/.local/share/sandpiper` (the default database, console history, the chat platforms'
/// working directories). `None` without a home directory.
pub fn data_dir(env: &dyn Env) -> Option<PathBuf> {
    if let Some(xdg) = env.var("XDG_DATA_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Some(xdg.join("sandpiper"));
    }
    let home = PathBuf::from(env.var("HOME")?);
    home.is_absolute()
        .then(|| home.join(".local/share/sandpiper"))
}

fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Whether a config file sets `[database] url` (else the default database is used).
fn names_database(text: &str) -> bool {
    toml::from_str::<toml::Table>(text)
        .ok()
        .and_then(|t| t.get("database")?.get("url").cloned())
        .is_some()
}

/// What a value of the key a parse error points at should look like.
fn expected_value(message: &str) -> Option<&'static str> {
    const EXPECTED: &[(&str, &str)] = &[
        ("_bytes", "a number of bytes such as 65536"),
        ("listen", "host:port such as 127.0.0.1:8090"),
        ("_timeout", "a duration such as \"120s\" or \"5m\""),
        ("lease", "a duration such as \"30s\""),
        ("interval", "a duration such as \"30s\""),
        ("max_tokens", "a number of tokens such as 4096"),
        ("context_window", "a number of tokens such as 32768"),
        ("url", "a URL such as http://127.0.0.1:11434/v1"),
    ];
    // toml quotes the offending line: `3 | max_output_bytes = "64k"`.
    let line = message
        .lines()
        .find(|l| l.contains(" | ") && l.contains('='))?;
    let key = line.split(" | ").nth(1)?.split('=').next()?.trim();
    EXPECTED
        .iter()
        .find(|(suffix, _)| key.ends_with(suffix))
        .map(|(_, expected)| *expected)
}

/// Where a configuration came from, for messages and `config check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file.
    File(PathBuf),
    /// No file was found; built-in defaults.
    Defaults,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "{}", p.display()),
            ConfigSource::Defaults => f.write_str("built-in defaults"),
        }
    }
}

/// Reads environment variables; a seam so tests need not touch the process environment.
pub trait Env {
    /// The value of `name`, if set and not empty.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl<const N: usize> Env for [(&str, &str); N] {
    fn var(&self, name: &str) -> Option<String> {
        self.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

impl Config {
    /// A configuration for tests: in-memory defaults, auto-approve off.
    ///
    /// The context window is set large (a million tokens), so that suites about other things
    /// never compact and never ask the fake server for its window; the context suites set
    /// their own.
    pub fn for_test() -> Self {
        let mut config = Self::default();
        config.model.context_window = Some(1 << 20);
        config
    }

    /// Finds and loads the configuration (see the module docs), then applies `env`.
    pub fn load(
        explicit: Option<&Path>,
        env: &dyn Env,
    ) -> Result<(Self, ConfigSource), ConfigError> {
        let source = Self::locate(explicit, env)?;
        let (mut config, file_names_database) = match &source {
            ConfigSource::File(path) => {
                let text = read_file(path)?;
                let mut config = Self::from_toml(&text, path)?;
                config.resolve_paths(paths::base_of(path));
                (config, names_database(&text))
            }
            ConfigSource::Defaults => (Self::default(), false),
        };
        config.apply_env(env, &source)?;
        // What the environment set is relative to where the command runs.
        config.resolve_paths(Path::new(""));
        if !file_names_database
            && env.var("SANDPIPER_DATABASE_URL").is_none()
            && let Some(dir) = data_dir(env)
        {
            config.database.url = format!("sqlite://{}", dir.join(DATABASE_FILE).display());
        }
        config.validate(&source, env)?;
        Ok((config, source))
    }

    fn locate(explicit: Option<&Path>, env: &dyn Env) -> Result<ConfigSource, ConfigError> {
        if let Some(path) = explicit {
            return Ok(ConfigSource::File(path.to_owned()));
        }
        if let Some(path) = env.var("SANDPIPER_CONFIG") {
            return Ok(ConfigSource::File(path.into()));
        }
        let local = PathBuf::from("sandpiper.toml");
        if local.is_file() {
            return Ok(ConfigSource::File(local));
        }
        if let Some(home) = env.var("HOME") {
            let user = Path::new(&home).join(".config/sandpiper/config.toml");
            if user.is_file() {
                return Ok(ConfigSource::File(user));
            }
        }
        Ok(ConfigSource::Defaults)
    }

    /// Parses one TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Self::from_toml(&read_file(path)?, path)
    }

    /// Parses TOML text; `path` is named in errors, with what a bad value should look like.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let mut message = e.to_string().trim_end().to_owned();
            if let Some(expected) = expected_value(&message) {
                message.push_str(&format!("\n(expected {expected})"));
            }
            ConfigError::Parse {
                path: path.to_owned(),
                message,
            }
        })
    }

    fn apply_env(&mut self, env: &dyn Env, source: &ConfigSource) -> Result<(), ConfigError> {
        if let Some(url) = env.var("SANDPIPER_DATABASE_URL") {
            self.database.url = url;
        }
        if let Some(p) = env.var("SANDPIPER_MODEL_PROVIDER") {
            self.model.provider = Provider::parse(&p).ok_or_else(|| ConfigError::Invalid {
                key: "model.provider".into(),
                source_name: "SANDPIPER_MODEL_PROVIDER".into(),
                message: format!("`{p}` is not a provider; use `openai` or `anthropic`"),
            })?;
        }
        if let Some(url) = env.var("SANDPIPER_MODEL_BASE_URL") {
            self.model.base_url = Some(url);
        }
        if let Some(model) = env.var("SANDPIPER_MODEL") {
            self.model.model = model;
        }
        if let Some(window) = env.var("SANDPIPER_MODEL_CONTEXT_WINDOW") {
            let tokens = window
                .trim()
                .parse::<u64>()
                .map_err(|e| ConfigError::Invalid {
                    key: "model.context_window".into(),
                    source_name: "SANDPIPER_MODEL_CONTEXT_WINDOW".into(),
                    message: format!("`{window}` is not a number of tokens such as 32768 ({e})"),
                })?;
            self.model.context_window = Some(tokens);
        }
        server::apply_env(&mut self.server, env)?;
        web::apply_env(&mut self.web, env);
        let key_env = self.model.effective_api_key_env();
        self.model.api_key = env.var(&key_env).map(Secret::new);
        let _ = source;
        Ok(())
    }

    fn validate(&self, source: &ConfigSource, env: &dyn Env) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            source_name: source.to_string(),
            message,
        };
        // A value the environment set is named by its variable, not by the file.
        let from_env = |key: &str, var: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            source_name: match env.var(var) {
                Some(_) => var.to_owned(),
                None => source.to_string(),
            },
            message,
        };
        let url = &self.database.url;
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            return Err(from_env(
                "database.url",
                "SANDPIPER_DATABASE_URL",
                format!(
                    "`{}` is neither `sqlite://FILE` nor `postgres://...`",
                    redact_url(url)
                ),
            ));
        }
        let base = self.model.effective_base_url();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(from_env(
                "model.base_url",
                "SANDPIPER_MODEL_BASE_URL",
                format!(
                    "`{}` is not an http(s) URL such as http://127.0.0.1:11434/v1",
                    redact_url(&base)
                ),
            ));
        }
        if self.model.model.trim().is_empty() {
            return Err(invalid("model.model", "the model name is empty".into()));
        }
        if let Some(blank) = self.model.choices.iter().position(|c| c.trim().is_empty()) {
            return Err(invalid(
                "model.choices",
                format!("choice {} is an empty model name", blank + 1),
            ));
        }
        if self.cluster.lease < std::time::Duration::from_secs(1) {
            return Err(invalid(
                "cluster.lease",
                "must be at least 1s (nodes renew it every third of it)".into(),
            ));
        }
        if self.agent.max_rounds == 0 {
            return Err(invalid("agent.max_rounds", "must be at least 1".into()));
        }
        if self.agent.task_max_rounds == 0 {
            return Err(invalid(
                "agent.task_max_rounds",
                "must be at least 1".into(),
            ));
        }
        if self.agent.task_max_tokens == 0 {
            return Err(invalid(
                "agent.task_max_tokens",
                "must be at least 1".into(),
            ));
        }
        if self.model.max_tokens == Some(0) {
            return Err(invalid("model.max_tokens", "must be at least 1".into()));
        }
        if self
            .model
            .context_window
            .is_some_and(|w| w < crate::turn::context::MIN_WINDOW)
        {
            return Err(invalid(
                "model.context_window",
                format!(
                    "must be at least {} tokens (a number of tokens such as 32768)",
                    crate::turn::context::MIN_WINDOW
                ),
            ));
        }
        if !(0.1..=0.95).contains(&self.agent.compact_threshold) {
            return Err(invalid(
                "agent.compact_threshold",
                "must be between 0.1 and 0.95 (a share of the context window such as 0.8)".into(),
            ));
        }
        if self.agent.settle_ms > 1000 {
            return Err(invalid(
                "agent.settle_ms",
                "must be at most 1000 (milliseconds; tens are enough, such as 40)".into(),
            ));
        }
        if self.tools.max_parallel == 0 {
            return Err(invalid("tools.max_parallel", "must be at least 1".into()));
        }
        if self.tools.search_max_results == 0 {
            return Err(invalid(
                "tools.search_max_results",
                "must be at least 1".into(),
            ));
        }
        if self.agent.max_concurrent_turns == 0 {
            return Err(invalid(
                "agent.max_concurrent_turns",
                "must be at least 1".into(),
            ));
        }
        if self.agent.max_turns_per_user == 0 {
            return Err(invalid(
                "agent.max_turns_per_user",
                "must be at least 1".into(),
            ));
        }
        server::validate(&self.server, source)?;
        if self.tools.max_output_bytes < 1024 {
            return Err(invalid(
                "tools.max_output_bytes",
                "must be at least 1024 (a number of bytes such as 65536)".into(),
            ));
        }
        web::validate(&self.web, &self.math, source)?;
        Ok(())
    }

    /// The effective configuration as TOML, secrets redacted (API key, the database and model
    /// URLs' userinfo and query values, MCP server environment values and HTTP header values).
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        shown.database.url = redact_url(&shown.database.url);
        shown.model.base_url = shown.model.base_url.as_deref().map(redact_url);
        // Tools' variables are where tokens for them go.
        for value in shown.tools.env.values_mut() {
            *value = "<redacted>".into();
        }
        for server in shown.mcp.servers.values_mut() {
            let secrets = match server {
                McpServerConfig::Stdio { env, .. } => env,
                McpServerConfig::Http { headers, url, .. } => {
                    *url = redact_url(url);
                    headers
                }
            };
            for value in secrets.values_mut() {
                *value = "<redacted>".into();
            }
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// Durations as seconds (`120`) or with a unit (`"120s"`, `"5m"`, `"4h"`, `"500ms"`), for
/// `#[serde(with = "duration")]` (the channels' config uses it too).
pub mod duration {
    use super::*;

    /// Writes a duration as its shortest text.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        let secs = d.as_secs();
        if d.subsec_millis() != 0 {
            s.serialize_str(&format!("{}ms", d.as_millis()))
        } else if secs != 0 && secs.is_multiple_of(3600) {
            s.serialize_str(&format!("{}h", secs / 3600))
        } else if secs != 0 && secs.is_multiple_of(60) {
            s.serialize_str(&format!("{}m", secs / 60))
        } else {
            s.serialize_str(&format!("{secs}s"))
        }
    }

    /// Reads seconds or a duration with a unit.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(s) => Ok(Duration::from_secs(s)),
            Raw::Text(t) => parse(&t).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`{t}` is not a duration; write seconds (120) or a number with ms, s, m or h (\"5m\")"
                ))
            }),
        }
    }

    /// Parses `90`, `90s`, `5m`, `4h`, `250ms`.
    pub fn parse(text: &str) -> Option<Duration> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: u64 = num.parse().ok()?;
        match unit.trim() {
            "" | "s" => Some(Duration::from_secs(n)),
            "ms" => Some(Duration::from_millis(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            "h" => n.checked_mul(3600).map(Duration::from_secs),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
