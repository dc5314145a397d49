//! The HTTP server of `sandpiper serve` holds up on a public port: clients that never finish
//! their headers or their bodies are cut off, connections are capped (overall and per peer),
//! and bodies are capped whichever route reads them. Raw TCP clients play the attacker; one
//! on another loopback address (127.0.0.2) plays a second host.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::{get, post};
use sandpiper_agent::config::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use super::WAIT;

struct Server {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(limits: ServerConfig) -> Self {
        let router = Router::new()
            .route("/health", get(|| async { "ok" }))
            .route(
                "/echo",
                post(|body: Bytes| async move { body.len().to_string() }),
            );
        let shutdown = CancellationToken::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            let listen = "127.0.0.1:0".parse().expect("an address");
            sandpiper::http_server::run(listen, router, &limits, stop, tx).await
        });
        let addr = rx.await.expect("server bound");
        Self {
            addr,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the server stops")
            .expect("the server task ends")
            .expect("the server ran");
    }
}

fn limits(header_read_timeout: Duration, max_connections: usize) -> ServerConfig {
    ServerConfig {
        header_read_timeout,
        max_connections,
        max_connections_per_peer: max_connections,
        max_body_bytes: 1024,
        ..ServerConfig::default()
    }
}

/// Sends `request` on a fresh connection and returns the whole answer (the server closes).
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connects");
    s.write_all(request).await.expect("sends");
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("an answer")
        .expect("reads");
    String::from_utf8_lossy(&out).into_owned()
}

/// Waits until the server closes `s` (EOF or reset); returns whether it did within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // hyper may answer 408 before closing; keep reading until the close.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn slow_header_clients_are_disconnected_and_the_server_keeps_answering() {
    let server = Server::start(limits(Duration::from_millis(500), 64)).await;
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(s);
    }
    for s in &mut slow {
        assert!(
            closed_within(s, WAIT).await,
            "a client that never finished its headers was left open"
        );
    }
    let answer = exchange(
        server.addr,
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_too() {
    let server = Server::start(limits(Duration::from_millis(500), 8)).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        closed_within(&mut s, WAIT).await,
        "the idle connection stayed open"
    );
    server.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_for_a_free_slot() {
    let server = Server::start(limits(Duration::from_secs(30), 2)).await;
    let mut holders = Vec::new();
    for _ in 0..2 {
        holders.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let addr = server.addr;
    let third = tokio::spawn(async move {
        exchange(
            addr,
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
    });
    // The two silent connections hold both slots: the third is not served while they stay.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !third.is_finished(),
        "a third connection was served beyond the limit"
    );
    drop(holders.pop());
    let answer = tokio::time::timeout(WAIT, third).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn bodies_over_the_cap_get_413_with_or_without_a_length() {
    let server = Server::start(limits(Duration::from_secs(5), 8)).await;
    let small = exchange(
        server.addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    assert!(
        small.starts_with("HTTP/1.1 200") && small.ends_with("\r\n5"),
        "{small}"
    );
    let announced = exchange(
        server.addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 4096\r\n\r\n",
    )
    .await;
    assert!(announced.starts_with("HTTP/1.1 413"), "{announced}");
    assert!(announced.contains("larger than 1024 bytes"), "{announced}");
    let mut chunked = b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..4 {
        chunked.extend_from_slice(b"400\r\n");
        chunked.extend_from_slice(&[b'a'; 0x400]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let streamed = exchange(server.addr, &chunked).await;
    assert!(streamed.starts_with("HTTP/1.1 413"), "{streamed}");
    server.stop().await;
}

/// A connection to `addr` from `from` (a loopback address other than 127.0.0.1 is another
/// host as far as the server can tell).
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(format!("{from}:0").parse().expect("an address"))
        .expect("binds a loopback source address");
    socket.connect(addr).await.expect("connects")
}

/// Sends `request` on `s` and reads the answer head (up to the blank line), or what came
/// before the server closed.
async fn answer_on(s: &mut TcpStream, request: &[u8]) -> String {
    s.write_all(request).await.expect("sends");
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    while !out.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(WAIT, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => panic!("no answer within {WAIT:?}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_body_that_never_arrives_gets_408_at_the_deadline_and_the_connection_closes() {
    let server = Server::start(ServerConfig {
        body_read_timeout: Duration::from_millis(600),
        ..limits(Duration::from_secs(30), 8)
    })
    .await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let head = answer_on(
        &mut s,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part",
    )
    .await;
    let took = started.elapsed();
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(5),
        "answered after {took:?}"
    );
    assert!(
        closed_within(&mut s, WAIT).await,
        "the connection stayed open after the body deadline"
    );
    // A body sent in time, in pieces, is read whole.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 10\r\n\r\nhello",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let head = answer_on(&mut s, b"world").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    server.stop().await;
}

#[tokio::test]
async fn one_peer_cannot_hold_more_than_its_share_of_the_connections() {
    let server = Server::start(ServerConfig {
        max_connections_per_peer: 4,
        ..limits(Duration::from_secs(30), 64)
    })
    .await;
    // Another host holds its four connections open without a request.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from("127.0.0.2", server.addr).await);
    }
    let request = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // Its fifth is refused at once, whether it says anything or not.
    let mut fifth = connect_from("127.0.0.2", server.addr).await;
    let started = Instant::now();
    let refused = answer_on(&mut fifth, request).await;
    assert!(
        !refused.contains(" 200 "),
        "the fifth connection of one peer was served: {refused}"
    );
    assert!(
        refused.is_empty() || refused.starts_with("HTTP/1.1 503"),
        "{refused}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // Another host is served meanwhile.
    let other = exchange(server.addr, request).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    // Once one of the four closes, the host may open another.
    drop(held.pop());
    let deadline = Instant::now() + WAIT;
    loop {
        let mut again = connect_from("127.0.0.2", server.addr).await;
        let answer = answer_on(&mut again, request).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "no slot came free: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}
