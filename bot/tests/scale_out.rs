//! Scale-out with real processes (issue 27): three `sandpiper serve` processes — the built
//! binary — on one PostgreSQL schema, behind the fake Slack in Events API mode, so the test
//! plays the load balancer and decides which node each message and each click reaches. The
//! node that holds a turn is killed with SIGKILL mid-stream, mid-tool and while its card waits
//! for approval; then all three nodes are restarted one after another under a steady stream.
//!
//! What is checked: every message is answered exactly once (a message whose turn died with
//! its node gets the "interrupted" notice instead, once), no two turns ran in one workstream
//! at once (the stored history alternates question and answer), a decision clicked on another
//! node reaches the turn (through the stored decision and Resume after the takeover), nothing
//! committed is lost, and the time from a kill to the takeover stays within twice the lease.
//!
//! The "random" choices (which node gets a message, which thread, when to kill) come from a
//! seeded generator; the seed is printed, and `SANDPIPER_SCALE_OUT_SEED` replays a run.
//! Without PostgreSQL (`SANDPIPER_TEST_POSTGRES_URL`) the test is skipped with a notice
//! (and fails under `SANDPIPER_REQUIRE_POSTGRES=1`, as in CI).

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
use sandpiper_tests::fake_slack::{
    CHANNEL_ID, FakeSlack, FakeSlackMessage, SlackUser, TEAM_ID, sign,
};
use sandpiper_tests::slack_harness::{SIGNING_SECRET, button, is_card};
use serde_json::{Value, json};

/// Short, so a killed node's threads move on within the test.
const LEASE: Duration = Duration::from_secs(2);
/// Generous bound for things that take milliseconds when all is well.
const WAIT: Duration = Duration::from_secs(30);
const THREADS: usize = 5;

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
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

