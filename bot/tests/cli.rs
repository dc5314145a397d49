//! The `sandpiper` binary itself, as a user runs it: piped stdin, environment configuration, a
//! scripted OpenAI-compatible server on 127.0.0.1, SQLite in a temporary directory.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use sandpiper_tests::fake_llm::{FakeLlm, text, tool_call};
use serde_json::json;

fn sandpiper(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "carol");
    cmd
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
async fn chat_runs_a_scripted_session_from_piped_stdin() {
    let llm = FakeLlm::start(vec![
        tool_call(
            "c1",
            "bash",
            json!({"command": "echo from-binary > proof.txt; cat proof.txt"}),
        ),
        text("The file says from-binary."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.args(["chat", "--workstream", "cli"])
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake")
        .env("OPENAI_API_KEY", "sk-cli-secret");
    let out =
        tokio::task::spawn_blocking(move || run_with_stdin(cmd, "write the proof\ny, thanks\n"))
            .await
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("▸ bash: echo from-binary"), "{stdout}");
    assert!(stdout.contains("  │ from-binary\n"), "{stdout}");
    assert!(stdout.contains("The file says from-binary."), "{stdout}");
    assert!(!stdout.contains("sk-cli-secret") && !stderr.contains("sk-cli-secret"));
    // The default database is in the user's data directory (HOME is the temporary
    // directory here), not where chat ran; the tool ran where chat was started.
    let data = dir.path().join(".local/share/sandpiper");
    assert!(data.join("sandpiper.db").exists());
    assert!(!dir.path().join("sandpiper.db").exists());
    // Every conversation is in it: readable by its owner only, with its WAL and shared
    // memory, in a directory of its owner's only.
    use std::os::unix::fs::PermissionsExt;
    for file in ["sandpiper.db", "sandpiper.db-wal", "sandpiper.db-shm"] {
        if let Ok(meta) = std::fs::metadata(data.join(file)) {
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{file}");
        }
    }
    let dir_mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("proof.txt")).unwrap(),
        "from-binary\n"
    );
    assert!(!dir.path().join("workstreams").exists());
    // Piped input echoes each message it sent, and the approval answer after its question.
    assert!(stdout.contains("> write the proof\n"), "{stdout}");
    assert!(
        stdout.contains("approve bash? [y]es / [n]o / [a]lways: y, thanks\n"),
        "{stdout}"
    );
    // The one-line command is shown once: in the call's header, not again as a preview or
    // in the question.
    assert_eq!(
        stdout.matches("echo from-binary > proof.txt").count(),
        1,
        "{stdout}"
    );
    llm.verify();
    let headers = llm.request_headers();
    assert_eq!(
        headers[0].get("authorization").map(String::as_str),
        Some("Bearer sk-cli-secret")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_chat_exits_non_zero_when_a_turn_failed() {
    use sandpiper_tests::fake_llm::Reply;
    let llm = FakeLlm::start(vec![
        Reply::http_error(400, "model `fake` does not exist"),
        text("The second turn works."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.args(["chat", "--workstream", "failing"])
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake");
    let out = tokio::task::spawn_blocking(move || run_with_stdin(cmd, "first\nsecond\n"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The failure is shown, later lines still run, and the exit code says one turn failed.
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("error: ") && stdout.contains("does not exist"),
        "{stdout}"
    );
    assert!(stdout.contains("The second turn works."), "{stdout}");
    assert!(stderr.contains("error: 1 of 2 turns failed"), "{stderr}");
}

#[test]
fn config_check_names_the_bad_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sandpiper.toml");
    std::fs::write(&file, "[tools]\nbash_timout = \"5s\"\n").unwrap();
    let out = sandpiper(dir.path())
        .args(["config", "check"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sandpiper.toml") && stderr.contains("bash_timout"),
        "{stderr}"
    );
}

#[test]
fn config_check_prints_the_effective_config_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandpiper(dir.path())
        .args(["config", "check"])
        .env("SANDPIPER_MODEL_PROVIDER", "anthropic")
        .env("ANTHROPIC_API_KEY", "sk-ant-secret")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("# source: built-in defaults"), "{stdout}");
    assert!(stdout.contains("provider = \"anthropic\""), "{stdout}");
    assert!(stdout.contains("api_key = \"<redacted>\""), "{stdout}");
    assert!(!stdout.contains("sk-ant-secret"), "{stdout}");
}

#[test]
fn config_check_hides_database_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandpiper(dir.path())
        .args(["config", "check"])
        .env(
            "SANDPIPER_DATABASE_URL",
            "postgres://bob:hunter2@db.internal/app?sslmode=require&sslpassword=keyphrase",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "url = \"postgres://<redacted>@db.internal/app?sslmode=<redacted>&sslpassword=<redacted>\""
        ),
        "{stdout}"
    );
    for secret in ["hunter2", "keyphrase"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{stdout}{stderr}"
        );
    }
    // A URL of no supported kind is named redacted in the error too.
    let out = sandpiper(dir.path())
        .args(["config", "check"])
        .env("SANDPIPER_DATABASE_URL", "mysql://root:hunter2@h/db")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("mysql://<redacted>@h/db"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// A model base URL carrying credentials (userinfo, a key in the query) and a model that
/// cannot be reached: the thread is told so without the endpoint, the log names the endpoint
/// redacted, and `doctor` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_url_with_credentials_is_never_shown_whole() {
    let port = {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        closed.local_addr().unwrap().port()
    };
    let base = format!("http://svc:pass-s3cret@127.0.0.1:{port}/v1?api-key=key-s3cret");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sandpiper.toml"),
        "[model]\nmax_retries = 1\n",
    )
    .unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.args(["chat", "--workstream", "creds"])
        .env("SANDPIPER_MODEL_BASE_URL", &base)
        .env("SANDPIPER_MODEL", "fake")
        .env("SANDPIPER_LOG", "info");
    let out = tokio::task::spawn_blocking(move || run_with_stdin(cmd, "hello\n"))
        .await
        .unwrap();
    let thread = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let log = std::fs::read_to_string(dir.path().join(".local/share/sandpiper/chat.log"))
        .expect("chat logs to its file");
    assert!(
        thread.contains("error: cannot reach the model: "),
        "{thread}\n{stderr}"
    );
    assert!(
        !thread.contains("127.0.0.1"),
        "no endpoint in the thread: {thread}"
    );
    // The request's path goes before the base URL's query.
    let shown =
        format!("http://<redacted>@127.0.0.1:{port}/v1/chat/completions?api-key=<redacted>");
    assert!(
        log.contains("cannot reach the model provider, retrying")
            && log.contains("giving up")
            && log.contains(&shown),
        "{log}"
    );
    let doctor = sandpiper(dir.path())
        .arg("doctor")
        .env("SANDPIPER_MODEL_BASE_URL", &base)
        .env("SANDPIPER_MODEL", "fake")
        .output()
        .unwrap();
    let doctor = format!(
        "{}{}",
        String::from_utf8_lossy(&doctor.stdout),
        String::from_utf8_lossy(&doctor.stderr)
    );
    assert!(
        doctor.contains(&format!(
            "http://<redacted>@127.0.0.1:{port}/v1?api-key=<redacted> is unreachable"
        )),
        "{doctor}"
    );
    for text in [&thread, &stderr, &log, &doctor] {
        for secret in ["pass-s3cret", "key-s3cret", "svc:"] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
    }
}

/// A PostgreSQL URL with a parameter the driver does not read (libpq's `sslpassword`): the
/// driver never sees it, so it cannot log it, and `doctor` shows the URL redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_drivers_logs_never_carry_an_sslpassword() {
    let Some(db) = sandpiper_tests::db::TestDb::postgres().await else {
        return;
    };
    let url = format!("{}&sslpassword=phrase-s3cret", db.url);
    let dir = tempfile::tempdir().unwrap();
    let out = sandpiper(dir.path())
        .arg("doctor")
        .env("SANDPIPER_DATABASE_URL", &url)
        .env("SANDPIPER_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
        .env("SANDPIPER_LOG", "debug")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("opened, migrations current"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("the PostgreSQL driver does not read") && stderr.contains("sslpassword"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("phrase-s3cret") && !stderr.contains("phrase-s3cret"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn chat_without_a_key_says_what_to_set_before_the_first_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.arg("chat");
    let out = run_with_stdin(cmd, "hello\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("set OPENAI_API_KEY") && stderr.contains("SANDPIPER_MODEL_BASE_URL"),
        "{stderr}"
    );
    assert!(
        !dir.path()
            .join(".local/share/sandpiper/sandpiper.db")
            .exists()
            && !dir.path().join("sandpiper.db").exists(),
        "nothing was started"
    );
}

#[test]
fn mcp_refresh_says_it_refreshes_its_own_process_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.args(["mcp", "refresh", "github"]);
    let out = cmd.output().expect("sandpiper runs");
    let stdout = stdout_of(&out);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(
        stdout,
        format!(
            "github: error: {}\n{}",
            sandpiper_agent::mcp::McpError::UnknownServer {
                server: "github".into()
            },
            sandpiper::commands::MCP_REFRESH_SCOPE
        )
    );
}

#[test]
fn tools_prints_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandpiper(dir.path()).arg("tools").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(stdout.starts_with("name "), "{stdout}");
    assert!(
        stdout.contains("read_file      yes           yes    yes         path"),
        "{stdout}"
    );
}

fn stdout_of(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn link_joins_two_terminal_accounts_and_a_code_works_once() {
    let dir = tempfile::tempdir().unwrap();
    let made = stdout_of(&sandpiper(dir.path()).arg("link").output().unwrap());
    let code = made.split_whitespace().nth(4).unwrap().to_owned();
    assert_eq!(code.len(), 8, "{made}");
    let joined = stdout_of(
        &sandpiper(dir.path())
            .args(["link", &code])
            .env("USER", "carol-laptop")
            .output()
            .unwrap(),
    );
    assert_eq!(
        joined.trim(),
        "linked: you are console-carol on console:carol, console:carol-laptop"
    );
    let again = sandpiper(dir.path())
        .args(["link", &code])
        .env("USER", "mallory")
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("that code is not valid"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lists_and_deletes_only_what_the_caller_sees() {
    let llm = FakeLlm::start(vec![
        tool_call(
            "m1",
            "memory",
            json!({"action": "save", "name": "carol_shell", "scope": "user", "content": "fish", "description": "carol's shell"}),
        ),
        text("saved"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.args(["chat", "--yes"])
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url());
    let out = tokio::task::spawn_blocking(move || run_with_stdin(cmd, "remember my shell\n"))
        .await
        .unwrap();
    stdout_of(&out);
    let dir = dir.path().to_owned();
    let d = dir.clone();
    let listed = tokio::task::spawn_blocking(move || {
        stdout_of(&sandpiper(&d).arg("memory").output().unwrap())
    })
    .await
    .unwrap();
    assert!(listed.starts_with("carol_shell"), "{listed}");
    assert!(
        listed.contains("user") && listed.contains("carol's shell"),
        "{listed}"
    );
    let d = dir.clone();
    let (others, deleted) = tokio::task::spawn_blocking(move || {
        let others = stdout_of(
            &sandpiper(&d)
                .arg("memory")
                .env("USER", "dave")
                .output()
                .unwrap(),
        );
        let refused = sandpiper(&d)
            .args(["memory", "delete", "carol_shell"])
            .env("USER", "dave")
            .output()
            .unwrap();
        assert!(!refused.status.success());
        let deleted = stdout_of(
            &sandpiper(&d)
                .args(["memory", "delete", "carol_shell"])
                .output()
                .unwrap(),
        );
        (others, deleted)
    })
    .await
    .unwrap();
    assert_eq!(others.trim(), "no memories");
    assert_eq!(deleted.trim(), "deleted `carol_shell` (user scope)");
}

/// `sandpiper serve` as an operator runs it: the token and the (test) API base come from the
/// environment, and a mention in the fake Discord gets an answer in a new thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_connects_to_discord_from_the_environment() {
    use sandpiper_tests::fake_discord::{CHANNEL_ID, FakeDiscord, FakeUser};
    let llm = FakeLlm::start(vec![text("Hello from the real binary.")]).await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.arg("serve")
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("DISCORD_TOKEN", "discord-secret-token")
        .env("SANDPIPER_DISCORD_API_BASE", discord.base_url())
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("sandpiper serve starts");
    let wait = std::time::Duration::from_secs(30);
    discord.wait_ready(wait).await;
    discord
        .wait_until(wait, "slash commands", |d| {
            (!d.registered_commands().is_empty()).then_some(())
        })
        .await;
    let alice = FakeUser::new(42, "alice");
    let msg = discord
        .user_message(CHANNEL_ID, &alice, &format!("{} hello", discord.mention()))
        .await;
    let thread = discord
        .wait_until(wait, "a thread", |d| {
            d.threads()
                .into_iter()
                .find(|t| t.starter_message_id == Some(msg))
                .map(|t| t.id)
        })
        .await;
    discord
        .wait_until(wait, "the answer", |d| {
            d.messages(thread)
                .into_iter()
                .find(|m| m.content.contains("Hello from the real binary."))
        })
        .await;
    child.kill().expect("stop serve");
    let out = child.wait_with_output().expect("serve exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Discord: connecting"), "{stderr}");
    assert!(!stderr.contains("discord-secret-token"), "{stderr}");
    let authorised = discord
        .requests()
        .iter()
        .all(|r| r.path.starts_with("/api/v10/"));
    assert!(authorised);
}

#[test]
fn serve_without_a_token_says_discord_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.arg("serve")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("SANDPIPER_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("sandpiper serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut seen = String::new();
    while let Some(Ok(line)) = lines.next() {
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("serving http://") {
            break;
        }
    }
    // An operator's `docker stop` or systemd sends SIGTERM: serve stops cleanly on it.
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(term.success());
    for line in lines.map_while(Result::ok) {
        seen.push_str(&line);
        seen.push('\n');
    }
    let status = child.wait().expect("serve exits");
    assert!(
        status.success(),
        "serve exited with {status} on SIGTERM\n{seen}"
    );
    assert!(seen.contains("Discord is off"), "{seen}");
    assert!(seen.contains("Slack is off"), "{seen}");
    assert!(seen.contains("/health"), "{seen}");
    assert!(
        seen.contains("shutting down") && seen.contains("SIGTERM"),
        "{seen}"
    );
    // Logs to a pipe carry no colour codes.
    assert!(!seen.contains('\u{1b}'), "{seen:?}");
}

/// `sandpiper serve` with Slack tokens in the environment answers a mention over Socket Mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_connects_to_slack_from_the_environment() {
    use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack};
    let llm = FakeLlm::start(vec![text("Hello Slack from the real binary.")]).await;
    let slack = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.arg("serve")
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("SLACK_BOT_TOKEN", "xoxb-secret-bot-token")
        .env("SLACK_APP_TOKEN", "xapp-secret-app-token")
        .env(
            "SANDPIPER_SLACK_API_BASE",
            format!("{}/api", slack.base_url()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("sandpiper serve starts");
    let wait = std::time::Duration::from_secs(30);
    slack.wait_connected(wait).await;
    let alice = slack.user("U0ALICE", "alice");
    let ts = slack
        .app_mention(CHANNEL_ID, &alice, "<@U0BOT> hello")
        .await;
    slack
        .wait_until(wait, "the answer in the thread", |s| {
            s.messages(CHANNEL_ID).into_iter().find(|m| {
                m.thread_ts.as_deref() == Some(ts.as_str())
                    && m.text.contains("Hello Slack from the real binary.")
            })
        })
        .await;
    child.kill().expect("stop serve");
    let out = child.wait_with_output().expect("serve exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Slack: connected (Socket Mode)"),
        "{stderr}"
    );
    assert!(!stderr.contains("secret-bot-token") && !stderr.contains("secret-app-token"));
}

#[test]
fn config_check_says_which_context_window_is_in_force_and_where_it_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    let check = |envs: &[(&str, &str)]| {
        let mut cmd = sandpiper(dir.path());
        cmd.args(["config", "check"]);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    };
    let (ok, stdout, _) = check(&[("SANDPIPER_MODEL_CONTEXT_WINDOW", "4096")]);
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains("# context window: 4096 tokens (from model.context_window)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("# compaction: when a request would fill 80% of the window"),
        "{stdout}"
    );
    let (_, stdout, _) = check(&[
        ("SANDPIPER_MODEL", "qwen2.5-coder"),
        ("SANDPIPER_MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    ]);
    assert!(
        stdout.contains("# context window: asked of the server on first use (/props n_ctx, /v1/models, LM Studio, Ollama); if it does not say, 8192 tokens (from a guess for an unknown model on an OpenAI-compatible server)"),
        "{stdout}"
    );
    let (ok, _, stderr) = check(&[("SANDPIPER_MODEL_CONTEXT_WINDOW", "lots")]);
    assert!(!ok);
    assert!(
        stderr.contains("SANDPIPER_MODEL_CONTEXT_WINDOW")
            && stderr.contains("a number of tokens such as 32768"),
        "{stderr}"
    );
}
