//! What `/proc` says about processes: parent, state, start time and environment. A process is
//! identified by its pid *and* start time, so a pid reused by a new process is never killed or
//! reaped by mistake.

use std::collections::{BTreeSet, HashMap};

/// A process as seen at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Proc {
    pub pid: libc::pid_t,
    /// Clock ticks since boot when it started (`/proc/<pid>/stat` field 22).
    pub start: u64,
}

/// The fields of `/proc/<pid>/stat` that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: libc::pid_t,
    pub start: u64,
}

/// Parses `/proc/<pid>/stat` text; the command name may contain spaces and parentheses, so
/// the fields are read after the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), …, starttime (22).
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The current stat of `pid`, if it exists.
pub(crate) fn stat(pid: libc::pid_t) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `proc` still exists as the same process (not a reused pid).
pub(crate) fn same(proc: Proc) -> Option<Stat> {
    stat(proc.pid).filter(|s| s.start == proc.start)
}

/// Whether `environ` (NUL-separated `NAME=value`) contains exactly `entry`.
pub(crate) fn environ_has(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|&b| b == 0).any(|e| e == entry)
}

/// Every live (non-zombie) process, with its parent.
fn all() -> Vec<(Proc, Stat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .filter(|(_, s)| s.state != 'Z')
        .map(|(pid, s)| {
            (
                Proc {
                    pid,
                    start: s.start,
                },
                s,
            )
        })
        .collect()
}

/// The live processes that belong to a call: descendants of `leader` (whatever their process
/// group or session) and every process whose environment carries `marker_entry`
/// (`NAME=value`), which survives double forks and reparenting.
pub(crate) fn members(leader: Option<libc::pid_t>, marker_entry: &[u8]) -> BTreeSet<Proc> {
    let procs = all();
    let mut children: HashMap<libc::pid_t, Vec<Proc>> = HashMap::new();
    for (p, s) in &procs {
        children.entry(s.ppid).or_default().push(*p);
    }
    let mut found = BTreeSet::new();
    let mut stack: Vec<libc::pid_t> = leader.into_iter().collect();
    while let Some(pid) = stack.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if found.insert(*child) {
                stack.push(child.pid);
            }
        }
    }
    let me = std::process::id();
    for (p, _) in &procs {
        if u32::try_from(p.pid).is_ok_and(|pid| pid == me) || found.contains(p) {
            continue;
        }
        if let Ok(environ) = std::fs::read(format!("/proc/{}/environ", p.pid))
            && environ_has(&environ, marker_entry)
        {
            found.insert(*p);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn stat_fields_after_a_tricky_name() {
        let text = "42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 \
                    10 18446744073709551615";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                state: 'S',
                ppid: 7,
                start: 98765
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn environ_entries_match_whole() {
        let environ = b"PATH=/bin\0SANDPIPER_CALL_ID=abc\0";
        assert!(environ_has(environ, b"SANDPIPER_CALL_ID=abc"));
        assert!(!environ_has(environ, b"SANDPIPER_CALL_ID=ab"));
    }

    #[test]
    fn this_process_is_found_by_pid_and_start() {
        let me = libc::pid_t::try_from(std::process::id()).expect("pid fits");
        let s = stat(me).expect("own stat");
        assert_eq!(
            same(Proc {
                pid: me,
                start: s.start
            }),
            Some(s)
        );
        assert_eq!(
            same(Proc {
                pid: me,
                start: s.start + 1
            }),
            None
        );
    }
}
