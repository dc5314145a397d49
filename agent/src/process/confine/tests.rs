//! The attacks, through real child processes: this test process stands in for the bot (its
//! environment and memory), a temporary file for its config.

use super::*;
use pretty_assertions::assert_eq;

const SECRET: &str = "sk-confine-test-secret";

/// Runs `script` with `sh -c` in `dir` as `confinement` starts a tool; stdout and stderr.
async fn sh(confinement: &Confinement, dir: &Path, script: &str) -> (bool, String) {
    let env = crate::process::env::ChildEnv::allow_listed(&crate::config::ProcessEnv)
        .confined(confinement.clone());
    let out = env
        .command("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .await
        .expect("sh starts");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("sandpiper.toml");
    std::fs::write(&config, format!("[model]\napi_key = \"{SECRET}\"\n")).expect("write");
    (dir, config)
}

#[tokio::test]
async fn a_tool_cannot_read_the_bots_environment_memory_or_config() {
    let (dir, config) = setup();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let me = std::process::id();
    let attack = format!(
        "cat /proc/{me}/environ >/dev/null && echo ENVIRON-READ; \
         for t in /proc/{me}/task/*; do cat $t/environ >/dev/null 2>&1 && echo TASK-ENVIRON-READ; done; \
         head -c 1 /proc/{me}/mem >/dev/null 2>&1; [ $? -eq 0 ] && echo MEM-READ; \
         readlink /proc/{me}/fd/0 && echo FD-READ; ls /proc/{me}/root/ >/dev/null 2>&1 && echo ROOT-READ; \
         cat {config}; echo end",
        config = config.display()
    );
    // Without the confinement the attack works: the test can fail.
    let (_, open) = sh(&Confinement::none(), &work, &attack).await;
    for leak in [
        "ENVIRON-READ",
        "TASK-ENVIRON-READ",
        "FD-READ",
        "ROOT-READ",
        SECRET,
    ] {
        assert!(
            open.contains(leak),
            "{leak} not readable unconfined:\n{open}"
        );
    }

    let confined = Confinement::probe(std::slice::from_ref(&config));
    let report = confined.report().expect("probed").clone();
    assert!(report.bot_process, "{report:?}");
    assert!(!matches!(report.files, FileHiding::No(_)), "{report:?}");
    let (_, text) = sh(&confined, &work, &attack).await;
    for leak in [
        "ENVIRON-READ",
        "TASK-ENVIRON-READ",
        "MEM-READ",
        "FD-READ",
        "ROOT-READ",
        SECRET,
    ] {
        assert!(!text.contains(leak), "{leak} leaked:\n{text}");
    }
    assert!(text.contains("Permission denied"), "{text}");
    assert!(text.contains("end\n"), "{text}");
    // The config file is still there for the bot.
    assert!(
        std::fs::read_to_string(&config)
            .expect("read")
            .contains(SECRET)
    );
}

#[tokio::test]
async fn ordinary_commands_still_work_confined() {
    let (dir, config) = setup();
    let confined = Confinement::probe(&[config]);
    let script = "echo hi > made.txt && cat made.txt && ls && mkdir sub && \
                  git init -q . && git status --short && sleep 5 & \
                  wait $!; ps -o pid= -p $$ >/dev/null && echo PS-OK; \
                  ps -e -o comm= | grep -q '^sh$' && echo PS-ALL; \
                  unshare --mount true 2>/dev/null || echo NO-MOUNT-NS; \
                  umount /proc 2>/dev/null || echo NO-UMOUNT";
    let (ok, text) = sh(&confined, dir.path(), script).await;
    assert!(ok, "{text}");
    for expected in ["hi", "made.txt", "PS-OK", "PS-ALL", "NO-UMOUNT"] {
        assert!(text.contains(expected), "{expected} missing:\n{text}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).expect("written"),
        "hi\n"
    );
}

#[tokio::test]
async fn math_reaches_no_socket_of_any_kind() {
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        eprintln!("no python3: skipped");
        return;
    };
    let (dir, config) = setup();
    let socket = dir.path().join("db.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = tcp.local_addr().expect("addr").port();
    let code = format!(
        "import socket\n\
         for fam, addr in [(socket.AF_UNIX, {socket:?}), (socket.AF_INET, ('127.0.0.1', {port}))]:\n\
         \x20   try:\n\
         \x20       s = socket.socket(fam, socket.SOCK_STREAM)\n\
         \x20       s.connect(addr)\n\
         \x20       print('CONNECTED', fam)\n\
         \x20   except OSError as e:\n\
         \x20       print('refused', fam, e.errno)\n",
        socket = socket.display().to_string()
    );
    let run = |confinement: Confinement| {
        let code = code.clone();
        async move {
            let env = crate::process::env::ChildEnv::allow_listed(&crate::config::ProcessEnv)
                .confined(confinement);
            let out = env
                .command_as(python, Profile::Math)
                .args(["-c", &code])
                .output()
                .await
                .expect("python starts");
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let open = run(Confinement::none()).await;
    assert_eq!(open.matches("CONNECTED").count(), 2, "{open}");
    let text = run(Confinement::probe(&[config])).await;
    assert!(!text.contains("CONNECTED"), "{text}");
    assert_eq!(text.matches("refused").count(), 2, "{text}");
}

/// What the confinement adds to starting a tool's shell: `bash -c 'echo hi'` started and
/// waited for, unconfined (`posix_spawn`) and confined (fork + namespaces + Landlock).
/// `cargo test -p sandpiper-agent --lib confine::tests::cost -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn cost_of_a_confined_bash_echo() {
    let (dir, config) = setup();
    let confined = Confinement::probe(&[config]);
    for (name, c) in [("posix_spawn", Confinement::none()), ("confined", confined)] {
        let env =
            crate::process::env::ChildEnv::allow_listed(&crate::config::ProcessEnv).confined(c);
        let runs = 200;
        let start = std::time::Instant::now();
        for _ in 0..runs {
            let out = env
                .command("bash")
                .args(["-c", "echo hi"])
                .current_dir(dir.path())
                .output()
                .await
                .expect("bash runs");
            assert_eq!(out.stdout, b"hi\n");
        }
        println!("{name}: {:?} per bash echo hi", start.elapsed() / runs);
    }
}

#[tokio::test]
async fn a_confined_command_starts_with_nothing_of_the_bots_environment() {
    // This test process has PATH, HOME and cargo's variables: none may reach the child
    // unless its caller sets them (ChildEnv sets the allow-list).
    assert!(std::env::var_os("PATH").is_some());
    for confinement in [Confinement::none(), Confinement::probe(&[])] {
        let out = confinement
            .command(OsStr::new("/usr/bin/env"), Profile::Tool)
            .output()
            .await
            .expect("env starts");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    }
}

/// Issue 40: an approved call sent `kill -9` to the bot. With Landlock 6 a tool signals only
/// processes of its own domain: its own jobs, not this test process (the bot here).
#[tokio::test]
async fn a_tool_signals_its_own_jobs_and_not_the_bot() {
    let (dir, config) = setup();
    let me = std::process::id();
    let script = format!(
        "sleep 30 & kill -0 $! && echo OWN-JOB; kill $!; \
         kill -0 {me} && echo BOT-SIGNALLED; kill -CONT {me} && echo BOT-CONTINUED; echo end"
    );
    // Unconfined the signals go through (harmless ones): the test can fail.
    let (_, open) = sh(&Confinement::none(), dir.path(), &script).await;
    assert!(open.contains("BOT-SIGNALLED\nBOT-CONTINUED"), "{open}");
    let confined = Confinement::probe(&[config]);
    let report = confined.report().expect("probed").clone();
    let (_, text) = sh(&confined, dir.path(), &script).await;
    if !report.signals_scoped {
        eprintln!(
            "Landlock ABI {} scopes no signals: skipped",
            report.landlock_abi
        );
        return;
    }
    assert!(text.contains("OWN-JOB\n"), "{text}");
    assert!(!text.contains("BOT-"), "{text}");
    assert_eq!(text.matches("Operation not permitted").count(), 2, "{text}");
    assert!(text.contains("end\n"), "{text}");
}

/// A tool finds every cgroup file system empty, so it can neither write itself into another
/// cgroup nor open one for `clone3(CLONE_INTO_CGROUP)`; the bot still sees them whole.
#[tokio::test]
async fn a_tool_finds_no_cgroup_to_move_into() {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mounts = crate::process::cgroupfs::cgroup_mount_points(&mountinfo);
    if mounts.is_empty() {
        eprintln!("no cgroup file system mounted here: skipped");
        return;
    }
    let (dir, config) = setup();
    let list: String = mounts
        .iter()
        .map(|m| {
            format!(
                "echo \"$(ls -A '{}' | wc -l) in {}\"; ",
                m.display(),
                m.display()
            )
        })
        .collect();
    let (_, open) = sh(&Confinement::none(), dir.path(), &list).await;
    assert!(
        !open.contains("\n0 in") && !open.starts_with("0 in"),
        "{open}"
    );
    let confined = Confinement::probe(&[config]);
    if !confined.report().expect("probed").cgroups_covered {
        eprintln!("cgroup file systems cannot be covered here: skipped");
        return;
    }
    let (_, text) = sh(&confined, dir.path(), &list).await;
    let empty: String = mounts
        .iter()
        .map(|m| format!("0 in {}\n", m.display()))
        .collect();
    assert_eq!(text, empty);
}
