//! A gateway node's HTTP port against hostile clients (issue 24): the real [`Node`] — what
//! `sandpiper serve` runs — with Slack in Events API mode (its port is public), a service
//! secret (notify and the admin API), attacked through raw sockets on loopback. A client on
//! 127.0.0.2 is another host as far as the server can tell.
//!
//! - Hundreds of connections that send headers announcing a body and never send it leave
//!   `/health` and an authenticated notify answering at once: requests without credentials are
//!   refused before their body is read, and one host holds at most its per-peer share.
//! - A route whose secret is not configured is not there: 404, body unread.
//! - `/ready` and `/metrics` behind the operations token, or on their own address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sandpiper::node::Node;
use sandpiper::service_jwt::{CHANNEL_AUDIENCE, ServiceKey};
use sandpiper_agent::config::{Secret, ServerConfig};
use sandpiper_channels::config::{ChannelsConfig, SlackConfig, SlackMode};
use sandpiper_tests::db::TestDb;
use sandpiper_tests::fake_slack::{CHANNEL_ID, FakeSlack};
use sandpiper_tests::slack_harness;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use super::{WAIT, setup};

const SECRET: &str = "hostile-test-secret-0123456789abcdef";
/// What "at once" means here, on a loaded CI machine: far below the body deadline.
const PROMPT: Duration = Duration::from_secs(3);

struct Gateway {
    node: Node,
    slack: Option<FakeSlack>,
    shutdown: CancellationToken,
    _setup: super::Setup,
}

/// A node on `db` with Slack in Events API mode (or no Slack), the service secret (or none),
/// and `[server]` as `server` leaves it.
async fn gateway(
    db: &TestDb,
    slack: bool,
    key: bool,
    server: impl FnOnce(&mut ServerConfig),
) -> Gateway {
    let s = setup(db, vec![]).await;
    let mut config = s.config.clone();
    let fake = match slack {
        true => {
            let fake = FakeSlack::start().await;
            slack_harness::configure(&mut config, &fake, SlackMode::Events);
            Some(fake)
        }
        false => None,
    };
    let mut core = config.core.clone();
    core.server.listen = "127.0.0.1:0".parse().expect("an address");
    server(&mut core.server);
    let env = [("PATH", "/usr/bin:/bin")];
    let host = sandpiper_agent::turn::agent::Host {
        protected_files: Vec::new(),
        env: &env,
    };
    let agent = sandpiper::wiring::build_agent_in(core, host)
        .await
        .expect("the agent builds");
    let slack_config = match slack {
        true => config.slack.clone(),
        false => SlackConfig::default(),
    };
    let channels = ChannelsConfig {
        discord: Default::default(),
        slack: slack_config,
    };
    let key = key.then(|| ServiceKey::new(SECRET).expect("a strong secret"));
    let shutdown = CancellationToken::new();
    let node = Node::start(agent, channels, key, shutdown.clone())
        .await
        .expect("the node starts");
    Gateway {
        node,
        slack: fake,
        shutdown,
        _setup: s,
    }
}

impl Gateway {
    async fn stop(self) {
        self.shutdown.cancel();
        let exit = tokio::time::timeout(WAIT * 2, self.node.join(WAIT))
            .await
            .expect("the node stops");
        exit.served.expect("the HTTP server ran");
    }
}

/// A connection to `addr` from loopback address `from`.
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(format!("{from}:0").parse().expect("an address"))
        .expect("binds a loopback source address");
    socket.connect(addr).await.expect("connects")
}

