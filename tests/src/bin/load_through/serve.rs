//! The real `sandpiper serve` process pointed at the fakes, and what `/proc` says about it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context as _;

/// Which adapter the run goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Through {
    Slack,
    Discord,
}

impl Through {
    pub(crate) fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "slack" => Ok(Self::Slack),
            "discord" => Ok(Self::Discord),
            other => anyhow::bail!("--through slack|discord, not {other}"),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Slack => "slack",
            Self::Discord => "discord",
        }
    }
}

/// Where the fakes listen.
pub(crate) struct Fakes<'a> {
    /// The model's base URL (`http://127.0.0.1:PORT/v1`).
    pub(crate) model: &'a str,
    /// The platform fake's base URL (`http://127.0.0.1:PORT`).
    pub(crate) platform: &'a str,
}

/// A running `sandpiper serve`; killed when dropped, so a failed run leaves no process
/// holding ports and database connections behind.
pub(crate) struct Serve {
    child: Child,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Serve {
    /// Writes the config (SQLite in `dir`, approvals off, the adapter's base URL at the fake)
    /// and starts `bin --config … serve`.
    pub(crate) fn start(
        bin: &Path,
        dir: &Path,
        through: Through,
        fakes: &Fakes<'_>,
        db_connections: Option<u32>,
        places: usize,
    ) -> anyhow::Result<Self> {
        let pool = db_connections.map_or(String::new(), |n| format!("max_connections = {n}\n"));
        let work = dir.join("work");
        std::fs::create_dir_all(&work)?;
        let platform = match through {
            // Socket Mode is the default; one post then edits as the answer streams.
            Through::Slack => "[slack]\nmode = \"socket\"\n",
            // Discord allows 50 requests/s per bot: the adapter paces to this, so a limit
            // that low would measure the pacing. The harness lifts it to see the CPU.
            Through::Discord => "[discord]\nrequests_per_second = 100000\n",
        };
        let config = dir.join("sandpiper.toml");
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = \"sqlite://{db}\"\n{pool}\n[model]\nprovider = \"openai\"\n\
                 base_url = \"{model}\"\nmodel = \"fake\"\nmax_retries = 0\n\
                 context_window = 1048576\n\n[tools]\nworkdir = \"{work}\"\n\n\
                 [approval]\nauto_approve = true\n\n\
                 [agent]\nmax_concurrent_turns = {places}\nmax_turns_per_user = {places}\n\n{platform}",
                db = dir.join("sandpiper.db").display(),
                model = fakes.model,
                work = work.display(),
            ),
        )?;
        let log = dir.join("serve.log");
        let mut cmd = Command::new(bin);
        cmd.current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("USER", "load")
            .env("SANDPIPER_LISTEN", "127.0.0.1:0")
            .env(
                "SANDPIPER_LOG",
                std::env::var("SANDPIPER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("OPENAI_API_KEY", "sk-load");
        match through {
            Through::Slack => cmd
                .env("SLACK_BOT_TOKEN", "xoxb-fake")
                .env("SLACK_APP_TOKEN", "xapp-fake")
                .env(
                    "SANDPIPER_SLACK_API_BASE",
                    format!("{}/api", fakes.platform),
                ),
            Through::Discord => cmd
                .env("DISCORD_TOKEN", "fake-bot-token")
                .env("SANDPIPER_DISCORD_API_BASE", fakes.platform),
        };
        let child = cmd
            .arg("--config")
            .arg(&config)
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        Ok(Self { child, log })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines serve logged, for an error's message.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Fails if serve has exited.
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!("serve exited with {status}:\n{}", self.log_tail(40));
        }
        Ok(())
    }
}

pub(crate) use sandpiper_tests::proc_stat::TICKS_PER_SECOND;

/// `agent.max_concurrent_turns` and `agent.max_turns_per_user` of the measured node unless
/// `--places` says otherwise: one person talks in every thread, and at the defaults (16 and
/// 4) most turns would wait for a place, so the run would measure the limiter's queue, not
/// what a turn costs.
pub(crate) const PLACES: usize = 4096;

/// What `/proc` says about a process at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    /// User and kernel CPU of the process (all its threads, live and exited), in ticks.
    pub(crate) utime: u64,
    pub(crate) stime: u64,
    /// CPU of the tool's processes (reaped children, and the standing spawner), in ticks.
    pub(crate) children: u64,
    /// Context switches summed over its live threads.
    pub(crate) voluntary: u64,
    pub(crate) involuntary: u64,
    /// Resident set, KiB.
    pub(crate) rss_kib: u64,
    pub(crate) threads: u64,
}

impl Sample {
    pub(crate) fn take(pid: u32) -> anyhow::Result<Self> {
        let [utime, stime, _, _] = sandpiper_tests::proc_stat::times(pid)?;
        let mut sample = Self {
            utime,
            stime,
            children: sandpiper_tests::proc_stat::tools(pid)?,
            ..Self::default()
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        sample.rss_kib = status_field(&status, "VmRSS:").unwrap_or(0);
        // `/proc/<pid>/status` counts the main thread's switches only: sum every thread's.
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))?.flatten() {
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
                continue; // the thread ended meanwhile
            };
            sample.threads += 1;
            sample.voluntary += status_field(&status, "voluntary_ctxt_switches:").unwrap_or(0);
            sample.involuntary += status_field(&status, "nonvoluntary_ctxt_switches:").unwrap_or(0);
        }
        Ok(sample)
    }
}

fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// This process's own CPU (user, kernel), in nanoseconds.
#[allow(unsafe_code)]
pub(crate) fn own_cpu_nanos() -> (u64, u64) {
    // SAFETY: an all-zero rusage is valid; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the call's duration.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let nanos = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_usec).unwrap_or(0) * 1_000
    };
    (nanos(usage.ru_utime), nanos(usage.ru_stime))
}
