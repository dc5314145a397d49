//! Per-turn cost of the real binary (issue 17): `sandpiper chat --yes` driven as a user runs
//! it, with lines piped to its stdin, against an OpenAI-compatible model on loopback that
//! answers at once. Every turn is "the model asks for a tool call, it runs, the model
//! answers", so a turn is two model calls, one tool call and four committed messages.
//!
//! `turn_cost [--turns N] [--tool bash|read_file] [--bin PATH]`; prints one report. The
//! binary defaults to `target/release/sandpiper` (build it first with
//! `cargo build --release -p sandpiper`).
//!
//! - The model is a plain HTTP/1.1 server on threads in this process (keep-alive, one
//!   pre-rendered SSE body per reply), costing a few microseconds a call; it times each
//!   request from its first byte to the last byte of the answer written ("model time").
//!   Which reply to send is read from the request itself: the last message a tool result →
//!   the final answer, else the tool call.
//! - A turn starts when its line is written to sandpiper's stdin and ends when the final
//!   answer's line shows on its stdout (the console prints the answer, then ends the turn's
//!   line when the turn completes), so whatever sandpiper does between two answers is counted.
//!   Lines are written one at a time, each after the previous answer.
//! - sandpiper's CPU is `utime + stime` of `/proc/<pid>/stat` over the measured turns. The
//!   tool's processes are not in it: they are counted apart ([`sandpiper_tests::proc_stat`]:
//!   sandpiper's reaped children, and the standing spawner with what it reaped).
//! - The tool's own process is measured apart: spawning `bash -c 'echo hi'` and waiting for
//!   it, N times, from this process.
//! - "Outside the model and the tool" = wall per turn − model time per turn − tool process
//!   time. A warm-up turn (connection set-up, first directory creation) is not measured.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sandpiper_tests::proc_stat::TICKS_PER_SECOND;

/// The final answer's text: its line on stdout ends a turn.
const ANSWER: &str = "turn-finished";

/// The small file the `read_file` variant reads.
const SMALL_FILE: &str = "small.txt";

/// What the model asks for in each turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// `bash` `echo hi`: a process per call.
    Bash,
    /// `read_file` of a small file: no process.
    ReadFile,
}

impl Tool {
    fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "bash" => Ok(Self::Bash),
            "read_file" => Ok(Self::ReadFile),
            other => anyhow::bail!("--tool bash|read_file, not {other}"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Bash => "bash",
            Self::ReadFile => "read_file",
        }
    }

    /// The call's arguments as the JSON text the model sends.
    fn arguments(self) -> String {
        let args = match self {
            Self::Bash => serde_json::json!({ "command": "echo hi" }),
            Self::ReadFile => serde_json::json!({ "path": SMALL_FILE }),
        };
        args.to_string()
    }
}

struct Options {
    turns: usize,
    tool: Tool,
    bin: PathBuf,
}

