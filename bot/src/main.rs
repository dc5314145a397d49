//! `sandpiper`: a chat-ops AI agent for Discord, Slack and the terminal.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use sandpiper::chat::ChatArgs;
use sandpiper::commands::{self, McpCommand};
use sandpiper::console_account::{self, MemoryCommand};
use sandpiper::defaults::{self, Place};
use sandpiper::wiring;
use sandpiper_agent::Config;
use sandpiper_agent::config::redact_url;
use sandpiper_agent::config::{ConfigError, ConfigSource, ProcessEnv};
use sandpiper_channels::config::ChannelsConfig;
use tracing::Instrument as _;

/// jemalloc instead of glibc's malloc. A turn allocates and frees about 100 KB of short-lived
/// memory around the few small strings a workstream keeps; glibc let those long-lived strings
/// pin the burst's pages, so a node with thousands of idle live workstreams stayed several
/// times larger than what they hold. jemalloc keeps each size class on its own small slabs,
/// and its background thread (the `background_threads` feature: a setting, no call from
/// here) gives pages unused for 10 s back to the kernel while the node is idle
/// (docs/benchmarks.md, "Memory per workstream").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    name = "sandpiper",
    version,
    about = "A chat-ops AI agent for Discord, Slack and the terminal"
)]
struct Cli {
    /// Configuration file (else $SANDPIPER_CONFIG, ./sandpiper.toml, ~/.config/sandpiper/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A standard MCP JSON file (`{"mcpServers": {...}}`) whose servers are added to the
    /// configured ones.
    #[arg(long, global = true, value_name = "FILE")]
    mcp_config: Option<PathBuf>,
    /// The database: a SQLite file or a `sqlite:`/`postgres:` URL (else
    /// $SANDPIPER_DATABASE_URL, `[database] url`, or sandpiper.db in the data directory,
    /// $XDG_DATA_HOME/sandpiper or ~/.local/share/sandpiper).
    #[arg(long, global = true, value_name = "FILE|URL")]
    database: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway: HTTP endpoints (`/health`) and the configured chat platforms.
    Serve,
    /// MCP servers: list them with their tools, or refresh their lists.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Chat with the agent in the terminal.
    Chat(ChatArgs),
    /// Run one message as one turn and exit, for scripts: the same as `chat -p MESSAGE`.
    Exec {
        /// The message.
        message: String,
        #[command(flatten)]
        chat: ChatArgs,
    },
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// List the tools the agent may call (built-in, and MCP with --mcp-config or
    /// `[mcp.servers]`) with their approval settings.
    Tools,
    /// Join this terminal account with your Discord or Slack identity (or another terminal
    /// user): without CODE, print a one-time code; with CODE, join the account that made it.
    Link {
        /// A code from `/link` or `sandpiper link` on your other account.
        code: Option<String>,
        /// Detach this terminal account from the user it was linked to.
        #[arg(long, conflicts_with = "code")]
        unlink: bool,
    },
    /// Print a one-time link (10 minutes, used once) that signs your browser in to the status
    /// page as this terminal user; `--admin` signs in as an admin (who sees everything).
    ConsoleLink {
        /// Sign in as an admin.
        #[arg(long)]
        admin: bool,
    },
    /// Show who you are to sandpiper: username and linked identities.
    Whoami,
    /// Write a commented starter configuration (asks on a terminal; never overwrites).
    Init(sandpiper::init::InitArgs),
    /// Check a deployment: config, database, model, Discord, Slack, MCP servers, the tool
    /// sandbox and the listen address; one line each, non-zero exit when something fails.
    Doctor,
    /// Print the approval audit trail: every request, decision (who, and through which
    /// path), call run unasked (and why), timeout, cancellation and grant.
    Audit(sandpiper::audit::AuditArgs),
    /// Print the model tokens used (prompt, cached, output) per user, workstream, channel or
    /// model since a date.
    Usage(sandpiper::usage::UsageArgs),
    /// Change your username.
    Rename {
        /// The new username (a-z, 0-9, `_`, `.`, `-`; at most 32 characters).
        username: String,
    },
    /// List or delete the memories you can see (global, yours, and the workstream's).
    Memory {
        #[command(subcommand)]
        command: Option<MemoryCommand>,
        /// Console workstream whose memories are included (default: the current directory's,
        /// as `sandpiper chat` picks it).
        #[arg(long, value_name = "NAME", global = true)]
        workstream: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate the configuration and print it, secrets redacted.
    Check,
}

fn main() -> std::process::ExitCode {
    // Before anything else: started as the launcher of a confined tool process, this
    // confines itself and execs the tool (see sandpiper_agent::process::confine::launcher).
    sandpiper_agent::process::confine::launcher::enter();
    let cli = Cli::parse();
    // The config first: its `[log]` section shapes the log. A config that does not load
    // is reported by the command (`doctor` as one of its checks).
    let loaded = Config::load(cli.config.as_deref(), &ProcessEnv);
    let log = loaded
        .as_ref()
        .map(|(config, _)| config.log.clone())
        .unwrap_or_default();
    let logging = match sandpiper::logging::init(&log, &ProcessEnv, log_place(&cli.command)) {
        Ok(logging) => logging,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Ok((_, source)) = &loaded {
        warn_of_env_overrides(source);
    }
    // Process-wide, set here once: orphans of tool calls (daemons, `setsid` jobs) are
    // reparented to sandpiper instead of init, so a timeout or /stop can kill and reap them.
    // See sandpiper_agent::process::tree.
    if let Err(e) = sandpiper_agent::process::signal::become_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; killed tool processes are reaped by init");
    }
    // The bot's environment and memory are not readable by a same-uid process that is not
    // root (tools run confined as well: see sandpiper_agent::process::confine).
    if let Err(e) = sandpiper_agent::process::confine::protect_this_process() {
        tracing::warn!(error = %e, "cannot make the process non-dumpable");
    }
    let result = runtime_for(&cli.command)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|runtime| {
            let result = runtime.block_on(run(cli, loaded));
            // Dropping the runtime would wait for every blocking task without limit; the
            // shutdown deadline must hold.
            runtime.shutdown_timeout(RUNTIME_GRACE);
            result
        });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            logging.fatal(&format!("{e:#}"));
            // A one-shot turn's ending is its own status, so a script tells a denial from a
            // failure.
            e.downcast_ref::<sandpiper::chat::OneShotEnded>()
                .map_or(std::process::ExitCode::FAILURE, |ended| ended.1.into())
        }
    }
}

