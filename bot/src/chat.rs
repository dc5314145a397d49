//! `sandpiper chat`: one workstream in the terminal, with the line editor on a terminal and
//! one message per stdin line otherwise; the workstream's watches run while it is open, and
//! Ctrl-C stops the running turn rather than the process.
//!
//! Like [`crate::init::run`], [`run`] is the binary's edge: it prints, and its errors are
//! reported by `main` as they are.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use sandpiper_agent::Config;
use sandpiper_agent::config::{ProcessEnv, ToolSearchMode};
use sandpiper_channels::console::editor::TerminalLines;
use sandpiper_channels::console::oneshot::{Ending, OneShot};
use sandpiper_channels::console::workstreams;
use sandpiper_channels::console::{Console, ConsoleOptions, Interrupter, Output, command_names};

use crate::{commands, defaults, wiring};

/// The flags of `sandpiper chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChatArgs {
    /// Approve every tool call without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Continue (or create) a named workstream (default: the working directory's,
    /// `<dir name>-<short hash of its path>`).
    #[arg(long, value_name = "NAME", conflicts_with = "resume")]
    pub workstream: Option<String>,
    /// List the console's workstreams (last active, directory, last message) and exit.
    #[arg(long, conflicts_with_all = ["print", "resume", "workstream"])]
    pub list: bool,
    /// Continue a listed workstream: NAME, or the last used one.
    #[arg(long, value_name = "NAME", num_args = 0..=1)]
    pub resume: Option<Option<String>>,
    /// The directory tools work in (default: `[tools] workdir`, else the current
    /// directory).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Dynamic tool search: auto, on or off (overrides `tools.search`).
    #[arg(long, value_name = "auto|on|off")]
    pub tool_search: Option<ToolSearchMode>,
    /// Total tool count that turns tool search on in auto mode (`tools.search_threshold`).
    #[arg(long, value_name = "N")]
    pub tool_search_threshold: Option<usize>,
    /// Most tools one search returns (`tools.search_max_results`).
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub tool_search_max_results: Option<usize>,
    /// Run this one message as one turn and exit (for scripts): 0 when it was answered, 1
    /// when the turn failed, 3 when a call was denied, 130 when Ctrl-C stopped it. Approvals follow `--yes` or a grant;
    /// any other call that asks is denied, never asked on stdin.
    #[arg(long, short = 'p', value_name = "MESSAGE")]
    pub print: Option<String>,
    /// With `-p`: one JSON event per line on stdout (text deltas, tool calls and results,
    /// approvals, usage, the result).
    #[arg(long)]
    pub json: bool,
}

/// A one-shot turn that did not succeed: its exit status (the reason is on the output).
#[derive(Debug, thiserror::Error)]
#[error("the one-shot turn {0}")]
pub struct OneShotEnded(pub &'static str, pub u8);

/// How long the end of a session waits for the watch runner to stop (releasing its claims),
/// as long as `serve` waits for its tasks at shutdown.
const WATCHES_GRACE: Duration = Duration::from_secs(10);

/// Runs the session until the person leaves (Ctrl-D, `/quit`) or stdin ends. `config` has
/// its working directory set (`--workdir` is applied by the caller with the other defaults);
/// `protected` are the files no tool may read. A piped session with a failed turn is an
/// error. With `-p` it runs that one message instead and ends with [`OneShotEnded`] when
/// the turn did not succeed.
pub async fn run(
    args: ChatArgs,
    mut config: Config,
    protected: Vec<PathBuf>,
) -> anyhow::Result<()> {
    let auto_source = Some(if args.yes {
        "--yes"
    } else {
        "[approval] auto_approve"
    });
    if args.list {
        return list(&config).await;
    }
    apply_flags(&mut config, &args);
    if let Some(hint) = commands::missing_api_key(&config) {
        anyhow::bail!(hint);
    }
    if args.json && args.print.is_none() {
        anyhow::bail!("--json is for one-shot turns: give the message with -p \"…\"");
    }
    let auto_approve = config.approval.auto_approve;
    let agent = wiring::build_agent_in(config, wiring::protected_host(protected)).await?;
    let workstream = workstream_name(&args, &agent).await?;
    let key = format!("console:{workstream}");
    wiring::announce_session(&agent, &key, auto_source).await?;
    if let Some(text) = args.print {
        let one_shot = OneShot {
            workstream,
            user: defaults::os_user(&ProcessEnv),
            auto_approve,
            json: args.json,
            styled: std::io::stdout().is_terminal(),
        };
        let out: Output = Arc::new(Mutex::new(std::io::stdout()));
        // Ctrl-C stops the turn (its tools too) and the process says so in its exit status.
        let stop = tokio_util::sync::CancellationToken::new();
        let on_signal = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_signal.cancel();
            }
        });
        let ending = one_shot.run(&agent, text, out, stop).await;
        agent.mcp().shutdown().await;
        return match ending {
            Ending::Answered => Ok(()),
            Ending::Failed => Err(OneShotEnded("failed", ending.exit_code()).into()),
            Ending::Refused => Err(OneShotEnded("was refused", ending.exit_code()).into()),
            Ending::Stopped => Err(OneShotEnded("was stopped", ending.exit_code()).into()),
        };
    }
    let interactive = std::io::stdin().is_terminal();
    let user = defaults::os_user(&ProcessEnv);
    let options = ConsoleOptions {
        workstream,
        user: user.clone(),
        auto_approve,
        interactive,
        styled: std::io::stdout().is_terminal(),
    };
    let console = if interactive {
        let history = defaults::history_file(&ProcessEnv, &user);
        let interrupter = Interrupter::default();
        let lines = TerminalLines::start(history, command_names(), interrupter.clone())
            .context("cannot start the line editor")?;
        let out = lines.output();
        Console::with_lines(agent.clone(), options, Arc::new(lines), out, interrupter)
    } else {
        let out: Output = Arc::new(Mutex::new(std::io::stdout()));
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
    let _ = tokio::time::timeout(WATCHES_GRACE, watches).await;
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

/// `--list`: the console's workstreams (never creates the database).
async fn list(config: &Config) -> anyhow::Result<()> {
    if defaults::no_database_yet(config).is_some() {
        print!("{}", workstreams::list(&[], None));
        return Ok(());
    }
    let store = wiring::open_existing_store(config).await?;
    print!(
        "{}",
        workstreams::list(&store.console_workstreams().await?, None)
    );
    Ok(())
}

/// The workstream this session continues: `--workstream`, `--resume`'s, or the working
/// directory's.
async fn workstream_name(
    args: &ChatArgs,
    agent: &sandpiper_agent::Agent,
) -> anyhow::Result<String> {
    if let Some(name) = &args.workstream {
        return Ok(name.clone());
    }
    if let Some(wanted) = &args.resume {
        let all = agent.console_workstreams().await?;
        return workstreams::pick(&all, wanted.as_deref()).map_err(anyhow::Error::msg);
    }
    let dir = match &agent.config().tools.workdir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    Ok(workstreams::name_for_dir(&dir))
}

/// `--yes` and the tool search flags over the configuration.
fn apply_flags(config: &mut Config, args: &ChatArgs) {
    if args.yes {
        config.approval.auto_approve = true;
    }
    let tools = &mut config.tools;
    tools.search = args.tool_search.unwrap_or(tools.search);
    tools.search_threshold = args.tool_search_threshold.unwrap_or(tools.search_threshold);
    tools.search_max_results = args
        .tool_search_max_results
        .unwrap_or(tools.search_max_results);
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
