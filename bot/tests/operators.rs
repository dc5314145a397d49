//! What an operator meets first, through the real binary: `doctor` checks the database it is
//! told and never creates one; a relative database in the config file is beside the file
//! wherever the command runs; a variable that overrides the file is named at start; `serve`
//! stops at once, saying why, on a taken port or a token Discord refuses; its fatal error is a
//! JSON line under JSON logs; `chat` keeps log lines out of the conversation.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandpiper_tests::fake_discord::{Failure, FakeDiscord};
use sandpiper_tests::fake_llm::{FakeLlm, Reply};

fn sandpiper(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "olga");
    cmd
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits for `child` to exit within `limit`, killing it (and failing) when it does not.
fn exits_within(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("killed");
            panic!(
                "still running after {limit:?}\nstderr:\n{}",
                text_of(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("exited")
}

#[test]
fn doctor_checks_the_database_it_is_told_and_never_creates_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("x/nonexistent.db");
    let out = sandpiper(dir.path())
        .args(["doctor", "--database"])
        .arg(format!("sqlite://{}", missing.display()))
        .output()
        .unwrap();
    let stdout = text_of(&out.stdout);
    let database = stdout
        .lines()
        .find(|l| l.contains(" database "))
        .unwrap_or_else(|| panic!("no database line:\n{stdout}"));
    assert_eq!(
        database,
        format!(
            "skip  database       There is no database yet at {}: it is created by the first \
             `sandpiper chat` or `sandpiper serve` (or choose another with --database, \
             SANDPIPER_DATABASE_URL or [database] url).",
            missing.display()
        )
    );
    assert!(
        !missing.parent().unwrap().exists(),
        "doctor created {missing:?}"
    );
    assert!(
        !dir.path().join(".local").exists(),
        "doctor made the default database"
    );

    // An existing one is opened, and the line names it.
    let here = dir.path().join("here.db");
    let made = sandpiper(dir.path())
        .args(["--database", "here.db", "link"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text_of(&made.stderr));
    let out = sandpiper(dir.path())
        .args(["doctor", "--database", "here.db"])
        .output()
        .unwrap();
    let stdout = text_of(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "ok    database       sqlite://{}: opened, migrations current",
            here.display()
        )),
        "{stdout}"
    );
}

#[test]
fn a_relative_database_in_the_file_is_beside_the_file_wherever_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path().join("etc");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let init = sandpiper(&etc)
        .args(["init", "--no-input"])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text_of(&init.stderr));
    let config = etc.join("sandpiper.toml");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("url = \"sqlite://sandpiper.db\""),
        "init writes a relative default"
    );
    let doctor = sandpiper(&elsewhere)
        .arg("--config")
        .arg(&config)
        .arg("doctor")
        .output()
        .unwrap();
    let stdout = text_of(&doctor.stdout);
    let beside = std::fs::canonicalize(&etc).unwrap().join("sandpiper.db");
    assert!(
        stdout.contains(&format!(
            "There is no database yet at {}:",
            beside.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("ok    config         {}", config.display())),
        "{stdout}"
    );
    // A command that writes creates it there, not in the directory it runs in.
    let link = sandpiper(&elsewhere)
        .arg("--config")
        .arg(&config)
        .arg("link")
        .output()
        .unwrap();
    assert!(link.status.success(), "{}", text_of(&link.stderr));
    assert!(beside.is_file());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// `serve` started with a config file that names its database and an environment that names
/// another: the start says which variable beats which key, without the URL's password.
#[test]
fn serve_warns_when_the_environment_overrides_the_files_database() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sandpiper.toml");
    std::fs::write(
        &config,
        "[database]\nurl = \"postgres://sp:file-hunter2@127.0.0.1:1/sp\"\n",
    )
    .unwrap();
    let env_db = dir.path().join("env.db");
    let mut child = sandpiper(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env(
            "SANDPIPER_DATABASE_URL",
            format!("sqlite://{}", env_db.display()),
        )
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("SANDPIPER_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.map_while(Result::ok) {
        let served = line.contains("serving http://");
        seen.push(line);
        if served {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let warning: serde_json::Value = seen
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["fields"]["variable"] == "SANDPIPER_DATABASE_URL")
        .unwrap_or_else(|| panic!("no warning:\n{}", seen.join("\n")));
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["fields"]["key"], "database.url");
    assert_eq!(
        warning["fields"]["message"],
        "the environment overrides the config file: $SANDPIPER_DATABASE_URL replaces \
         database.url (unset the variable, or drop the key from the file)"
    );
    let all = seen.join("\n");
    assert!(!all.contains("hunter2"), "{all}");
    // The environment did win: serve runs on its SQLite file.
    assert!(env_db.is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_taken_port_stops_before_connecting_and_says_so_in_json() {
    let discord = FakeDiscord::start().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let child = sandpiper(dir.path())
        .arg("serve")
        .env("SANDPIPER_LISTEN", addr.to_string())
        .env("SANDPIPER_LOG_FORMAT", "json")
        .env("DISCORD_TOKEN", "discord-token")
        .env("SANDPIPER_DISCORD_API_BASE", discord.base_url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || exits_within(child, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = text_of(&out.stderr);
    let last: serde_json::Value = stderr
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the last line is not JSON:\n{stderr}"));
    assert_eq!(last["level"], "ERROR", "{stderr}");
    let error = last["fields"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(&format!("cannot serve on {addr}: ")),
        "{stderr}"
    );
    // Nothing reached the gateway: the port was checked first.
    let gateway: Vec<String> = discord
        .requests()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.contains("gateway"))
        .collect();
    assert_eq!(gateway, Vec::<String>::new());
    assert_eq!(discord.identify_count(), 0);
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_a_token_discord_refuses_stops_and_says_what_to_do() {
    let discord = FakeDiscord::start().await;
    discord.fail_next("GET", "/users/@me", Failure::Status(401), 1);
    let dir = tempfile::tempdir().unwrap();
    let child = sandpiper(dir.path())
        .arg("serve")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("DISCORD_TOKEN", "a-wrong-token")
        .env("SANDPIPER_DISCORD_API_BASE", discord.base_url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || exits_within(child, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = text_of(&out.stderr);
    assert_eq!(
        stderr.lines().last(),
        Some(
            "error: cannot start Discord: the token in DISCORD_TOKEN is not valid (401): reset \
             it under Bot in the developer portal"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("a-wrong-token"), "{stderr}");
    assert_eq!(discord.identify_count(), 0);
}

/// A piped `chat` whose model refuses: the conversation shows the error once, and no log line;
/// the log went to `chat.log` in the data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_shows_a_model_error_once_and_logs_to_a_file() {
    let llm = FakeLlm::start(vec![Reply::http_error(400, "model `nope` does not exist")]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sandpiper(dir.path());
    cmd.args(["chat", "--workstream", "ops"])
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "nope")
        .env("OPENAI_API_KEY", "sk-ops")
        .env("SANDPIPER_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
        exits_within(child, Duration::from_secs(60))
    })
    .await
    .unwrap();
    let shown = format!("{}{}", text_of(&out.stdout), text_of(&out.stderr));
    assert_eq!(
        shown.matches("does not exist").count(),
        1,
        "the error is shown once:\n{shown}"
    );
    for level in [" INFO ", " WARN ", " ERROR "] {
        assert!(
            !shown.contains(level),
            "a log line in the conversation:\n{shown}"
        );
    }
    let log = std::fs::read_to_string(dir.path().join(".local/share/sandpiper/chat.log"))
        .expect("chat.log");
    assert!(log.contains(" INFO "), "{log}");
}