/// Where a command logs: `chat` to a file in the data directory, so warnings do not land in
/// the conversation (the console shows each failure once, in its own words); every other
/// command to stderr.
fn log_place(command: &Command) -> sandpiper::logging::LogPlace {
    use sandpiper::logging::LogPlace;
    match command {
        Command::Chat(_) | Command::Exec { .. } => {
            defaults::chat_log_file(&ProcessEnv).map_or(LogPlace::Stderr, LogPlace::File)
        }
        _ => LogPlace::Stderr,
    }
}

/// Warns once per environment variable that replaces a value the config file sets: a
/// default baked into an image or a unit must not silently beat the mounted file. Names, not
/// values (a database URL may hold a password).
fn warn_of_env_overrides(source: &ConfigSource) {
    for o in source.env_overrides(&ProcessEnv) {
        tracing::warn!(
            variable = o.var,
            key = o.key,
            file = %source,
            "the environment overrides the config file: ${} replaces {} (unset the variable, or \
             drop the key from the file)",
            o.var,
            o.key
        );
    }
}

/// The async runtime a command runs on. `chat` runs one conversation at a time: on one
/// thread its turn's steps (the model's stream, the tool's pipes, the renderer) follow each
/// other without waking a worker thread per step, which costs more than the work itself
/// (about half of a turn's CPU was futex wake-ups between threads on a multi-threaded
/// runtime). Blocking work (file reads, searches) still goes to tokio's blocking pool, and
/// the database to sqlx's worker. `serve` runs many threads' turns at once: all cores.
fn runtime_for(command: &Command) -> tokio::runtime::Builder {
    match command {
        Command::Chat { .. } | Command::Exec { .. } => {
            tokio::runtime::Builder::new_current_thread()
        }
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
}

/// `sandpiper chat` (and `exec`, as `chat -p`).
async fn chat(args: ChatArgs, loaded: Loaded, flags: &Flags) -> anyhow::Result<()> {
    let setup = Setup::load(loaded, flags)?
        .placed(Place::Console, args.workdir.as_deref())
        .writing()?;
    sandpiper::chat::run(args, setup.config, setup.protected).await
}

/// What `Config::load` made of the file and the environment, before the command line.
type Loaded = Result<(Config, ConfigSource), ConfigError>;

/// Runs the command: each is one function. `init` and `doctor` take the configuration as it
/// loaded (a bad one is `doctor`'s to report); every other command goes through [`Setup`]
/// first.
async fn run(cli: Cli, loaded: Loaded) -> anyhow::Result<()> {
    let flags = Flags {
        mcp_config: cli.mcp_config,
        database: cli.database,
    };
    let loaded = flags.with_database(loaded)?;
    match cli.command {
        Command::Init(args) => sandpiper::init::run(&args, cli.config.as_deref()),
        Command::Doctor => doctor(loaded, flags.mcp_config.as_deref()).await,
        Command::Config {
            command: ConfigCommand::Check,
        } => config_check(Setup::load(loaded, &flags)?),
        Command::Serve => serve(Setup::load(loaded, &flags)?.for_platforms().writing()?).await,
        Command::Exec { message, mut chat } => {
            if chat.print.is_some() {
                anyhow::bail!("exec takes its message once: drop -p");
            }
            chat.print = Some(message);
            self::chat(chat, loaded, &flags).await
        }
        Command::Chat(args) => self::chat(args, loaded, &flags).await,
        Command::Mcp { command } => {
            let setup = Setup::load(loaded, &flags)?.for_platforms();
            commands::mcp(command, &setup.config, &setup.protected).await
        }
        Command::Tools => {
            let setup = Setup::load(loaded, &flags)?.for_platforms();
            commands::tools(&setup.config, &setup.protected).await
        }
        Command::Link { code, unlink } => {
            let setup = Setup::load(loaded, &flags)?.for_platforms().writing()?;
            console_account::link(&setup.config, code.as_deref(), unlink).await
        }
        Command::ConsoleLink { admin } => {
            let setup = Setup::load(loaded, &flags)?.for_platforms();
            console_account::console_link(&setup.config, admin).await
        }
        Command::Whoami => {
            console_account::whoami(&Setup::load(loaded, &flags)?.for_platforms().config).await
        }
        Command::Audit(args) => {
            let setup = Setup::load(loaded, &flags)?.for_platforms();
            sandpiper::audit::run(args, &setup.config).await
        }
        Command::Usage(args) => {
            let setup = Setup::load(loaded, &flags)?.for_platforms();
            sandpiper::usage::run(args, &setup.config).await
        }
        Command::Rename { username } => {
            let setup = Setup::load(loaded, &flags)?.for_platforms().writing()?;
            console_account::rename(&setup.config, &username).await
        }
        Command::Memory {
            command,
            workstream,
        } => {
            let setup = Setup::load(loaded, &flags)?;
            // Where `chat` here would work: `[tools] workdir`, else this directory.
            let workstream = workstream.unwrap_or_else(|| {
                let dir = setup.config.tools.workdir.as_deref().unwrap_or(&setup.cwd);
                sandpiper_channels::console::workstreams::name_for_dir(dir)
            });
            let setup = setup.for_platforms();
            console_account::memory(&setup.config, command, &workstream).await
        }
    }
}

/// The global flags that change the configuration (`--config` chose the file before).
struct Flags {
    /// `--mcp-config`: servers added to the configured ones.
    mcp_config: Option<PathBuf>,
    /// `--database`: the database instead of the configured one.
    database: Option<String>,
}

impl Flags {
    /// `--database` over the loaded configuration, for every command that reads one
    /// (`doctor` included); a relative file is relative to the current directory.
    fn with_database(&self, loaded: Loaded) -> anyhow::Result<Loaded> {
        let Some(database) = &self.database else {
            return Ok(loaded);
        };
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        Ok(loaded.map(|(mut config, source)| {
            config.database.url = defaults::database_url(database, &cwd);
            (config, source)
        }))
    }
}

/// What a command runs with: the configuration with the command line's flags over it, the
/// chat platforms' sections, the directory the command started in, and the files no tool
/// may read.
struct Setup {
    config: Config,
    channels: ChannelsConfig,
    source: ConfigSource,
    cwd: PathBuf,
    /// Files that may hold tokens: no tool may read them, asked or not.
    protected: Vec<PathBuf>,
}

impl Setup {
    /// The loaded configuration (its error is the command's), `[discord]` and `[slack]` from
    /// the same file, then `--mcp-config`. Where tools work is not set yet
    /// ([`Setup::placed`]).
    fn load(loaded: Loaded, flags: &Flags) -> anyhow::Result<Self> {
        let (mut config, source) = loaded?;
        // `[discord]` and `[slack]` from the same file: the chat channels' own sections.
        let channels = ChannelsConfig::load(&source, &ProcessEnv)?;
        if let Some(path) = &flags.mcp_config {
            config.mcp.merge_json_file(path)?;
        }
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let protected = match &source {
            ConfigSource::File(path) => Some(path.clone()),
            ConfigSource::Defaults => None,
        }
        .into_iter()
        .chain(flags.mcp_config.clone())
        .collect();
        Ok(Self {
            config,
            channels,
            source,
            cwd,
            protected,
        })
    }

    /// Sets where tools work when the configuration did not ([`defaults::workdir`]).
    fn placed(mut self, place: Place, workdir: Option<&Path>) -> Self {
        defaults::workdir(&mut self.config, place, workdir, &self.cwd, &ProcessEnv);
        self
    }

    /// [`Setup::placed`] as the chat platforms' threads work: every command but `chat`.
    fn for_platforms(self) -> Self {
        self.placed(Place::Platforms, None)
    }

    /// Creates the database's directory. Only the commands that write create the database;
    /// the others say there is none yet.
    fn writing(self) -> anyhow::Result<Self> {
        defaults::prepare_database(&self.config).with_context(|| {
            format!(
                "cannot create the database directory for {}",
                redact_url(&self.config.database.url)
            )
        })?;
        Ok(self)
    }
}

/// `sandpiper doctor`: one line per check; a failed check is a failed command.
async fn doctor(loaded: Loaded, mcp_config: Option<&Path>) -> anyhow::Result<()> {
    let failed = sandpiper::doctor::run(loaded, mcp_config).await;
    if failed > 0 {
        anyhow::bail!("{failed} check(s) failed");
    }
    Ok(())
}

/// `sandpiper config check`: the configuration `serve` would run with, secrets redacted,
/// and where `chat` run here and `serve`'s threads would work.
fn config_check(setup: Setup) -> anyhow::Result<()> {
    let mut console = setup.config.clone();
    defaults::workdir(&mut console, Place::Console, None, &setup.cwd, &ProcessEnv);
    let setup = setup.for_platforms();
    let facts = commands::Facts {
        console_workdir: defaults::workdir_of(&console, "console:default", &setup.cwd),
        platform_workdirs: defaults::workdir_of(&setup.config, "discord:ID", &setup.cwd),
        env: &ProcessEnv,
    };
    print!(
        "{}",
        commands::config_report(&setup.config, &setup.channels, &setup.source)
    );
    print!(
        "{}",
        commands::config_facts(&setup.config, &setup.channels, &facts)
    );
    Ok(())
}

/// `sandpiper serve`: the chat platforms and the HTTP endpoints until Ctrl-C or SIGTERM (see
/// [`sandpiper::node`]).
async fn serve(setup: Setup) -> anyhow::Result<()> {
    let Setup {
        config,
        channels,
        protected,
        ..
    } = setup;
    let stop_signal = stop_signals().context("cannot listen for SIGINT and SIGTERM")?;
    let listen = config.server.listen;
    let key = sandpiper::service_jwt::ServiceKey::from_env(&config.auth, &ProcessEnv)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Held until the process ends: a second node on this SQLite file is refused.
    let _single = sandpiper::single_node::lock(&config.database.url)?;
    if let Some(refused) = sandpiper::doctor::refused_discord_token(&channels.discord).await {
        anyhow::bail!("cannot start Discord: {refused}");
    }
    // One node id for the whole process: the registry's, the cluster's, the watch runner's,
    // and the `node` field of every line logged inside this span.
    let node_id = sandpiper::registry::node_id();
    let span = tracing::info_span!("node", node = %node_id);
    let agent = wiring::build_agent_in(config, wiring::protected_host(protected))
        .instrument(span.clone())
        .await?;
    wiring::announce_session(&agent, "*", Some("[approval] auto_approve")).await?;
    sandpiper::audit::prune_daily(agent.store().clone(), agent.config().audit.clone());
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Listening before the node starts: a platform retried at start (Slack unreachable)
    // still stops on SIGTERM.
    let stop = shutdown.clone();
    let signal_task = tokio::spawn(async move {
        let signal = stop_signal.await;
        tracing::info!(signal, "shutting down");
        stop.cancel();
    });
    let node =
        sandpiper::node::Node::start_as(node_id, agent.clone(), channels, key, shutdown.clone())
            .instrument(span.clone())
            .await?;
    let exit = node.join(SHUTDOWN_GRACE).instrument(span).await;
    signal_task.abort();
    if exit.left > 0 {
        tracing::warn!(
            left = exit.left,
            grace_s = SHUTDOWN_GRACE.as_secs(),
            "tasks still running at the shutdown deadline; exiting without them (a turn waiting \
             for approval resumes after the restart)"
        );
        sandpiper::startup!(
            "{} task(s) still running after {} s; exiting without them",
            exit.left,
            SHUTDOWN_GRACE.as_secs()
        );
    }
    agent.mcp().shutdown().await;
    exit.served
        .with_context(|| format!("cannot serve on {listen}"))?;
    Ok(())
}

/// How long `serve` waits at shutdown for the channels' running turns and tasks (closing the
/// gateway, a click being answered) before it exits without them. A turn waiting for approval
/// is not waited for: it stays pending in the store and resumes after the restart. Below the
/// usual 30 s a container runtime or systemd gives before SIGKILL.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long the runtime waits, after `serve` returned, for blocking work (a file read, a
/// search walk) before the process exits anyway.
const RUNTIME_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Listens for Ctrl-C (SIGINT) and SIGTERM (what `docker stop`, systemd and Kubernetes send)
/// from now on; the future names the one that came. Made before anything else starts, so a
/// signal that arrives early still stops the process cleanly.
fn stop_signals() -> std::io::Result<impl std::future::Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_takes_tool_search_flags() {
        let cli = Cli::try_parse_from([
            "sandpiper",
            "chat",
            "--tool-search",
            "on",
            "--tool-search-threshold",
            "3",
            "--tool-search-max-results",
            "7",
        ])
        .expect("parses");
        let Command::Chat(ChatArgs {
            tool_search,
            tool_search_threshold,
            tool_search_max_results,
            ..
        }) = cli.command
        else {
            panic!("not chat: {cli:?}");
        };
        assert_eq!(
            (tool_search, tool_search_threshold, tool_search_max_results),
            (
                Some(sandpiper_agent::config::ToolSearchMode::On),
                Some(3),
                Some(7)
            )
        );
        let bad = Cli::try_parse_from(["sandpiper", "chat", "--tool-search", "maybe"]);
        assert!(bad.is_err());
        let zero = Cli::try_parse_from(["sandpiper", "chat", "--tool-search-max-results", "0"]);
        assert!(zero.is_err());
    }
}
