//! `sandpiper`: a chat-ops AI agent for Discord, Slack and the terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use sandpiper::{commands, wiring};
use sandpiper_agent::Config;
use sandpiper_agent::config::ProcessEnv;
use sandpiper_agent::tools::ToolRegistry;
use sandpiper_channels::console::{Console, ConsoleOptions, Output};

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
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Chat with the agent in the terminal.
    Chat {
        /// Approve every tool call without asking.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Continue (or create) a named workstream.
        #[arg(long, default_value = "default", value_name = "NAME")]
        workstream: String,
    },
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// List the built-in tools and their approval settings.
    Tools,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate the configuration and print it, secrets redacted.
    Check,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|runtime| runtime.block_on(run(cli)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SANDPIPER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (mut config, source) = Config::load(cli.config.as_deref(), &ProcessEnv)?;
    match cli.command {
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            print!("{}", commands::config_report(&config, &source));
            Ok(())
        }
        Command::Tools => {
            print!("{}", commands::tools_table(&ToolRegistry::builtin()?));
            Ok(())
        }
        Command::Chat { yes, workstream } => {
            if yes {
                config.approval.auto_approve = true;
            }
            let auto_approve = config.approval.auto_approve;
            let agent = wiring::build_agent(config).await?;
            let interactive = std::io::stdin().is_terminal();
            let options = ConsoleOptions {
                workstream,
                user: std::env::var("USER").unwrap_or_else(|_| "local".into()),
                auto_approve,
                interactive,
            };
            let out: Output = Arc::new(Mutex::new(std::io::stdout()));
            let console = Console::new(agent, options, stdin_lines(), out);
            let interrupter = console.interrupter();
            tokio::spawn(async move {
                while tokio::signal::ctrl_c().await.is_ok() {
                    if !interrupter.interrupt() {
                        eprintln!("\n(nothing to stop; Ctrl-D or /quit to leave)");
                    }
                }
            });
            console.run().await;
            Ok(())
        }
    }
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
