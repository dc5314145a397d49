//! Load harness (issue 17): N concurrent threads (workstreams) driven through the real turn
//! pipeline in one process — a real [`Agent`] on a real store (a SQLite file in a temporary
//! directory, or a fresh PostgreSQL schema), the channel layer's lanes ([`TurnQueue`]) and turn
//! runner ([`thread::run`], which starts the stream renderer and the card approver) over an
//! in-memory thread that only counts what it is shown, and an in-process model that waits a
//! configurable latency per call, asks for one tool call per turn, then answers.
//!
//! The harness costs little itself: no network, no fake platform, no per-turn allocation
//! beyond the job it submits; latencies go into a fixed-size atomic histogram allocated
//! before the first RSS reading, so the memory figures are the node's.
//!
//! ```text
//! load [--threads N] [--turns M] [--latency-ms L] [--tool read_file|bash] [--db sqlite|postgres]
//!      [--rate TURNS_PER_MIN] [--workers W] [--connections C] [--cache K] [--idle-ms MS]
//!      [--max-turns T]
//! ```
//!
//! `--max-turns` sets `agent.max_concurrent_turns` (the turns that run at once across all
//! workstreams; the binary's default is 16). Without it the harness lets every thread's turn
//! run at once (the thread count, at least 16), to test that many in flight.
//!
//! Reports turns per second, the CPU the process used, p50/p90/p99 of the time a turn adds
//! (its wall time from submission to the thread showing its end, minus the model's latency
//! for its two calls, minus the tool's own time measured alone before the run), and VmRSS
//! before the first workstream, after the run with every workstream idle, and per live
//! workstream. PostgreSQL comes from `SANDPIPER_TEST_POSTGRES_URL` (a private schema, dropped
//! at the end).

// The counting allocator and `malloc_trim` below are the only unsafe code: they measure.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sandpiper_agent::model::{
    ChatModel, ChatRequest, ModelError, ModelEvent, ModelStream, Role, ScriptedModel,
};
use sandpiper_agent::{Agent, Config};
use sandpiper_channels::approver::CardSurface;
use sandpiper_channels::card::ApprovalCard;
use sandpiper_channels::stream::{Post, Surface, SurfaceError, ToolState};
use sandpiper_channels::tasks::Tasks;
use sandpiper_channels::thread::{self, TurnPlace, Work};
use sandpiper_channels::turns::TurnQueue;
use sandpiper_tests::db::{Backend, TestDb};
use tokio_util::sync::CancellationToken;

/// The binary's allocator (jemalloc, as `bot/src/main.rs` installs it), counting the bytes Rust
/// code holds (as requested; the allocator's own overhead and SQLite's page cache, which
/// SQLite allocates itself with glibc's malloc, are not in it). So the report can tell what
/// the workstreams hold from what the allocator keeps.
struct Counting;

/// What `Counting` forwards to: the same allocator as the real binary's.
static INNER: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

