//! CPU figures of a process from `/proc`, for the benchmarks: its own, and that of the tool
//! processes it started, wherever they are counted.
//!
//! A tool process started by the bot itself is counted in the bot's `cutime + cstime` once
//! reaped. One started by the standing spawner (a child of the bot that forks the tools) is
//! reaped by the spawner: it is counted in the spawner's `cutime + cstime`, and the
//! spawner's own forking in its `utime + stime`. So the tools' CPU is the bot's reaped
//! children plus everything of its live children.

use anyhow::Context as _;

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// `utime`, `stime`, `cutime`, `cstime` of `pid`, in clock ticks.
pub fn times(pid: u32) -> anyhow::Result<[u64; 4]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces; the fields after it are plain numbers.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // After the state: ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime stime cutime cstime.
    let field = |i: usize| fields.get(i).copied().context("short stat");
    Ok([field(10)?, field(11)?, field(12)?, field(13)?])
}

/// The live children of `pid` (over all its threads).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// CPU of the tool processes `pid` started so far, in ticks: its reaped children and all of
/// its live children (the standing spawner and what it reaped).
pub fn tools(pid: u32) -> anyhow::Result<u64> {
    let [_, _, cutime, cstime] = times(pid)?;
    let live: u64 = children(pid)
        .into_iter()
        .filter_map(|c| times(c).ok())
        .map(|t| t.iter().sum::<u64>())
        .sum();
    Ok(cutime + cstime + live)
}
