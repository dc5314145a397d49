//! Three `sandpiper serve` processes on one PostgreSQL schema behind one front door, the fake
//! model, and what the test can do to them: start, SIGKILL, SIGTERM and restart a node, send
//! messages and clicks, and read back threads, leases and stored histories.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandpiper_agent::model::{Message, Role};
use sandpiper_agent::store::Store;
use sandpiper_tests::db::TestDb;
use sandpiper_tests::fake_llm::{FakeLlm, Reply, text, tool_call};
use sandpiper_tests::fake_slack::sign;
use sandpiper_tests::slack_harness::SIGNING_SECRET;
use serde_json::{Value, json};

use crate::doors::{Door, Front, NODES, Shown, Thread, Via};

/// Short, so a killed node's threads move on within the test.
pub(crate) const LEASE: Duration = Duration::from_secs(2);
/// Generous bound for things that take milliseconds when all is well.
pub(crate) const WAIT: Duration = Duration::from_secs(30);
/// The settle window of every node: more than the default, for a handoff through the
/// database between three processes on a loaded two-core runner (at 100 ms one message of a
/// burst in 16 was handed over after its successor had started, and answered late).
pub(crate) const SETTLE_MS: u64 = 300;
/// How many threads a run keeps busy.
pub(crate) const THREADS: usize = 5;
/// What a thread is told when its turn died with its node.
pub(crate) const INTERRUPTED: &str = "interrupted by a restart";

/// xorshift64*: small, seeded, reproducible.
pub(crate) struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The run's seed: `SANDPIPER_SCALE_OUT_SEED`, or the clock's (printed, to replay a failure).
pub(crate) fn seed() -> u64 {
    let seed = std::env::var("SANDPIPER_SCALE_OUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("a clock")
                .as_nanos() as u64
                | 1
        });
    eprintln!("scale-out seed: {seed} (SANDPIPER_SCALE_OUT_SEED={seed} replays it)");
    seed
}

/// The token (`msg-…`, `run-…`, `slow-…`, `tool-…`) of the newest user message of a request.
fn asked(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .filter(|m| m["role"] == "user")
        .find_map(|m| token_in(m["content"].as_str()?))
}

pub(crate) fn token_in(content: &str) -> Option<String> {
    content
        .split_whitespace()
        .find(|w| {
            ["msg-", "run-", "slow-", "tool-"]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_owned)
}

/// The model: `msg-…` answered at once; `run-…` after `bash echo` (approval needed);
/// `tool-…` after a `bash sleep` that outlives its node; `slow-…` streams for seconds.
fn respond(body: &Value) -> Reply {
    let Some(token) = asked(body) else {
        return text("I was asked nothing I know");
    };
    let after_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    if token.starts_with("slow-") {
        return Reply::slow_text("word ".repeat(300), Duration::from_millis(50));
    }
    if !after_tool && token.starts_with("run-") {
        return tool_call(
            format!("call-{token}"),
            "bash",
            json!({"command": format!("echo ran-{token}")}),
        );
    }
    if !after_tool && token.starts_with("tool-") {
        return tool_call(
            format!("call-{token}"),
            "bash",
            json!({"command": format!("sleep 20; echo ran-{token}")}),
        );
    }
    text(format!("answer to {token}"))
}

/// One `sandpiper serve` process.
pub(crate) struct Proc {
    child: Child,
    addr: SocketAddr,
    id: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Proc {
    /// A failing test leaves no `serve` behind, nor its database connections.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts node `node` in `dir` with the door's environment, and waits until it listens.
fn start_proc(dir: &Path, front: &Front, node: usize) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "carol")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env(
            "SANDPIPER_LOG",
            std::env::var("SANDPIPER_SCALE_OUT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .envs(front.env(node))
        .arg("--config")
        .arg(dir.join("sandpiper.toml"))
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let keep = log.clone();
    // SANDPIPER_SCALE_OUT_LOGS=DIR also keeps each node's log in DIR/node-N.log.
    let mut copy = std::env::var_os("SANDPIPER_SCALE_OUT_LOGS").and_then(|dir| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(Path::new(&dir).join(format!("node-{node}.log")))
            .ok()
    });
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(file) = copy.as_mut() {
                use std::io::Write as _;
                let _ = writeln!(file, "{line}");
            }
            if let Some(found) = line
                .split("serving http://")
                .nth(1)
                .and_then(|rest| rest.split("/health").next())
                .and_then(|a| a.parse::<SocketAddr>().ok())
            {
                let id = line
                    .find("node-")
                    .map(|at| line[at..].chars().take(5 + 36).collect::<String>())
                    .unwrap_or_default();
                if let Some(tx) = tx.take() {
                    let _ = tx.send((found, id));
                }
            }
            keep.lock().expect("the log").push(line);
        }
    });
    let (addr, id) = rx.recv_timeout(WAIT).unwrap_or_else(|_| {
        panic!(
            "serve did not listen: {:#?}",
            log.lock()
                .expect("the log")
                .iter()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
        )
    });
    assert!(
        id.starts_with("node-") && id.len() == 41,
        "node id in {id:?}"
    );
    Proc {
        child,
        addr,
        id,
        log,
    }
}

