//! A real llama.cpp server on 127.0.0.1 (PyPI's xllamacpp with Gemma 3 270M, issue 23).
//!
//! `SANDPIPER_TEST_LLAMA` names the launcher (`tests/llama/serve.py` through the script that
//! `tests/llama/install.sh` writes; `.ci/run` sets it). When it is unset the real-server tests
//! are skipped with a notice, unless `SANDPIPER_REQUIRE_LLAMA=1` (CI), where they fail.
//!
//! The launcher binds a free port itself (`--port 0`) and prints `READY http://127.0.0.1:PORT`,
//! so there is no race for a port. It exits when its stdin closes: dropping a [`LlamaServer`]
//! closes it and kills the process group, and if the test binary dies the kernel closes the
//! pipe, so no server outlives its test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The environment variable naming the launcher command.
pub const LAUNCHER_ENV: &str = "SANDPIPER_TEST_LLAMA";
/// Set to `1` to fail (not skip) when the launcher is missing or the server does not start.
pub const REQUIRE_ENV: &str = "SANDPIPER_REQUIRE_LLAMA";

/// How long loading the model may take (about 1.5 s on an idle 2-core machine; CI is busy).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// How a server is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlamaOptions {
    /// Context window of each slot, in tokens.
    pub n_ctx: u32,
    /// Parallel slots (requests served at once).
    pub parallel: u32,
    /// Tokens a response may generate when the request sets no `max_tokens`.
    pub n_predict: u32,
    /// CPU threads (1 is fastest on a busy 2-core machine: see serve.py).
    pub threads: u32,
}

impl Default for LlamaOptions {
    fn default() -> Self {
        Self {
            n_ctx: 2048,
            parallel: 2,
            n_predict: 32,
            threads: 1,
        }
    }
}

/// A running llama.cpp server; stopped when dropped.
#[derive(Debug)]
pub struct LlamaServer {
    child: Child,
    stdin: Option<ChildStdin>,
    root: String,
    options: LlamaOptions,
    startup: Duration,
}

impl LlamaServer {
    /// Starts a server and waits until `/health` answers OK. `None` (with a notice) when
    /// `SANDPIPER_TEST_LLAMA` is unset and `SANDPIPER_REQUIRE_LLAMA` is not `1`; panics when it
    /// is required, or when a configured launcher fails. Blocks for the model load.
    pub fn start(options: LlamaOptions) -> Option<Self> {
        // The tests talk to it with reqwest, which needs a TLS provider even for plain HTTP.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1");
        let launcher = match std::env::var(LAUNCHER_ENV) {
            Ok(path) if !path.is_empty() => path,
            _ if required => panic!(
                "{LAUNCHER_ENV} must name the llama.cpp launcher ({REQUIRE_ENV}=1); \
                 run `bash tests/llama/install.sh`"
            ),
            _ => {
                eprintln!(
                    "NOTICE: {LAUNCHER_ENV} is not set; skipping the real llama.cpp test \
                     (bash tests/llama/install.sh prints the launcher)"
                );
                return None;
            }
        };
        match Self::spawn(&launcher, options) {
            Ok(server) => Some(server),
            Err(e) => panic!("the llama.cpp server from {launcher} did not start: {e}"),
        }
    }

    /// The configuration of an agent talking to this server: the model it serves, greedy
    /// sampling, the window asked from the server, tools off (the small model calls them at
    /// random) and answers of at most `max_tokens`.
    pub fn agent_config(
        &self,
        db: &crate::db::TestDb,
        work: &std::path::Path,
        max_tokens: u32,
    ) -> crate::harness::TestConfig {
        let mut config = crate::harness::config(db, &self.base_url(), work);
        config.model.model = "gemma-3-270m".into();
        config.model.context_window = None;
        config.model.max_tokens = Some(max_tokens);
        config.model.temperature = Some(0.0);
        config.model.timeout = Duration::from_secs(300);
        config.model.capabilities.supports_tools = false;
        config
    }

