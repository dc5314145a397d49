//! Speed through the real adapters (issue 27): the real `sandpiper serve` binary driven
//! through the real Slack (Socket Mode) or Discord (serenity gateway + REST) adapter, against
//! the fakes of this crate and an instant model, all in this process on 127.0.0.1.
//!
//! `load_through --through slack|discord [--threads N] [--turns M] [--rate TURNS_PER_S]
//! [--bin PATH] [--tool bash|none] [--idle SECS] [--db-connections N] [--places P] [--grow]`;
//! prints one report (`--db-connections`: the node's `[database] max_connections`; unset,
//! sandpiper's default; `--places`: its `max_concurrent_turns` and `max_turns_per_user`,
//! 4096 unless given). The binary defaults to `target/release/sandpiper` (`cargo build
//! --release -p sandpiper`).
//!
//! - N workstreams are opened first (Slack: a mention in N channels, each answer's thread is
//!   a workstream; Discord: N mentions in the text channel, each opens a thread). That turn
//!   is not measured.
//! - Then M turns in each: a message in the thread, then wait until the answer shows in the
//!   fake (a post or edit by the bot naming the turn's token, seen through the fake's
//!   `on_bot_text` hook). Closed loop (each thread sends its next message when its answer
//!   shows) unless `--rate R`: then a message every 1/R s, round robin over the threads,
//!   whatever is in flight (open loop), for the added latency at a paced rate.
//! - Measured over the M turns (from before the first message to 1 s after the last answer,
//!   so a turn's trailing edits are counted): serve's user and kernel CPU (`/proc/<pid>/stat`,
//!   10 ms ticks), its context switches summed over its threads (`/proc/<pid>/task/*/status`;
//!   threads that ended meanwhile are not counted), the tool's processes' CPU apart (reaped
//!   children), the Web API calls by method, and this process's own CPU (the fakes, the
//!   model and the driver) with the model's share measured by its threads' CPU clocks.
//! - Serve's RSS before the first workstream, after the run and after `--idle` seconds.
//! - Added latency = wall from sending a message to its answer shown − the mean model time
//!   of a turn (a few microseconds).
//! - `--grow`: then N more workstreams are opened and given M turns each the same way, and
//!   the RSS they added is reported per workstream, right after their turns and after
//!   `--idle`. The first N paid for everything a node sets up once (connections, caches,
//!   the allocator's arenas, the binary's pages) and for the turns in flight, so this is
//!   what one more live workstream costs.

mod model;
mod serve;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sandpiper_tests::fake_discord::{self, FakeDiscord, FakeUser};
use sandpiper_tests::fake_slack::{FakeSlack, SlackUser};
use tokio::sync::oneshot;

use model::{ANSWER_PREFIX, FakeModel, TOKEN_PREFIX, Tool};
use serve::{Fakes, Sample, Serve, TICKS_PER_SECOND, Through};

/// How long one turn may take before the run fails.
const TURN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long serve may take to connect to the fake platform.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Wait after the last answer before the sample, so trailing edits and reactions count.
const SETTLE: Duration = Duration::from_secs(1);

struct Options {
    through: Through,
    threads: usize,
    turns: usize,
    rate: Option<f64>,
    bin: PathBuf,
    tool: Tool,
    idle: Duration,
    /// `[database] max_connections` of the measured node (`None`: sandpiper's default).
    db_connections: Option<u32>,
    /// `max_concurrent_turns` and `max_turns_per_user` of the measured node.
    places: usize,
    /// Open a second wave of workstreams and report the RSS each added.
    grow: bool,
}

