//! Defaults that follow the user and the CLI's messages, through the real binary: where the
//! database and the console's work go, which commands never create a database, what
//! `config check`, `link`, `mcp list` and `tools` say. Every run has a temporary HOME (and
//! so a temporary data directory); nothing touches the real one.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use sandpiper_tests::fake_llm::{FakeLlm, said, text, tool_call};
use serde_json::json;

fn sandpiper(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "erin");
    cmd
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d)
            .expect("the temporary directory is readable")
            .map(|e| e.expect("a directory entry"))
        {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                found.push(
                    path.strip_prefix(dir)
                        .expect("the temporary directory is readable")
                        .display()
                        .to_string(),
                );
            }
        }
    }
    found
}

#[test]
fn commands_that_only_read_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["whoami"][..],
        &["memory"],
        &["memory", "list"],
        &["tools"],
        &["config", "check"],
        &["mcp", "list"],
        &["audit"],
    ] {
        let out = sandpiper(dir.path()).args(args).output().unwrap();
        let stdout = text_of(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {stdout}{}",
            text_of(&out.stderr)
        );
        if matches!(args[0], "whoami" | "memory" | "audit") {
            assert_eq!(
                stdout.trim(),
                format!(
                    "There is no database yet at {}/.local/share/sandpiper/sandpiper.db: it is \
                     created by the first `sandpiper chat` or `sandpiper serve` (or choose \
                     another with --database, SANDPIPER_DATABASE_URL or [database] url).",
                    dir.path().display()
                ),
                "{args:?}"
            );
        }
    }
    assert_eq!(files_under(dir.path()), Vec::<String>::new());
}

