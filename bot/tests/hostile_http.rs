//! The real `sandpiper serve` binary against requests crafted to forge its log lines and
//! to reach its operations endpoints (issue 24), configured the way an operator does it: the
//! environment.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use sandpiper_agent::service_jwt::{CHANNEL_AUDIENCE, ServiceKey};

const SECRET: &str = "log-forging-test-secret-0123456789abcdef";
const OPS_TOKEN: &str = "ops-token-from-the-environment-32-chars";
/// What an attacker wants to appear as a line of its own.
const FORGED: &str = "2026-01-01T00:00:00.000000Z  INFO sandpiper: admin access granted to mallory";

/// The same in a path, where spaces cannot go.
const PATH_FORGED: &str = "2026-01-01T00:00:00.000000Z\u{a0}INFO\u{a0}admin-access-granted";

/// `method path` with `headers` sent as raw bytes; the answer's first line.
fn raw(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("test setup");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("test setup");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}

/// `serve` with the service secret, the ops address and token in its environment, logging
/// at info; returns the child, the public and the ops address, and the lines read so far.
fn serve(dir: &std::path::Path) -> (Child, SocketAddr, SocketAddr, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandpiper"))
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("SANDPIPER_LOG", "info")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("SANDPIPER_OPS_LISTEN", "127.0.0.1:0")
        .env("SANDPIPER_OPS_TOKEN", OPS_TOKEN)
        .env("SANDPIPER_JWT_SECRET", SECRET)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandpiper serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let (mut public, mut ops) = (None, None);
    while public.is_none() || ops.is_none() {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("serve ended before listening: {seen:#?}"))
            .expect("reads stderr");
        let addr = |prefix: &str, suffix: &str| {
            let rest = line.split(prefix).nth(1)?;
            rest.split(suffix).next()?.parse::<SocketAddr>().ok()
        };
        public = public.or_else(|| addr("serving http://", "/health"));
        ops = ops.or_else(|| addr("serving http://", "/ready"));
        seen.push(line);
    }
    // The rest of stderr, gathered until the process exits.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    CHILD_LINES.with(|c| *c.borrow_mut() = Some(rest));
    (child, public.expect("public"), ops.expect("ops"), seen)
}

thread_local! {
    static CHILD_LINES: std::cell::RefCell<Option<std::thread::JoinHandle<Vec<String>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Sends SIGTERM and returns every line the process wrote to stderr after `serve` returned.
fn stop(child: Child) -> Vec<String> {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(term.success());
    let mut child = child;
    assert!(child.wait().expect("serve exits").success());
    CHILD_LINES
        .with(|c| c.borrow_mut().take())
        .expect("a reader")
        .join()
        .expect("the reader ends")
}

/// A token whose JWT header holds a newline and a fake log line in its `alg`.
fn forged_header_token() -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = serde_json::json!({"alg": format!("HS256\n{FORGED}"), "typ": "JWT"});
    let good = ServiceKey::new(SECRET)
        .expect("test setup")
        .sign(CHANNEL_AUDIENCE, "node", Duration::from_secs(60))
        .expect("test setup");
    let (_, rest) = good.split_once('.').expect("test setup");
    format!("{}.{rest}", b64.encode(header.to_string()))
}

#[test]
fn request_fields_cannot_forge_log_lines_and_ops_endpoints_live_apart() {
    let dir = tempfile::tempdir().expect("test setup");
    let (child, public, ops, mut seen) = serve(dir.path());
    // A JWT header with a newline, on notify.
    let forged = format!("Authorization: Bearer {}\r\n", forged_header_token());
    let body = r#"{"message": "hi", "username": "alice"}"#;
    let answer = raw(public, "POST", "/v1/api/notify", &forged, body);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // A path with a Unicode line separator and a bidi override, raw (a URL library would
    // percent-encode them), on the admin API.
    let path = format!("/v1/api/workstreams/x\u{2028}{PATH_FORGED}\u{202e}/connectors");
    let answer = raw(public, "GET", &path, "", "");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // The ops endpoints: on their own address only, and only with the token.
    let with_token = format!("Authorization: Bearer {OPS_TOKEN}\r\n");
    for p in ["/ready", "/metrics"] {
        for (addr, headers, expected) in [
            (public, with_token.as_str(), "HTTP/1.1 404"),
            (ops, "", "HTTP/1.1 401"),
            (ops, "Authorization: Bearer wrong\r\n", "HTTP/1.1 401"),
            (ops, with_token.as_str(), "HTTP/1.1 200"),
        ] {
            let answer = raw(addr, "GET", p, headers, "");
            assert!(answer.starts_with(expected), "{p} on {addr}: {answer}");
        }
    }
    let answer = raw(public, "GET", "/health", "", "");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    seen.extend(stop(child));
    let log = seen.join("\n");
    // The refusals were logged, each on one line, with the forged text spelled out in it.
    let refused: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("HTTP request refused"))
        .collect();
    assert_eq!(refused.len(), 2, "{log}");
    assert!(
        refused
            .iter()
            .any(|l| l.contains(&format!("HS256\\n{FORGED}"))),
        "{log}"
    );
    assert!(
        refused
            .iter()
            .any(|l| l.contains("x\\u{2028}2026-01-01T00:00:00.000000Z")),
        "{log}"
    );
    // No line starts with, or is split at, the forged text.
    for line in &seen {
        assert!(
            !line.starts_with(FORGED)
                && !line.starts_with(PATH_FORGED)
                && !line.contains('\u{2028}')
                && !line.contains('\u{202e}'),
            "a forged line: {line:?}\n{log}"
        );
    }
}