fn options() -> anyhow::Result<Options> {
    let mut through = None;
    let mut o = Options {
        through: Through::Slack,
        threads: 10,
        turns: 20,
        rate: None,
        bin: Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/sandpiper"),
        tool: Tool::Bash,
        idle: Duration::from_secs(10),
        db_connections: None,
        places: serve::PLACES,
        grow: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--through" => {
                through = Some(Through::parse(
                    &args.next().context("--through slack|discord")?,
                )?);
            }
            "--threads" => o.threads = args.next().context("--threads N")?.parse()?,
            "--turns" => o.turns = args.next().context("--turns M")?.parse()?,
            "--rate" => o.rate = Some(args.next().context("--rate TURNS_PER_S")?.parse()?),
            "--bin" => o.bin = args.next().context("--bin PATH")?.into(),
            "--tool" => o.tool = Tool::parse(&args.next().context("--tool bash|none")?)?,
            "--db-connections" => {
                o.db_connections = Some(args.next().context("--db-connections N")?.parse()?);
            }
            "--places" => o.places = args.next().context("--places P")?.parse()?,
            "--grow" => o.grow = true,
            "--idle" => {
                o.idle = Duration::from_secs_f64(args.next().context("--idle SECS")?.parse()?);
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    o.through = through.context("--through slack|discord is required")?;
    anyhow::ensure!(o.threads >= 1 && o.turns >= 1, "--threads and --turns ≥ 1");
    anyhow::ensure!(o.rate.is_none_or(|r| r > 0.0), "--rate must be positive");
    Ok(o)
}

/// An answer as the fake saw it: when, and in which Discord channel (its thread).
#[derive(Debug, Clone, Copy)]
struct Seen {
    at: Instant,
    channel: u64,
}

/// Turns waiting for their answer, by token; the fakes' hook completes them.
#[derive(Default)]
struct Waiting(Mutex<HashMap<String, oneshot::Sender<Seen>>>);

impl Waiting {
    fn register(&self, token: &str) -> oneshot::Receiver<Seen> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(token.to_owned(), tx);
        rx
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Seen>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called with every bot message as it stands: completes the turn its answer names.
    fn saw(&self, channel: u64, text: &str) {
        let Some(at) = text.find(ANSWER_PREFIX) else {
            return;
        };
        let rest = &text[at + ANSWER_PREFIX.len()..];
        if !rest.starts_with(TOKEN_PREFIX) {
            return;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        if let Some(tx) = self.lock().remove(&rest[..len]) {
            let _ = tx.send(Seen {
                at: Instant::now(),
                channel,
            });
        }
    }
}

/// The fake platform and the one person talking in every thread.
#[derive(Clone)]
enum Platform {
    Slack(FakeSlack, SlackUser),
    Discord(FakeDiscord, FakeUser),
}

/// Where a workstream's messages go.
#[derive(Debug, Clone)]
enum Thread {
    Slack { channel: String, root: String },
    Discord { thread: u64 },
}

fn token(workstream: usize, turn: usize) -> String {
    format!("{TOKEN_PREFIX}{workstream}-{turn}")
}

impl Platform {
    async fn start(through: Through, waiting: &Arc<Waiting>) -> Self {
        match through {
            Through::Slack => {
                let slack = FakeSlack::start().await;
                let w = waiting.clone();
                slack.on_bot_text(move |_, _, text| w.saw(0, text));
                let user = slack.user("U0LOAD", "loader");
                Self::Slack(slack, user)
            }
            Through::Discord => {
                let discord = FakeDiscord::start().await;
                let w = waiting.clone();
                discord.on_bot_text(move |channel, text| w.saw(channel, text));
                Self::Discord(discord, FakeUser::new(900_000_000_000_000_001, "loader"))
            }
        }
    }

    fn base_url(&self) -> String {
        match self {
            Self::Slack(s, _) => s.base_url(),
            Self::Discord(d, _) => d.base_url(),
        }
    }

    /// Waits until serve is connected and ready for messages.
    async fn wait_ready(&self, serve: &mut Serve) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            serve.check_alive()?;
            let ready = match self {
                Self::Slack(s, _) => s.open_connections() > 0,
                // READY is handled (the bot knows its id) once the commands are registered.
                Self::Discord(d, _) => d
                    .requests()
                    .iter()
                    .any(|r| r.method == "PUT" && r.path.ends_with("/commands")),
            };
            if ready {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "serve did not connect within {READY_TIMEOUT:?}:\n{}",
                serve.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens workstream `i` with its first turn; returns where its messages go.
    async fn open(&self, waiting: &Waiting, i: usize) -> anyhow::Result<Thread> {
        let token = token(i, 0);
        let seen = waiting.register(&token);
        let thread = match self {
            Self::Slack(slack, user) => {
                let channel = format!("C0LOAD{i:05}");
                let root = slack.app_mention(&channel, user, &token).await;
                Thread::Slack { channel, root }
            }
            Self::Discord(discord, user) => {
                let text = format!("{} {token}", discord.mention());
                discord
                    .user_message(fake_discord::CHANNEL_ID, user, &text)
                    .await;
                Thread::Discord { thread: 0 }
            }
        };
        let seen = wait(seen, &token).await?;
        Ok(match thread {
            Thread::Discord { .. } => Thread::Discord {
                thread: seen.channel,
            },
            slack => slack,
        })
    }

    /// Sends turn `turn` of workstream `i` and waits for its answer; returns the wall time.
    async fn turn(
        &self,
        waiting: &Waiting,
        thread: &Thread,
        i: usize,
        turn: usize,
    ) -> anyhow::Result<Duration> {
        let token = token(i, turn);
        let seen = waiting.register(&token);
        let sent = Instant::now();
        match (self, thread) {
            (Self::Slack(slack, user), Thread::Slack { channel, root }) => {
                slack.thread_message(channel, root, user, &token).await;
            }
            (Self::Discord(discord, user), Thread::Discord { thread }) => {
                discord.user_message(*thread, user, &token).await;
            }
            _ => anyhow::bail!("a thread of the other platform"),
        }
        let seen = wait(seen, &token).await?;
        Ok(seen.at.saturating_duration_since(sent))
    }

    /// Calls so far by method (Discord: method and route, ids replaced by `{id}`).
    fn calls(&self) -> BTreeMap<String, usize> {
        match self {
            Self::Slack(s, _) => s.call_counts(),
            Self::Discord(d, _) => {
                let mut counts = BTreeMap::new();
                for r in d.requests() {
                    let route: Vec<&str> = r
                        .path
                        .split('/')
                        .map(|p| {
                            if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                                "{id}"
                            } else {
                                p
                            }
                        })
                        .collect();
                    *counts
                        .entry(format!("{} {}", r.method, route.join("/")))
                        .or_default() += 1;
                }
                counts
            }
        }
    }
}

async fn wait(seen: oneshot::Receiver<Seen>, token: &str) -> anyhow::Result<Seen> {
    match tokio::time::timeout(TURN_TIMEOUT, seen).await {
        Ok(Ok(seen)) => Ok(seen),
        _ => anyhow::bail!("no answer to {token} within {TURN_TIMEOUT:?}"),
    }
}

/// p50 and p99 of `samples`, in milliseconds.
fn percentiles(samples: &[Duration]) -> (f64, f64) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((ms.len() as f64 - 1.0) * q).round() as usize;
        ms.get(i).copied().unwrap_or(f64::NAN)
    };
    (at(0.5), at(0.99))
}

