//! The instant model: an OpenAI-compatible `POST /v1/chat/completions` on 127.0.0.1, a plain
//! HTTP/1.1 server on threads (one per keep-alive connection, as in `turn_cost`), answering
//! with pre-rendered SSE. Which reply it sends is read from the request itself: the last
//! message a tool result (or `--tool none`) → the final answer, else the tool call. The
//! answer names the turn's token (`tok-W-T`, the newest one in the request), so the harness
//! knows which turn an answer shown in the fake ends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What every final answer starts with; the token follows.
pub(crate) const ANSWER_PREFIX: &str = "done ";
/// What every turn's message starts with: `tok-{workstream}-{turn}`.
pub(crate) const TOKEN_PREFIX: &str = "tok-";

/// What the model asks for in each turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tool {
    /// `bash` `echo hi`: a process per turn, two model calls.
    Bash,
    /// No tool call: one model call.
    None,
}

impl Tool {
    pub(crate) fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "bash" => Ok(Self::Bash),
            "none" => Ok(Self::None),
            other => anyhow::bail!("--tool bash|none, not {other}"),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Bash => "bash",
            Self::None => "none",
        }
    }
}

/// What the model did, summed over requests.
#[derive(Default)]
pub(crate) struct ModelClock {
    pub(crate) requests: AtomicU64,
    /// Wall time from a request's first byte to its answer written.
    pub(crate) nanos: AtomicU64,
    /// CPU time the server's threads spent on requests (not waiting for them).
    pub(crate) cpu_nanos: AtomicU64,
    /// Requests that were not understood (no token in them).
    pub(crate) bad: AtomicU64,
}

/// The running fake model.
pub(crate) struct FakeModel {
    pub(crate) base_url: String,
    pub(crate) clock: Arc<ModelClock>,
}

impl FakeModel {
    pub(crate) fn start(tool: Tool) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let clock = Arc::new(ModelClock::default());
        let shared = clock.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let clock = shared.clone();
                std::thread::spawn(move || {
                    if let Err(e) = serve(stream, tool, &clock) {
                        eprintln!("fake model: connection ended: {e}");
                    }
                });
            }
        });
        Ok(Self { base_url, clock })
    }
}

/// CPU time of the calling thread.
#[allow(unsafe_code)]
pub(crate) fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Answers the requests of one keep-alive connection until the client closes it.
fn serve(stream: TcpStream, tool: Tool, clock: &ModelClock) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let mut head = String::new();
    let mut line = String::new();
    let mut body = Vec::new();
    let mut response = Vec::with_capacity(4096);
    let mut n = 0u64;
    loop {
        head.clear();
        // Blocks until the next request; its clocks start with its first line.
        if reader.read_line(&mut head)? == 0 {
            return Ok(());
        }
        let started = Instant::now();
        let cpu = thread_cpu_nanos();
        let mut length = 0usize;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((name, value)) = l.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
        clock.requests.fetch_add(1, Ordering::Relaxed);
        n += 1;
        let messages = &body[..find(&body, b"],\"tools\":[").unwrap_or(body.len())];
        let token = newest_token(messages);
        if token.is_none() {
            clock.bad.fetch_add(1, Ordering::Relaxed);
        }
        let token = token.unwrap_or("tok-unknown");
        let sse = if tool == Tool::None || last_role(messages) == Some(b"tool") {
            answer_sse(token)
        } else {
            tool_call_sse(n)
        };
        response.clear();
        write!(
            response,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
             content-length: {}\r\n\r\n{sse}",
            sse.len()
        )?;
        writer.write_all(&response)?;
        clock
            .cpu_nanos
            .fetch_add(thread_cpu_nanos().saturating_sub(cpu), Ordering::Relaxed);
        clock.nanos.fetch_add(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

/// The role of the last message (see `turn_cost`: JSON strings escape their quotes, so the
/// raw `{"role":"` can only be a message's start).
fn last_role(messages: &[u8]) -> Option<&[u8]> {
    let key = b"{\"role\":\"";
    let start = messages.windows(key.len()).rposition(|w| w == key)? + key.len();
    let len = messages[start..].iter().position(|&b| b == b'"')?;
    Some(&messages[start..start + len])
}

/// The newest `tok-W-T` in the messages: the user message of the turn being answered
/// (earlier answers name earlier tokens, and come before it).
fn newest_token(messages: &[u8]) -> Option<&str> {
    let key = TOKEN_PREFIX.as_bytes();
    let start = messages.windows(key.len()).rposition(|w| w == key)?;
    let len = messages[start..]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-'))
        .unwrap_or(messages.len() - start);
    std::str::from_utf8(&messages[start..start + len]).ok()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One `chat.completion.chunk` event.
fn chunk(choices: &str, usage: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-load\",\"object\":\"chat.completion.chunk\",\"created\":0,\
         \"model\":\"fake\",\"choices\":{choices},\"usage\":{usage}}}\n\n"
    )
}

/// The end of a reply: the finish reason, usage, `[DONE]`.
fn ending(finish: &str) -> String {
    format!(
        "{}{}data: [DONE]\n\n",
        chunk(
            &format!("[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{finish}\"}}]"),
            "null"
        ),
        chunk(
            "[]",
            "{\"prompt_tokens\":100,\"completion_tokens\":10,\"total_tokens\":110}"
        )
    )
}

/// A reply asking for `bash` `echo hi`.
fn tool_call_sse(n: u64) -> String {
    let delta = format!(
        "[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{{\
         \"index\":0,\"id\":\"call_{n}\",\"type\":\"function\",\"function\":{{\"name\":\"bash\",\
         \"arguments\":\"{{\\\"command\\\":\\\"echo hi\\\"}}\"}}}}]}},\"finish_reason\":null}}]"
    );
    format!("{}{}", chunk(&delta, "null"), ending("tool_calls"))
}

/// The final answer, naming the turn's token.
fn answer_sse(token: &str) -> String {
    let delta = format!(
        "[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"{ANSWER_PREFIX}{token}\"}},\
         \"finish_reason\":null}}]"
    );
    format!("{}{}", chunk(&delta, "null"), ending("stop"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_token_and_the_last_role_are_read_from_the_messages() {
        let body = br#"{"messages":[{"role":"user","content":"tok-1-0"},{"role":"assistant","content":"done tok-1-0"},{"role":"user","content":"tok-1-1 go"},{"role":"tool","content":"hi"}],"tools":[{"x":"tok-9-9"}]}"#;
        let messages = &body[..find(body, b"],\"tools\":[").unwrap()];
        assert_eq!(newest_token(messages), Some("tok-1-1"));
        assert_eq!(last_role(messages), Some(&b"tool"[..]));
    }
}