static HEAP: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `INNER` unchanged; only a counter is updated besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `INNER`'s.
        let p = unsafe { INNER.alloc(layout) };
        if !p.is_null() {
            HEAP.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { INNER.alloc_zeroed(layout) };
        if !p.is_null() {
            HEAP.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { INNER.dealloc(ptr, layout) };
        HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { INNER.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HEAP.fetch_add(new_size, Ordering::Relaxed);
            HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

unsafe extern "C" {
    /// glibc: returns free memory at the top of every arena and free whole pages inside them
    /// to the kernel (what SQLite and other C code allocated; Rust's heap is jemalloc's).
    fn malloc_trim(pad: usize) -> i32;
    /// The bundled SQLite's own count of the memory it holds (page caches, statements).
    fn sqlite3_memory_used() -> i64;
}

/// Memory SQLite holds, in KiB (0 when it was never used).
fn sqlite_kib() -> u64 {
    // SAFETY: a read of SQLite's global counter; valid before and after initialisation.
    let bytes = unsafe { sqlite3_memory_used() };
    u64::try_from(bytes).unwrap_or(0) / 1024
}

/// What glibc keeps that nobody holds: VmRSS after [`malloc_trim`] shows it.
fn trim() {
    // SAFETY: malloc_trim only walks glibc's own arenas; any pad is valid.
    unsafe {
        malloc_trim(0);
    }
}

/// The tool the model asks for once per turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolKind {
    /// `read_file` of a small file: no process.
    ReadFile,
    /// `bash echo hi`: one process per turn.
    Bash,
}

#[derive(Debug)]
struct Options {
    threads: usize,
    turns: usize,
    latency: Duration,
    tool: ToolKind,
    backend: Backend,
    /// Turns per minute over all threads; `None` runs every thread as fast as it can.
    rate: Option<f64>,
    workers: Option<usize>,
    connections: u32,
    cache: Option<usize>,
    /// `agent.max_concurrent_turns`; `None` lets every thread's turn run at once.
    max_turns: Option<usize>,
    /// How long to wait, idle, after the run before reading RSS (renderers end, pools settle).
    idle: Duration,
}

fn options() -> anyhow::Result<Options> {
    let mut o = Options {
        threads: 100,
        turns: 10,
        latency: Duration::from_millis(500),
        tool: ToolKind::ReadFile,
        backend: Backend::Sqlite,
        rate: None,
        workers: None,
        connections: 8,
        cache: None,
        max_turns: None,
        idle: Duration::from_millis(1000),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--threads" => o.threads = value()?.parse()?,
            "--turns" => o.turns = value()?.parse()?,
            "--latency-ms" => o.latency = Duration::from_millis(value()?.parse()?),
            "--tool" => {
                o.tool = match value()?.as_str() {
                    "read_file" => ToolKind::ReadFile,
                    "bash" => ToolKind::Bash,
                    other => anyhow::bail!("--tool {other}: use read_file or bash"),
                }
            }
            "--db" => {
                o.backend = match value()?.as_str() {
                    "sqlite" => Backend::Sqlite,
                    "postgres" => Backend::Postgres,
                    other => anyhow::bail!("--db {other}: use sqlite or postgres"),
                }
            }
            "--rate" => o.rate = Some(value()?.parse()?),
            "--workers" => o.workers = Some(value()?.parse()?),
            "--connections" => o.connections = value()?.parse()?,
            "--cache" => o.cache = Some(value()?.parse()?),
            "--max-turns" => o.max_turns = Some(value()?.parse()?),
            "--idle-ms" => o.idle = Duration::from_millis(value()?.parse()?),
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    anyhow::ensure!(
        o.threads > 0 && o.turns > 0,
        "--threads and --turns must be positive"
    );
    Ok(o)
}

/// A model that waits `latency`, then asks for the tool when the last message is the user's
/// and answers when it is the tool's result. Stateless, so any number of threads share it.
struct LoadModel {
    latency: Duration,
    name: &'static str,
    arguments: String,
    calls: AtomicU64,
}

#[async_trait::async_trait]
impl ChatModel for LoadModel {
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ModelStream, ModelError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let mut events = match request.messages.last().map(|m| m.role) {
            Some(Role::User) => {
                ScriptedModel::tool_call(&format!("call_{n}"), self.name, &self.arguments)
            }
            _ => ScriptedModel::text("done: it said hi"),
        };
        events.push(ModelEvent::Done {
            finish_reason: None,
        });
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }

    fn model_name(&self) -> &str {
        "load"
    }
}

/// A platform thread that shows nothing and counts what it was asked to show.
#[derive(Default)]
struct CountingThread {
    posts: AtomicU64,
    edits: AtomicU64,
    /// Tool lines shown as failed (a run whose tool did not work measures nothing).
    failed_tools: AtomicU64,
    /// Errors shown instead of an answer.
    errors: AtomicU64,
}

impl CountingThread {
    fn count(&self, post: &Post) {
        match post {
            Post::Tool(line) if line.state == ToolState::Failed => {
                self.failed_tools.fetch_add(1, Ordering::Relaxed);
            }
            Post::Error(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

#[async_trait::async_trait]
impl Surface for CountingThread {
    fn limit(&self) -> usize {
        2000
    }

    async fn post(&self, post: &Post) -> Result<String, SurfaceError> {
        self.count(post);
        Ok(self.posts.fetch_add(1, Ordering::Relaxed).to_string())
    }

    async fn edit(&self, _id: &str, post: &Post) -> Result<(), SurfaceError> {
        self.count(post);
        self.edits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn upload(&self, _name: &str, _body: Vec<u8>, _c: &str) -> Result<(), SurfaceError> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl CardSurface for CountingThread {
    async fn post_card(&self, _card: &ApprovalCard) -> Result<String, SurfaceError> {
        Ok(self.posts.fetch_add(1, Ordering::Relaxed).to_string())
    }

    async fn replace_card(&self, _id: &str, _card: &ApprovalCard) -> Result<(), SurfaceError> {
        Ok(())
    }
}

/// Microsecond latencies in log-linear buckets (1 µs below 1 ms, then 1/512 relative), fixed
/// size and lock-free, so recording costs an atomic add and allocates nothing.
struct Histogram {
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_us: AtomicU64,
}

const LINEAR: u64 = 1024;
const SUB: u64 = 512;

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: (0..(LINEAR + 40 * SUB))
                .map(|_| AtomicU64::new(0))
                .collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    fn index(us: u64) -> usize {
        if us < LINEAR {
            return us as usize;
        }
        let exp = u64::from(63 - us.leading_zeros()); // >= 10
        let mantissa = (us >> (exp - 9)) & (SUB - 1);
        (LINEAR + (exp - 10) * SUB + mantissa) as usize
    }

    fn value(index: usize) -> u64 {
        let i = index as u64;
        if i < LINEAR {
            return i;
        }
        let exp = (i - LINEAR) / SUB + 10;
        let mantissa = (i - LINEAR) % SUB;
        (SUB + mantissa) << (exp - 9)
    }

    fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = Self::index(us).min(self.buckets.len() - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The `p` quantile in milliseconds.
    fn quantile_ms(&self, p: f64) -> f64 {
        let total = self.count.load(Ordering::Relaxed);
        let rank = ((total as f64 * p).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= rank {
                return Self::value(i) as f64 / 1000.0;
            }
        }
        0.0
    }

    fn mean_ms(&self) -> f64 {
        let n = self.count.load(Ordering::Relaxed).max(1);
        self.sum_us.load(Ordering::Relaxed) as f64 / n as f64 / 1000.0
    }
}

/// What every driver shares.
struct Shared {
    agent: Agent,
    queue: TurnQueue,
    tasks: Tasks,
    thread: Arc<CountingThread>,
    wall: Histogram,
    added: Histogram,
    failed: AtomicU64,
    /// Time not spent in sandpiper: two model calls and the tool alone.
    outside: Duration,
}

/// Sends one message to workstream `key` through its lane and waits until the thread shows
/// the end of the turn; records its wall time and the time sandpiper added to it.
async fn one_turn(shared: &Arc<Shared>, key: &str, author: &str, text: String) {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let place = TurnPlace {
        agent: shared.agent.clone(),
        workstream: key.to_owned(),
        interval: Duration::from_millis(1500),
        tasks: shared.tasks.clone(),
    };
    let surface = shared.thread.clone();
    let work = Work::message(author, text);
    let started = Instant::now();
    let submitted = shared.queue.submit(
        key,
        Box::new(move |start| {
            Box::pin(async move {
                let ok = thread::run(&place, surface, work, start).await;
                let _ = done_tx.send(ok);
            })
        }),
    );
    let ok = submitted.is_ok() && done_rx.await.unwrap_or(false);
    let wall = started.elapsed();
    if !ok {
        shared.failed.fetch_add(1, Ordering::Relaxed);
    }
    shared.wall.record(wall);
    shared.added.record(wall.saturating_sub(shared.outside));
}

/// One thread's conversation: `turns` messages, each sent when the previous one is answered
/// (or, paced, at its scheduled time).
async fn drive(shared: Arc<Shared>, index: usize, o: Arc<Options>, began: tokio::time::Instant) {
    let key = format!("load:{index}");
    let author = format!("u{index}");
    // Paced: thread i's k-th turn is due at (i + k·N) · 60/R seconds.
    let spacing = o.rate.map(|r| Duration::from_secs_f64(60.0 / r));
    for k in 0..o.turns {
        if let Some(spacing) = spacing {
            let slot = u32::try_from(index + k * o.threads).unwrap_or(u32::MAX);
            tokio::time::sleep_until(began + spacing * slot).await;
        }
        one_turn(&shared, &key, &author, format!("turn {k}: say hi")).await;
    }
}

/// The tool's own time, measured alone (median of 21) before the run: subtracted from each
/// turn's wall time so that "added" is what sandpiper costs around it.
async fn tool_alone(tool: ToolKind, file: &std::path::Path) -> anyhow::Result<Duration> {
    let mut samples = Vec::new();
    for _ in 0..21 {
        let start = Instant::now();
        match tool {
            ToolKind::ReadFile => {
                tokio::fs::read(file).await?;
            }
            ToolKind::Bash => {
                tokio::process::Command::new("bash")
                    .args(["-c", "echo hi"])
                    .output()
                    .await?;
            }
        }
        samples.push(start.elapsed());
    }
    samples.sort();
    Ok(samples[samples.len() / 2])
}

/// A number of `/proc/self/status`: `VmRSS`, `RssAnon`, ... in KiB, or `Threads`.
fn proc_status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(str::to_owned))
        })
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time this process used (user + system), from `/proc/self/stat` (clock ticks of 10 ms).
fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.to_owned();
            let fields: Vec<&str> = after.split_whitespace().collect();
            let user: u64 = fields.get(11)?.parse().ok()?;
            let system: u64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn main() -> anyhow::Result<()> {
    let o = Arc::new(options()?);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(w) = o.workers {
        runtime.worker_threads(w);
    }
    runtime.enable_all().build()?.block_on(run(o))
}

async fn run(o: Arc<Options>) -> anyhow::Result<()> {
    let db = TestDb::new(o.backend)
        .await
        .context("PostgreSQL is not reachable (SANDPIPER_TEST_POSTGRES_URL)")?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("small.txt");
    std::fs::write(&file, "hi\n")?;
    let store = sandpiper_agent::store::Store::connect(&db.url, o.connections).await?;

    let (name, arguments) = match o.tool {
        ToolKind::ReadFile => (
            "read_file",
            serde_json::json!({ "path": file.display().to_string() }).to_string(),
        ),
        ToolKind::Bash => ("bash", r#"{"command":"echo hi"}"#.to_owned()),
    };
    let model = Arc::new(LoadModel {
        latency: o.latency,
        name,
        arguments,
        calls: AtomicU64::new(0),
    });
    let mut config = Config::for_test();
    config.database.url = db.url.clone();
    config.tools.workdir = Some(dir.path().join("work"));
    config.approval.auto_approve = true;
    config.agent.max_concurrent_turns = o.max_turns.unwrap_or(o.threads.max(16));
    if let Some(cache) = o.cache {
        config.agent.workstream_cache = cache;
    }
    let agent = Agent::new(config, model.clone(), store)?;
    let tasks = Tasks::new(CancellationToken::new());
    let tool_time = tool_alone(o.tool, &file).await?;
    let shared = Arc::new(Shared {
        queue: TurnQueue::new(tasks.clone()),
        tasks: tasks.clone(),
        agent,
        thread: Arc::new(CountingThread::default()),
        wall: Histogram::new(),
        added: Histogram::new(),
        failed: AtomicU64::new(0),
        outside: o.latency * 2 + tool_time,
    });

    // Warm up (lazy statics, prepared statements, the runtime's threads) in a workstream that
    // is then dropped, so "before" holds the node and no workstream.
    one_turn(&shared, "load:warmup", "warmup", "warm up".into()).await;
    shared.agent.forget("load:warmup");
    tokio::time::sleep(o.idle).await;
    let rss_before = proc_status("VmRSS");
    let heap_before = HEAP.load(Ordering::Relaxed);
    let sqlite_before = sqlite_kib();
    for h in [&shared.wall, &shared.added] {
        h.count.store(0, Ordering::Relaxed);
        h.sum_us.store(0, Ordering::Relaxed);
        for b in &h.buckets {
            b.store(0, Ordering::Relaxed);
        }
    }

    let cpu_before = cpu_time();
    let began = tokio::time::Instant::now();
    let drivers: Vec<_> = (0..o.threads)
        .map(|i| tokio::spawn(drive(shared.clone(), i, o.clone(), began)))
        .collect();
    for d in drivers {
        d.await?;
    }
    let elapsed = began.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu_before).as_secs_f64();
    let turns = shared.wall.count.load(Ordering::Relaxed);

    // Idle: every lane ended, every renderer too.
    tokio::time::sleep(o.idle).await;
    let rss_after = proc_status("VmRSS");
    let heap_after = HEAP.load(Ordering::Relaxed);
    trim();
    let rss_trimmed = proc_status("VmRSS");
    let live = shared.agent.live_workstreams();
    let per_kib = |bytes: usize| bytes as f64 / 1024.0 / live.max(1) as f64;
    println!(
        "load: {} threads x {} turns, tool {:?}, model latency {} ms, {}, {} on {}, {} connections, \
         {} turns at once",
        o.threads,
        o.turns,
        o.tool,
        o.latency.as_millis(),
        match o.rate {
            Some(r) => format!("paced at {r} turns/min"),
            None => "closed loop".into(),
        },
        match o.workers {
            Some(w) => format!("{w} runtime workers"),
            None => "default runtime workers".into(),
        },
        match o.backend {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        },
        o.connections,
        o.max_turns.unwrap_or(o.threads.max(16)),
    );
    println!(
        "  throughput: {turns} turns in {elapsed:.2} s = {:.0} turns/s; {} failed; CPU {cpu:.1} s \
         = {:.2} cores, {:.2} ms per turn",
        turns as f64 / elapsed,
        shared.failed.load(Ordering::Relaxed),
        cpu / elapsed,
        cpu * 1000.0 / turns.max(1) as f64,
    );
    println!(
        "  added latency (wall - {} ms model - {:.3} ms tool alone): p50 {:.2} ms, p90 {:.2} ms, \
         p99 {:.2} ms, max {:.2} ms, mean {:.2} ms; wall p50 {:.2} ms, p99 {:.2} ms",
        (o.latency * 2).as_millis(),
        tool_time.as_secs_f64() * 1000.0,
        shared.added.quantile_ms(0.50),
        shared.added.quantile_ms(0.90),
        shared.added.quantile_ms(0.99),
        shared.added.quantile_ms(1.0),
        shared.added.mean_ms(),
        shared.wall.quantile_ms(0.50),
        shared.wall.quantile_ms(0.99),
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    let grown = |after: u64| usize::try_from(after.saturating_sub(rss_before) * 1024).unwrap_or(0);
    println!(
        "  memory: {live} live workstreams; VmRSS before {:.1} MiB, after {:.1} MiB = {:.1} KiB \
         per live workstream; after malloc_trim {:.1} MiB = {:.1} KiB per workstream; Rust heap \
         held {:.1} -> {:.1} MiB = {:.1} KiB per workstream",
        mib(rss_before),
        mib(rss_after),
        per_kib(grown(rss_after)),
        mib(rss_trimmed),
        per_kib(grown(rss_trimmed)),
        heap_before as f64 / 1048576.0,
        heap_after as f64 / 1048576.0,
        per_kib(heap_after.saturating_sub(heap_before)),
    );
    println!(
        "  VmRSS now: RssAnon {:.1} MiB, RssFile {:.1} MiB, RssShmem {:.1} MiB; SQLite holds \
         {:.1} MiB (before: {:.1}); {} OS threads",
        mib(proc_status("RssAnon")),
        mib(proc_status("RssFile")),
        mib(proc_status("RssShmem")),
        mib(sqlite_kib()),
        mib(sqlite_before),
        proc_status("Threads"),
    );
    let thread = &shared.thread;
    println!(
        "  thread saw {} posts and {} edits, {} failed tool lines, {} errors; model calls {}",
        thread.posts.load(Ordering::Relaxed),
        thread.edits.load(Ordering::Relaxed),
        thread.failed_tools.load(Ordering::Relaxed),
        thread.errors.load(Ordering::Relaxed),
        model.calls.load(Ordering::Relaxed),
    );
    tasks.shutdown().cancel();
    drop(shared);
    drop(db);
    Ok(())
}