/// What the measured turns did.
struct Run {
    walls: Vec<Duration>,
    elapsed: Duration,
}

/// Closed loop: each thread sends its next message once its answer shows.
async fn closed(
    platform: &Platform,
    waiting: &Arc<Waiting>,
    threads: &[Thread],
    first: usize,
    turns: usize,
) -> anyhow::Result<Run> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, thread) in threads.iter().enumerate() {
        let i = first + i;
        let (platform, waiting, thread) = (platform.clone(), waiting.clone(), thread.clone());
        tasks.spawn(async move {
            let mut walls = Vec::with_capacity(turns);
            for turn in 1..=turns {
                walls.push(platform.turn(&waiting, &thread, i, turn).await?);
            }
            anyhow::Ok(walls)
        });
    }
    let mut walls = Vec::with_capacity(threads.len() * turns);
    while let Some(done) = tasks.join_next().await {
        walls.extend(done??);
    }
    Ok(Run {
        walls,
        elapsed: started.elapsed(),
    })
}

/// Open loop: a message every 1/rate s, round robin over the threads.
async fn paced(
    platform: &Platform,
    waiting: &Arc<Waiting>,
    threads: &[Thread],
    turns: usize,
    rate: f64,
) -> anyhow::Result<Run> {
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..threads.len() * turns {
        tokio::time::sleep_until(started + Duration::from_secs_f64(k as f64 / rate)).await;
        let (i, turn) = (k % threads.len(), 1 + k / threads.len());
        let (platform, waiting, thread) = (platform.clone(), waiting.clone(), threads[i].clone());
        tasks.spawn(async move { platform.turn(&waiting, &thread, i, turn).await });
    }
    let mut walls = Vec::with_capacity(threads.len() * turns);
    while let Some(done) = tasks.join_next().await {
        walls.push(done??);
    }
    Ok(Run {
        walls,
        elapsed: started.elapsed(),
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let o = options()?;
    anyhow::ensure!(
        o.bin.exists(),
        "{} not found: build it with `cargo build --release -p sandpiper` or pass --bin",
        o.bin.display()
    );
    let dir = tempfile::tempdir()?;
    let model = FakeModel::start(o.tool)?;
    let waiting = Arc::new(Waiting::default());
    let platform = Platform::start(o.through, &waiting).await;
    let base = platform.base_url();
    let fakes = Fakes {
        model: &model.base_url,
        platform: &base,
    };
    let mut serve = Serve::start(
        &o.bin,
        dir.path(),
        o.through,
        &fakes,
        o.db_connections,
        o.places,
    )?;
    let pid = serve.pid();
    platform.wait_ready(&mut serve).await?;
    tokio::time::sleep(SETTLE).await;
    let at_start = Sample::take(pid)?;

    let outcome = measure(&o, &platform, &waiting, &model.clock, pid).await;
    let report = match outcome {
        Ok(r) => r,
        Err(e) => anyhow::bail!("{e:#}\nserve's log, last lines:\n{}", serve.log_tail(40)),
    };
    serve.check_alive()?;
    tokio::time::sleep(o.idle).await;
    let idle = Sample::take(pid)?;
    let growth = match o.grow {
        true => match grow(&o, &platform, &waiting, pid, (report.after, idle)).await {
            Ok(g) => Some(g),
            Err(e) => anyhow::bail!("{e:#}\nserve's log, last lines:\n{}", serve.log_tail(40)),
        },
        false => None,
    };
    drop(serve);

    print_report(&o, &report, at_start, idle);
    if let Some(g) = growth {
        let per = |(a, b): (u64, u64)| (b as f64 - a as f64) / o.threads as f64;
        println!(
            "  RSS per added live workstream (a second wave of {}, {} turns each): {:+.1} KiB right after its turns, {:+.1} KiB after {:.0} s idle",
            o.threads,
            o.turns,
            per(g.after),
            per(g.idle),
            o.idle.as_secs_f64()
        );
    }
    // serve asks the model once at start-up (no turn in it); more would be a harness bug.
    let bad = model.clock.bad.load(Ordering::Relaxed);
    println!("  model requests naming no turn: {bad}");
    Ok(())
}

/// Everything measured between opening the workstreams and the idle wait.
struct Report {
    run: Run,
    opened: Duration,
    before: Sample,
    after: Sample,
    own: ((u64, u64), (u64, u64)),
    model: (u64, u64, u64),
    calls: BTreeMap<String, usize>,
}

async fn measure(
    o: &Options,
    platform: &Platform,
    waiting: &Arc<Waiting>,
    clock: &model::ModelClock,
    pid: u32,
) -> anyhow::Result<Report> {
    // Open the workstreams, all at once.
    let opening = Instant::now();
    let threads = open_all(platform, waiting, 0..o.threads).await?;
    let opened = opening.elapsed();
    tokio::time::sleep(SETTLE).await;

    let calls_before = platform.calls();
    let model_before = model_totals(clock);
    let before = Sample::take(pid)?;
    let own_before = serve::own_cpu_nanos();
    let run = match o.rate {
        None => closed(platform, waiting, &threads, 0, o.turns).await?,
        Some(rate) => paced(platform, waiting, &threads, o.turns, rate).await?,
    };
    tokio::time::sleep(SETTLE).await;
    let own_after = serve::own_cpu_nanos();
    let after = Sample::take(pid)?;
    let model_after = model_totals(clock);
    let mut calls = platform.calls();
    for (method, n) in &calls_before {
        if let Some(count) = calls.get_mut(method) {
            *count -= n;
        }
    }
    calls.retain(|_, n| *n > 0);
    Ok(Report {
        run,
        opened,
        before,
        after,
        own: (own_before, own_after),
        model: (
            model_after.0 - model_before.0,
            model_after.1 - model_before.1,
            model_after.2 - model_before.2,
        ),
        calls,
    })
}

/// Opens workstreams `range`, all at once; returns where each one's messages go, in order.
async fn open_all(
    platform: &Platform,
    waiting: &Arc<Waiting>,
    range: std::ops::Range<usize>,
) -> anyhow::Result<Vec<Thread>> {
    let first = range.start;
    let mut tasks = tokio::task::JoinSet::new();
    for i in range.clone() {
        let (platform, waiting) = (platform.clone(), waiting.clone());
        tasks.spawn(async move { (i, platform.open(&waiting, i).await) });
    }
    let mut threads = vec![None; range.len()];
    while let Some(done) = tasks.join_next().await {
        let (i, thread) = done?;
        threads[i - first] = Some(thread?);
    }
    Ok(threads.into_iter().flatten().collect())
}

/// RSS of serve as `--grow` saw it: right after the first wave's turns, after its idle, and
/// the same after the second wave's.
struct Growth {
    after: (u64, u64),
    idle: (u64, u64),
}

/// `--grow`: a second wave of `o.threads` workstreams, `o.turns` turns each.
async fn grow(
    o: &Options,
    platform: &Platform,
    waiting: &Arc<Waiting>,
    pid: u32,
    first_wave: (Sample, Sample),
) -> anyhow::Result<Growth> {
    let threads = open_all(platform, waiting, o.threads..2 * o.threads).await?;
    closed(platform, waiting, &threads, o.threads, o.turns).await?;
    tokio::time::sleep(SETTLE).await;
    let after = Sample::take(pid)?;
    tokio::time::sleep(o.idle).await;
    let idle = Sample::take(pid)?;
    Ok(Growth {
        after: (first_wave.0.rss_kib, after.rss_kib),
        idle: (first_wave.1.rss_kib, idle.rss_kib),
    })
}

/// Requests, wall nanos, CPU nanos of the model so far.
fn model_totals(clock: &model::ModelClock) -> (u64, u64, u64) {
    (
        clock.requests.load(Ordering::Relaxed),
        clock.nanos.load(Ordering::Relaxed),
        clock.cpu_nanos.load(Ordering::Relaxed),
    )
}

fn print_report(o: &Options, r: &Report, start: Sample, idle: Sample) {
    let turns = r.run.walls.len() as f64;
    let ticks_ms = |t: u64| t as f64 * 1e3 / TICKS_PER_SECOND / turns;
    let user = ticks_ms(r.after.utime - r.before.utime);
    let kernel = ticks_ms(r.after.stime - r.before.stime);
    let children = ticks_ms(r.after.children.saturating_sub(r.before.children));
    let cpu = user + kernel;
    let ((own_u0, own_s0), (own_u1, own_s1)) = r.own;
    let own = (own_u1 - own_u0 + own_s1 - own_s0) as f64 / 1e6 / turns;
    let own_kernel = (own_s1 - own_s0) as f64 / 1e6 / turns;
    let (requests, model_nanos, model_cpu) = r.model;
    let model_per_turn_ms = model_nanos as f64 / 1e6 / turns;
    let (p50, p99) = percentiles(&r.run.walls);
    let n = o.threads as f64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let per_ws = |kib: u64| (kib as f64 - start.rss_kib as f64) / n;

    println!(
        "load_through --through {} --threads {} --turns {} --tool {}{}: {} turns, {}",
        o.through.name(),
        o.threads,
        o.turns,
        o.tool.name(),
        o.rate.map(|r| format!(" --rate {r}")).unwrap_or_default(),
        r.run.walls.len(),
        o.bin.display()
    );
    println!(
        "  opened {} workstreams in {:.2} s (not measured)",
        o.threads,
        r.opened.as_secs_f64()
    );
    println!(
        "  throughput             {:.0} turns/s ({:.2} s)",
        turns / r.run.elapsed.as_secs_f64(),
        r.run.elapsed.as_secs_f64()
    );
    println!(
        "  serve CPU per turn     {cpu:.3} ms: user {user:.3} + kernel {kernel:.3} ({:.0}% kernel; 10 ms ticks)",
        if cpu > 0.0 { kernel / cpu * 100.0 } else { 0.0 }
    );
    println!(
        "  tool processes         {children:.3} ms CPU per turn (reaped children, the spawner)"
    );
    println!(
        "  context switches/turn  {:.1} voluntary, {:.1} involuntary (over {} threads)",
        (r.after.voluntary.saturating_sub(r.before.voluntary)) as f64 / turns,
        (r.after.involuntary.saturating_sub(r.before.involuntary)) as f64 / turns,
        r.after.threads
    );
    let calls: Vec<String> = r
        .calls
        .iter()
        .map(|(m, c)| format!("{m} {:.2}", *c as f64 / turns))
        .collect();
    println!(
        "  Web API calls per turn {:.2}: {}",
        r.calls.values().sum::<usize>() as f64 / turns,
        calls.join(", ")
    );
    println!(
        "  model                  {:.2} calls/turn, {:.3} ms wall/turn, {:.3} ms CPU/turn",
        requests as f64 / turns,
        model_per_turn_ms,
        model_cpu as f64 / 1e6 / turns
    );
    println!(
        "  harness CPU per turn   {own:.3} ms ({own_kernel:.3} kernel): fakes + driver {:.3}, model {:.3}",
        own - model_cpu as f64 / 1e6 / turns,
        model_cpu as f64 / 1e6 / turns
    );
    println!(
        "  latency {}  p50 {:.2} ms  p99 {:.2} ms (wall − model; model {:.3} ms/turn)",
        if o.rate.is_some() {
            "(paced)"
        } else {
            "(closed)"
        },
        p50 - model_per_turn_ms,
        p99 - model_per_turn_ms,
        model_per_turn_ms
    );
    println!(
        "  RSS                    {:.1} MiB before, {:.1} after ({:+.1} KiB/workstream), {:.1} after {:.0} s idle ({:+.1} KiB/workstream)",
        mib(start.rss_kib),
        mib(r.after.rss_kib),
        per_ws(r.after.rss_kib),
        mib(idle.rss_kib),
        o.idle.as_secs_f64(),
        per_ws(idle.rss_kib)
    );
}
