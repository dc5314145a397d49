//! The binary as a service: MCP servers that hang or fail never hold up `chat` or `serve`,
//! are named in the system message and `/ready`, and leave no process behind (`chat`,
//! `serve`, `mcp list`); logs (filter, JSON), metrics through the HTTP server; `init`.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandpiper_tests::fake_llm::{FakeLlm, text};
use serde_json::Value;

fn sandpiper(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "carol");
    cmd
}

/// A config with two MCP servers: `hung` starts a background child and never answers the
/// handshake; `broken` says why on stderr and exits. `tag` (a number no other process uses)
/// marks their `sleep` processes so the test can find any that outlive sandpiper.
fn config_with_bad_servers(dir: &Path, tag: u32, extra: &str) -> std::path::PathBuf {
    let path = dir.join("sandpiper.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[mcp]
connect_timeout = "60s"
{extra}

[mcp.servers.hung]
command = "sh"
args = ["-c", "sleep {tag} & echo hung starting >&2; exec sleep {tag}"]

[mcp.servers.broken]
command = "sh"
args = ["-c", "echo 'fatal: GITHUB_TOKEN is not set' >&2; exit 1"]
"#
        ),
    )
    .expect("writes the config");
    path
}

/// Processes whose command line is `sleep <tag>`.
fn sleepers(tag: u32) -> Vec<u32> {
    let wanted = format!("sleep\0{tag}\0");
    std::fs::read_dir("/proc")
        .expect("reads /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes())
        })
        .filter(|pid| {
            // A zombie waiting for its reaper is gone as far as anyone can tell.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .collect()
}

/// Waits until no `sleep <tag>` is left (reaping may take a moment); the survivors if any.
fn no_sleepers_left(tag: u32) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = sleepers(tag);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn unique_tag() -> u32 {
    // Distinct per test and run: a `sleep` of this many seconds exists nowhere else.
    100_000 + (std::process::id() % 50_000) * 10 + u32::from(rand_digit())
}

fn rand_digit() -> u8 {
    use std::sync::atomic::{AtomicU8, Ordering};
    static NEXT: AtomicU8 = AtomicU8::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) % 10
}

fn run_with_stdin(mut cmd: Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandpiper starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("sandpiper exits")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_runs_at_once_while_servers_hang_or_fail_and_names_them() {
    let llm = FakeLlm::start(vec![text("Answered without MCP.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let tag = unique_tag();
    let config = config_with_bad_servers(dir.path(), tag, "");
    let mut cmd = sandpiper(dir.path());
    cmd.arg("--config")
        .arg(&config)
        .args(["chat", "--workstream", "svc"])
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake");
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || run_with_stdin(cmd, "hello\n"))
        .await
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("Answered without MCP."), "{stdout}");
    // The hung server's 60 s connect timeout did not hold the session up.
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let requests = llm.requests();
    let system = requests[0]["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        system.contains("MCP servers not ready yet, so their tools are not offered in this turn:"),
        "{system}"
    );
    assert!(system.contains("hung (still connecting)"), "{system}");
    assert!(system.contains("broken ("), "{system}");
    assert!(
        !system.contains("GITHUB_TOKEN"),
        "errors stay out of the prompt: {system}"
    );
    assert_eq!(no_sleepers_left(tag), Vec::<u32>::new(), "orphans of chat");
}

#[test]
fn mcp_list_reports_the_first_attempts_with_stderr_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let tag = unique_tag();
    let config = config_with_bad_servers(dir.path(), tag, "");
    // One attempt each, short.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"60s\"", "\"1s\"");
    std::fs::write(&config, text).unwrap();
    let started = Instant::now();
    let out = sandpiper(dir.path())
        .arg("--config")
        .arg(&config)
        .args(["mcp", "list"])
        .output()
        .expect("mcp list runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // A failed server is a broken installation: the command says so in its exit status.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("error: MCP server broken, hung failed"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let broken = stdout
        .split("\n")
        .skip_while(|l| !l.starts_with("broken ("))
        .take(3)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(broken.starts_with("broken (failed): 0 tools"), "{stdout}");
    assert!(
        broken.contains("  last stderr lines:\n    fatal: GITHUB_TOKEN is not set"),
        "{stdout}"
    );
    assert!(
        stdout.contains("hung (failed): 0 tools, 0 resources, 0 prompts — "),
        "{stdout}"
    );
    assert!(stdout.contains("no answer within 1000 ms"), "{stdout}");
    assert!(stdout.contains("    hung starting"), "{stdout}");
    assert_eq!(
        no_sleepers_left(tag),
        Vec::<u32>::new(),
        "orphans of mcp list"
    );
}

/// `serve` with `envs`; returns the child, its address (from the start-up line) and the
/// lines read so far; the rest are collected by [`stop`].
fn serve(
    dir: &Path,
    config: &Path,
    envs: &[(&str, String)],
) -> (Child, SocketAddr, Vec<String>, Duration) {
    let mut cmd = sandpiper(dir);
    cmd.arg("--config")
        .arg(config)
        .arg("serve")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let addr = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("serve ended before listening: {seen:#?}"))
            .expect("reads stderr");
        let found = line
            .split("serving http://")
            .nth(1)
            .and_then(|rest| rest.split("/health").next())
            .and_then(|a| a.parse::<SocketAddr>().ok());
        seen.push(line);
        if let Some(addr) = found {
            break addr;
        }
    };
    let listening_after = started.elapsed();
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    REST.with(|r| *r.borrow_mut() = Some(rest));
    (child, addr, seen, listening_after)
}

