//! Several nodes on one PostgreSQL (issue 17): each is [`Node::start`] — what `sandpiper
//! serve` runs — in this process, all on one database, with Slack in Events API mode so the
//! test decides which node each message and each click reaches (as a load balancer in front
//! of several nodes would).
//!
//! The model answers by what it is asked: `msg-…` gets `answer to msg-…`; `run-…` first asks
//! for `bash echo ran-…` (approval needed), then answers. So every answer names its message,
//! and the test checks that each message was answered exactly once, that no two turns ran in
//! one workstream at once (the stored history alternates question and answer), and that a
//! killed node's threads go on on the others.

use std::collections::HashMap;
use std::time::Duration;

use sandpiper::node::Node;
use sandpiper_agent::config::Config;
use sandpiper_agent::model::{Message, Role};
use sandpiper_channels::config::{ChannelsConfig, SlackConfig, SlackMode};
use sandpiper_tests::both_backends;
use sandpiper_tests::db::TestDb;
use sandpiper_tests::fake_llm::{FakeLlm, Reply, text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack, FakeSlackMessage, SlackUser, sign};
use sandpiper_tests::slack_harness::{self, SIGNING_SECRET, button, is_card};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{WAIT, setup};

/// Short, so a killed node's threads move on within the test.
const LEASE: Duration = Duration::from_secs(2);

/// The token (`msg-…` or `run-…`) of the newest user message of a model request.
fn asked(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .filter(|m| m["role"] == "user")
        .find_map(|m| {
            let content = m["content"].as_str()?;
            content
                .split_whitespace()
                .find(|w| w.starts_with("msg-") || w.starts_with("run-") || w.starts_with("slow-"))
                .map(str::to_owned)
        })
}

/// The model: answers `msg-…` at once; `run-…` after a bash call that needs approval.
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
    if token.starts_with("run-") && !after_tool {
        tool_call(
            format!("call-{token}"),
            "bash",
            json!({"command": format!("echo ran-{token}")}),
        )
    } else {
        text(format!("answer to {token}"))
    }
}

/// Three (or `n`) nodes, the fake Slack they share, and a client that plays Slack's HTTP side.
struct Cluster {
    nodes: Vec<Option<Node>>,
    slack: FakeSlack,
    http: reqwest::Client,
    llm: FakeLlm,
    config: sandpiper_tests::harness::TestConfig,
    _work: tempfile::TempDir,
}

async fn start_node(core: &Config, slack: &SlackConfig) -> Node {
    let mut core = core.clone();
    core.server.listen = "127.0.0.1:0".parse().expect("an address");
    core.cluster.lease = LEASE;
    let env = [("PATH", "/usr/bin:/bin")];
    let host = sandpiper_agent::turn::agent::Host {
        protected_files: Vec::new(),
        env: &env,
    };
    let agent = sandpiper::wiring::build_agent_in(core, host)
        .await
        .expect("the agent builds");
    let channels = ChannelsConfig {
        discord: Default::default(),
        slack: slack.clone(),
    };
    Node::start(agent, channels, None, CancellationToken::new())
        .await
        .expect("the node starts")
}

impl Cluster {
    async fn start(db: &TestDb, n: usize) -> Self {
        Self::settling(
            db,
            n,
            sandpiper_agent::config::AgentConfig::default().settle_ms,
        )
        .await
    }

    /// [`Cluster::start`], every quiet thread waiting `settle_ms` before a turn.
    async fn settling(db: &TestDb, n: usize, settle_ms: u64) -> Self {
        let s = setup(db, vec![]).await;
        s.llm.respond_with(respond);
        let slack = FakeSlack::start().await;
        let mut config = s.config.clone();
        config.core.agent.settle_ms = settle_ms;
        slack_harness::configure(&mut config, &slack, SlackMode::Events);
        let mut nodes = Vec::new();
        for _ in 0..n {
            nodes.push(Some(start_node(&config.core, &config.slack).await));
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            nodes,
            slack,
            http: reqwest::Client::new(),
            llm: s.llm,
            config,
            _work: s.work,
        }
    }

    fn node(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("a live node")
    }

