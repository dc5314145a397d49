//! `sandpiper chat` at a real terminal: the binary runs on a pseudo-terminal (its stdin,
//! stdout and stderr, and its controlling terminal), keys are typed as a terminal sends them,
//! and what the person would see is read back. The model is the scripted fake on 127.0.0.1.
//!
//! `unsafe` is allowed in this file only: opening a pseudo-terminal and making it the child's
//! controlling terminal are libc calls with no safe wrapper in the lock file.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandpiper_tests::fake_llm::{FakeLlm, said, text, tool_call};

const WAIT: Duration = Duration::from_secs(30);
const UP: &str = "\x1b[A";
const LEFT: &str = "\x1b[D";
const CTRL_A: &str = "\x01";
const CTRL_C: &str = "\x03";
const CTRL_D: &str = "\x04";
const CTRL_E: &str = "\x05";
const CTRL_R: &str = "\x12";
const ALT_ENTER: &str = "\x1b\r";
const PASTE_START: &str = "\x1b[200~";
const PASTE_END: &str = "\x1b[201~";

/// The binary on a pseudo-terminal, and everything it wrote.
struct Terminal {
    master: std::fs::File,
    child: Child,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    fn spawn(mut cmd: Command) -> Self {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: 50,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes two new descriptors into the given integers.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        cmd.stdin(slave.try_clone().expect("the pseudo-terminal works"))
            .stdout(slave.try_clone().expect("the pseudo-terminal works"))
            .stderr(slave);
        // SAFETY: between fork and exec, only async-signal-safe calls: a new session whose
        // controlling terminal is the pseudo-terminal on stdin (so Ctrl-C is a signal).
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("sandpiper starts");
        drop(cmd);
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().expect("the pseudo-terminal works");
        let sink = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once the child and its descriptors are gone.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("the pseudo-terminal works")
                    .extend_from_slice(&buf[..n]);
            }
        });
        Self {
            master,
            child,
            screen,
        }
    }

    /// Types keys (one write, as a terminal sends a key or a paste).
    fn keys(&mut self, keys: &str) {
        self.master
            .write_all(keys.as_bytes())
            .expect("the pseudo-terminal works");
        self.master.flush().expect("the pseudo-terminal works");
        // Let the editor read this key before the next, as a person types.
        std::thread::sleep(Duration::from_millis(60));
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().expect("the pseudo-terminal works"))
            .into_owned()
    }

    /// Waits until the terminal shows `needle` `times` times in all.
    fn wait_for_count(&self, needle: &str, times: usize) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.matches(needle).count() >= times {
                return screen;
            }
            assert!(
                start.elapsed() < WAIT,
                "the terminal never showed {needle:?} {times} times; it shows:\n{screen:?}"
            );
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    fn wait_for(&self, needle: &str) -> String {
        self.wait_for_count(needle, 1)
    }

    /// Waits for the end of an answer (`last` is printed when the turn ends), and for the
    /// next prompt.
    fn answered(&self, last: &str) -> String {
        let screen = self.wait_for(last);
        std::thread::sleep(Duration::from_millis(300));
        screen
    }

    /// Waits for the program to end by itself.
    fn exit_status(mut self) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("the pseudo-terminal works") {
                return status;
            }
            assert!(
                start.elapsed() < WAIT,
                "sandpiper did not exit; the terminal shows:\n{:?}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(30));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chat(home: &std::path::Path, llm: &FakeLlm) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("USER", "dana")
        .env("TERM", "xterm-256color")
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake")
        .args(["chat", "--workstream", "pty"]);
    cmd
}