fn options() -> anyhow::Result<Options> {
    let mut o = Options {
        turns: 200,
        tool: Tool::Bash,
        bin: Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/sandpiper"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--turns" => o.turns = args.next().context("--turns N")?.parse()?,
            "--tool" => o.tool = Tool::parse(&args.next().context("--tool bash|read_file")?)?,
            "--bin" => o.bin = args.next().context("--bin PATH")?.into(),
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    anyhow::ensure!(o.turns >= 1, "--turns must be at least 1");
    Ok(o)
}

/// Time the model spent answering, summed over requests.
#[derive(Default)]
struct ModelClock {
    requests: AtomicU64,
    nanos: AtomicU64,
    /// Requests that were not understood (no body, no messages).
    bad: AtomicU64,
}

impl ModelClock {
    fn nanos(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }
}

/// The fake model: an OpenAI-compatible `POST /v1/chat/completions` on 127.0.0.1.
struct FakeModel {
    base_url: String,
    clock: Arc<ModelClock>,
}

impl FakeModel {
    fn start(tool: Tool) -> anyhow::Result<Self> {
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

/// Answers the requests of one keep-alive connection until the client closes it.
fn serve(stream: TcpStream, tool: Tool, clock: &ModelClock) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let call = serde_json::to_string(&tool.arguments())?;
    let mut head = String::new();
    let mut body = Vec::new();
    loop {
        head.clear();
        // Blocks until the next request; its clock starts with its first line.
        if reader.read_line(&mut head)? == 0 {
            return Ok(());
        }
        let started = Instant::now();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
        let n = clock.requests.fetch_add(1, Ordering::Relaxed);
        let sse = match last_role(&body) {
            Some(b"tool") => answer_sse(),
            Some(_) => tool_call_sse(tool, &call, n),
            None => {
                clock.bad.fetch_add(1, Ordering::Relaxed);
                answer_sse()
            }
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
             content-length: {}\r\n\r\n{sse}",
            sse.len()
        );
        writer.write_all(response.as_bytes())?;
        clock
            .nanos
            .fetch_add(nanos(started.elapsed()), Ordering::Relaxed);
    }
}

/// The role of the request's last message. JSON strings escape their quotes, so the raw
/// `],"tools":[` can only be the end of the messages array, and `{"role":"` only a message's
/// start (tools follow the messages; without tools the body's end is searched).
fn last_role(body: &[u8]) -> Option<&[u8]> {
    let end = find(body, b"],\"tools\":[").unwrap_or(body.len());
    let key = b"{\"role\":\"";
    let start = body[..end].windows(key.len()).rposition(|w| w == key)? + key.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    Some(&body[start..start + len])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One `chat.completion.chunk` event.
fn chunk(choices: &str, usage: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":0,\
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

/// A reply asking for the tool (`call` is the arguments as a JSON string literal).
fn tool_call_sse(tool: Tool, call: &str, n: u64) -> String {
    let delta = format!(
        "[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{{\
         \"index\":0,\"id\":\"call_{n}\",\"type\":\"function\",\"function\":{{\"name\":\"{}\",\
         \"arguments\":{call}}}}}]}},\"finish_reason\":null}}]",
        tool.name()
    );
    format!("{}{}", chunk(&delta, "null"), ending("tool_calls"))
}

/// The final answer.
fn answer_sse() -> String {
    let delta = format!(
        "[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"{ANSWER}\"}},\
         \"finish_reason\":null}}]"
    );
    format!("{}{}", chunk(&delta, "null"), ending("stop"))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// sandpiper's CPU time so far, own and of its tool processes, in clock ticks.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    own: u64,
    children: u64,
}

fn cpu(pid: u32) -> anyhow::Result<Cpu> {
    let [utime, stime, _, _] = sandpiper_tests::proc_stat::times(pid)?;
    Ok(Cpu {
        own: utime + stime,
        children: sandpiper_tests::proc_stat::tools(pid)?,
    })
}

/// The running `sandpiper chat`.
struct Chat {
    child: Child,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Chat {
    fn start(bin: &Path, dir: &Path, model: &FakeModel) -> anyhow::Result<Self> {
        let config = dir.join("sandpiper.toml");
        // The window is stated: the fake answers chat completions only, not the discovery
        // requests (`/props`, `/models`) sandpiper makes when it has to find the window out.
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = \"sqlite://{db}\"\n\n[model]\nprovider = \"openai\"\n\
                 base_url = \"{url}\"\nmodel = \"fake\"\nmax_retries = 0\n\
                 context_window = 1048576\n\n[tools]\n\
                 workdir = \"{work}\"\nworkdir_mode = \"shared\"\n",
                db = dir.join("sandpiper.db").display(),
                url = model.base_url,
                work = dir.display(),
            ),
        )?;
        let mut child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .args(["chat", "--yes", "--workstream", "bench"])
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("USER", "bench")
            .env("OPENAI_API_KEY", "sk-bench")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("stderr.log"))?)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Self {
            child,
            stdout,
            line: String::new(),
        })
    }

    /// Sends one message and waits for its answer's line; returns the wall time.
    fn turn(&mut self, text: &str) -> anyhow::Result<Duration> {
        let stdin = self.child.stdin.as_mut().context("stdin closed")?;
        let started = Instant::now();
        stdin.write_all(format!("{text}\n").as_bytes())?;
        stdin.flush()?;
        loop {
            self.line.clear();
            if self.stdout.read_line(&mut self.line)? == 0 {
                anyhow::bail!("sandpiper closed its output before answering");
            }
            if self.line.trim_end() == ANSWER {
                return Ok(started.elapsed());
            }
        }
    }

    /// Ends input and waits for the process to exit.
    fn finish(mut self) -> anyhow::Result<()> {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest)?;
        let status = self.child.wait()?;
        anyhow::ensure!(status.success(), "sandpiper exited with {status}");
        Ok(())
    }
}

/// Wall time of starting `bash -c 'echo hi'` and waiting for it, `n` times.
fn bash_spawns(n: usize) -> anyhow::Result<Vec<Duration>> {
    (0..n)
        .map(|_| {
            let started = Instant::now();
            let out = Command::new("bash")
                .args(["-c", "echo hi"])
                .stdin(Stdio::null())
                .output()?;
            anyhow::ensure!(out.status.success(), "bash failed");
            Ok(started.elapsed())
        })
        .collect()
}

