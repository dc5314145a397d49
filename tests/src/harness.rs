//! Drives the real wiring: an [`Agent`] built by `sandpiper::wiring` against a fake LLM and a
//! test database, and the real console channel fed with scripted input.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandpiper::wiring;
use sandpiper_agent::config::Provider;
use sandpiper_agent::protocol::{ApprovalItem, Approver, Decision, TurnEvent, TurnSink};
use sandpiper_agent::workstream::WorkdirLayout;
use sandpiper_agent::{Agent, Config};
use sandpiper_channels::config::{DiscordConfig, SlackConfig};
use sandpiper_channels::console::{Console, ConsoleOptions, Interrupter, Output, SessionReport};
use tokio::sync::mpsc;

use crate::db::TestDb;

/// What one `sandpiper.toml` holds: the agent's configuration and the chat channels'
/// sections. Derefs to the agent's part, so `config.tools.…` and `config.discord.…` both read
/// as they do in the file.
#[derive(Debug, Clone, Default)]
pub struct TestConfig {
    /// Everything but `[discord]` and `[slack]`.
    pub core: Config,
    /// `[discord]`.
    pub discord: DiscordConfig,
    /// `[slack]`.
    pub slack: SlackConfig,
}

impl std::ops::Deref for TestConfig {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.core
    }
}

impl std::ops::DerefMut for TestConfig {
    fn deref_mut(&mut self) -> &mut Config {
        &mut self.core
    }
}

impl From<TestConfig> for Config {
    fn from(config: TestConfig) -> Config {
        config.core
    }
}

impl From<Config> for TestConfig {
    fn from(core: Config) -> TestConfig {
        TestConfig {
            core,
            ..Default::default()
        }
    }
}

/// A configuration pointing at a fake LLM's OpenAI endpoint, a test database and a work dir
/// (the root of the workstreams' directories: see [`workstream_dir`]).
pub fn config(db: &TestDb, llm_base_url: &str, workdir: &Path) -> TestConfig {
    let mut c = Config::for_test();
    c.database.url = db.url.clone();
    c.database.max_connections = 4;
    c.model.provider = Provider::Openai;
    c.model.base_url = Some(llm_base_url.to_owned());
    c.model.model = "fake-model".into();
    c.model.max_retries = 1;
    c.model.timeout = Duration::from_secs(20);
    c.tools.workdir = Some(workdir.to_owned());
    c.into()
}

/// Builds the agent through the binary's wiring.
pub async fn agent(config: impl Into<Config>) -> Agent {
    let agent = wiring::build_agent(config.into())
        .await
        .expect("agent builds");
    mcp_attempted(&agent).await;
    agent
}

/// Waits until every configured MCP server's first connection attempt has ended: servers
/// connect in the background, and a test's first turn expects the tools of those that can.
pub async fn mcp_attempted(agent: &Agent) {
    let limit = agent.config().mcp.connect_timeout + Duration::from_secs(5);
    agent.mcp().first_attempts(limit).await;
}

/// Builds the agent as the binary does when it was started with a config file (`protected`):
/// no tool may read or change those files.
pub async fn agent_protecting(config: impl Into<Config>, protected: Vec<PathBuf>) -> Agent {
    let host = sandpiper_agent::turn::agent::Host {
        protected_files: protected,
        ..Default::default()
    };
    let agent = wiring::build_agent_in(config.into(), host)
        .await
        .expect("agent builds");
    mcp_attempted(&agent).await;
    agent
}

/// The working directory of workstream `key` under `config` (per workstream by default),
/// created, so a test can put files there before the agent first uses it.
pub fn workstream_dir(config: &Config, key: &str) -> PathBuf {
    let cwd = std::env::current_dir().expect("current dir");
    let layout = WorkdirLayout::new(
        config.tools.workdir.as_deref(),
        config.tools.workdir_mode,
        &cwd,
    );
    let dir = layout.dir_for(key);
    std::fs::create_dir_all(&dir).expect("workstream dir");
    dir
}

/// A `Write` into shared memory, readable while the console runs.
#[derive(Debug, Clone, Default)]
pub struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A console running in the background, fed line by line like a piped stdin.
pub struct ConsoleRun {
    input: Option<mpsc::Sender<String>>,
    /// What the console printed.
    pub output: SharedBuf,
    /// Ctrl-C.
    pub interrupter: Interrupter,
    /// Starts turns in the console's workstream from outside the terminal.
    pub starter: Arc<dyn sandpiper_channels::thread::TurnStarter>,
    task: tokio::task::JoinHandle<SessionReport>,
}

impl ConsoleRun {
    /// Starts the real console channel on `agent` (non-interactive, like piped stdin).
    pub fn start(agent: Agent, workstream: &str, user: &str, auto_approve: bool) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let output = SharedBuf::default();
        let out: Output = Arc::new(Mutex::new(output.clone()));
        let console = Console::new(
            agent,
            ConsoleOptions {
                workstream: workstream.to_owned(),
                user: user.to_owned(),
                auto_approve,
                interactive: false,
                styled: false,
            },
            rx,
            out,
        );
        let interrupter = console.interrupter();
        let starter = console.starter();
        let task = tokio::spawn(async move { console.run().await });
        Self {
            input: Some(tx),
            output,
            starter,
            interrupter,
            task,
        }
    }

    /// Types one line.
    pub async fn send(&self, line: &str) {
        if let Some(tx) = &self.input {
            tx.send(line.to_owned()).await.expect("console is reading");
        }
    }

    /// Waits until the output contains `needle`; panics with the output after `timeout`.
    pub async fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            let text = self.output.text();
            if text.contains(needle) {
                return text;
            }
            assert!(
                start.elapsed() < timeout,
                "console output never contained {needle:?}; output so far:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Ends input (like Ctrl-D) and waits for the console to finish every queued message.
    pub async fn finish(self) -> String {
        self.finish_with_report().await.0
    }

    /// [`ConsoleRun::finish`], with how many turns ran and failed.
    pub async fn finish_with_report(mut self) -> (String, SessionReport) {
        self.input.take();
        let report = tokio::time::timeout(Duration::from_secs(60), &mut self.task)
            .await
            .expect("console finishes")
            .expect("console task does not panic");
        (self.output.text(), report)
    }
}

/// Records every turn event.
#[derive(Debug, Default, Clone)]
pub struct RecordingSink(Arc<Mutex<Vec<TurnEvent>>>);

impl RecordingSink {
    /// Events so far.
    pub fn events(&self) -> Vec<TurnEvent> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl TurnSink for RecordingSink {
    fn event(&self, event: TurnEvent) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(event);
    }
}

/// Answers approvals from a queue of decisions and records what it was asked.
#[derive(Debug, Default, Clone)]
pub struct ScriptedApprover {
    decisions: Arc<Mutex<Vec<Decision>>>,
    asked: Arc<Mutex<Vec<Vec<ApprovalItem>>>>,
}

impl ScriptedApprover {
    /// Decisions given in order, across batches.
    pub fn new(decisions: Vec<Decision>) -> Self {
        Self {
            decisions: Arc::new(Mutex::new(decisions)),
            asked: Arc::default(),
        }
    }

    /// Every batch it was asked about.
    pub fn asked(&self) -> Vec<Vec<ApprovalItem>> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait::async_trait]
impl Approver for ScriptedApprover {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        self.asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(items.to_vec());
        let mut queue = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
        let n = items.len().min(queue.len());
        queue.drain(..n).collect()
    }
}
