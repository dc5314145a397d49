//! The first hour, through the real binary as a new user runs it: the first message after
//! start, a real MCP server from npm, a model server that does not describe itself.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use sandpiper_tests::fake_llm::{FakeLlm, text, tool_call};
use serde_json::{Value, json};

fn sandpiper(dir: &std::path::Path, llm: &FakeLlm) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "carol")
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake");
    cmd
}

async fn run_with_stdin(mut cmd: Command, stdin: &'static str) -> (Output, String) {
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sandpiper starts");
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin.as_bytes()).expect("write stdin");
        drop(input);
        child.wait_with_output().expect("sandpiper exits")
    })
    .await
    .expect("the blocking task ends");
    let shown = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, shown)
}

/// The real server from npm (`.ci/run` installs it), or `None` with a notice.
fn everything_server() -> Option<String> {
    match std::env::var("SANDPIPER_TEST_MCP_EVERYTHING") {
        Ok(path) if !path.is_empty() => Some(path),
        _ if std::env::var("SANDPIPER_REQUIRE_MCP").is_ok_and(|v| v == "1") => {
            panic!("SANDPIPER_TEST_MCP_EVERYTHING must name the installed server")
        }
        _ => {
            eprintln!("NOTICE: SANDPIPER_TEST_MCP_EVERYTHING is not set; skipping");
            None
        }
    }
}

fn offered_tools(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_piped_message_is_offered_a_real_npm_servers_tools() {
    let Some(everything) = everything_server() else {
        return;
    };
    let llm = FakeLlm::start(vec![
        tool_call("s1", "tool_search", json!({"query": "echo message"})),
        tool_call("c1", "mcp__ev__echo", json!({"message": "first hour"})),
        text("It echoed."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mcp = dir.path().join("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": everything, "autoApprove": ["echo"]}}});
    std::fs::write(&mcp, servers.to_string()).unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.arg("--mcp-config").arg(&mcp).arg("chat");
    let (out, shown) = run_with_stdin(cmd, "echo something for me\n").await;
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("It echoed."), "{shown}");
    assert!(!shown.contains("Going on without"), "{shown}");
    llm.verify();
    let requests = llm.requests();
    // The server's tools are deferred behind tool search from the first request on, which
    // finds them; nothing says the server is not ready.
    assert!(
        offered_tools(&requests[0]).contains(&"tool_search".to_owned()),
        "{:?}",
        offered_tools(&requests[0])
    );
    assert!(!requests[0].to_string().contains("not ready"));
    assert!(
        offered_tools(&requests[1]).contains(&"mcp__ev__echo".to_owned()),
        "tool search found the server's tool: {:?}",
        offered_tools(&requests[1])
    );
    let result = &requests[2]["messages"];
    assert!(
        result.to_string().contains("Echo: first hour"),
        "the call ran on the server: {result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_still_starting_after_the_startup_timeout_is_left_out_in_one_line() {
    let llm = FakeLlm::start(vec![text("Hello without it.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sandpiper.toml");
    std::fs::write(
        &config,
        "[mcp]\nstartup_timeout = \"3s\"\n\n[mcp.servers.slow]\ncommand = \"sleep\"\nargs = [\"60\"]\n",
    )
    .unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.arg("--config").arg(&config).arg("chat");
    let started = std::time::Instant::now();
    let (out, shown) = run_with_stdin(cmd, "hello\n").await;
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("Hello without it."), "{shown}");
    assert_eq!(
        shown
            .matches("Going on without the tools of MCP server slow (still connecting)")
            .count(),
        1,
        "{shown}"
    );
    // It said what it waited for, once it had waited a moment.
    assert!(
        shown.contains("⏳ Waiting for MCP server slow to connect (at most"),
        "{shown}"
    );
    // The turn waited for the start-up time, not the 30 s connect timeout.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{shown}"
    );
    llm.verify();
    let system = llm.requests()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("slow (still connecting)"), "{system}");
}

/// The MCP test server of the tests crate, built beside this binary by `cargo test
/// --workspace`.
fn mcp_test_server() -> std::path::PathBuf {
    let path =
        std::path::Path::new(env!("CARGO_BIN_EXE_sandpiper")).with_file_name("mcp_test_server");
    assert!(
        path.is_file(),
        "mcp_test_server is not built: run `cargo test --workspace`"
    );
    path
}

/// A server that names no window (OpenAI's `/v1/models` does not), every tool offered
/// (tool search off) with an MCP server's beside the built-ins: the guessed 8,192 tokens
/// would not even hold the tools, yet the message is sent, with a quarter of the guess as
/// its output limit; the server answers. Where the server then refuses, its error teaches
/// the real window, smaller or larger than the guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guessed_window_never_refuses_a_message() {
    use sandpiper_tests::fake_llm::{ContextLimit, Flavor};
    let llm = FakeLlm::start(vec![text("Hello with every tool.")]).await;
    llm.set_window(ContextLimit::new(65_536, Flavor::OpenAi));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sandpiper.toml");
    std::fs::write(
        &config,
        "[tools]\nsearch = \"off\"\n\n[agent]\nsystem_prompt_extra = \"\"\"\n".to_owned()
            + &"Follow the team's conventions for every change. ".repeat(500)
            + "\"\"\"\n",
    )
    .unwrap();
    let mcp = dir.path().join("mcp.json");
    let servers = json!({"mcpServers": {"t": {"command": mcp_test_server(), "args": ["--stdio"]}}});
    std::fs::write(&mcp, servers.to_string()).unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.arg("--config")
        .arg(&config)
        .arg("--mcp-config")
        .arg(&mcp)
        .arg("chat");
    let (out, shown) = run_with_stdin(cmd, "hello\n").await;
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("Hello with every tool."), "{shown}");
    assert!(!shown.contains("context window"), "{shown}");
    llm.verify();
    let request = &llm.requests()[0];
    let tools = offered_tools(request);
    assert!(
        tools.len() > 20 && tools.iter().any(|t| t.starts_with("mcp__t__")),
        "{tools:?}"
    );
    assert!(
        sandpiper_tests::fake_llm::window::prompt_tokens(request) > 8192,
        "the request is larger than the guess"
    );
    assert_eq!(
        request["max_tokens"], 2048,
        "a quarter of the guessed window"
    );
}