/// Reads the answer's head (to the blank line) within `within`; `None` when nothing came.
async fn head_within(s: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    let deadline = tokio::time::Instant::now() + within;
    while !out.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) if out.is_empty() => return None,
            Err(_) => break,
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Whether the server has closed `s` (EOF or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 2048];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// A request head announcing a 4 KiB body that never comes.
fn headers_only(method: &str, path: &str, extra: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n{extra}\r\n").into_bytes()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock")
        .as_secs()
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_without_bodies_leave_health_and_an_authenticated_notify_answering() {
    let db = TestDb::sqlite();
    let gw = gateway(&db, true, true, |server| {
        // Long, so that only refusing early (not the deadline) can keep the node answering.
        server.body_read_timeout = Duration::from_secs(120);
        server.header_read_timeout = Duration::from_secs(120);
    })
    .await;
    let addr = gw.node.addr;
    let per_peer = gw.node.agent.config().server.max_connections_per_peer;
    let max = gw.node.agent.config().server.max_connections;
    assert!(per_peer < max, "per-peer {per_peer}, overall {max}");
    let forged_token = ServiceKey::new("a secret that is not the node's, 32+ bytes")
        .unwrap()
        .sign(CHANNEL_AUDIENCE, "mallory", Duration::from_secs(60))
        .unwrap();
    // 300 connections from this host (the one Slack and the other nodes use too), on every
    // route that reads a body, without credentials or with bad ones.
    let bad_auth = format!("Authorization: Bearer {forged_token}\r\n");
    let attacks: Vec<Vec<u8>> = vec![
        headers_only("POST", "/v1/api/notify", ""),
        headers_only("POST", "/v1/api/notify", &bad_auth),
        headers_only("PATCH", "/v1/api/channels/discord:1/connectors", ""),
        headers_only("POST", "/slack/events", ""),
        headers_only(
            "POST",
            "/slack/interactions",
            "X-Slack-Request-Timestamp: 1\r\nX-Slack-Signature: v0=00\r\n",
        ),
        headers_only("POST", "/health", ""),
    ];
    let mut local = Vec::new();
    for i in 0..300 {
        let mut s = TcpStream::connect(addr).await.expect("connects");
        s.write_all(&attacks[i % attacks.len()])
            .await
            .expect("sends");
        local.push((i % attacks.len(), s));
    }
    // 300 from another host that look signed by Slack (a fresh timestamp, a signature of the
    // right shape): only the body can tell them apart, so the server waits for it.
    let slack_like = headers_only(
        "POST",
        "/slack/events",
        &format!(
            "X-Slack-Request-Timestamp: {}\r\nX-Slack-Signature: v0={}\r\n",
            unix_now(),
            "ab".repeat(32)
        ),
    );
    let mut remote = Vec::new();
    for _ in 0..300 {
        let mut s = connect_from("127.0.0.2", addr).await;
        let _ = s.write_all(&slack_like).await;
        remote.push(s);
    }
    // While all 600 stay open: /health and an authenticated notify answer at once.
    let http = client();
    let started = Instant::now();
    let health = tokio::time::timeout(PROMPT, http.get(format!("http://{addr}/health")).send())
        .await
        .expect("/health answered promptly")
        .expect("/health answered");
    assert_eq!(health.status(), 200);
    let token = ServiceKey::new(SECRET)
        .unwrap()
        .sign(CHANNEL_AUDIENCE, "node-b", Duration::from_secs(60))
        .unwrap();
    let notify = http
        .post(format!("http://{addr}/v1/api/notify"))
        .bearer_auth(&token)
        .json(&serde_json::json!({
            "message": "still answering",
            "channel_type": "slack",
            "channel_id": CHANNEL_ID,
        }))
        .send();
    let notify = tokio::time::timeout(PROMPT, notify)
        .await
        .expect("notify answered promptly")
        .expect("notify answered");
    let status = notify.status();
    let body: serde_json::Value = notify.json().await.expect("a JSON answer");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["status"], "sent", "{body}");
    assert!(started.elapsed() < PROMPT * 2, "{:?}", started.elapsed());
    let slack = gw.slack.as_ref().expect("the fake Slack");
    assert!(
        slack
            .messages(CHANNEL_ID)
            .iter()
            .any(|m| m.text.contains("still answering")),
        "the notification reached Slack"
    );
    // Each unauthenticated request was answered without its body (or, opened while this host
    // had its share open, refused), and its connection closed.
    let mut answered = vec![0; attacks.len()];
    for (kind, s) in &mut local {
        let head = head_within(s, PROMPT)
            .await
            .unwrap_or_else(|| panic!("attack {kind} got no answer without its body"));
        let expected = if *kind == 5 {
            "HTTP/1.1 405"
        } else {
            "HTTP/1.1 401"
        };
        if head.starts_with(expected) {
            answered[*kind] += 1;
        } else {
            assert!(
                head.is_empty() || head.starts_with("HTTP/1.1 503"),
                "attack {kind}: {head}"
            );
        }
        assert!(closed_within(s, PROMPT).await, "attack {kind} left open");
    }
    assert!(
        answered.iter().all(|n| *n > 0),
        "answered per kind: {answered:?}"
    );
    // The other host holds its per-peer share, waiting for bodies; the rest were refused.
    let mut held = 0;
    for s in &mut remote {
        match head_within(s, Duration::from_millis(100)).await {
            None => held += 1,
            Some(head) => assert!(
                head.is_empty() || head.starts_with("HTTP/1.1 503"),
                "{head}"
            ),
        }
    }
    assert_eq!(held, per_peer, "connections the other host kept open");
    drop((local, remote));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_whose_secret_is_not_configured_is_not_there_and_its_body_is_not_read() {
    let db = TestDb::sqlite();
    // No service secret, Slack off: neither notify, the admin API nor Slack's routes exist.
    let gw = gateway(&db, false, false, |server| {
        server.body_read_timeout = Duration::from_secs(120);
    })
    .await;
    for (method, path) in [
        ("POST", "/v1/api/notify"),
        ("PATCH", "/v1/api/channels/discord:1/connectors"),
        ("GET", "/v1/api/workstreams/discord:1/connectors"),
        ("POST", "/slack/events"),
        ("POST", "/slack/commands"),
    ] {
        let mut s = TcpStream::connect(gw.node.addr).await.unwrap();
        s.write_all(&headers_only(method, path, "Authorization: Bearer x\r\n"))
            .await
            .unwrap();
        let head = head_within(&mut s, PROMPT)
            .await
            .unwrap_or_else(|| panic!("{method} {path}: no answer without the body"));
        assert!(head.starts_with("HTTP/1.1 404"), "{method} {path}: {head}");
        assert!(closed_within(&mut s, PROMPT).await, "{method} {path}");
    }
    gw.stop().await;
}