/// One cluster at a time in this binary (`cargo test` runs its tests on several threads):
/// three `serve` processes each, two clusters at once on a two-core machine are slow enough
/// to stretch a settle window, and the order checked would be the machine's, not the code's.
/// (`cargo nextest` runs each test in its own process: `.config/nextest.toml` puts them in one
/// group of one.)
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The three places of the cluster, the fakes, the database and what the test sent.
pub(crate) struct Cluster {
    /// Held while this cluster runs ([`ONE_CLUSTER`]).
    _alone: tokio::sync::MutexGuard<'static, ()>,
    nodes: Vec<Option<Proc>>,
    pub(crate) front: Front,
    pub(crate) llm: FakeLlm,
    db: TestDb,
    pub(crate) store: Store,
    http: reqwest::Client,
    dir: tempfile::TempDir,
    pub(crate) rng: Rng,
    /// Every node log of the run, for a failure's message.
    logs: Vec<Arc<Mutex<Vec<String>>>>,
}

impl Cluster {
    pub(crate) async fn start(db: TestDb, door: Door, seed: u64) -> Self {
        let alone = ONE_CLUSTER.lock().await;
        let llm = FakeLlm::start(vec![]).await;
        llm.respond_with(respond);
        let front = Front::start(door, seed).await;
        let dir = tempfile::tempdir().expect("a work dir");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).expect("the workstreams' dir");
        std::fs::write(
            dir.path().join("sandpiper.toml"),
            format!(
                r#"
[database]
url = "{db}"
max_connections = 4

[model]
provider = "openai"
base_url = "{llm}"
model = "fake-model"
max_retries = 1
timeout = "20s"
context_window = 1048576

[agent]
settle_ms = {settle}

[tools]
workdir = "{work}"

[cluster]
lease = "{lease}s"

{door}"#,
                db = db.url,
                llm = llm.openai_base_url(),
                work = work.display(),
                lease = LEASE.as_secs(),
                settle = SETTLE_MS,
                door = front.config(),
            ),
        )
        .expect("writes the config");
        let store = Store::connect(&db.url, 2).await.expect("the store");
        let mut c = Self {
            _alone: alone,
            nodes: (0..NODES).map(|_| None).collect(),
            front,
            llm,
            db,
            store,
            http: reqwest::Client::new(),
            dir,
            rng: Rng(seed),
            logs: Vec::new(),
        };
        for i in 0..NODES {
            c.restart(i).await;
        }
        c
    }

    pub(crate) fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_some())
            .collect()
    }

    /// A live node picked at random.
    pub(crate) fn pick(&mut self) -> usize {
        let live = self.live();
        live[self.rng.below(live.len())]
    }

    /// A live node other than `not`, picked at random.
    pub(crate) fn pick_other(&mut self, not: usize) -> usize {
        let live: Vec<usize> = self.live().into_iter().filter(|i| *i != not).collect();
        live[self.rng.below(live.len())]
    }

    /// What every node logged, last lines first, for a failure's message.
    pub(crate) fn tail(&self) -> String {
        let mut out = String::new();
        for (i, log) in self.logs.iter().enumerate() {
            let log = log.lock().expect("the log");
            out.push_str(&format!("--- process {i} (last 30 lines)\n"));
            for line in log.iter().skip(log.len().saturating_sub(30)) {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Events API: POSTs what the fake Slack last sent (an event or an interaction) to a
    /// node `via` says, signed; a node that cannot take it (it is going away) is skipped for
    /// another, as a load balancer does. Other doors deliver by themselves.
    async fn deliver_last(&mut self, via: Via) {
        if !self.front.delivered_by_the_test() {
            return;
        }
        let (path, body, content_type) = self.front.last_delivery();
        let mut target = match via {
            Via::Any => self.pick(),
            Via::NotNode(not) => self.pick_other(not),
        };
        for _ in 0..10 {
            let addr = self.nodes[target].as_ref().expect("a live node").addr;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("a clock")
                .as_secs() as i64;
            let answer = self
                .http
                .post(format!("http://{addr}/slack/{path}"))
                .header("x-slack-request-timestamp", now.to_string())
                .header("x-slack-signature", sign(SIGNING_SECRET, now, &body))
                .header("content-type", content_type)
                .body(body.clone())
                .send()
                .await;
            match answer {
                Ok(a) if a.status().is_success() => return,
                other => {
                    eprintln!("node {target} did not take a delivery ({other:?}); another will");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    target = self.pick();
                }
            }
        }
        panic!("no node took the delivery\n{}", self.tail());
    }

    pub(crate) async fn wait_thread(
        &self,
        thread: &Thread,
        what: &str,
        ok: impl Fn(&[Shown]) -> bool,
    ) -> Duration {
        let started = Instant::now();
        loop {
            let shown = self.front.shown(thread);
            if ok(&shown) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < WAIT,
                "timed out waiting for {what} in {}: {:#?}\n{}",
                thread.key,
                shown.iter().map(|m| &m.text).collect::<Vec<_>>(),
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many messages in `thread` read exactly `text`.
    pub(crate) fn count(&self, thread: &Thread, text: &str) -> usize {
        self.front
            .shown(thread)
            .iter()
            .filter(|m| m.text == text)
            .count()
    }

    /// How many interrupted notices `thread` got.
    pub(crate) fn notices(&self, thread: &Thread) -> usize {
        self.front
            .shown(thread)
            .iter()
            .filter(|m| m.text.contains(INTERRUPTED))
            .count()
    }

    pub(crate) async fn wait_answer(&self, thread: &Thread, token: &str) {
        let answer = format!("answer to {token}");
        self.wait_thread(thread, &answer, |t| t.iter().any(|m| m.text == answer))
            .await;
    }

    /// Alice opens thread `t` with `token`, through a random node where the test chooses.
    pub(crate) async fn open_thread(&mut self, t: usize, token: &str) -> Thread {
        let delivered = self.front.delivered_by_the_test();
        if !delivered {
            return self.front.open_thread(t, token).await;
        }
        let thread = self.front.open_thread(t, token).await;
        self.deliver_last(Via::Any).await;
        thread
    }

    /// Alice writes `token` in `thread`.
    pub(crate) async fn say(&mut self, thread: &Thread, token: &str) {
        self.front.say(thread, token).await;
        self.deliver_last(Via::Any).await;
    }

    /// The card of `token`'s call in `thread`, as it stands now.
    pub(crate) fn card(&self, thread: &Thread, token: &str) -> Option<Shown> {
        let needle = format!("ran-{token}");
        self.front
            .shown(thread)
            .into_iter()
            .find(|m| m.card && m.detail.contains(&needle))
    }

    pub(crate) async fn wait_card(&self, thread: &Thread, token: &str) -> Shown {
        self.wait_thread(thread, "the approval card", |_| {
            self.card(thread, token).is_some()
        })
        .await;
        self.card(thread, token).expect("the card")
    }

    /// Waits until `token`'s card says `needle`.
    pub(crate) async fn wait_card_says(&self, thread: &Thread, token: &str, needle: &str) -> Shown {
        self.wait_thread(thread, needle, |_| {
            self.card(thread, token)
                .is_some_and(|m| m.detail.contains(needle))
        })
        .await;
        self.card(thread, token).expect("the card")
    }

    /// Alice clicks `label` on `card`, reaching a node `via` says where the test chooses.
    pub(crate) async fn click(&mut self, thread: &Thread, card: &Shown, label: &str, via: Via) {
        self.front.click(thread, card, label).await;
        self.deliver_last(via).await;
    }

    /// The node holding `thread`'s lease now.
    pub(crate) async fn owner(&self, thread: &Thread) -> usize {
        let owner = self
            .store
            .lease_owner(&thread.key)
            .await
            .expect("the store")
            .expect("an owner");
        (0..self.nodes.len())
            .find(|i| self.nodes[*i].as_ref().is_some_and(|p| p.id == owner))
            .unwrap_or_else(|| panic!("{owner} is no live node"))
    }

    /// Waits until a live node holds `thread`'s lease; returns how long after `since`.
    pub(crate) async fn wait_taken_over(&self, thread: &Thread, since: Instant) -> Duration {
        loop {
            let elapsed = since.elapsed();
            let owner = self
                .store
                .lease_owner(&thread.key)
                .await
                .expect("the store");
            let live: Vec<&str> = self.nodes.iter().flatten().map(|p| p.id.as_str()).collect();
            if owner.is_some_and(|o| live.contains(&o.as_str())) {
                return elapsed;
            }
            assert!(
                elapsed < WAIT,
                "no node took {} over\n{}",
                thread.key,
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILLs node `i`: no drain, no lease released, the kernel closes its sockets.
    pub(crate) fn sigkill(&mut self, i: usize) -> Instant {
        let mut p = self.nodes[i].take().expect("a live node");
        p.child.kill().expect("SIGKILL");
        let at = Instant::now();
        p.child.wait().expect("reaped");
        at
    }

    /// SIGTERMs node `i` and waits for it to drain and exit.
    pub(crate) async fn sigterm(&mut self, i: usize) {
        let mut p = self.nodes[i].take().expect("a live node");
        let term = Command::new("kill")
            .args(["-TERM", &p.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(term.success(), "SIGTERM");
        let status = tokio::task::spawn_blocking(move || p.child.wait())
            .await
            .expect("joined")
            .expect("reaped");
        assert!(
            status.success(),
            "a drained node exits cleanly: {status}\n{}",
            self.tail()
        );
    }

    /// Starts node `i` again (the same shard on Discord) and waits until the door reaches it.
    pub(crate) async fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].is_none());
        let mark = self.front.mark();
        let p = start_proc(self.dir.path(), &self.front, i);
        self.logs.push(p.log.clone());
        self.nodes[i] = Some(p);
        self.front.wait_joined(i, mark, WAIT).await;
    }

    /// Waits until `thread`'s stored history holds an answer to each of `tokens`, and returns
    /// it. Not "ends with the last one sent": two messages of one burst that reach different
    /// nodes are not ordered (one goes straight into the owner's lane, the other through a
    /// handoff), only each answered once and never two turns at once.
    async fn history_answering(&self, thread: &Thread, tokens: &[&str]) -> Vec<Message> {
        let started = Instant::now();
        loop {
            let history = self
                .store
                .load_messages(&thread.key)
                .await
                .expect("the history");
            let answered = |token: &&str| {
                let answer = format!("answer to {token}");
                history.iter().any(|m| m.content == answer)
            };
            if tokens.iter().all(answered) {
                return history;
            }
            assert!(
                started.elapsed() < WAIT,
                "the history of {} does not answer all of {tokens:?}: {history:#?}",
                thread.key
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The longest a person waited for an answer in each thread: from each message `sent`
    /// (with when) to when `clock` first saw its answer shown.
    pub(crate) async fn longest_waits(
        &self,
        clock: &AnswerClock,
        threads: &[Thread],
        sent: &[(usize, String, Instant)],
    ) -> Vec<Duration> {
        let started = Instant::now();
        loop {
            let pending: Vec<&String> = sent
                .iter()
                .filter(|(_, token, _)| clock.first_shown(token).is_none())
                .map(|(_, token, _)| token)
                .collect();
            if pending.is_empty() {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "unanswered: {pending:?}\n{}",
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut longest = vec![Duration::ZERO; threads.len()];
        for (t, token, at) in sent {
            let shown = clock.first_shown(token).expect("answered");
            longest[*t] = longest[*t].max(shown.saturating_duration_since(*at));
        }
        longest
    }

    /// Waits until every sent message is answered in its thread; if some are not, says for
    /// each whether its question was committed (in the stored history) or not.
    pub(crate) async fn wait_all_answered(&self, threads: &[Thread], sent: &[(usize, String)]) {
        let started = Instant::now();
        loop {
            let missing: Vec<&(usize, String)> = sent
                .iter()
                .filter(|(t, token)| self.count(&threads[*t], &format!("answer to {token}")) == 0)
                .collect();
            if missing.is_empty() {
                return;
            }
            if started.elapsed() > WAIT {
                let mut why = String::new();
                for (t, token) in missing {
                    let key = &threads[*t].key;
                    let history = self.store.load_messages(key).await.expect("the history");
                    let committed = history
                        .iter()
                        .any(|m| m.role == Role::User && m.content.contains(token.as_str()));
                    let owner = self.store.lease_owner(key).await;
                    why.push_str(&format!(
                        "{token}: unanswered; question committed: {committed}; lease owner now: {owner:?}\n"
                    ));
                }
                panic!("{why}{}", self.tail());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Exactly once in every thread and in every stored history, one turn at a time, in the
    /// order they were sent (the stored questions and the answers shown); a turn cut off by a
    /// kill got the interrupted notice.
    pub(crate) async fn check_all(
        &self,
        threads: &[Thread],
        sent: &[(usize, String)],
        killed: &[String],
    ) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for (t, token) in sent {
            let answer = format!("answer to {token}");
            let shown = self.count(&threads[*t], &answer);
            assert_eq!(shown, 1, "{answer} shown {shown} times");
        }
        for (t, thread) in threads.iter().enumerate() {
            let tokens: Vec<&str> = sent
                .iter()
                .filter(|(tt, token)| *tt == t && token.starts_with("msg-"))
                .map(|(_, token)| token.as_str())
                .collect();
            let history = self.history_answering(thread, &tokens).await;
            let answered = check_history(&history, killed);
            let in_order: Vec<&str> = sent
                .iter()
                .filter(|(tt, token)| *tt == t && !killed.contains(token))
                .map(|(_, token)| token.as_str())
                .collect();
            let asked: Vec<String> = history
                .iter()
                .filter(|m| m.role == Role::User)
                .filter_map(|m| token_in(&m.content))
                .collect();
            let stored = first_seen(&asked, &in_order);
            let shown: Vec<String> = self
                .front
                .shown(thread)
                .iter()
                .filter_map(|m| m.text.strip_prefix("answer to ").map(str::to_owned))
                .collect();
            let shown = first_seen(&shown, &in_order);
            assert_eq!(
                stored, in_order,
                "the questions of {} are stored out of the order they were sent",
                thread.key
            );
            assert_eq!(
                shown, in_order,
                "the answers in {} are shown out of the order the questions were sent",
                thread.key
            );
            for (_, token) in sent.iter().filter(|(tt, _)| *tt == t) {
                let times = answered.iter().filter(|a| *a == token).count();
                assert_eq!(times, 1, "{token} answered {times} times in the history");
            }
            for k in killed.iter().filter(|k| k.contains(&format!("-{t}-"))) {
                assert!(self.notices(thread) >= 1, "{k}: the interrupted notice");
            }
        }
    }

    pub(crate) async fn stop(mut self) {
        for i in self.live() {
            self.sigterm(i).await;
        }
        self.store.close().await;
        drop(self.db);
    }
}

/// The stored history of one workstream: every user message is followed by its own answer
/// (or, for a turn that died with its node, by nothing) before the next one; `killed` are the
/// tokens whose turns were cut off. Returns the answered tokens.
fn check_history(history: &[Message], killed: &[String]) -> Vec<String> {
    let mut answered = Vec::new();
    let mut waiting: Option<String> = None;
    for m in history {
        match m.role {
            Role::User => {
                let token = token_in(&m.content);
                if let Some(w) = waiting.take() {
                    assert!(
                        killed.contains(&w),
                        "{token:?} came in before {w} was answered: {history:#?}"
                    );
                }
                waiting = token;
            }
            Role::Assistant if m.tool_calls.is_empty() => {
                let Some(token) = waiting.take() else {
                    // A resumed turn's answer follows its tool result.
                    continue;
                };
                assert_eq!(m.content, format!("answer to {token}"), "{history:#?}");
                answered.push(token);
            }
            _ => {}
        }
    }
    answered
}

/// `wanted`, in the order their first occurrences come in `seen` (each of them is in `seen`).
fn first_seen<'a>(seen: &[String], wanted: &[&'a str]) -> Vec<&'a str> {
    let mut order: Vec<(usize, &str)> = wanted
        .iter()
        .map(|w| (seen.iter().position(|s| s == w).unwrap_or(usize::MAX), *w))
        .collect();
    order.sort_by_key(|(at, _)| *at);
    order.into_iter().map(|(_, w)| w).collect()
}

/// When each answer was first shown, looked at every 10 ms from its start on, whatever the
/// test does meanwhile (a SIGTERM's drain, a restart): the pause a person sees is from their
/// message to this, not to when the test got round to looking.
pub(crate) struct AnswerClock {
    first: Arc<Mutex<HashMap<String, Instant>>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl AnswerClock {
    /// Starts watching `threads` on `front`.
    pub(crate) fn start(front: &Front, threads: &[Thread]) -> Self {
        let first: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let (front, threads, seen) = (front.clone(), threads.to_vec(), first.clone());
        let watcher = tokio::spawn(async move {
            loop {
                let now = Instant::now();
                for thread in &threads {
                    for shown in front.shown(thread) {
                        if let Some(token) = shown.text.strip_prefix("answer to ") {
                            let mut seen = seen.lock().expect("the clock");
                            seen.entry(token.to_owned()).or_insert(now);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Self { first, watcher }
    }

    /// When the answer to `token` was first seen.
    pub(crate) fn first_shown(&self, token: &str) -> Option<Instant> {
        self.first.lock().expect("the clock").get(token).copied()
    }
}

impl Drop for AnswerClock {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}