    /// The live nodes' indexes.
    fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_some())
            .collect()
    }

    /// A live node picked by `seed` (the test's own "random", reproducible).
    fn pick(&self, seed: usize) -> usize {
        let live = self.live();
        live[seed % live.len()]
    }

    /// POSTs what the fake Slack last sent (an event or an interaction) to node `i`, signed.
    async fn deliver_last(&self, i: usize) {
        let envelope = self.slack.envelopes().pop().expect("an envelope");
        self.deliver(i, envelope).await;
    }

    /// POSTs `envelope` (an event or an interaction the fake Slack made) to node `i`, signed.
    async fn deliver(&self, i: usize, envelope: Value) {
        let payload = envelope["payload"].clone();
        let (path, body, content_type) = if envelope["type"] == "events_api" {
            ("events", payload.to_string(), "application/json")
        } else {
            let form: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("payload", &payload.to_string())
                .finish();
            ("interactions", form, "application/x-www-form-urlencoded")
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock")
            .as_secs() as i64;
        let url = format!("http://{}/slack/{path}", self.node(i).addr);
        let answer = self
            .http
            .post(&url)
            .header("x-slack-request-timestamp", now.to_string())
            .header("x-slack-signature", sign(SIGNING_SECRET, now, &body))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("the node answers");
        assert!(answer.status().is_success(), "{url}: {}", answer.status());
    }

    fn thread(&self, root: &str) -> Vec<FakeSlackMessage> {
        self.slack
            .messages(CHANNEL_ID)
            .into_iter()
            .filter(|m| m.thread_ts.as_deref() == Some(root) || m.ts == root)
            .collect()
    }

    async fn wait_thread(&self, root: &str, what: &str, ok: impl Fn(&[FakeSlackMessage]) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let thread = self.thread(root);
            if ok(&thread) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what} in thread {root}: {:#?}",
                thread.iter().map(|m| &m.text).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `root`'s stored history satisfies `ok`, and returns it. A streamed answer
    /// shows in the thread a moment before its turn commits it, so a test that reads the
    /// history after seeing an answer waits for the commit here.
    async fn wait_history(
        &self,
        root: &str,
        what: &str,
        ok: impl Fn(&[Message]) -> bool,
    ) -> Vec<Message> {
        let key = format!(
            "slack:{}:{CHANNEL_ID}:{root}",
            sandpiper_tests::fake_slack::TEAM_ID
        );
        let store = self.node(self.live()[0]).agent.store().clone();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let history = store.load_messages(&key).await.expect("the history");
            if ok(&history) {
                return history;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what} in the history of {root}: {history:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_answer(&self, root: &str, token: &str) {
        let answer = format!("answer to {token}");
        self.wait_thread(root, &answer, |t| t.iter().any(|m| m.text == answer))
            .await;
    }

    /// Alice opens a thread with `token` through node `i`; returns its root ts.
    async fn open_thread(&self, alice: &SlackUser, token: &str, i: usize) -> String {
        let root = self.slack.app_mention(CHANNEL_ID, alice, token).await;
        self.deliver_last(i).await;
        root
    }

    /// Alice writes `token` in the thread through node `i`.
    async fn say(&self, alice: &SlackUser, root: &str, token: &str, i: usize) {
        self.slack
            .thread_message(CHANNEL_ID, root, alice, token)
            .await;
        self.deliver_last(i).await;
    }

    /// Waits for the approval card of `token`'s call and has alice approve it on node `i`.
    async fn approve(&self, alice: &SlackUser, root: &str, token: &str, i: usize) {
        let needle = format!("ran-{token}");
        let find = |t: &[FakeSlackMessage]| {
            t.iter()
                .find(|m| is_card(m) && m.blocks.to_string().contains(&needle))
                .cloned()
        };
        self.wait_thread(root, "the approval card", |t| find(t).is_some())
            .await;
        let card = find(&self.thread(root)).expect("the card");
        let (action, value) = button(&card, "Approve");
        self.slack
            .click(CHANNEL_ID, &card.ts, alice, &action, &value)
            .await;
        self.deliver_last(i).await;
    }

    /// Which node index holds each workstream's lease now.
    async fn owners(&self) -> HashMap<String, usize> {
        let mut ids = HashMap::new();
        for i in self.live() {
            let node = self.node(i);
            let id = node.agent.cluster().expect("a cluster").node().to_owned();
            ids.insert(id, i);
        }
        let store = self.node(self.live()[0]).agent.store().clone();
        let mut out = HashMap::new();
        for root in self
            .slack
            .messages(CHANNEL_ID)
            .iter()
            .filter(|m| m.thread_ts.is_none())
        {
            let key = format!(
                "slack:{}:{CHANNEL_ID}:{}",
                sandpiper_tests::fake_slack::TEAM_ID,
                root.ts
            );
            if let Some(owner) = store.lease_owner(&key).await.expect("the store")
                && let Some(i) = ids.get(&owner)
            {
                out.insert(key, *i);
            }
        }
        out
    }

    async fn kill(&mut self, i: usize) {
        let node = self.nodes[i].take().expect("a live node");
        node.kill();
        let _ = node.join(Duration::from_secs(5)).await;
    }

    /// Starts a new node (a new process, as far as the others can tell) in place `i`.
    async fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].is_none(), "node {i} still runs");
        self.nodes[i] = Some(start_node(&self.config.core, &self.config.slack).await);
    }

    async fn stop(mut self) {
        for node in self.nodes.iter_mut().filter_map(Option::take) {
            node.shutdown();
            let _ = node.join(Duration::from_secs(5)).await;
        }
    }
}

