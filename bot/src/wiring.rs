//! Builds a running agent from configuration: the one path both the binary and the tests use.

use std::path::PathBuf;
use std::sync::Arc;

use sandpiper_agent::config::{Env, ProcessEnv};
use sandpiper_agent::mcp::{McpManager, McpOptions};
use sandpiper_agent::model::ChatModel;
use sandpiper_agent::process::env::ChildEnv;
use sandpiper_agent::store::prompt_templates::McpPromptSpec;
use sandpiper_agent::store::{Store, redact_url};
use sandpiper_agent::turn::agent::Host;
use sandpiper_agent::{Agent, Config};

/// Why start-up failed.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    /// The model client could not be built.
    #[error("cannot set up the model: {0}")]
    Model(#[from] sandpiper_agent::model::ModelError),
    /// The database could not be opened or migrated.
    #[error("cannot open the database {url}: {source}")]
    Store {
        /// The URL, password redacted.
        url: String,
        /// The error.
        source: sandpiper_agent::store::StoreError,
    },
    /// The agent could not be built.
    #[error(transparent)]
    Agent(#[from] sandpiper_agent::AgentError),
}

/// Installs the process-wide TLS provider (ring) once; see CRATES.md "One TLS crypto provider".
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The configured model provider.
pub fn build_model(config: &Config) -> Result<Arc<dyn ChatModel>, WiringError> {
    install_crypto_provider();
    Ok(sandpiper_agent::turn::agent::models::client(&config.model)?)
}

/// Opens the configured database (running migrations).
pub async fn open_store(config: &Config) -> Result<Store, WiringError> {
    let db = &config.database;
    Store::connect_with(&db.url, db.max_connections, db.acquire_timeout)
        .await
        .map_err(|source| WiringError::Store {
            url: redact_url(&config.database.url),
            source,
        })
}

/// Opens the configured database for a command that only reads: a SQLite file that does
/// not exist is an error, never created ([`Store::open_existing`]).
pub async fn open_existing_store(config: &Config) -> Result<Store, WiringError> {
    let db = &config.database;
    Store::open_existing(&db.url, db.max_connections, db.acquire_timeout)
        .await
        .map_err(|source| WiringError::Store {
            url: redact_url(&config.database.url),
            source,
        })
}

/// Connects the configured MCP servers (never fails: a bad server is reported in its status).
/// Stdio servers are confined ([`sandpiper_agent::process::confine`]): `protected` (the config files)
/// and the database files are hidden from them.
pub async fn start_mcp(config: &Config, protected: &[PathBuf]) -> Arc<McpManager> {
    start_mcp_with_env(config, &ProcessEnv, protected).await
}

/// [`start_mcp`] for a one-shot command that reports what the servers did (`mcp list`,
/// `doctor`): each server is tried once, and [`McpManager::first_attempts`] waits for that.
pub async fn start_mcp_once(config: &Config, protected: &[PathBuf]) -> Arc<McpManager> {
    start_mcp_with(config, &ProcessEnv, protected, false).await
}

/// [`start_mcp`] with stdio servers' environment built from `env` (a seam for tests).
pub async fn start_mcp_with_env(
    config: &Config,
    env: &dyn Env,
    protected: &[PathBuf],
) -> Arc<McpManager> {
    start_mcp_with(config, env, protected, true).await
}

async fn start_mcp_with(
    config: &Config,
    env: &dyn Env,
    protected: &[PathBuf],
    retry_connects: bool,
) -> Arc<McpManager> {
    install_crypto_provider();
    if config.mcp.servers.is_empty() {
        return McpManager::empty();
    }
    let mut hidden = sandpiper_agent::tools::path_policy::database_files(&config.database.url);
    hidden.extend_from_slice(protected);
    let confinement = sandpiper_agent::process::confine::Confinement::probe(&hidden);
    let options = McpOptions {
        child_env: ChildEnv::for_mcp_servers(env, &config.tools).confined(confinement),
        max_output_bytes: config.tools.max_output_bytes,
        retry_connects,
        ..McpOptions::from(&config.mcp)
    };
    McpManager::start(config.mcp.servers.clone(), options).await
}

/// Keeps the `prompt_templates` table in step with the prompts the MCP servers offer: at once,
/// and whenever a server's lists change. Ends when the manager is dropped.
pub fn sync_prompt_templates(mcp: &Arc<McpManager>, store: Store) {
    let weak = Arc::downgrade(mcp);
    let mut generation = mcp.generation();
    tokio::spawn(async move {
        loop {
            let Some(mcp) = weak.upgrade() else { break };
            sync_prompts_once(&mcp, &store).await;
            drop(mcp);
            if generation.changed().await.is_err() {
                break;
            }
        }
    });
}

/// One sync of every connected server's prompts into `prompt_templates`.
pub async fn sync_prompts_once(mcp: &McpManager, store: &Store) {
    let catalog = mcp.catalog();
    for server in mcp.status().into_iter().filter(|s| s.connected) {
        let specs: Vec<McpPromptSpec> = catalog
            .prompts
            .iter()
            .filter(|p| p.server == server.name)
            .map(|p| McpPromptSpec {
                name: format!("mcp__{}__{}", p.server, p.name),
                description: p.description.clone(),
                arguments: serde_json::to_string(
                    &p.arguments
                        .iter()
                        .map(|a| {
                            serde_json::json!({
                                "name": a.name,
                                "description": a.description,
                                "required": a.required,
                            })
                        })
                        .collect::<Vec<_>>(),
                )
                .unwrap_or_else(|_| "[]".into()),
            })
            .collect();
        match store.sync_mcp_templates(&server.name, &specs).await {
            Ok(r) if r.added.len() + r.updated.len() + r.removed.len() > 0 => tracing::info!(
                server = %server.name,
                added = r.added.len(),
                updated = r.updated.len(),
                removed = r.removed.len(),
                "prompt templates synced"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(server = %server.name, error = %e, "prompt template sync failed")
            }
        }
    }
}

/// The whole agent: model, store, tools, MCP servers.
pub async fn build_agent(config: Config) -> Result<Agent, WiringError> {
    build_agent_in(config, Host::default()).await
}

/// [`build_agent`] in `host`: the config file it was loaded from (no tool may read or change
/// it) and the environment tools' processes and MCP servers start from (tests plant secrets
/// there to show they never reach a tool).
pub async fn build_agent_in(config: Config, host: Host<'_>) -> Result<Agent, WiringError> {
    let model = build_model(&config)?;
    let store = open_store(&config).await?;
    let mcp = start_mcp_with_env(&config, host.env, &host.protected_files).await;
    sync_prompt_templates(&mcp, store.clone());
    tracing::info!(
        model = %config.model.model,
        provider = ?config.model.provider,
        database = %redact_url(&config.database.url),
        "sandpiper ready"
    );
    let agent = Agent::with_host(config, model, store.clone(), mcp, host)?;
    sandpiper_agent::store::recall::index_in_background(store);
    Ok(agent)
}

/// This process as the agent's host, with `protected` (the config files) kept from tools.
pub fn protected_host(protected: Vec<PathBuf>) -> Host<'static> {
    Host {
        protected_files: protected,
        ..Default::default()
    }
}

/// At start: prunes the audit trail, and when every call is approved (`auto_source` says what
/// turned it on) prints the warning banner and records it in the audit trail.
pub async fn announce_session(
    agent: &Agent,
    workstream: &str,
    auto_source: Option<&str>,
) -> Result<(), sandpiper_agent::store::StoreError> {
    let banner = sandpiper_agent::approvals::ledger::session_started(
        agent.store(),
        agent.config(),
        workstream,
        auto_source,
    )
    .await?;
    if let Some(banner) = banner {
        eprintln!("{banner}");
    }
    Ok(())
}

/// Starts the watch runner for the workstreams `starters` show (Discord and Slack threads in
/// `serve`, the console's workstream in `chat`); it stops, releasing its claims, when
/// `shutdown` is cancelled.
pub fn start_watches(
    agent: &Agent,
    starters: sandpiper_channels::thread::Starters,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let runner = sandpiper_agent::watch::WatchRunner::new(agent.clone(), Arc::new(starters));
    tokio::spawn(runner.run(shutdown))
}
