//! `sandpiper`: a chat-ops AI agent for Discord, Slack and the terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use sandpiper::defaults::{self, Place};
use sandpiper::{commands, wiring};
use sandpiper_agent::Config;
use sandpiper_agent::config::redact_url;
use sandpiper_agent::config::{ConfigSource, ProcessEnv, ToolSearchMode};
use sandpiper_agent::people::People;
use sandpiper_agent::tools::ToolRegistry;
use sandpiper_channels::commands::account;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_channels::console::editor::TerminalLines;
use sandpiper_channels::console::{Console, ConsoleOptions, Output, command_names};
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
    Chat {
        /// Approve every tool call without asking.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Continue (or create) a named workstream.
        #[arg(long, default_value = "default", value_name = "NAME")]
        workstream: String,
        /// The directory tools work in (default: `[tools] workdir`, else the current
        /// directory).
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Dynamic tool search: auto, on or off (overrides `tools.search`).
        #[arg(long, value_name = "auto|on|off")]
        tool_search: Option<ToolSearchMode>,
        /// Total tool count that turns tool search on in auto mode (`tools.search_threshold`).
        #[arg(long, value_name = "N")]
        tool_search_threshold: Option<usize>,
        /// Most tools one search returns (`tools.search_max_results`).
        #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        tool_search_max_results: Option<usize>,
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
    Audit {
        /// Only this workstream (`discord:<thread>`, `console:default`, ...).
        #[arg(long, value_name = "KEY")]
        workstream: Option<String>,
        /// Only events this person acted in (username or shown name).
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Only events since this date (YYYY-MM-DD, UTC) or RFC 3339 time.
        #[arg(long, value_name = "DATE", value_parser = sandpiper::audit::parse_since)]
        since: Option<i64>,
        /// table, jsonl or csv.
        #[arg(long, value_enum, default_value_t = sandpiper::audit::AuditFormat::Table)]
        format: sandpiper::audit::AuditFormat,
    },
    /// Change your username.
    Rename {
        /// The new username (a-z, 0-9, `_`, `.`, `-`; at most 32 characters).
        username: String,
    },
    /// List or delete the memories you can see (global, yours, and the workstream's).
    Memory {
        #[command(subcommand)]
        command: Option<MemoryCommand>,
        /// Workstream whose memories are included.
        #[arg(long, default_value = "default", value_name = "NAME", global = true)]
        workstream: String,
    },
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Connected servers and their tools.
    List,
    /// Re-list tools, resources and prompts (reconnecting a disconnected server) and show what
    /// was added and removed — in this command's own process only: a running `serve` is
    /// refreshed from chat with `/mcp refresh [server]`.
    Refresh {
        /// Only this server.
        server: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// List memories (the default).
    List,
    /// Delete a memory by name.
    Delete {
        /// The memory's name.
        name: String,
        /// global, workstream or user (needed when the name exists in several).
        #[arg(long)]
        scope: Option<String>,
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
    if let Err(e) = sandpiper::logging::init(&log, &ProcessEnv) {
        eprintln!("error: {e}");
        return std::process::ExitCode::FAILURE;
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
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
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
        Command::Chat { .. } => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
}

async fn run(
    cli: Cli,
    loaded: Result<(Config, ConfigSource), sandpiper_agent::config::ConfigError>,
) -> anyhow::Result<()> {
    match &cli.command {
        Command::Init(args) => return sandpiper::init::run(args, cli.config.as_deref()),
        Command::Doctor => {
            let failed = sandpiper::doctor::run(loaded, cli.mcp_config.as_deref()).await;
            if failed > 0 {
                anyhow::bail!("{failed} check(s) failed");
            }
            return Ok(());
        }
        _ => {}
    }
    let (mut config, source) = loaded?;
    // `[discord]` and `[slack]` from the same file: the chat channels' own sections.
    let channels = ChannelsConfig::load(&source, &ProcessEnv)?;
    if let Some(path) = &cli.mcp_config {
        config.mcp.merge_json_file(path)?;
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    if let Some(database) = &cli.database {
        config.database.url = defaults::database_url(database, &cwd);
    }
    // Where `chat` run here would work and where `serve`'s threads work, for `config check`.
    let workdirs = [Place::Console, Place::Platforms].map(|place| {
        let mut config = config.clone();
        defaults::workdir(&mut config, place, None, &cwd, &ProcessEnv);
        config
    });
    match &cli.command {
        Command::Chat { workdir, .. } => defaults::workdir(
            &mut config,
            Place::Console,
            workdir.as_deref(),
            &cwd,
            &ProcessEnv,
        ),
        _ => defaults::workdir(&mut config, Place::Platforms, None, &cwd, &ProcessEnv),
    }
    // Only the commands that write create the database; the others say there is none yet.
    if matches!(
        cli.command,
        Command::Serve | Command::Chat { .. } | Command::Link { .. } | Command::Rename { .. }
    ) {
        defaults::prepare_database(&config).with_context(|| {
            format!(
                "cannot create the database directory for {}",
                redact_url(&config.database.url)
            )
        })?;
    }
    // Files that may hold tokens: no tool may read them, asked or not.
    let protected: Vec<PathBuf> = match &source {
        ConfigSource::File(path) => Some(path.clone()),
        ConfigSource::Defaults => None,
    }
    .into_iter()
    .chain(cli.mcp_config.clone())
    .collect();
    match cli.command {
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            let facts = commands::Facts {
                console_workdir: defaults::workdir_of(&workdirs[0], "console:default", &cwd),
                platform_workdirs: defaults::workdir_of(&workdirs[1], "discord:ID", &cwd),
                env: &ProcessEnv,
            };
            print!("{}", commands::config_report(&config, &channels, &source));
            print!("{}", commands::config_facts(&config, &channels, &facts));
            Ok(())
        }
        Command::Serve => serve(config, channels, protected).await,
        Command::Init(_) | Command::Doctor => {
            unreachable!("init and doctor are answered before the configuration is required")
        }
        Command::Mcp { command } => {
            let mcp = wiring::start_mcp_once(&config, &protected).await;
            // Servers connect in the background; this command reports their first attempt.
            mcp.first_attempts(config.mcp.connect_timeout + std::time::Duration::from_secs(1))
                .await;
            let (text, failed) = match command {
                McpCommand::List => (commands::mcp_list(&mcp), commands::mcp_failed(&mcp)),
                // Its report names each server's error; a refresh that failed is not a
                // broken installation.
                McpCommand::Refresh { server } => (
                    commands::mcp_refresh_cli(&mcp.refresh(server.as_deref()).await),
                    Vec::new(),
                ),
            };
            print!("{text}");
            mcp.shutdown().await;
            if !failed.is_empty() {
                anyhow::bail!("MCP server {} failed (see above)", failed.join(", "));
            }
            Ok(())
        }
        Command::Tools => {
            print!("{}", commands::tools_table(&ToolRegistry::builtin()?));
            if !config.mcp.servers.is_empty() {
                let mcp = wiring::start_mcp_once(&config, &protected).await;
                mcp.first_attempts(config.mcp.connect_timeout + std::time::Duration::from_secs(1))
                    .await;
                print!("{}", commands::mcp_tools_table(&mcp, &config));
                let failed = commands::mcp_failed(&mcp);
                mcp.shutdown().await;
                if !failed.is_empty() {
                    anyhow::bail!("MCP server {} failed (see above)", failed.join(", "));
                }
            }
            Ok(())
        }
        Command::Link { code, unlink } => {
            let me = os_user();
            let people = People::new(wiring::open_store(&config).await?);
            println!(
                "{}",
                account::link(&people, console_person(&me), code.as_deref(), unlink).await?
            );
            Ok(())
        }
        Command::ConsoleLink { admin } => {
            let me = os_user();
            let store = wiring::open_store(&config).await?;
            let who = sandpiper_agent::store::web_access::WebIdentity {
                user_id: Some(
                    account::user_id(&People::new(store.clone()), console_person(&me)).await?,
                ),
                admin,
            };
            let link = sandpiper_agent::sign_in::make_link(&store, &config.server, &who).await?;
            println!("{}", link.message());
            Ok(())
        }
        Command::Whoami => {
            if let Some(none) = defaults::no_database_yet(&config) {
                println!("{none}");
                return Ok(());
            }
            let me = os_user();
            let people = People::new(wiring::open_store(&config).await?);
            println!("{}", account::whoami(&people, console_person(&me)).await?);
            Ok(())
        }
        Command::Audit {
            workstream,
            user,
            since,
            format,
        } => {
            if let Some(none) = defaults::no_database_yet(&config) {
                println!("{none}");
                return Ok(());
            }
            let store = wiring::open_store(&config).await?;
            let filter = sandpiper_agent::store::audit::AuditFilter {
                workstream,
                user,
                since,
                limit: None,
            };
            print!(
                "{}",
                sandpiper::audit::report(&store, &filter, format).await?
            );
            Ok(())
        }
        Command::Rename { username } => {
            let me = os_user();
            let people = People::new(wiring::open_store(&config).await?);
            println!(
                "{}",
                account::rename(&people, console_person(&me), &username).await?
            );
            Ok(())
        }
        Command::Memory {
            command,
            workstream,
        } => {
            if let Some(none) = defaults::no_database_yet(&config) {
                println!("{none}");
                return Ok(());
            }
            let me = os_user();
            let people = People::new(wiring::open_store(&config).await?);
            let workstream =
                sandpiper_agent::workstream::WorkstreamKey::console(&workstream).to_string();
            let text = match command.unwrap_or(MemoryCommand::List) {
                MemoryCommand::List => {
                    account::memory_list(&people, console_person(&me), &workstream).await?
                }
                MemoryCommand::Delete { name, scope } => {
                    account::memory_delete(
                        &people,
                        console_person(&me),
                        &workstream,
                        &name,
                        scope.as_deref(),
                        // The console runs as the operator, who holds the database anyway.
                        true,
                    )
                    .await?
                }
            };
            println!("{}", text.trim_end());
            Ok(())
        }
        Command::Chat {
            yes,
            workstream,
            workdir: _,
            tool_search,
            tool_search_threshold,
            tool_search_max_results,
        } => {
            let auto_source = Some(if yes {
                "--yes"
            } else {
                "[approval] auto_approve"
            });
            if yes {
                config.approval.auto_approve = true;
            }
            let tools = &mut config.tools;
            tools.search = tool_search.unwrap_or(tools.search);
            tools.search_threshold = tool_search_threshold.unwrap_or(tools.search_threshold);
            tools.search_max_results = tool_search_max_results.unwrap_or(tools.search_max_results);
            if let Some(hint) = commands::missing_api_key(&config) {
                anyhow::bail!(hint);
            }
            let auto_approve = config.approval.auto_approve;
            let agent = wiring::build_agent_in(config, protected_host(protected)).await?;
            let key = format!("console:{workstream}");
            wiring::announce_session(&agent, &key, auto_source).await?;
            let interactive = std::io::stdin().is_terminal();
            let user = os_user();
            let options = ConsoleOptions {
                workstream,
                user: user.clone(),
                auto_approve,
                interactive,
                styled: std::io::stdout().is_terminal(),
            };
            let out: Output = Arc::new(Mutex::new(std::io::stdout()));
            let console = if interactive {
                let history = defaults::history_file(&ProcessEnv, &user);
                let lines = TerminalLines::start(history, command_names())
                    .context("cannot start the line editor")?;
                Console::with_lines(agent.clone(), options, Arc::new(lines), out)
            } else {
                Console::new(agent.clone(), options, stdin_lines(), out)
            };
            // This workstream's watches, while the console is open.
            let mut starters = sandpiper_channels::thread::Starters::default();
            starters.add(console.starter());
            let stop_watches = tokio_util::sync::CancellationToken::new();
            let watches = wiring::start_watches(&agent, starters, stop_watches.clone());
            let interrupter = console.interrupter();
            tokio::spawn(async move {
                while tokio::signal::ctrl_c().await.is_ok() {
                    if !interrupter.interrupt() {
                        eprintln!("\n(nothing to stop; Ctrl-D or /quit to leave)");
                    }
                }
            });
            let report = console.run().await;
            stop_watches.cancel();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, watches).await;
            agent.mcp().shutdown().await;
            // A script piping messages in learns of a failed turn from the exit code; at a
            // terminal the person saw the error and the session's end is not a verdict.
            if !interactive && !report.succeeded() {
                anyhow::bail!(
                    "{} of {} turns failed (the errors are shown above)",
                    report.failed,
                    report.turns
                );
            }
            Ok(())
        }
    }
}

/// `sandpiper serve`: the chat platforms and the HTTP endpoints until Ctrl-C or SIGTERM (see
/// [`sandpiper::node`]).
async fn serve(
    config: Config,
    channels: ChannelsConfig,
    protected: Vec<PathBuf>,
) -> anyhow::Result<()> {
    let stop_signal = stop_signals().context("cannot listen for SIGINT and SIGTERM")?;
    let listen = config.server.listen;
    let key = sandpiper::service_jwt::ServiceKey::from_env(&config.auth, &ProcessEnv)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Held until the process ends: a second node on this SQLite file is refused.
    let _single = sandpiper::single_node::lock(&config.database.url)?;
    // One node id for the whole process: the registry's, the cluster's, the watch runner's,
    // and the `node` field of every line logged inside this span.
    let node_id = sandpiper::registry::node_id();
    let span = tracing::info_span!("node", node = %node_id);
    let agent = wiring::build_agent_in(config, protected_host(protected))
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

/// This process as the agent's host, with `protected` (the config files) kept from tools.
fn protected_host(protected: Vec<PathBuf>) -> sandpiper_agent::turn::agent::Host<'static> {
    sandpiper_agent::turn::agent::Host {
        protected_files: protected,
        ..Default::default()
    }
}

/// The person at the terminal as a console identity.
fn console_person(os_user: &str) -> account::Person<'_> {
    account::Person {
        platform: sandpiper_channels::console::PLATFORM,
        platform_user_id: os_user,
        display_name: os_user,
    }
}

/// The person at the terminal: the OS user name.
fn os_user() -> String {
    defaults::os_user(&ProcessEnv)
}

/// Reads stdin lines on a blocking thread into a bounded channel.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = line.trim_end_matches(['\n', '\r']).to_owned();
                    if tx.blocking_send(text).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
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
        let Command::Chat {
            tool_search,
            tool_search_threshold,
            tool_search_max_results,
            ..
        } = cli.command
        else {
            panic!("not chat: {cli:?}");
        };
        assert_eq!(
            (tool_search, tool_search_threshold, tool_search_max_results),
            (Some(ToolSearchMode::On), Some(3), Some(7))
        );
        let bad = Cli::try_parse_from(["sandpiper", "chat", "--tool-search", "maybe"]);
        assert!(bad.is_err());
        let zero = Cli::try_parse_from(["sandpiper", "chat", "--tool-search-max-results", "0"]);
        assert!(zero.is_err());
    }
}