/// Every user message in a workstream's stored history is followed by its own answer before
/// the next one: no two turns ran there at once, and nothing committed was lost.
fn assert_turns_alternate(history: &[Message]) {
    let mut waiting: Option<String> = None;
    for m in history {
        match m.role {
            Role::User => {
                let token = m
                    .content
                    .split_whitespace()
                    .find(|w| w.starts_with("msg-") || w.starts_with("run-"))
                    .map(str::to_owned);
                assert!(
                    waiting.is_none(),
                    "a message came in before {waiting:?} was answered: {history:#?}"
                );
                waiting = token;
            }
            Role::Assistant if m.tool_calls.is_empty() => {
                let token = waiting.take().expect("an answer answers a message");
                assert_eq!(m.content, format!("answer to {token}"));
            }
            _ => {}
        }
    }
    assert!(waiting.is_none(), "unanswered: {waiting:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_delivered_in_reverse_through_two_nodes_is_answered_in_send_order() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    // Long enough for the first message's way through the other node and the database.
    let c = Cluster::settling(&db, 2, 300).await;
    let alice = c.slack.user("U0ALICE", "alice");
    let root = c.open_thread(&alice, "msg-open", 0).await;
    c.wait_answer(&root, "msg-open").await;
    let owner = c.owners().await.values().next().copied().expect("an owner");
    let other = 1 - owner;
    c.slack
        .thread_message(CHANNEL_ID, &root, &alice, "msg-first")
        .await;
    c.slack
        .thread_message(CHANNEL_ID, &root, &alice, "msg-second")
        .await;
    let mut envelopes = c.slack.envelopes();
    let second = envelopes.pop().expect("the second's event");
    let first = envelopes.pop().expect("the first's event");
    // The second reaches the owner first; the first goes through the other node.
    c.deliver(owner, second).await;
    c.deliver(other, first).await;
    let history = c
        .wait_history(&root, "both answers", |h| {
            h.iter().filter(|m| m.role == Role::Assistant).count() >= 3
        })
        .await;
    let asked: Vec<&str> = history
        .iter()
        .filter(|m| m.role == Role::User)
        .filter_map(|m| m.content.split_whitespace().find(|w| w.starts_with("msg-")))
        .collect();
    assert_eq!(
        asked,
        ["msg-open", "msg-first", "msg-second"],
        "{history:#?}"
    );
    assert!(
        !c.thread(&root)
            .iter()
            .any(|m| m.text.contains(sandpiper_channels::thread::LATE)),
        "nothing arrived late within the settle window"
    );
    c.stop().await;
}

#[tokio::test]
async fn three_nodes_answer_each_message_once_and_survive_a_killed_node() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let mut c = Cluster::start(&db, 3).await;
    let alice = c.slack.user("U0ALICE", "alice");
    const THREADS: usize = 6;
    let mut roots = Vec::new();
    let mut sent: Vec<(usize, String)> = Vec::new();
    for t in 0..THREADS {
        let token = format!("msg-{t}-0");
        let root = c.open_thread(&alice, &token, c.pick(t)).await;
        sent.push((t, token));
        roots.push(root);
    }
    for (t, token) in &sent {
        c.wait_answer(&roots[*t], token).await;
    }
    let mut seed = 7;
    let mut next = || {
        seed = (seed * 31 + 11) % 1009;
        seed
    };
    for round in 1..=4 {
        if round == 3 {
            // Kill the node that owns the most threads, between turns: its leases run out
            // and the others take its threads over.
            let owners = c.owners().await;
            let mut count = HashMap::new();
            for i in owners.values() {
                *count.entry(*i).or_insert(0) += 1;
            }
            let victim = *count.iter().max_by_key(|(_, n)| **n).expect("owners").0;
            c.kill(victim).await;
        }
        // A burst in every thread at once: two messages each through different nodes, then a
        // call that needs approval, clicked through yet another node.
        let mut burst = Vec::new();
        for (t, root) in roots.iter().enumerate() {
            let (a, b) = (format!("msg-{t}-{round}a"), format!("msg-{t}-{round}b"));
            c.say(&alice, root, &a, c.pick(next())).await;
            c.say(&alice, root, &b, c.pick(next())).await;
            burst.push((t, a));
            burst.push((t, b));
        }
        for (t, token) in &burst {
            c.wait_answer(&roots[*t], token).await;
        }
        sent.extend(burst);
        for (t, root) in roots.iter().enumerate() {
            let token = format!("run-{t}-{round}");
            c.say(&alice, root, &token, c.pick(next())).await;
            c.approve(&alice, root, &token, c.pick(next())).await;
            c.wait_answer(root, &token).await;
            sent.push((t, token));
        }
    }
    // Exactly once: each answer shows once in its thread.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (t, token) in &sent {
        let answer = format!("answer to {token}");
        let shown = c
            .thread(&roots[*t])
            .iter()
            .filter(|m| m.text == answer)
            .count();
        assert_eq!(shown, 1, "{answer} shown {shown} times");
    }
    // Nothing committed lost, no two turns at once in a workstream.
    for (t, root) in roots.iter().enumerate() {
        let last = format!("answer to run-{t}-4");
        let history = c
            .wait_history(root, &last, |h| h.last().is_some_and(|m| m.content == last))
            .await;
        assert_turns_alternate(&history);
    }
    c.llm.verify();
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_killed_with_its_node_is_marked_interrupted_and_the_thread_goes_on() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let mut c = Cluster::start(&db, 2).await;
    let alice = c.slack.user("U0ALICE", "alice");
    let root = c.open_thread(&alice, "msg-0-0", 0).await;
    c.wait_answer(&root, "msg-0-0").await;
    let owner = c.owners().await.into_values().next().expect("an owner");
    // The owner asks for approval, and dies before anyone decides.
    c.say(&alice, &root, "run-0-1", owner).await;
    let needle = "ran-run-0-1";
    c.wait_thread(&root, "the card", |t| {
        t.iter()
            .any(|m| is_card(m) && m.blocks.to_string().contains(needle))
    })
    .await;
    c.kill(owner).await;
    // The survivor takes the thread over once the lease ran out and says what happened.
    c.wait_thread(&root, "the interrupted notice", |t| {
        t.iter().any(|m| {
            m.text
                .contains("interrupted by a restart — reply to continue")
        })
    })
    .await;
    let survivor = c.live()[0];
    c.say(&alice, &root, "msg-0-2", survivor).await;
    c.wait_answer(&root, "msg-0-2").await;
    let history = c
        .wait_history(&root, "the last answer", |h| {
            h.last().is_some_and(|m| m.content == "answer to msg-0-2")
        })
        .await;
    // What the dead node committed is all there: the question and the call it asked about.
    assert!(
        history
            .iter()
            .any(|m| m.role == Role::User && m.content.contains("run-0-1"))
    );
    assert!(
        history
            .iter()
            .any(|m| m.tool_calls.iter().any(|c| c.id == "call-run-0-1"))
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stop_on_another_node_stops_the_turn_where_it_runs() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let c = Cluster::start(&db, 2).await;
    let alice = c.slack.user("U0ALICE", "alice");
    let root = c.open_thread(&alice, "msg-0-0", 0).await;
    c.wait_answer(&root, "msg-0-0").await;
    let owner = c.owners().await.into_values().next().expect("an owner");
    let other = 1 - owner;
    c.say(&alice, &root, "slow-0-1", owner).await;
    let streaming = |m: &FakeSlackMessage| {
        m.text.starts_with("word") && m.blocks.to_string().contains("\"stop:slack:")
    };
    c.wait_thread(&root, "the live answer", |t| t.iter().any(streaming))
        .await;
    let live = c
        .thread(&root)
        .into_iter()
        .find(streaming)
        .expect("the live answer");
    let key = format!(
        "slack:{}:{CHANNEL_ID}:{root}",
        sandpiper_tests::fake_slack::TEAM_ID
    );
    c.slack
        .click(CHANNEL_ID, &live.ts, &alice, &format!("stop:{key}"), &key)
        .await;
    c.deliver_last(other).await;
    c.wait_thread(&root, "the stopped answer", |t| {
        t.iter().any(|m| m.text.ends_with("_(stopped)_"))
    })
    .await;
    c.stop().await;
}

