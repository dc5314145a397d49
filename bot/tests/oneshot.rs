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