/// GET `path` on `addr` with `token` as a bearer token; the status.
async fn get(http: &reqwest::Client, addr: SocketAddr, path: &str, token: Option<&str>) -> u16 {
    let mut req = http.get(format!("http://{addr}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.expect("an answer").status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_and_metrics_need_the_operations_token_when_one_is_set() {
    let db = TestDb::sqlite();
    let gw = gateway(&db, true, true, |server| {
        server.ops_token = Some(Secret::new("ops-token-for-the-scraper-of-32-chars"));
    })
    .await;
    let http = client();
    let addr = gw.node.addr;
    for path in ["/ready", "/metrics"] {
        assert_eq!(get(&http, addr, path, None).await, 401, "{path} without");
        assert_eq!(
            get(&http, addr, path, Some("ops-token-for-the-scrapeR")).await,
            401,
            "{path} with a wrong token"
        );
        assert_eq!(
            get(&http, addr, path, Some(SECRET)).await,
            401,
            "{path} with the service secret"
        );
        assert_eq!(
            get(
                &http,
                addr,
                path,
                Some("ops-token-for-the-scraper-of-32-chars")
            )
            .await,
            200,
            "{path} with the token"
        );
    }
    assert_eq!(get(&http, addr, "/health", None).await, 200);
    let metrics = http
        .get(format!("http://{addr}/metrics"))
        .bearer_auth("ops-token-for-the-scraper-of-32-chars")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("sandpiper_turns_total"), "{metrics}");
    assert_eq!(gw.node.ops_addr, None);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ops_address_serves_ready_and_metrics_and_the_public_port_does_not() {
    let db = TestDb::sqlite();
    let gw = gateway(&db, true, true, |server| {
        server.ops_listen = Some("127.0.0.1:0".parse().expect("an address"));
    })
    .await;
    let http = client();
    let public = gw.node.addr;
    let ops = gw.node.ops_addr.expect("the ops address");
    assert_ne!(ops, public);
    for path in ["/ready", "/metrics"] {
        assert_eq!(
            get(&http, public, path, None).await,
            404,
            "{path} on the public port"
        );
        assert_eq!(
            get(&http, ops, path, None).await,
            200,
            "{path} on the ops port"
        );
    }
    assert_eq!(get(&http, public, "/health", None).await, 200);
    // Only the operations endpoints are on the ops address.
    assert_eq!(
        get(&http, ops, "/v1/api/channels/discord:1/connectors", None).await,
        404
    );
    gw.stop().await;
}

/// Signs `name` (a person in no thread) in over HTTP with a fresh link; the session cookie.
async fn signed_in(gw: &Gateway, name: &str) -> String {
    let agent = &gw.node.agent;
    let user = agent
        .store()
        .user_for_identity("discord", name, name)
        .await
        .expect("a user")
        .id;
    let who = sandpiper_agent::sign_in::WebIdentity {
        user_id: Some(user),
        admin: false,
    };
    let link = agent.sign_in_link(&who).await.expect("a link");
    let path = &link.url[link.url.find("/sign-in/").expect("a link path")..];
    let base = format!("http://{}", gw.node.addr);
    super::who_decides_page::press_link(&super::who_decides_page::client(), &base, path).await
}

/// Opens `GET /events` with `cookie` from loopback address `from`; the stream and the
/// status its answer started with (`None`: no answer in time).
async fn stream_from(from: &str, addr: SocketAddr, cookie: &str) -> (TcpStream, Option<String>) {
    let mut s = connect_from(from, addr).await;
    let request = format!("GET /events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n");
    s.write_all(request.as_bytes()).await.expect("asks");
    let head = head_within(&mut s, PROMPT).await;
    let status = head.and_then(|h| h.split(' ').nth(1).map(str::to_owned));
    (s, status)
}

/// One signed-in stranger opening event streams from 8 addresses holds 4 of them (the rest
/// are answered 429 at once); many people together hold at most a quarter of the server's
/// connections (the rest answered 503 at once); meanwhile `/health`, Slack's Events API and
/// an authenticated notify answer at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_are_budgeted_and_leave_health_slack_and_notify_answering() {
    let db = TestDb::sqlite();
    let gw = gateway(&db, true, true, |server| {
        server.max_connections = 40;
    })
    .await;
    let addr = gw.node.addr;
    let mallory = signed_in(&gw, "mallory").await;
    let mut held = Vec::new();
    let mut statuses = Vec::new();
    for i in 0..32 {
        let from = format!("127.0.0.{}", 2 + i % 8);
        let (s, status) = stream_from(&from, addr, &mallory).await;
        statuses.push(status.unwrap_or_else(|| panic!("stream {i} got no answer")));
        held.push(s);
    }
    let count = |code: &str| statuses.iter().filter(|s| *s == code).count();
    assert_eq!((count("200"), count("429")), (4, 28), "{statuses:?}");
    // Twelve more people, one stream each: the node follows 10 (a quarter of 40) in all.
    let mut others = Vec::new();
    for i in 0..12 {
        let cookie = signed_in(&gw, &format!("person{i}")).await;
        let (s, status) = stream_from(&format!("127.0.1.{}", 2 + i), addr, &cookie).await;
        others.push(status.unwrap_or_else(|| panic!("person {i} got no answer")));
        held.push(s);
    }
    let count = |code: &str| others.iter().filter(|s| *s == code).count();
    assert_eq!((count("200"), count("503")), (6, 6), "{others:?}");

    // While the streams stay open: /health, Slack's Events API and notify answer at once.
    let http = client();
    let health = tokio::time::timeout(PROMPT, http.get(format!("http://{addr}/health")).send())
        .await
        .expect("/health answered promptly")
        .expect("/health answered");
    assert_eq!(health.status(), 200);
    let slack = tokio::time::timeout(
        PROMPT,
        http.post(format!("http://{addr}/slack/events"))
            .header("X-Slack-Request-Timestamp", unix_now().to_string())
            .header("X-Slack-Signature", format!("v0={}", "ab".repeat(32)))
            .body("{}")
            .send(),
    )
    .await
    .expect("Slack's endpoint answered promptly")
    .expect("Slack's endpoint answered");
    assert!(slack.status().is_client_error(), "{}", slack.status());
    let token = ServiceKey::new(SECRET)
        .unwrap()
        .sign(CHANNEL_AUDIENCE, "node-b", Duration::from_secs(60))
        .unwrap();
    let notify = http
        .post(format!("http://{addr}/v1/api/notify"))
        .bearer_auth(&token)
        .json(&serde_json::json!({
            "message": "still answering",
            "channel_type": "slack",
            "channel_id": CHANNEL_ID,
        }))
        .send();
    let notify = tokio::time::timeout(PROMPT, notify)
        .await
        .expect("notify answered promptly")
        .expect("notify answered");
    assert_eq!(notify.status(), 200);
    // A stream closed gives its place back.
    drop(held);
    let deadline = Instant::now() + PROMPT;
    loop {
        let (_s, status) = stream_from("127.0.0.2", addr, &mallory).await;
        if status.as_deref() == Some("200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the budget came back: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}
