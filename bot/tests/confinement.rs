//! Issue 24: an approved command cannot read the bot's secrets. The real `sandpiper chat
//! --yes` binary holds secrets in its environment, its config file and its SQLite database;
//! a scripted model asks bash to read each of them (and math's Python to connect to a Unix
//! socket and to PostgreSQL's port), and the test reads what the tools returned to the model.
//! Ordinary work in the same call (`git`, `ls`, writing in the workdir, `ps` of the call's
//! own processes) must still work.

use std::io::Read;
use std::process::{Command, Stdio};

use sandpiper_tests::fake_llm::{FakeLlm, Reply, ToolCallSpec, text, tool_call};
use serde_json::json;

const ENV_SECRETS: [(&str, &str); 3] = [
    ("OPENAI_API_KEY", "sk-confine-model-key"),
    ("DISCORD_TOKEN", "discord-confine-token"),
    (
        "SANDPIPER_JWT_SECRET",
        "jwt-confine-secret-0123456789abcdef",
    ),
];
const CONFIG_SECRET: &str = "config-file-confine-secret";
/// Said in the chat, so it is in the database before the tool runs.
const DB_SECRET: &str = "db-row-confine-secret";
const ANSWER: &str = "All done.";

/// Runs the binary in `dir` on `script`; returns what each tool call returned to the model
/// and the binary's log (its stderr and `chat.log`).
async fn chat(
    dir: &std::path::Path,
    script: Vec<sandpiper_tests::fake_llm::Reply>,
) -> (Vec<String>, String) {
    let requests = script.len();
    let llm = FakeLlm::start(script).await;
    chat_with(dir, &llm, requests, "").await
}

/// The config file the binary runs with: the secret, automatic approval, and `tools`
/// (lines of its `[tools]` table).
fn config_text(tools: &str) -> String {
    format!("# {CONFIG_SECRET}\n[approval]\nauto_approve = true\n[tools]\n{tools}")
}