fn token_in(content: &str) -> Option<String> {
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
        return Reply::slow_text("word ".repeat(400), Duration::from_millis(50));
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
struct Proc {
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

/// The three places of the cluster, the fakes, the database and what the test sent.
struct Cluster {
    nodes: Vec<Option<Proc>>,
    slack: FakeSlack,
    llm: FakeLlm,
    db: TestDb,
    store: Store,
    http: reqwest::Client,
    dir: tempfile::TempDir,
    rng: Rng,
    /// Every node log of the run, for a failure's message.
    logs: Vec<Arc<Mutex<Vec<String>>>>,
}

fn start_proc(dir: &Path, slack: &FakeSlack) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpiper"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "carol")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("SANDPIPER_LOG", "info")
        .env("SLACK_BOT_TOKEN", "xoxb-fake")
        .env("SLACK_SIGNING_SECRET", SIGNING_SECRET)
        .env(
            "SANDPIPER_SLACK_API_BASE",
            format!("{}/api", slack.base_url()),
        )
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
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
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

impl Cluster {
    async fn start(db: TestDb, seed: u64) -> Self {
        let llm = FakeLlm::start(vec![]).await;
        llm.respond_with(respond);
        let slack = FakeSlack::start().await;
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

[tools]
workdir = "{work}"

[cluster]
lease = "{lease}s"

[slack]
mode = "events"
stream_interval = "50ms"
"#,
                db = db.url,
                llm = llm.openai_base_url(),
                work = work.display(),
                lease = LEASE.as_secs(),
            ),
        )
        .expect("writes the config");
        let store = Store::connect(&db.url, 2).await.expect("the store");
        let mut nodes = Vec::new();
        let mut logs = Vec::new();
        for _ in 0..3 {
            let p = start_proc(dir.path(), &slack);
            logs.push(p.log.clone());
            nodes.push(Some(p));
        }
        Self {
            nodes,
            slack,
            llm,
            db,
            store,
            http: reqwest::Client::new(),
            dir,
            rng: Rng(seed),
            logs,
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_some())
            .collect()
    }

    /// A live node picked at random.
    fn pick(&mut self) -> usize {
        let live = self.live();
        live[self.rng.below(live.len())]
    }

    /// A live node other than `not`, picked at random.
    fn pick_other(&mut self, not: usize) -> usize {
        let live: Vec<usize> = self.live().into_iter().filter(|i| *i != not).collect();
        live[self.rng.below(live.len())]
    }

    /// What every node logged, last lines first, for a failure's message.
    fn tail(&self) -> String {
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

    /// POSTs what the fake Slack last sent (an event or an interaction) to node `i`, signed;
    /// a node that cannot take it (it is going away) is skipped for another, as a load
    /// balancer does.
    async fn deliver_last(&mut self, i: usize) {
        let envelope = self.slack.envelopes().pop().expect("an envelope");
        let payload = envelope["payload"].clone();
        let (path, body, content_type) = if envelope["type"] == "events_api" {
            ("events", payload.to_string(), "application/json")
        } else {
            let form: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("payload", &payload.to_string())
                .finish();
            ("interactions", form, "application/x-www-form-urlencoded")
        };
        let mut target = i;
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

    fn thread(&self, root: &str) -> Vec<FakeSlackMessage> {
        self.slack
            .messages(CHANNEL_ID)
            .into_iter()
            .filter(|m| m.thread_ts.as_deref() == Some(root) || m.ts == root)
            .collect()
    }

    async fn wait_thread(
        &self,
        root: &str,
        what: &str,
        ok: impl Fn(&[FakeSlackMessage]) -> bool,
    ) -> Duration {
        let started = Instant::now();
        loop {
            let thread = self.thread(root);
            if ok(&thread) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < WAIT,
                "timed out waiting for {what} in thread {root}: {:#?}\n{}",
                thread.iter().map(|m| &m.text).collect::<Vec<_>>(),
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_answer(&self, root: &str, token: &str) {
        let answer = format!("answer to {token}");
        self.wait_thread(root, &answer, |t| t.iter().any(|m| m.text == answer))
            .await;
    }

    async fn open_thread(&mut self, alice: &SlackUser, token: &str) -> String {
        let root = self.slack.app_mention(CHANNEL_ID, alice, token).await;
        let i = self.pick();
        self.deliver_last(i).await;
        root
    }

    async fn say_to(&mut self, alice: &SlackUser, root: &str, token: &str, i: usize) {
        self.slack
            .thread_message(CHANNEL_ID, root, alice, token)
            .await;
        self.deliver_last(i).await;
    }

    async fn say(&mut self, alice: &SlackUser, root: &str, token: &str) {
        let i = self.pick();
        self.say_to(alice, root, token, i).await;
    }

    fn key(root: &str) -> String {
        format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}")
    }

    /// The node index holding `root`'s lease now.
    async fn owner(&self, root: &str) -> usize {
        let owner = self
            .store
            .lease_owner(&Self::key(root))
            .await
            .expect("the store")
            .expect("an owner");
        (0..self.nodes.len())
            .find(|i| self.nodes[*i].as_ref().is_some_and(|p| p.id == owner))
            .unwrap_or_else(|| panic!("{owner} is no live node"))
    }

    /// The card of `token`'s call in `root`, as it stands now.
    fn card(&self, root: &str, token: &str) -> Option<FakeSlackMessage> {
        let needle = format!("ran-{token}");
        self.thread(root)
            .into_iter()
            .find(|m| is_card(m) && m.blocks.to_string().contains(&needle))
    }

    async fn wait_card(&self, root: &str, token: &str) -> FakeSlackMessage {
        self.wait_thread(root, "the approval card", |_| {
            self.card(root, token).is_some()
        })
        .await;
        self.card(root, token).expect("the card")
    }

    async fn click(&mut self, alice: &SlackUser, card: &FakeSlackMessage, label: &str, i: usize) {
        let (action, value) = button(card, label);
        self.slack
            .click(CHANNEL_ID, &card.ts, alice, &action, &value)
            .await;
        self.deliver_last(i).await;
    }

    /// SIGKILLs node `i`: no drain, no lease released, the kernel closes its sockets.
    fn sigkill(&mut self, i: usize) -> Instant {
        let mut p = self.nodes[i].take().expect("a live node");
        p.child.kill().expect("SIGKILL");
        let at = Instant::now();
        p.child.wait().expect("reaped");
        at
    }

    /// SIGTERMs node `i` and waits for it to drain and exit.
    async fn sigterm(&mut self, i: usize) {
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

    fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].is_none());
        let p = start_proc(self.dir.path(), &self.slack);
        self.logs.push(p.log.clone());
        self.nodes[i] = Some(p);
    }

    /// Waits until `root`'s stored history holds an answer to each of `tokens`, and returns
    /// it. Not "ends with the last one sent": two messages of one burst that reach different
    /// nodes are not ordered (one goes straight into the owner's lane, the other through a
    /// handoff), only each answered once and never two turns at once.
    async fn history_answering(&self, root: &str, tokens: &[&str]) -> Vec<Message> {
        let started = Instant::now();
        loop {
            let history = self
                .store
                .load_messages(&Self::key(root))
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
                "the history of {root} does not answer all of {tokens:?}: {history:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop(mut self) {
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

fn seed() -> u64 {
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

/// Three nodes and `THREADS` threads, each opened with a message through a random node and
/// answered; returns the cluster, alice, the roots and what was sent.
async fn started() -> Option<(Cluster, SlackUser, Vec<String>, Vec<(usize, String)>)> {
    let db = TestDb::postgres().await?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut c = Cluster::start(db, seed()).await;
    let alice = c.slack.user("U0ALICE", "alice");
    let mut roots = Vec::new();
    let mut sent: Vec<(usize, String)> = Vec::new();
    for t in 0..THREADS {
        let token = format!("msg-{t}-0");
        roots.push(c.open_thread(&alice, &token).await);
        sent.push((t, token));
    }
    for (t, token) in &sent {
        c.wait_answer(&roots[*t], token).await;
    }
    Some((c, alice, roots, sent))
}

/// Waits until every sent message is answered in its thread; if some are not, says for each
/// whether its question was committed (in the stored history) or not.
async fn wait_all_answered(c: &Cluster, roots: &[String], sent: &[(usize, String)]) {
    let started = Instant::now();
    loop {
        let missing: Vec<&(usize, String)> = sent
            .iter()
            .filter(|(t, token)| {
                let answer = format!("answer to {token}");
                !c.thread(&roots[*t]).iter().any(|m| m.text == answer)
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        if started.elapsed() > WAIT {
            let mut why = String::new();
            for (t, token) in missing {
                let history = c
                    .store
                    .load_messages(&Cluster::key(&roots[*t]))
                    .await
                    .expect("the history");
                let committed = history
                    .iter()
                    .any(|m| m.role == Role::User && m.content.contains(token.as_str()));
                let owner = c.store.lease_owner(&Cluster::key(&roots[*t])).await;
                why.push_str(&format!(
                    "{token}: unanswered; question committed: {committed}; lease owner now: {owner:?}\n"
                ));
            }
            panic!("{why}{}", c.tail());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Exactly once in every thread and in every stored history, one turn at a time; a turn cut off by a
/// kill got the interrupted notice.
async fn check_all(c: &Cluster, roots: &[String], sent: &[(usize, String)], killed: &[String]) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (t, token) in sent {
        let answer = format!("answer to {token}");
        let shown = c
            .thread(&roots[*t])
            .iter()
            .filter(|m| m.text == answer)
            .count();
        assert_eq!(shown, 1, "{answer} shown {shown} times");
    }
    for (t, root) in roots.iter().enumerate() {
        let tokens: Vec<&str> = sent
            .iter()
            .filter(|(tt, token)| *tt == t && token.starts_with("msg-"))
            .map(|(_, token)| token.as_str())
            .collect();
        let history = c.history_answering(root, &tokens).await;
        let answered = check_history(&history, killed);
        for (_, token) in sent.iter().filter(|(tt, _)| *tt == t) {
            let times = answered.iter().filter(|a| *a == token).count();
            assert_eq!(times, 1, "{token} answered {times} times in the history");
        }
        for k in killed.iter().filter(|k| k.contains(&format!("-{t}-"))) {
            let notices = c
                .thread(root)
                .iter()
                .filter(|m| m.text.contains("interrupted by a restart"))
                .count();
            assert!(notices >= 1, "{k}: the interrupted notice");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_serve_processes_survive_sigkill_mid_stream_mid_tool_and_at_a_card() {
    let Some((mut c, alice, roots, mut sent)) = started().await else {
        return;
    };
    let begun = Instant::now();
    let mut killed: Vec<String> = Vec::new();
    let mut takeovers = Vec::new();

    // Three kills, in random order: mid-stream, mid-tool, while a card waits. Each time a
    // burst of ordinary messages goes to random threads through random nodes first.
    let mut kinds = vec!["stream", "tool", "card"];
    for round in 1..=3 {
        let kind = kinds.remove(c.rng.below(kinds.len()));
        let notices = |c: &Cluster, root: &str| {
            c.thread(root)
                .iter()
                .filter(|m| m.text.contains("interrupted by a restart"))
                .count()
        };
        for n in 0..4 {
            let t = c.rng.below(THREADS);
            let token = format!("msg-{t}-{round}{n}");
            let root = roots[t].clone();
            c.say(&alice, &root, &token).await;
            sent.push((t, token));
        }
        for (t, token) in sent.clone() {
            c.wait_answer(&roots[t], &token).await;
        }
        // The victim thread has a live owner now (it just answered); leases of idle threads
        // stay with the node that last ran them.
        let t = c.rng.below(THREADS);
        let root = roots[t].clone();
        let notices_before = notices(&c, &root);
        let mut pending_card = None;
        let victim;
        let kill_at;
        match kind {
            "stream" => {
                let token = format!("slow-{t}-{round}");
                c.say(&alice, &root, &token).await;
                c.wait_thread(&root, "the live answer", |th| {
                    th.iter().any(|m| m.text.starts_with("word"))
                })
                .await;
                victim = c.owner(&root).await;
                // A random moment into the stream.
                tokio::time::sleep(Duration::from_millis(c.rng.below(500) as u64)).await;
                kill_at = c.sigkill(victim);
                killed.push(token);
            }
            "tool" => {
                let token = format!("tool-{t}-{round}");
                c.say(&alice, &root, &token).await;
                let card = c.wait_card(&root, &token).await;
                victim = c.owner(&root).await;
                let other = c.pick_other(victim);
                c.click(&alice, &card, "Approve", other).await;
                // The owner runs the 20 s tool: kill it a random moment in.
                c.wait_thread(&root, "the approved card", |_| {
                    c.card(&root, &token)
                        .is_some_and(|m| m.text.contains("Approved by"))
                })
                .await;
                tokio::time::sleep(Duration::from_millis(100 + c.rng.below(500) as u64)).await;
                kill_at = c.sigkill(victim);
                killed.push(token);
            }
            _ => {
                let token = format!("run-{t}-{round}");
                c.say(&alice, &root, &token).await;
                let card = c.wait_card(&root, &token).await;
                victim = c.owner(&root).await;
                tokio::time::sleep(Duration::from_millis(c.rng.below(300) as u64)).await;
                kill_at = c.sigkill(victim);
                sent.push((t, token));
                pending_card = Some(card);
            }
        }
        // The takeover: another node claims the thread once the lease ran out, and says the
        // turn was interrupted.
        let took = loop {
            let elapsed = kill_at.elapsed();
            let owner = c
                .store
                .lease_owner(&Cluster::key(&root))
                .await
                .expect("the store");
            let live_ids: Vec<String> = c.nodes.iter().flatten().map(|p| p.id.clone()).collect();
            if owner.is_some_and(|o| live_ids.contains(&o)) {
                break elapsed;
            }
            assert!(elapsed < WAIT, "no node took {root} over\n{}", c.tail());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        eprintln!("round {round} ({kind}): node {victim} killed; taken over after {took:?}");
        assert!(
            took <= LEASE * 2,
            "kill→takeover {took:?} exceeds twice the lease ({LEASE:?})"
        );
        takeovers.push((kind, took));
        c.wait_thread(&root, "the interrupted notice", |_| {
            notices(&c, &root) > notices_before
        })
        .await;
        if let Some(card) = pending_card {
            // The card of the dead node's turn is decided on a node that does not own the
            // thread now; the decision is stored, and the card offers Resume; pressed on
            // another node again, the owner goes on with the approved call.
            let token = format!("run-{t}-{round}");
            let owner = c.owner(&root).await;
            let other = c.pick_other(owner);
            c.click(&alice, &card, "Approve", other).await;
            c.wait_thread(&root, "the kept decision and Resume", |_| {
                c.card(&root, &token).is_some_and(|m| {
                    m.text.contains("Your decision is kept") && m.text.contains("Press Resume")
                })
            })
            .await;
            let card = c.card(&root, &token).expect("the card");
            let other = c.pick_other(owner);
            c.click(&alice, &card, "Resume", other).await;
            c.wait_answer(&root, &token).await;
        }
        // The thread goes on.
        let token = format!("msg-{t}-{round}z");
        c.say(&alice, &root, &token).await;
        sent.push((t, token));
        for (t, token) in sent.clone() {
            c.wait_answer(&roots[t], &token).await;
        }
        c.restart(victim);
    }

    wait_all_answered(&c, &roots, &sent).await;
    check_all(&c, &roots, &sent, &killed).await;
    eprintln!(
        "scale-out kills: {} messages answered once each, takeovers {takeovers:?}, {:?}",
        sent.len(),
        begun.elapsed()
    );
    c.llm.verify();
    c.stop().await;
}

// A rolling restart: SIGTERM drains a node (its running turns finish, holding their leases;
// what waits in its lanes is left for the next owner), so nothing is interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_three_serve_processes_under_load_loses_and_duplicates_nothing() {
    let Some((mut c, alice, roots, mut sent)) = started().await else {
        return;
    };
    let begun = Instant::now();
    // Rolling restart under a steady stream: each node in turn is stopped (SIGTERM, drained)
    // while messages keep arriving at the others, and replaced.
    let mut n = 0;
    for i in 0..3 {
        for step in 0..6 {
            if step == 2 {
                c.sigterm(i).await;
            }
            if step == 4 {
                c.restart(i);
            }
            let t = c.rng.below(THREADS);
            let token = format!("msg-{t}-r{n}");
            n += 1;
            let root = roots[t].clone();
            c.say(&alice, &root, &token).await;
            sent.push((t, token));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    wait_all_answered(&c, &roots, &sent).await;
    check_all(&c, &roots, &sent, &[]).await;
    eprintln!(
        "scale-out rolling restart: {} messages answered once each, {:?}",
        sent.len(),
        begun.elapsed()
    );
    c.llm.verify();
    c.stop().await;
}

// A decision clicked on a live node after the owner died but before its lease ran out is
// stored, and sent to a node that cannot read it. No turn took it (`tool_approvals.taken_at`),
// so the call never ran: the node that takes the workstream over says so and goes on with
// the stored decision, without a second click.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_clicked_while_the_owner_is_dead_reaches_the_turn_after_the_takeover() {
    let Some((mut c, alice, roots, mut sent)) = started().await else {
        return;
    };
    let root = roots[0].clone();
    let token = "run-0-1".to_owned();
    c.say(&alice, &root, &token).await;
    let card = c.wait_card(&root, &token).await;
    let victim = c.owner(&root).await;
    c.sigkill(victim);
    let other = c.pick();
    c.click(&alice, &card, "Approve", other).await;
    c.wait_thread(&root, "the notice that the turn goes on", |m| {
        m.iter().any(|m| {
            m.text
                .contains("Your decision was kept, and the turn goes on")
        })
    })
    .await;
    c.wait_answer(&root, &token).await;
    let interrupted = c
        .thread(&root)
        .iter()
        .filter(|m| m.text.contains("interrupted by a restart"))
        .count();
    assert_eq!(
        interrupted, 0,
        "the turn went on; it was not said to be interrupted"
    );
    sent.push((0, token));
    let z = "msg-0-1z".to_owned();
    c.say(&alice, &root, &z).await;
    sent.push((0, z));
    wait_all_answered(&c, &roots, &sent).await;
    check_all(&c, &roots, &sent, &[]).await;
    c.stop().await;
}
