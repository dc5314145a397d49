//! The matcher against bash itself: command lines drawn from a small grammar of words,
//! quotes, operators, redirections, comments and substitutions are judged by [`allowed`];
//! every line it accepts runs under `bash --noprofile --norc -c` with `PATH` holding only
//! recording stubs, and only the programs and arguments the patterns cover may have run.
//!
//! The generator is seeded; a failure prints the seed (rerun with `PATTERN_ORACLE_SEED=<n>`).

use super::{allowed, shell};
use std::path::Path;
use std::process::{Command, Stdio};

const PATTERNS: &[&str] = &["git status", "ls"];

/// Pieces a line is made of; each may be glued to the next or set apart by a blank.
const PIECES: &[&str] = &[
    "git",
    "git",
    "status",
    "status",
    "--short",
    "ls",
    "-la",
    "rm",
    "-rf",
    "id",
    "sh",
    "-c",
    "env",
    "x",
    "1",
    "'a b'",
    "\"a b\"",
    "'$(id)'",
    "\"$(id)\"",
    "$(id)",
    "`id`",
    "$VAR",
    "${VAR}",
    "$'\\x3b'",
    "*",
    "a#b",
    "#",
    "# id",
    "#x\n",
    "2>&1",
    "2>&1",
    ">&2",
    ">&2",
    "1>&2",
    ">&",
    "2>",
    ">out",
    "<in",
    "<<<x",
    "<(id)",
    "(",
    ")",
    "{",
    "}",
    ";",
    ";",
    "&&",
    "&&",
    "||",
    "|",
    "|",
    "|&",
    "&",
    "\n",
    "\n",
    "\\",
    "\\\n",
    "VAR=1",
    "\\;",
    "\r",
    "'",
    "\"",
    "=",
    "!",
    "\\ ",
    "id;",
    ";id",
    "&&id",
    "|id",
];
const JOINERS: &[&str] = &[" ", " ", " ", "", "", "\t"];

/// Names stubbed in `PATH`; anything else bash cannot find is recorded by
/// `command_not_found_handle`.
const STUBS: &[&str] = &[
    "git", "ls", "rm", "id", "sh", "env", "x", "status", "--short", "-la", "-rf", "-c", "1",
];

/// A small xorshift generator: no dependency, and the seed says everything.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

fn line(rng: &mut Rng) -> String {
    let mut line = String::from(if rng.below(4) == 0 {
        "ls"
    } else {
        "git status"
    });
    for _ in 0..rng.below(7) {
        line.push_str(rng.pick(JOINERS));
        line.push_str(rng.pick(PIECES));
    }
    line
}

fn stub_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    // Each run appends its name and arguments, separated by \x1f and ended by \x1e, in one
    // write: the stages of a pipeline run at once, and separate writes would interleave.
    let stub = "#!/bin/sh\nr=\"${0##*/}\"; for a in \"$@\"; do r=\"$r$(printf '\\037')$a\"; done; printf '%s\\036' \"$r\" >> \"$STUB_LOG\"\n";
    for name in STUBS {
        let path = dir.join(name);
        std::fs::write(&path, stub).expect("write a stub");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

/// The runs recorded in `log`: each program name and its arguments.
fn runs(log: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.split('\u{1e}')
        .filter(|r| !r.is_empty())
        .map(|r| r.split('\u{1f}').map(str::to_owned).collect())
        .collect()
}

#[test]
fn every_line_the_matcher_accepts_runs_only_what_the_patterns_cover() {
    let seed = std::env::var("PATTERN_ORACLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("PATTERN_ORACLE_SEED={seed}");
    let mut rng = Rng(seed);
    let root = tempfile::tempdir().expect("temp dir");
    let bin = root.path().join("bin");
    let work = root.path().join("work");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::create_dir_all(&work).expect("work");
    std::fs::write(work.join("in"), "x\n").expect("in");
    stub_dir(&bin);
    let log = root.path().join("log");
    let not_found = "() { r=\"?$1\"; shift; for a in \"$@\"; do r=\"$r$(printf '\\037')$a\"; done; printf '%s\\036' \"$r\" >> \"$STUB_LOG\"; return 127; }";

    // Found on the test's own PATH: the child's PATH holds only the stubs.
    let bash = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("bash"))
        .find(|path| path.is_file())
        .expect("bash on PATH");
    let (mut accepted, mut judged) = (0, 0);
    for _ in 0..600 {
        let line = line(&mut rng);
        judged += 1;
        if !allowed(&line, PATTERNS) {
            continue;
        }
        accepted += 1;
        let _ = std::fs::remove_file(&log);
        // `output` reads until every holder of the pipes is gone: background jobs included.
        let out = Command::new(&bash)
            .args(["--noprofile", "--norc", "-c", &line])
            .env_clear()
            .env("PATH", &bin)
            .env("STUB_LOG", &log)
            .env("BASH_FUNC_command_not_found_handle%%", not_found)
            .current_dir(&work)
            .stdin(Stdio::null())
            .output()
            .expect("run bash");
        let read = shell::simple_commands(&line).expect("an accepted line reads");
        let mut expected: Vec<Vec<String>> = read
            .iter()
            .map(|words| words.iter().map(|w| w.text.clone()).collect())
            .collect();
        for run in runs(&log) {
            let covered = match run.as_slice() {
                [git, status, ..] if git == "git" && status == "status" => true,
                [ls, ..] if ls == "ls" => true,
                _ => false,
            };
            assert!(
                covered,
                "seed {seed}: {line:?} was accepted but ran {run:?} (stderr {:?})",
                String::from_utf8_lossy(&out.stderr)
            );
            // With no glob in it, the run is exactly a command the matcher read.
            let exact = expected.iter().position(|e| *e == run);
            let globbed = read.iter().any(|words| words.iter().any(|w| !w.literal));
            assert!(
                exact.is_some() || globbed,
                "seed {seed}: {line:?} ran {run:?}, the matcher read {expected:?}"
            );
            if let Some(i) = exact {
                expected.swap_remove(i);
            }
        }
    }
    println!("{accepted} of {judged} lines accepted and run");
    assert!(
        accepted >= 30,
        "seed {seed}: only {accepted} lines accepted; the test proves little"
    );
}