    /// One server for the whole test binary, started on first use with the default options.
    /// It is never dropped: it exits when the test binary does (its stdin closes).
    pub fn shared() -> Option<&'static Self> {
        static SHARED: OnceLock<Option<LlamaServer>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::start(LlamaOptions::default()))
            .as_ref()
    }

    fn spawn(launcher: &str, options: LlamaOptions) -> Result<Self, String> {
        let began = Instant::now();
        let mut log = tempfile::tempfile().map_err(|e| format!("temp file for the log: {e}"))?;
        let stderr = log
            .try_clone()
            .map_err(|e| format!("temp file for the log: {e}"))?;
        let mut child = Command::new(launcher)
            .args(["--port", "0"])
            .args(["--n-ctx", &options.n_ctx.to_string()])
            .args(["--parallel", &options.parallel.to_string()])
            .args(["--n-predict", &options.n_predict.to_string()])
            .args(["--threads", &options.threads.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run it: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let mut server = Self {
            child,
            stdin,
            root: String::new(),
            options,
            startup: Duration::ZERO,
        };
        let ready = stdout
            .ok_or_else(|| "no stdout".to_owned())
            .and_then(|out| wait_ready(out, START_TIMEOUT))
            .and_then(|root| wait_healthy(&root, began + START_TIMEOUT).map(|()| root));
        match ready {
            Ok(root) => {
                server.root = root;
                server.startup = began.elapsed();
                eprintln!(
                    "llama.cpp server at {} (n_ctx {}, {} slots) ready in {:.1?}",
                    server.root, options.n_ctx, options.parallel, server.startup
                );
                Ok(server)
            }
            Err(e) => {
                drop(server);
                let mut text = String::new();
                let _ = std::io::Seek::rewind(&mut log);
                let _ = log.read_to_string(&mut text);
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                Err(format!("{e}; its log ends:\n{}", tail.join("\n")))
            }
        }
    }

    /// The OpenAI-compatible API base, `http://127.0.0.1:PORT/v1` (for `ModelConfig::base_url`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root)
    }

    /// The server root, `http://127.0.0.1:PORT` (for `/health`, `/props`, `/slots`).
    pub fn root_url(&self) -> &str {
        &self.root
    }

    /// The options it was started with.
    pub fn options(&self) -> LlamaOptions {
        self.options
    }

    /// How long it took from spawning the launcher to a healthy server.
    pub fn startup(&self) -> Duration {
        self.startup
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // End of file on stdin asks the launcher to exit; the group kill makes sure.
        drop(self.stdin.take());
        if let Ok(pgid) = libc::pid_t::try_from(self.child.id()) {
            kill_process_group(pgid);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGKILL to the launcher's process group (`process_group(0)` made it the leader), so a
/// launcher that forks instead of exec'ing leaves nothing behind either.
#[allow(unsafe_code)]
fn kill_process_group(pgid: libc::pid_t) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg takes two integers and touches no memory of ours; `pgid` is greater than
    // 1 and names the group created for the launcher, so it never signals every process or init.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Reads the launcher's stdout until `READY <url>`; keeps draining it afterwards.
fn wait_ready(stdout: std::process::ChildStdout, timeout: Duration) -> Result<String, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(rest) = line.strip_prefix("READY ") {
                let url = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                sent = tx.send(url).is_ok();
            }
        }
    });
    match rx.recv_timeout(timeout) {
        Ok(url) if url.starts_with("http://127.0.0.1:") => Ok(url.trim_end_matches('/').into()),
        Ok(url) => Err(format!("it is ready at {url:?}, not on 127.0.0.1")),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!("no READY line within {timeout:?}")),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("it exited before READY".into()),
    }
}

/// Polls `GET /health` until it answers 200 (llama.cpp answers 503 while loading).
fn wait_healthy(root: &str, deadline: Instant) -> Result<(), String> {
    let addr = root.trim_start_matches("http://");
    let mut last = String::new();
    while Instant::now() < deadline {
        match health(addr) {
            Ok(status) if status.starts_with("HTTP/1.1 200") => return Ok(()),
            Ok(status) => last = status,
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("/health did not answer OK: {last}"))
}

fn health(addr: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut status = String::new();
    BufReader::new(stream).read_line(&mut status)?;
    Ok(status.trim_end().to_owned())
}