/// [`chat`] against `llm`, which answers `requests` requests, with `tools` in the config's
/// `[tools]` table.
async fn chat_with(
    dir: &std::path::Path,
    llm: &FakeLlm,
    requests: usize,
    tools: &str,
) -> (Vec<String>, String) {
    std::fs::write(dir.join("sandpiper.toml"), config_text(tools)).expect("config file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "carol")
        // The database beside the config file, where the attack looks for it.
        .env(
            "SANDPIPER_DATABASE_URL",
            format!("sqlite://{}/sandpiper.db", dir.display()),
        )
        .env("SANDPIPER_LOG", "sandpiper_agent::process::confine=info")
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake")
        .envs(ENV_SECRETS)
        .args([
            "--config",
            "sandpiper.toml",
            "chat",
            "--workstream",
            "confine",
            "--yes",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("sandpiper starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    use std::io::Write as _;
    writeln!(stdin, "please remember {DB_SECRET} and check the machine").expect("write");
    let requests = llm
        .wait_for_requests(requests, std::time::Duration::from_secs(120))
        .await;
    drop(stdin);
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let stdout = out.join().unwrap_or_default();
    // `chat` logs to a file in the data directory (stderr carries only a fatal error).
    let log = err.join().unwrap_or_default()
        + &std::fs::read_to_string(dir.join(".local/share/sandpiper/chat.log")).unwrap_or_default();
    assert!(stdout.contains(ANSWER), "stdout:\n{stdout}\nlog:\n{log}");
    // Each request after the first ends with the results of the calls before it.
    let results = requests
        .iter()
        .skip(1)
        .flat_map(|r| {
            let messages = r["messages"].as_array().cloned().unwrap_or_default();
            let answered = messages
                .iter()
                .rposition(|m| m["role"] == "assistant")
                .map_or(0, |i| i + 1);
            messages[answered..]
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    (results, log)
}

fn assert_no_secret(text: &str) {
    for (_, secret) in ENV_SECRETS {
        assert!(!text.contains(secret), "{secret} leaked:\n{text}");
    }
    assert!(!text.contains(CONFIG_SECRET), "the config leaked:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_command_reads_none_of_the_bots_secrets_and_ordinary_work_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().display();
    // The bot is bash's parent (a launcher execs bash) or grandparent (the standing spawner
    // forks it): found by walking up to the process called `sandpiper`. `$PPID` is the
    // spawner, which must give away nothing either. `env`: what bash itself was given (only
    // the tools' environment may reach it).
    let attack = format!(
        "BOT=$$; while [ \"$BOT\" -gt 1 ] && [ \"$(cat /proc/$BOT/comm)\" != sandpiper ]; do \
           BOT=$(awk '/^PPid:/{{print $2}}' /proc/$BOT/status); done; \
         echo BOT-IS-$(cat /proc/$BOT/comm); \
         env; cat /proc/$BOT/environ; echo; \
         for t in /proc/$BOT/task/*; do cat $t/environ; done; echo; \
         head -c 64 /proc/$BOT/mem >/dev/null && echo MEM-READ; \
         cat /proc/$PPID/environ; echo; \
         head -c 64 /proc/$PPID/mem >/dev/null && echo PARENT-MEM-READ; \
         cat {d}/sandpiper.toml; \
         cat {d}/sandpiper.db {d}/sandpiper.db-wal 2>&1 | grep -a -c {DB_SECRET}; \
         echo DB-CHECKED"
    );
    let work = "echo hi > made.txt && cat made.txt && ls && \
                git init -q repo && cd repo && echo x > f && git add f && \
                git -c user.email=a@b -c user.name=a commit -qm first && \
                git log --oneline | wc -l && sleep 3 & wait; \
                ps -o comm= -p $$ && echo PS-OK";
    let (results, log) = chat(
        dir.path(),
        vec![
            tool_call("c1", "bash", json!({ "command": attack })),
            tool_call("c2", "bash", json!({ "command": work })),
            text(ANSWER),
        ],
    )
    .await;
    let (attacked, worked) = (&results[0], &results[1]);
    assert!(attacked.contains("BOT-IS-sandpiper\n"), "{attacked}");
    assert_no_secret(attacked);
    assert!(!attacked.contains("MEM-READ"), "{attacked}");
    assert!(attacked.contains("Permission denied"), "{attacked}");
    // The database files are covered: grep counts no line with the secret.
    assert!(attacked.contains("0\nDB-CHECKED"), "{attacked}");
    // ... while the bot itself did store it (the test can fail).
    let mut stored = Vec::new();
    for suffix in ["", "-wal"] {
        if let Ok(bytes) = std::fs::read(dir.path().join(format!("sandpiper.db{suffix}"))) {
            stored.extend(bytes);
        }
    }
    assert!(
        String::from_utf8_lossy(&stored).contains(DB_SECRET),
        "the database does not hold the secret"
    );
    for expected in ["hi\n", "made.txt", "1\n", "bash\nPS-OK"] {
        assert!(worked.contains(expected), "{expected:?} missing:\n{worked}");
    }
    assert!(
        log.contains("tool processes confined") || log.contains("only partly confined"),
        "no start-up line:\n{log}"
    );
    // Built beside the binary, the small launcher starts the tools (not the whole bot again).
    assert!(
        log.contains("sandpiper-confine") && log.contains("start through this launcher"),
        "not through the small launcher:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn math_connects_to_no_unix_socket_and_no_port() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("db.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&socket).expect("a Unix socket");
    let code = format!(
        "import socket\n\
         targets = [(socket.AF_UNIX, {socket:?}), (socket.AF_INET, ('127.0.0.1', 5432))]\n\
         import glob\n\
         targets += [(socket.AF_UNIX, p) for p in glob.glob('/var/run/postgresql/.s.PGSQL.*')]\n\
         for fam, addr in targets:\n\
         \x20   try:\n\
         \x20       s = socket.socket(fam, socket.SOCK_STREAM)\n\
         \x20       s.settimeout(2)\n\
         \x20       s.connect(addr)\n\
         \x20       print('CONNECTED', addr)\n\
         \x20   except OSError as e:\n\
         \x20       print('refused', addr)\n",
        socket = socket.display().to_string()
    );
    let (results, _) = chat(
        dir.path(),
        vec![
            tool_call("m1", "math", json!({ "code": code })),
            text(ANSWER),
        ],
    )
    .await;
    let out = &results[0];
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(out.matches("refused").count() >= 2, "{out}");
}

/// Bash's calls start from the standing spawner where Landlock is on: each call is a fork of
/// one confined process, in a Landlock domain of its own. A job left running by one call is
/// out of the next call's reach (as between two launchers), the shell sees SIGPIPE as any
/// process does (Rust ignores it in its own), and each call still gets its own process
/// group and working directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_starts_from_the_spawner_in_its_own_domain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = "sleep 60 & echo $! > sleeper.pid; echo PARENT-$(cat /proc/$PPID/comm); \
                 echo GROUP-$(($(ps -o pgid= -p $$) == $$)); pwd";
    let second = "cat /proc/$(cat sleeper.pid)/environ >/dev/null && echo NEIGHBOUR-READ; \
                  head -c 1 /proc/$(cat sleeper.pid)/mem >/dev/null && echo NEIGHBOUR-MEM; \
                  yes | head -c 4; echo; echo PIPE-$?; \
                  kill $(cat sleeper.pid) 2>/dev/null || echo NEIGHBOUR-UNSIGNALLED; \
                  echo PARENT-$(cat /proc/$PPID/comm)";
    let (results, log) = chat(
        dir.path(),
        vec![
            tool_call("s1", "bash", json!({ "command": first })),
            tool_call("s2", "bash", json!({ "command": second })),
            text(ANSWER),
        ],
    )
    .await;
    let (first, second) = (&results[0], &results[1]);
    let landlock = !log.contains("landlock_abi=0");
    if landlock {
        // `comm` holds 15 bytes: the spawner is the small launcher.
        assert!(first.contains("PARENT-sandpiper-confi\n"), "{first}\n{log}");
        assert!(second.contains("PARENT-sandpiper-confi"), "{second}");
        if !log.contains("signals_scoped=false") {
            assert!(second.contains("NEIGHBOUR-UNSIGNALLED"), "{second}");
        }
    } else {
        eprintln!("no Landlock here: each call has a launcher of its own");
    }
    assert!(first.contains("GROUP-1\n"), "{first}");
    // The console's workstream works where it was started.
    let here = dir.path().file_name().expect("a name").to_string_lossy();
    assert!(first.contains(&*here), "{first}");
    assert!(!second.contains("NEIGHBOUR-READ"), "{second}");
    assert!(!second.contains("NEIGHBOUR-MEM"), "{second}");
    assert!(second.contains("Permission denied"), "{second}");
    assert!(second.contains("y\ny\n\nPIPE-0"), "{second}");
    assert!(!second.contains("Broken pipe"), "{second}");
}

/// Walks up from the shell to the process called `sandpiper` (the bot) into `$BOT`.
const FIND_BOT: &str = "BOT=$$; while [ \"$BOT\" -gt 1 ] && [ \"$(cat /proc/$BOT/comm)\" != sandpiper ]; do \
                        BOT=$(awk '/^PPid:/{print $2}' /proc/$BOT/status); done; ";

/// Issue 40: from an approved call, `kill -9` of the bot and of another thread's running
/// call worked. Two calls run at once from the standing spawner; the second signals its own
/// job, then tries `kill -0` and `kill -9` on the bot, on the spawner and on the first call's
/// shell, and every one is refused; the first call and the bot carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cannot_signal_the_bot_the_spawner_or_another_running_call() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = "echo $$ > running.pid; sleep 4; echo FIRST-DONE";
    let attack = format!(
        "{FIND_BOT}echo BOT-IS-$(cat /proc/$BOT/comm); \
         while [ ! -s running.pid ]; do sleep 0.1; done; OTHER=$(cat running.pid); \
         sleep 30 & kill -0 $! && echo OWN-JOB; kill -9 $!; \
         for target in bot:$BOT spawner:$PPID other:$OTHER; do \
           kill -0 ${{target#*:}} 2>/dev/null && echo SIGNALLED-${{target%%:*}}; \
           kill -9 ${{target#*:}} 2>/dev/null && echo KILLED-${{target%%:*}}; \
           kill -0 ${{target#*:}} 2>&1 | grep -q 'not permitted' && echo EPERM-${{target%%:*}}; \
         done"
    );
    let (results, log) = chat(
        dir.path(),
        vec![
            Reply::tool_calls(vec![
                ToolCallSpec::new("k1", "bash", json!({ "command": running })),
                ToolCallSpec::new("k2", "bash", json!({ "command": attack })),
            ]),
            text(ANSWER),
        ],
    )
    .await;
    let (first, second) = (&results[0], &results[1]);
    assert!(second.contains("BOT-IS-sandpiper\n"), "{second}");
    assert!(second.contains("OWN-JOB\n"), "{second}");
    if log.contains("signals_scoped=false") {
        eprintln!("Landlock here scopes no signals (ABI < 6): skipped\n{log}");
        return;
    }
    for target in ["bot", "spawner", "other"] {
        assert!(!second.contains(&format!("SIGNALLED-{target}")), "{second}");
        assert!(!second.contains(&format!("KILLED-{target}")), "{second}");
        assert!(second.contains(&format!("EPERM-{target}")), "{second}");
    }
    assert!(first.contains("FIRST-DONE"), "{first}");
}

/// Issue 40: the spawner covered the config once, when it started; a config saved again by
/// rename is a new file its namespace does not cover, and a later `cat` printed it. Before
/// each call the spawner's files are checked, and a replaced one gets a new spawner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_replaced_by_rename_is_not_readable_by_later_calls() {
    const REPLACED: &str = "replaced-config-secret";
    let dir = tempfile::tempdir().expect("temp dir");
    let look = "cat sandpiper.toml; echo CAT-$?; echo PARENT-$(cat /proc/$PPID/comm)";
    let llm = FakeLlm::start(vec![tool_call("r1", "bash", json!({ "command": look }))]).await;
    // The second request comes after the first call ran from the spawner: the config is
    // saved again (a new file renamed over it) before the second call starts.
    let config = dir.path().join("sandpiper.toml");
    let calls = std::sync::atomic::AtomicUsize::new(0);
    llm.respond_with(
        move |_| match calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => {
                let new = config.with_extension("toml.new");
                let text = config_text("").replace(CONFIG_SECRET, REPLACED);
                std::fs::write(&new, text).expect("the new config");
                std::fs::rename(&new, &config).expect("renamed over the config");
                tool_call("r2", "bash", json!({ "command": look }))
            }
            _ => text(ANSWER),
        },
    );
    let (results, log) = chat_with(dir.path(), &llm, 3, "").await;
    let (before, after) = (&results[0], &results[1]);
    assert!(before.contains("CAT-0"), "{before}");
    assert!(!before.contains(CONFIG_SECRET), "{before}");
    assert!(after.contains("CAT-0"), "{after}");
    assert!(
        !after.contains(REPLACED),
        "the replaced config leaked:\n{after}"
    );
    if !log.contains("landlock_abi=0") {
        assert!(after.contains("PARENT-sandpiper-confi"), "{after}");
        assert!(
            log.contains("a protected file was replaced"),
            "no new spawner:\n{log}"
        );
    }
}

/// Issue 40: as root a call wrote itself into another cgroup, cleared its marker, left its
/// process group and outlived its timeout, while the result said everything was killed.
/// From the spawner no cgroup file system is in reach: the call stays in its cgroup and the
/// timeout ends all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cannot_leave_its_cgroup_and_outlive_its_timeout() {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let Some(v2) = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2").then(|| left.split(' ').nth(4))?
    }) else {
        eprintln!("no cgroup v2 here: nothing to leave");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let escape = format!(
        "echo $$ > {v2}/cgroup.procs && echo LEFT-THE-CGROUP; \
         env -i setsid sh -c 'echo $$ > sleeper.pid; exec sleep 60' & sleep 30"
    );
    let llm = FakeLlm::start(vec![
        tool_call("t1", "bash", json!({ "command": escape })),
        text(ANSWER),
    ])
    .await;
    let (results, log) = chat_with(dir.path(), &llm, 2, "bash_timeout = \"2s\"\n").await;
    let out = &results[0];
    let pid = std::fs::read_to_string(dir.path().join("sleeper.pid")).unwrap_or_default();
    let pid = pid.trim();
    assert!(!pid.is_empty(), "the sleeper did not start:\n{out}\n{log}");
    let survived = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(')').next().unwrap_or_default().starts_with(" Z"));
    if survived {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid])
            .status();
    }
    if log.contains("cgroups_covered=false") {
        eprintln!("the cgroup file systems cannot be covered here: skipped\n{log}");
        return;
    }
    assert!(!out.contains("LEFT-THE-CGROUP"), "{out}");
    assert!(!survived, "the call outlived its timeout:\n{out}");
    assert!(out.contains("[timed out after 2s; the command"), "{out}");
}