/// Mean, p50 and p99 of `samples`, in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Summary {
    mean: f64,
    p50: f64,
    p99: f64,
}

fn summary(samples: &[Duration]) -> Summary {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((ms.len() as f64 - 1.0) * q).round() as usize;
        ms.get(i).copied().unwrap_or(f64::NAN)
    };
    Summary {
        mean: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
        p50: at(0.5),
        p99: at(0.99),
    }
}

fn main() -> anyhow::Result<()> {
    let o = options()?;
    anyhow::ensure!(
        o.bin.exists(),
        "{} not found: build it with `cargo build --release -p sandpiper` or pass --bin",
        o.bin.display()
    );
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join(SMALL_FILE), "a small file\n")?;
    let model = FakeModel::start(o.tool)?;
    let mut chat = Chat::start(&o.bin, dir.path(), &model)?;
    let pid = chat.child.id();
    let outcome = (|| {
        chat.turn("warm-up")?;
        let cpu_before = cpu(pid)?;
        let model_before = model.clock.nanos();
        let mut walls = Vec::with_capacity(o.turns);
        let mut model_time = Vec::with_capacity(o.turns);
        for i in 0..o.turns {
            let before = model.clock.nanos();
            walls.push(chat.turn(&format!("turn {i}: run the tool"))?);
            model_time.push(Duration::from_nanos(model.clock.nanos() - before));
        }
        let cpu_after = cpu(pid)?;
        let model_total = Duration::from_nanos(model.clock.nanos() - model_before);
        anyhow::Ok((walls, model_time, model_total, cpu_before, cpu_after))
    })();
    let (walls, model_time, model_total, cpu_before, cpu_after) = match outcome {
        Ok(r) => r,
        Err(e) => {
            let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
            let _ = chat.child.kill();
            anyhow::bail!("{e:#}\nsandpiper's stderr:\n{log}");
        }
    };
    chat.finish()?;
    let bad = model.clock.bad.load(Ordering::Relaxed);
    anyhow::ensure!(bad == 0, "{bad} model requests were not understood");
    let requests = model.clock.requests.load(Ordering::Relaxed);
    anyhow::ensure!(
        requests == 2 * (o.turns as u64 + 1),
        "{requests} model requests for {} turns (expected 2 per turn)",
        o.turns + 1
    );

    let n = o.turns as f64;
    let wall = summary(&walls);
    let model_per_turn = model_total.as_secs_f64() * 1e3 / n;
    let model_p50 = summary(&model_time).p50;
    let head = summary(&walls[..walls.len().min(20)]);
    let tail = summary(&walls[walls.len().saturating_sub(20)..]);
    let tool = match o.tool {
        Tool::Bash => summary(&bash_spawns(o.turns)?),
        Tool::ReadFile => Summary {
            mean: 0.0,
            p50: 0.0,
            p99: 0.0,
        },
    };
    let ticks_ms = |t: u64| t as f64 * 1e3 / TICKS_PER_SECOND / n;
    let own_cpu = ticks_ms(cpu_after.own - cpu_before.own);
    let child_cpu = ticks_ms(cpu_after.children.saturating_sub(cpu_before.children));

    println!(
        "turn_cost: {} turns of `{}` (2 model calls each), {}",
        o.turns,
        o.tool.name(),
        o.bin.display()
    );
    println!(
        "  wall per turn          mean {:.3} ms  p50 {:.3}  p99 {:.3}",
        wall.mean, wall.p50, wall.p99
    );
    println!(
        "  first 20 / last 20     mean {:.3} / {:.3} ms  p50 {:.3} / {:.3}",
        head.mean, tail.mean, head.p50, tail.p50
    );
    println!("  model time per turn    mean {model_per_turn:.3} ms  p50 {model_p50:.3}");
    if o.tool == Tool::Bash {
        println!(
            "  bash -c 'echo hi'      mean {:.3} ms  p50 {:.3}  p99 {:.3} (spawned from here)",
            tool.mean, tool.p50, tool.p99
        );
    }
    println!(
        "  outside model and tool mean {:.3} ms  p50 {:.3}",
        wall.mean - model_per_turn - tool.mean,
        wall.p50 - model_p50 - tool.p50
    );
    println!(
        "  sandpiper CPU per turn {own_cpu:.3} ms (tool processes: {child_cpu:.3} ms; 10 ms ticks)"
    );
    Ok(())
}