#[test]
fn the_database_goes_to_xdg_data_home_or_where_it_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    let out = sandpiper(dir.path())
        .arg("link")
        .env("XDG_DATA_HOME", &xdg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert!(xdg.join("sandpiper/sandpiper.db").is_file());
    // `--database` (a file) and SANDPIPER_DATABASE_URL choose another.
    let out = sandpiper(dir.path())
        .args(["--database", "here.db", "link"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert!(dir.path().join("here.db").is_file());
    let url = format!("sqlite://{}", dir.path().join("env.db").display());
    let out = sandpiper(dir.path())
        .arg("link")
        .env("SANDPIPER_DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert!(dir.path().join("env.db").is_file());
    assert!(!dir.path().join(".local").exists());
}

#[test]
fn link_names_each_platforms_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandpiper(dir.path()).arg("link").output().unwrap();
    let stdout = text_of(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let code = stdout.split_whitespace().nth(4).unwrap().to_owned();
    assert_eq!(
        stdout,
        format!(
            "Your link code is {code} (valid for 10 minutes, once).\nEnter it on your other \
             account: `/link {code}` on Discord, `/sandpiper link {code}` on Slack, or \
             `sandpiper link {code}` in a terminal (as another user).\n"
        )
    );
}

#[test]
fn without_user_the_console_user_is_the_account_name() {
    let dir = tempfile::tempdir().unwrap();
    let account = Command::new("id").arg("-un").output().unwrap();
    let account = text_of(&account.stdout).trim().to_owned();
    let mut cmd = sandpiper(dir.path());
    cmd.env_remove("USER").arg("link");
    assert!(cmd.output().unwrap().status.success());
    let mut cmd = sandpiper(dir.path());
    cmd.env_remove("USER").arg("whoami");
    let out = cmd.output().unwrap();
    let stdout = text_of(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("console:{account}")) && !stdout.contains("console:local"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_works_in_its_directory_unless_told_and_asks_a_bad_answer_again() {
    let llm = FakeLlm::start(vec![
        tool_call("c1", "bash", json!({"command": "pwd > where.txt"})),
        text("Written."),
        tool_call("c2", "bash", json!({"command": "pwd > where.txt"})),
        text("Written elsewhere."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let other = dir.path().join("other");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let base = llm.openai_base_url();
    let (home, p) = (dir.path().to_owned(), project.clone());
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = sandpiper(&home);
        cmd.current_dir(&p)
            .args(["chat", "--workstream", "here"])
            .env("SANDPIPER_MODEL_BASE_URL", base)
            .env("SANDPIPER_MODEL", "fake");
        // `sure` is no answer: it is asked again, and the next line answers.
        run_with_stdin(cmd, "where are you?\nsure\ny\n")
    })
    .await
    .unwrap();
    let stdout = text_of(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text_of(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(project.join("where.txt"))
            .unwrap()
            .trim(),
        project.canonicalize().unwrap().display().to_string()
    );
    assert_eq!(
        stdout
            .matches("approve bash? [y]es / [n]o / [a]lways: ")
            .count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("approve bash? [y]es / [n]o / [a]lways: sure\nplease answer y, n or a"),
        "{stdout}"
    );
    assert!(stdout.contains("Written."), "{stdout}");
    let base = llm.openai_base_url();
    let (home, p) = (dir.path().to_owned(), project.clone());
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = sandpiper(&home);
        cmd.current_dir(&p)
            .args([
                "chat",
                "--workstream",
                "there",
                "--workdir",
                "../other",
                "--yes",
            ])
            .env("SANDPIPER_MODEL_BASE_URL", base)
            .env("SANDPIPER_MODEL", "fake");
        run_with_stdin(cmd, "and now?\n")
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert!(other.join("where.txt").is_file());
    llm.verify();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_commands_are_answered_here_and_never_reach_the_model() {
    let llm = FakeLlm::start(vec![text("A slash, sent on purpose.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.args(["chat", "--workstream", "cmds"])
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake");
    let out = tokio::task::spawn_blocking(move || {
        run_with_stdin(
            cmd,
            "/help\n/status\n/nonsense\n//etc is a word\n/quit\nnever sent\n",
        )
    })
    .await
    .unwrap();
    let stdout = text_of(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text_of(&out.stderr));
    assert!(
        stdout.contains("Commands (never sent to the model):"),
        "{stdout}"
    );
    // The workstream is opened for the person at the terminal before anything is sent.
    assert!(
        stdout.contains("Workstream `console:cmds`\nOwner: @") && stdout.contains("Messages: 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Unknown command `/nonsense`; nothing was sent. Commands: /stop /status"),
        "{stdout}"
    );
    assert!(stdout.contains("A slash, sent on purpose."), "{stdout}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "{stdout}");
    let last = requests[0]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        said(last["content"].as_str().unwrap_or_default()),
        "/etc is a word"
    );
    llm.verify();
}

#[test]
fn config_check_says_where_tools_work_which_database_and_which_platforms_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sandpiper.toml");
    std::fs::write(
        &file,
        "[tools.env]\nGITHUB_TOKEN = \"ghp-tools-secret\"\n\
         [mcp.servers.remote]\nurl = \"https://bob:mcp-password@mcp.example/mcp?token=mcp-token\"\n\
         [discord]\ntoken_env = \"MY_DISCORD_TOKEN\"\n",
    )
    .unwrap();
    let out = sandpiper(dir.path())
        .args(["config", "check"])
        .env("SLACK_BOT_TOKEN", "xoxb-slack-secret")
        .output()
        .unwrap();
    let stdout = text_of(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text_of(&out.stderr));
    let home = dir.path().display();
    for line in [
        format!("# chat works in: {home} (`sandpiper chat --workdir DIR` or [tools] workdir to change)"),
        format!("# serve's threads work in: {home}/.local/share/sandpiper/workstreams/discord_3aID"),
        format!("# database: {home}/.local/share/sandpiper/sandpiper.db (SQLite; not created yet: the first chat or serve creates it)"),
        "# discord: off: $MY_DISCORD_TOKEN is not set ([discord] token_env names the variable)".into(),
        "# slack: will not start: Socket Mode needs the app-level token in $SLACK_APP_TOKEN, which is not set".into(),
        "# warning: [discord] token_env names $MY_DISCORD_TOKEN, which is not set".into(),
        "GITHUB_TOKEN = \"<redacted>\"".into(),
        "url = \"https://<redacted>@mcp.example/mcp?token=<redacted>\"".into(),
    ] {
        assert!(stdout.contains(&line), "missing {line:?} in:\n{stdout}");
    }
    for secret in [
        "ghp-tools-secret",
        "mcp-password",
        "mcp-token",
        "xoxb-slack-secret",
    ] {
        assert!(!stdout.contains(secret), "{secret} in:\n{stdout}");
    }
}

#[test]
fn config_errors_name_their_source_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let check = |cmd: &mut Command| {
        let out = cmd.args(["config", "check"]).output().unwrap();
        assert!(!out.status.success());
        text_of(&out.stderr)
    };
    let stderr = check(sandpiper(dir.path()).env("SANDPIPER_DATABASE_URL", "mysql://h/db"));
    assert!(
        stderr.contains("invalid config value `database.url` (from SANDPIPER_DATABASE_URL)"),
        "{stderr}"
    );
    let stderr = check(sandpiper(dir.path()).env("SANDPIPER_LISTEN", "nowhere"));
    assert!(
        stderr.contains("(from SANDPIPER_LISTEN)")
            && stderr.contains("host:port such as 127.0.0.1:8090"),
        "{stderr}"
    );
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[tools]\nmax_output_bytes = \"64k\"\n").unwrap();
    let stderr = check(sandpiper(dir.path()).arg("--config").arg(&file));
    assert!(
        stderr.contains("bad.toml")
            && stderr.contains("(expected a number of bytes such as 65536)"),
        "{stderr}"
    );
}

/// The MCP test server of the tests crate, built beside this binary by `cargo test
/// --workspace`.
fn mcp_test_server() -> Option<std::path::PathBuf> {
    let path = Path::new(env!("CARGO_BIN_EXE_sandpiper")).with_file_name("mcp_test_server");
    path.is_file().then_some(path)
}

#[test]
fn mcp_list_fails_naming_a_broken_server_and_a_misshapen_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        r#"{"mcpServers": {"broken": {"command": "sh", "args": ["-c", "echo cannot open /var/run/db.sock >&2; exit 3"]}}}"#,
    )
    .unwrap();
    let out = sandpiper(dir.path())
        .args(["mcp", "list", "--mcp-config"])
        .arg(&file)
        .output()
        .unwrap();
    let (stdout, stderr) = (text_of(&out.stdout), text_of(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.starts_with("broken (failed): "), "{stdout}");
    // Why it failed is in what it last wrote to stderr, shown under it.
    assert!(
        stdout.contains("last stderr lines:") && stdout.contains("cannot open /var/run/db.sock"),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: MCP server broken failed"),
        "{stderr}"
    );

    std::fs::write(&file, r#"{"servers": {}}"#).unwrap();
    let out = sandpiper(dir.path())
        .args(["mcp", "list", "--mcp-config"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = text_of(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("mcp.json") && stderr.contains(r#"expected {"mcpServers""#),
        "{stderr}"
    );
}

#[test]
fn tools_explains_its_columns_and_lists_mcp_tools() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandpiper(dir.path()).arg("tools").output().unwrap();
    let stdout = text_of(&out.stdout);
    assert!(out.status.success());
    assert!(
        stdout.contains("agent            offered to a plan sub-agent (the `plan` tool), not whether the main agent may use it"),
        "{stdout}"
    );
    assert!(!stdout.contains("MCP tools:"), "{stdout}");
    let Some(server) = mcp_test_server() else {
        panic!("mcp_test_server is not built: run `cargo test --workspace`");
    };
    let file = dir.path().join("mcp.json");
    let config = json!({"mcpServers": {"t": {"command": server, "args": ["--stdio"], "autoApprove": ["echo"]}}});
    std::fs::write(&file, config.to_string()).unwrap();
    let out = sandpiper(dir.path())
        .args(["tools", "--mcp-config"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = text_of(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text_of(&out.stderr));
    let listed = &stdout[stdout.find("MCP tools:").expect("an MCP section")..];
    assert!(listed.contains("\nname "), "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("mcp__t__echo ") && l.contains(" yes ")),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("mcp__t__add ") && l.contains(" no ")),
        "{listed}"
    );
}