both_backends! {
    async fn a_restart_marks_the_turn_it_cut_off_and_the_thread_goes_on(db) {
        let mut c = Cluster::start(&db, 1).await;
        let alice = c.slack.user("U0ALICE", "alice");
        let root = c.open_thread(&alice, "msg-0-0", 0).await;
        c.wait_answer(&root, "msg-0-0").await;
        c.say(&alice, &root, "run-0-1", 0).await;
        c.wait_thread(&root, "the card", |t| {
            t.iter().any(|m| is_card(m) && m.blocks.to_string().contains("ran-run-0-1"))
        })
        .await;
        // The process dies waiting for approval, and a new one starts on the same database
        // (on SQLite at once: it is the only node; on PostgreSQL once the lease ran out).
        c.kill(0).await;
        c.restart(0).await;
        c.wait_thread(&root, "the interrupted notice", |t| {
            t.iter().any(|m| m.text.contains("interrupted by a restart — reply to continue"))
        })
        .await;
        let notices = c
            .thread(&root)
            .iter()
            .filter(|m| m.text.contains("interrupted by a restart"))
            .count();
        assert_eq!(notices, 1, "said once");
        c.say(&alice, &root, "msg-0-2", 0).await;
        c.wait_answer(&root, "msg-0-2").await;
        c.stop().await;
    }

    async fn lease_expiry_is_the_databases_clock_not_a_nodes(db) {
        use sandpiper_agent::store::leases::{Claim, Liveness};
        let store = sandpiper_agent::store::Store::connect(&db.url, 2).await.unwrap();
        // No node's clock is an argument: node b, however far ahead its clock runs, can only
        // ask, and the database answers by its own clock that a's lease is alive.
        let fresh = Claim::Ours { taken_over: false, interrupted: false };
        assert_eq!(store.claim_lease("w", "a", 1_500, Liveness::Shared).await.unwrap(), fresh);
        store.mark_turn("w", "a", Some(1)).await.unwrap();
        assert_eq!(store.claim_lease("w", "b", 60_000, Liveness::Shared).await.unwrap(), Claim::Held { node: "a".into() });
        assert_eq!(store.turn_owner("w").await.unwrap().as_deref(), Some("a"));
        assert!(store.orphaned_leases("b", Liveness::Shared, 10).await.unwrap().is_empty());
        // The expiry was written as the database's clock plus the lease.
        let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
        let now_sql = if db.url.starts_with("postgres") {
            "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
        } else {
            "CAST(unixepoch('subsec') * 1000 AS BIGINT)"
        };
        let (left,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT expires_at - {now_sql} FROM workstream_leases WHERE workstream = 'w'")))
            .fetch_one(&pool).await.unwrap();
        assert!((0..=1_500).contains(&left), "{left}");
        // Once the database's clock passes it, and only then, b takes over.
        tokio::time::sleep(Duration::from_millis(1_700)).await;
        assert_eq!(store.turn_owner("w").await.unwrap(), None);
        assert_eq!(store.orphaned_leases("b", Liveness::Shared, 10).await.unwrap().len(), 1);
        assert_eq!(
            store.claim_lease("w", "b", 60_000, Liveness::Shared).await.unwrap(),
            Claim::Ours { taken_over: true, interrupted: true }
        );
        assert_eq!(store.claim_lease("w", "a", 60_000, Liveness::Shared).await.unwrap(), Claim::Held { node: "b".into() });
        pool.close().await;
        store.close().await;
    }
}