/// The text of the last user message of each chat request.
fn user_messages(llm: &FakeLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(|r| {
            r["messages"]
                .as_array()
                .expect("the pseudo-terminal works")
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str().map(|c| said(c).to_owned()))
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_edits_lines_keeps_history_and_never_sends_commands() {
    let llm = FakeLlm::start(vec![
        text("Hi. **Bold** and `code`, then \x1b[31mred\x07 and \u{202e}txt.exe"),
        text("Three lines, one message."),
        text("Two lines typed."),
        text("Continued."),
        text("Only the second."),
        text("Again."),
        text("Found it."),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let mut term = Terminal::spawn(chat(home.path(), &llm));
    term.wait_for("(new workstream console:pty; /help for commands");
    term.wait_for("> ");

    // A command is answered here and never reaches the model; an unknown one says so.
    term.keys("/help\r");
    term.answered("Ctrl-D leaves.");
    let help = term.screen();
    assert!(
        help.contains("Commands (never sent to the model):"),
        "{help:?}"
    );
    term.keys("/frobnicate now\r");
    term.answered("begin it with");
    let screen = term.screen();
    assert!(
        screen.contains("Unknown command \x1b[36m/frobnicate\x1b[39m; nothing was sent."),
        "{screen:?}"
    );
    // Tab completes a command name.
    term.keys("/sta\t");
    term.keys("\r");
    term.answered("Messages: 0");
    let screen = term.screen();
    assert!(
        screen.contains("> /status ")
            && screen.contains("Workstream \x1b[36mconsole:pty\x1b[39m\r\n"),
        "{screen:?}"
    );
    assert_eq!(llm.requests().len(), 0, "a command reached the model");

    // Arrow keys and Emacs keys edit the line: `helo wrld` becomes `hello world`.
    term.keys("helo wrld");
    for _ in 0..3 {
        term.keys(LEFT);
    }
    term.keys("o");
    term.keys(CTRL_A);
    term.keys("\x06\x06\x06"); // Ctrl-F three times: after `hel`
    term.keys("l");
    term.keys(CTRL_E);
    term.keys("!\r");
    term.answered("txt.exe");
    // The model's escapes are shown spelled out, its Markdown drawn.
    let screen_now = term.screen();
    assert!(
        screen_now.contains("\\x1b[31mred\\x07 and \\u202etxt.exe"),
        "{screen_now:?}"
    );
    for raw in ["\x1b[31m", "\x07", "\u{202e}"] {
        assert!(
            !screen_now.contains(raw),
            "raw {raw:?} reached the terminal: {screen_now:?}"
        );
    }
    assert!(screen_now.contains("\x1b[1mBold\x1b[22m"), "{screen_now:?}");
    assert!(
        screen_now.contains("\x1b[36mcode\x1b[39m"),
        "{screen_now:?}"
    );

    // A paste of three lines is one message.
    term.keys(&format!(
        "{PASTE_START}error: one\r\n  at two\r\n  at three{PASTE_END}"
    ));
    term.keys("\r");
    term.answered("Three lines, one message.");
    // Alt-Enter and a trailing backslash add a line.
    term.keys("first");
    term.keys(ALT_ENTER);
    term.keys("second\r");
    term.answered("Two lines typed.");
    term.keys("left \\");
    term.keys("\r");
    term.keys("right\r");
    term.answered("Continued.");
    // Ctrl-C clears the line being typed.
    term.keys("throw this away");
    term.keys(CTRL_C);
    term.keys("keep this\r");
    term.answered("Only the second.");
    // Ctrl-D leaves, with a newline.
    term.keys(CTRL_D);
    assert!(term.exit_status().success());

    assert_eq!(
        user_messages(&llm),
        [
            "hello world!",
            "error: one\n  at two\n  at three",
            "first\nsecond",
            "left \nright",
            "keep this",
        ]
    );

    // The history survives the run: Up brings back the last message, Ctrl-R finds an older
    // one; commands typed at the prompt are in it too, approval answers are not.
    let mut term = Terminal::spawn(chat(home.path(), &llm));
    term.answered("(continuing workstream console:pty: 10 messages");
    term.keys(UP);
    term.keys("\r");
    term.answered("Again.");
    term.keys(CTRL_R);
    term.keys("hello");
    term.keys("\r");
    term.keys("\r");
    term.answered("Found it.");
    term.keys(CTRL_D);
    assert!(term.exit_status().success());
    let sent = user_messages(&llm);
    assert_eq!(sent[5..], ["keep this", "hello world!"]);
    let history = home.path().join("data/sandpiper/history/dana");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&history).unwrap().permissions().mode() & 0o777,
        0o600
    );
    llm.verify();
}

/// The distinct user messages the model was sent, in order (a tool result's request repeats
/// the message that started the turn).
fn messages_sent(llm: &FakeLlm) -> Vec<String> {
    let mut sent = user_messages(llm);
    sent.dedup();
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_typed_or_pasted_during_a_turn_is_the_next_message_and_in_history() {
    let slow = |id: &str| {
        tool_call(
            id,
            "bash",
            serde_json::json!({ "command": "sleep 3; echo slept" }),
        )
    };
    let llm = FakeLlm::start(vec![
        slow("c1"),
        text("Slept once."),
        slow("c2"),
        text("Slept twice."),
        text("Read the log."),
        text("Read it again."),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let mut cmd = chat(home.path(), &llm);
    cmd.arg("--yes");
    let mut term = Terminal::spawn(cmd);
    term.wait_for("> ");

    // A line typed while the tool sleeps stays in the editor, is kept when entered, and is
    // the next message once the turn ends.
    term.keys("sleep please\r");
    term.wait_for("▸ bash");
    term.keys("typed during the turn");
    term.keys("\r");
    term.wait_for("(kept: sent when this turn ends");
    term.wait_for("Slept once.");
    // It started the next turn; a 13-line paste during that one is one message, not 13.
    let log: Vec<String> = (1..=13).map(|n| format!("log line {n}")).collect();
    term.wait_for_count("▸ bash", 2);
    term.keys(&format!("{PASTE_START}{}{PASTE_END}", log.join("\r\n")));
    term.keys("\r");
    term.wait_for_count("(kept: sent when this turn ends", 2);
    term.answered("Read the log.");
    let screen = term.screen();
    // Nothing typed went into the tool's output.
    for line in screen.lines().filter(|l| l.contains('│')) {
        assert!(
            !line.contains("typed during") && !line.contains("log line"),
            "{screen:?}"
        );
    }
    term.keys(CTRL_D);
    assert!(term.exit_status().success());

    let pasted = log.join("\n");
    assert_eq!(
        messages_sent(&llm),
        ["sleep please", "typed during the turn", pasted.as_str()]
    );
    // Both are in the history: Up brings back the paste whole.
    let mut term = Terminal::spawn(chat(home.path(), &llm));
    term.wait_for("(continuing workstream console:pty");
    term.keys(UP);
    term.keys("\r");
    term.answered("Read it again.");
    term.keys(CTRL_D);
    assert!(term.exit_status().success());
    assert_eq!(messages_sent(&llm).last(), Some(&pasted));
    llm.verify();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_answered_at_the_prompt_and_ctrl_c_stops_the_turn_keeping_the_draft() {
    let llm = FakeLlm::start(vec![
        tool_call("c1", "bash", serde_json::json!({ "command": "echo hi" })),
        text("Done."),
        tool_call(
            "c2",
            "bash",
            serde_json::json!({ "command": "echo started; sleep 30" }),
        ),
        text("Got the draft."),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    // Nothing listens where the status page would be.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = free.local_addr().unwrap().to_string();
    drop(free);
    let mut cmd = chat(home.path(), &llm);
    cmd.env("SANDPIPER_LISTEN", &listen);
    let mut term = Terminal::spawn(cmd);
    term.wait_for("> ");
    term.keys("go\r");
    // The question names the card's two Always allows; the answer is typed at the prompt.
    term.wait_for("approve bash? [y]es / [n]o / [a]lways allow bash / [p] always allow `echo hi`:");
    term.keys("y\r");
    term.answered("Done.");
    term.keys("again\r");
    term.wait_for_count("approve bash?", 2);
    term.keys("y\r");
    term.wait_for("│ started");
    // Ctrl-C stops the turn and keeps what is being typed; Enter then sends it.
    term.keys("my draft");
    term.keys(CTRL_C);
    term.wait_for("(turn cancelled)");
    term.keys("\r");
    term.answered("Got the draft.");
    // The workstream is the person's at the terminal, and the status page is not served by
    // `chat`: /console says how to start it rather than hand out a dead link.
    term.keys("/status\r");
    term.answered("Messages:");
    assert!(
        term.screen().contains("Owner: @dana\r\n"),
        "{:?}",
        term.screen()
    );
    term.keys("/console\r");
    term.answered("sign-in link.");
    let screen = term.screen();
    assert!(
        screen.contains("The status page is not running"),
        "{screen:?}"
    );
    assert!(!screen.contains("http://"), "{screen:?}");
    term.keys(CTRL_D);
    assert!(term.exit_status().success());
    assert_eq!(messages_sent(&llm), ["go", "again", "my draft"]);
    llm.verify();
}