thread_local! {
    static REST: std::cell::RefCell<Option<std::thread::JoinHandle<Vec<String>>>> =
        const { std::cell::RefCell::new(None) };
}

fn stop(child: Child) -> Vec<String> {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(term.success());
    let mut child = child;
    assert!(child.wait().expect("serve exits").success());
    REST.with(|r| r.borrow_mut().take())
        .expect("a reader")
        .join()
        .expect("the reader ends")
}

async fn get(url: String) -> (u16, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::get(&url).await.expect("answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

async fn ready_until(addr: SocketAddr, what: &str, done: impl Fn(&Value) -> bool) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(format!("http://{addr}/ready")).await;
        let ready: Value = serde_json::from_str(&body).expect("/ready answers JSON");
        if done(&ready) {
            return (status, ready);
        }
        assert!(Instant::now() < deadline, "{what}: {ready:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn server<'a>(ready: &'a Value, name: &str) -> &'a Value {
    ready["mcp"]["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {ready:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_health_at_once_names_every_server_in_ready_and_logs_json() {
    let llm = FakeLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let tag = unique_tag();
    let config = config_with_bad_servers(dir.path(), tag, "");
    let envs = [
        ("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url()),
        ("SANDPIPER_MODEL", "fake".to_owned()),
        ("SANDPIPER_LOG", "info".to_owned()),
        ("SANDPIPER_LOG_FORMAT", "json".to_owned()),
    ];
    let (child, addr, mut lines, listening_after) = serve(dir.path(), &config, &envs);
    assert!(
        listening_after < Duration::from_secs(5),
        "{listening_after:?}"
    );
    let (status, health) = get(format!("http://{addr}/health")).await;
    assert_eq!(status, 200, "{health}");
    let (status, ready) = ready_until(addr, "broken failed, model checked", |r| {
        server(r, "broken")["state"] != "connecting" && r["model"]["state"] == "ok"
    })
    .await;
    // One broken server does not take the node out of the load balancer.
    assert_eq!(
        (status, ready["status"].as_str()),
        (200, Some("ready")),
        "{ready:#}"
    );
    assert_eq!(server(&ready, "hung")["state"], "connecting");
    assert!(
        ready["mcp"]["required_for_ready"] == false && ready["mcp"]["connected"] == 0,
        "{ready:#}"
    );
    let broken = server(&ready, "broken");
    assert!(
        broken["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("broken")),
        "{ready:#}"
    );
    let (_, metrics) = get(format!("http://{addr}/metrics")).await;
    for line in [
        "sandpiper_mcp_servers{state=\"connecting\"} 1",
        "sandpiper_http_requests_total{route=\"/health\",status=\"200\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(
        metrics.contains("sandpiper_http_requests_total{route=\"/ready\",status=\"200\"} "),
        "{metrics}"
    );
    lines.extend(stop(child));
    assert_eq!(no_sleepers_left(tag), Vec::<u32>::new(), "orphans of serve");
    // Every line is one JSON object; the start-up lines are among them.
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let message = |e: &Value| {
        e["fields"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let serving = events
        .iter()
        .find(|e| message(e).starts_with("serving http://"))
        .expect("the start-up line");
    assert_eq!(serving["target"], "sandpiper");
    assert_eq!(serving["level"], "INFO");
    let node = serving["fields"]["node"]
        .as_str()
        .expect("node id")
        .to_owned();
    assert!(node.starts_with("node-"), "{serving}");
    let failed = events
        .iter()
        .find(|e| message(e) == "MCP server connection failed" && e["fields"]["server"] == "broken")
        .expect("the failure is logged");
    assert!(
        failed["fields"]["stderr"]
            .as_str()
            .is_some_and(|s| s.contains("fatal: GITHUB_TOKEN is not set")),
        "{failed}"
    );
    // One node id in the process: the registry's, in the span of what the node logs.
    assert_eq!(failed["spans"][0]["node"], node.as_str(), "{failed}");
    let registered = events
        .iter()
        .find(|e| message(e) == "registered in the services registry")
        .expect("registered");
    assert_eq!(registered["fields"]["node"], node.as_str());
    for e in &events {
        for key in ["timestamp", "level", "target"] {
            assert!(e.get(key).is_some(), "{key} missing in {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_server_that_fails_makes_the_node_not_ready_and_no_key_is_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let tag = unique_tag();
    let config = config_with_bad_servers(dir.path(), tag, "required_for_ready = true");
    // No key for the provider's own endpoint: degraded, reported, not a crash.
    let (child, addr, mut lines, _) = serve(dir.path(), &config, &[]);
    let (status, ready) =
        ready_until(addr, "model checked", |r| r["model"]["state"] != "checking").await;
    assert_eq!(status, 503, "{ready:#}");
    assert_eq!(ready["status"], "not ready");
    assert_eq!(ready["mcp"]["required_for_ready"], true);
    assert_eq!(ready["model"]["state"], "degraded");
    assert!(
        ready["model"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("no API key: set OPENAI_API_KEY")),
        "{ready:#}"
    );
    lines.extend(stop(child));
    assert!(
        lines.iter().any(|l| l.contains("model endpoint: degraded")),
        "{lines:#?}"
    );
    assert_eq!(no_sleepers_left(tag), Vec::<u32>::new());
}

#[test]
fn an_invalid_log_filter_stops_start_up_with_the_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    for var in ["SANDPIPER_LOG", "RUST_LOG"] {
        let out = sandpiper(dir.path())
            .arg("tools")
            .env(var, "sandpiper=loud")
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        assert!(
            stderr.starts_with(&format!("error: invalid ${var} `sandpiper=loud`: ")),
            "{stderr}"
        );
    }
    let out = sandpiper(dir.path())
        .arg("tools")
        .env("SANDPIPER_LOG_FORMAT", "xml")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("use text or json"));
}

#[test]
fn init_writes_a_config_that_loads_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conf/sandpiper.toml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let out = sandpiper(dir.path())
        .args(["init", "--path"])
        .arg(&path)
        .args([
            "--provider",
            "anthropic",
            "--slack",
            "--database",
            "sqlite://data/s.db",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("init runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("provider = \"anthropic\""), "{written}");
    assert!(
        written.contains("url = \"sqlite://data/s.db\""),
        "{written}"
    );
    assert!(written.contains("\nmode = \"socket\""), "{written}");
    let check = sandpiper(dir.path())
        .arg("--config")
        .arg(&path)
        .args(["config", "check"])
        .output()
        .expect("config check runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let again = sandpiper(dir.path())
        .args(["init", "--path"])
        .arg(&path)
        .output()
        .expect("init runs");
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already exists"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
    let bad = sandpiper(dir.path())
        .args(["init", "--provider", "mistral"])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    assert!(!dir.path().join("sandpiper.toml").exists());
}

#[test]
fn serve_retries_an_unreachable_slack_and_still_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut child = sandpiper(dir.path())
        .arg("serve")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("SLACK_BOT_TOKEN", "xoxb-unreachable-secret")
        .env("SLACK_APP_TOKEN", "xapp-unreachable-secret")
        .env(
            "SANDPIPER_SLACK_API_BASE",
            format!("http://127.0.0.1:{port}/api"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let mut retries = 0;
    while retries < 2 {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("serve ended: {seen:#?}"))
            .expect("reads stderr");
        if line.contains("Slack is unreachable; retrying") {
            retries += 1;
        }
        seen.push(line);
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(term.success());
    let stopped = Instant::now();
    let status = child.wait().expect("serve exits");
    seen.extend(lines.map_while(Result::ok));
    assert!(status.success(), "{status}\n{seen:#?}");
    assert!(stopped.elapsed() < Duration::from_secs(10));
    let text = seen.join("\n");
    assert!(
        text.contains("attempt=1") && text.contains("attempt=2"),
        "{text}"
    );
    assert!(!text.contains("unreachable-secret"), "{text}");
    // Said in words, not as a debug dump of the HTTP client's error.
    assert!(
        text.contains("error=slack auth.test: cannot reach Slack: "),
        "{text}"
    );
    assert!(
        !text.contains("hyper_util::") && !text.contains("Os {"),
        "{text}"
    );
}
