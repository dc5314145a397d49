//! One-shot turns for scripts (`sandpiper chat -p`, `sandpiper exec`) through the real binary
//! against the fake model: the exit status says how the turn went, approvals never wait on
//! stdin, and `--json` writes one event per line.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sandpiper_tests::fake_llm::{FakeLlm, text, tool_call};
use serde_json::{Value, json};

/// Longer than a turn takes here, far shorter than a prompt waiting for an answer.
const DEADLINE: Duration = Duration::from_secs(90);

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

/// Runs `cmd` with stdin open and never written (as a prompt nobody answers), within
/// [`DEADLINE`]; the output and a text of both streams for failures.
async fn run(mut cmd: Command) -> (Output, String) {
    let out = tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || {
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("sandpiper starts");
            let stdin = child.stdin.take();
            let out = child.wait_with_output().expect("sandpiper exits");
            drop(stdin);
            out
        }),
    )
    .await
    .expect("a one-shot turn ends without anyone answering")
    .expect("the blocking task ends");
    let shown = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, shown)
}

fn bash_then_answer(command: &str, answer: &str) -> Vec<sandpiper_tests::fake_llm::Reply> {
    vec![
        tool_call("c1", "bash", json!({ "command": command })),
        text(answer),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_answers_on_stdout_and_exits_zero() {
    let llm = FakeLlm::start(vec![text("The answer is 42.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.args(["chat", "-p", "what is the answer?"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("The answer is 42."),
        "{shown}"
    );
    let requests = llm.requests();
    assert!(
        requests[0].to_string().contains("what is the answer?"),
        "the message reached the model: {}",
        requests[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_asks_is_denied_without_yes_and_the_exit_says_so() {
    let llm = FakeLlm::start(bash_then_answer("echo ran > marker", "I could not run it.")).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.args(["chat", "-p", "write the marker"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(3), "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("run it with --yes"), "{shown}");
    assert!(!dir.path().join("marker").exists(), "{shown}");
    // The model was told why, and answered.
    assert!(stdout.contains("I could not run it."), "{shown}");
    let told = llm.requests()[1]["messages"].to_string();
    assert!(told.contains("run it with --yes"), "{told}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_yes_the_call_runs_and_the_exit_is_zero() {
    let llm = FakeLlm::start(bash_then_answer("echo ran > marker", "Written.")).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.args(["chat", "--yes", "-p", "write the marker"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("marker"))
            .unwrap()
            .trim(),
        "ran",
        "{shown}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Written."),
        "{shown}"
    );
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_json_writes_the_call_its_result_usage_and_answer_as_lines() {
    let llm = FakeLlm::start(vec![
        tool_call("c1", "bash", json!({ "command": "echo hello-from-bash" })).with_usage(11, 3),
        text("It said hello.").with_usage(20, 5),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.args(["exec", "--yes", "--json", "say hello"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let events = events(&out);
    let call = of_type(&events, "tool_call");
    assert_eq!(call.len(), 1, "{shown}");
    assert_eq!(
        (&call[0]["name"], &call[0]["call_id"]),
        (&json!("bash"), &json!("c1"))
    );
    // With --yes no call asks: nothing waits for a decision.
    assert_eq!(call[0]["needs_approval"], json!(false), "{shown}");
    assert!(of_type(&events, "approval_requested").is_empty(), "{shown}");
    let result = of_type(&events, "tool_result");
    assert_eq!(result.len(), 1, "{shown}");
    assert!(
        result[0]["output"]
            .as_str()
            .unwrap()
            .contains("hello-from-bash"),
        "{shown}"
    );
    assert_eq!(result[0]["is_error"], json!(false));
    let deltas: String = of_type(&events, "text_delta")
        .iter()
        .filter_map(|d| d["text"].as_str())
        .collect();
    assert_eq!(deltas, "It said hello.");
    let usage = of_type(&events, "usage");
    assert_eq!(
        (
            &usage[0]["usage"]["input_tokens"],
            &usage[0]["usage"]["output_tokens"]
        ),
        (&json!(31), &json!(8)),
        "{shown}"
    );
    let last = events.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"], &last["text"]),
        (
            &json!("result"),
            &json!("answered"),
            &json!("It said hello.")
        ),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_say_a_denial_and_its_reason_and_the_exit_is_three() {
    let llm = FakeLlm::start(bash_then_answer("echo ran > marker", "Not allowed.")).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.args(["chat", "--json", "-p", "write the marker"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(3), "{shown}");
    let events = events(&out);
    let asked = of_type(&events, "approval_requested");
    assert_eq!(asked.len(), 1, "{shown}");
    let decided = of_type(&events, "approval_decided");
    assert_eq!(decided[0]["decision"], json!("denied"), "{shown}");
    assert!(
        decided[0]["reason"]
            .as_str()
            .unwrap()
            .contains("run it with --yes")
    );
    let result = of_type(&events, "tool_result");
    assert_eq!(
        (&result[0]["approval"], &result[0]["is_error"]),
        (&json!("denied"), &json!(true)),
        "{shown}"
    );
    assert_eq!(events.last().unwrap()["status"], json!("refused"));
    assert!(!dir.path().join("marker").exists());
}

/// Runs `cmd` with `input` on stdin (a piped console session: one line a message, an
/// approval answered by the next line), within [`DEADLINE`].
async fn run_with_input(mut cmd: Command, input: &str) -> (Output, String) {
    let input = input.to_owned();
    let out = tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || {
            use std::io::Write as _;
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("sandpiper starts");
            let mut stdin = child.stdin.take().expect("stdin is piped");
            stdin.write_all(input.as_bytes()).expect("sandpiper reads");
            drop(stdin);
            child.wait_with_output().expect("sandpiper exits")
        }),
    )
    .await
    .expect("the session ends when its input does")
    .expect("the blocking task ends");
    let shown = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, shown)
}

/// `sandpiper` in `dir`, its data (the database) under `home` for every directory.
fn sandpiper_in(home: &std::path::Path, dir: &std::path::Path, llm: &FakeLlm) -> Command {
    let mut cmd = sandpiper(home, llm);
    cmd.current_dir(dir);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_allowed_at_the_console_runs_in_a_later_exec_and_nothing_else_does() {
    let llm = FakeLlm::start(vec![
        tool_call("c1", "bash", json!({ "command": "git status --short" })),
        text("Clean."),
        tool_call("c2", "bash", json!({ "command": "git status" })),
        text("Still clean."),
        tool_call("c3", "bash", json!({ "command": "git log -1" })),
        text("Not allowed."),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(init.success());

    // At the console `p` allows the command's pattern (as the card's button does), and
    // /grants lists it.
    let mut cmd = sandpiper_in(home.path(), &repo, &llm);
    cmd.arg("chat");
    let (out, shown) = run_with_input(cmd, "is it clean?\np\n/grants\n").await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[a]lways allow bash / [p] always allow `git status`: p"),
        "{shown}"
    );
    assert!(stdout.contains("Always allowed in this thread:"), "{shown}");
    assert!(stdout.contains("git status"), "{shown}");

    // A one-shot in the same directory continues the same workstream: the pattern covers
    // `git status`, with nobody to ask.
    let mut cmd = sandpiper_in(home.path(), &repo, &llm);
    cmd.args(["exec", "--json", "again?"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let events = events(&out);
    assert!(of_type(&events, "approval_requested").is_empty(), "{shown}");
    assert_eq!(
        of_type(&events, "tool_result")[0]["is_error"],
        json!(false),
        "{shown}"
    );

    // Another command still asks, and nobody can answer: denied, exit 3.
    let mut cmd = sandpiper_in(home.path(), &repo, &llm);
    cmd.args(["exec", "and the log?"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(3), "{shown}");
    llm.verify();
}

/// The text of every request the model was sent.
fn requests_text(llm: &FakeLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(|r| r["messages"].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workstreams_follow_the_directory_and_are_listed_and_resumed() {
    let llm = FakeLlm::start(vec![
        text("Hello, old default."),
        text("Hello, app."),
        text("Hello, other."),
        text("Back in app."),
        text("Back in default."),
        text("Still in default."),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let app = home.path().join("app");
    let other = home.path().join("other");
    std::fs::create_dir(&app).unwrap();
    std::fs::create_dir(&other).unwrap();

    // A workstream from before: `console:default`.
    let mut cmd = sandpiper_in(home.path(), home.path(), &llm);
    cmd.args(["chat", "--workstream", "default"]);
    let (out, shown) = run_with_input(cmd, "from the old default\n").await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    // `exec` in app and `chat` in other: a workstream each, by directory.
    let mut cmd = sandpiper_in(home.path(), &app, &llm);
    cmd.args(["exec", "from app"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let mut cmd = sandpiper_in(home.path(), &other, &llm);
    cmd.arg("chat");
    let (out, shown) = run_with_input(cmd, "from other\n").await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let sent = requests_text(&llm);
    assert!(
        !sent[2].contains("from app"),
        "other continued app: {}",
        sent[2]
    );

    // --list: most recent first, with the directory and the last message.
    let mut cmd = sandpiper_in(home.path(), &app, &llm);
    cmd.args(["chat", "--list"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{list}");
    let other_dir = other.canonicalize().unwrap().display().to_string();
    let app_dir = app.canonicalize().unwrap().display().to_string();
    assert!(rows[0].trim_start().starts_with("other-"), "{list}");
    assert!(
        rows[0].contains(&other_dir) && rows[0].ends_with("\"from other\""),
        "{list}"
    );
    assert!(rows[1].trim_start().starts_with("app-"), "{list}");
    assert!(
        rows[1].contains(&app_dir) && rows[1].ends_with("\"from app\""),
        "{list}"
    );
    assert!(rows[2].trim_start().starts_with("default "), "{list}");
    assert!(rows[2].ends_with("\"from the old default\""), "{list}");
    let app_name = rows[1].split_whitespace().next().unwrap().to_owned();

    // --resume NAME continues app's history from elsewhere; --resume default the old one.
    let mut cmd = sandpiper_in(home.path(), &other, &llm);
    cmd.args(["chat", "--resume", &app_name]);
    let (out, shown) = run_with_input(cmd, "back to app\n").await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let mut cmd = sandpiper_in(home.path(), &other, &llm);
    cmd.args(["exec", "--resume", "default", "back to default"]);
    let (out, shown) = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let sent = requests_text(&llm);
    assert!(
        sent[3].contains("from app") && sent[3].contains("back to app"),
        "{}",
        sent[3]
    );
    assert!(
        sent[4].contains("from the old default") && !sent[4].contains("from app"),
        "{}",
        sent[4]
    );
    // --resume alone picks the last used; an unknown name says where the names are.
    let mut cmd = sandpiper_in(home.path(), &app, &llm);
    cmd.args(["chat", "--resume"]);
    let (out, shown) = run_with_input(cmd, "which one?\n").await;
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let sent = requests_text(&llm);
    assert!(sent[5].contains("back to default"), "{}", sent[5]);
    let mut cmd = sandpiper_in(home.path(), &app, &llm);
    cmd.args(["chat", "--resume", "nope"]);
    let (out, shown) = run(cmd).await;
    assert_ne!(out.status.code(), Some(0), "{shown}");
    assert!(shown.contains("--list"), "{shown}");
    llm.verify();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_a_one_shot_turn_and_the_exit_is_130() {
    let llm = FakeLlm::start(vec![tool_call(
        "c1",
        "bash",
        json!({ "command": "echo started; sleep 60" }),
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path(), &llm);
    cmd.args(["exec", "--yes", "--json", "wait a minute"]);
    let started = std::time::Instant::now();
    let (status, lines) = tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || {
            use std::io::BufRead as _;
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("sandpiper starts");
            let stdout = child.stdout.take().expect("stdout is piped");
            let mut lines = Vec::new();
            for line in std::io::BufReader::new(stdout).lines() {
                let line = line.expect("sandpiper writes lines");
                let running = line.contains("\"tool_output\"");
                lines.push(line);
                if running {
                    // Ctrl-C as a terminal sends it: SIGINT.
                    let kill = Command::new("kill")
                        .args(["-INT", &child.id().to_string()])
                        .status()
                        .expect("kill runs");
                    assert!(kill.success());
                }
            }
            (child.wait().expect("sandpiper exits"), lines)
        }),
    )
    .await
    .expect("Ctrl-C ends the turn")
    .expect("the blocking task ends");
    assert_eq!(status.code(), Some(130), "{lines:#?}");
    assert!(started.elapsed() < Duration::from_secs(50), "{lines:#?}");
    let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(
        (&last["type"], &last["status"], &last["exit_code"]),
        (&json!("result"), &json!("stopped"), &json!(130)),
        "{lines:#?}"
    );
}
