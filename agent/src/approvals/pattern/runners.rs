//! Programs that run other programs, or code they are given: a pattern grant must never stand
//! for them, or "Always allow `env`" would be "always allow anything" (issue 40).
//!
//! Three kinds, judged on a simple command's words after quote removal:
//! - [`RUNNERS`]: wrappers, shells, `sudo` and friends, and the builtins that evaluate text
//!   (`eval`, `source`, `trap`, and those that take a variable name, whose array subscript bash
//!   evaluates: `printf -v 'a[$(id)]'` runs `id`). Never covered.
//! - [`SCRIPT_HOSTS`]: interpreters and programs whose options can name a program to run
//!   (`python -c`, `git -c core.pager=…`). Covered only by a pattern naming the script or
//!   subcommand, and only when that second word is not an option.
//! - [`RUNNING_ARGUMENTS`]: programs that are fine unless given one of a few arguments
//!   (`find -exec`), and git's subcommands and options that run a program ([`git_runs`]).
//!
//! This cannot know what a program does with its other arguments or its configuration: a
//! `git status` grant still runs whatever `core.fsmonitor` the repository's config names.

/// Programs never covered by a pattern.
#[rustfmt::skip]
const RUNNERS: &[&str] = &[
    // Wrappers that run their arguments as a command.
    "env", "xargs", "parallel", "timeout", "nice", "nohup", "setsid", "stdbuf", "time",
    "watch", "chroot", "ionice", "taskset", "unshare", "nsenter", "flock", "chrt", "prlimit",
    "setpriv", "capsh", "script", "strace", "ltrace", "gdb", "valgrind", "firejail", "bwrap",
    "systemd-run", "ssh", "npx", "busybox", "sudo", "doas", "su", "runuser", "pkexec",
    // Shells.
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "ash", "yash", "fish", "csh", "tcsh",
    "rbash",
    // Builtins that run or evaluate text, or name a variable whose subscript bash evaluates.
    "eval", "exec", "source", ".", "command", "builtin", "trap", "alias", "enable", "fc",
    "hash", "compgen", "complete", "bind", "let", "declare", "typeset", "local", "export",
    "readonly", "read", "mapfile", "readarray", "unset", "getopts", "wait", "test", "[", "[[",
    // Reserved words, should the grammar ever read one as a program.
    "coproc", "function", "if", "then", "else", "elif", "fi", "case", "esac", "for", "select",
    "while", "until", "do", "done", "in", "{", "}", "!",
    // Languages whose program text is always code (`awk 'BEGIN{system("id")}'`,
    // `sed 'e id'`), and editors and pagers that run commands they are given.
    "awk", "gawk", "mawk", "nawk", "sed", "gsed", "vi", "vim", "nvim", "ex", "emacs", "man",
];

/// Programs covered only through a pattern that names their second word, itself no option.
#[rustfmt::skip]
const SCRIPT_HOSTS: &[&str] = &[
    "perl", "ruby", "irb", "node", "nodejs", "deno", "bun", "php", "lua", "luajit", "Rscript",
    "tclsh", "wish", "pwsh", "osascript", "git",
];

/// Programs refused when any word after them starts with one of the listed ones.
#[rustfmt::skip]
const RUNNING_ARGUMENTS: &[(&str, &[&str])] = &[
    ("find", &["-exec", "-ok", "-delete", "-fprint", "-fls"]),
    ("printf", &["-v"]),
    ("tar", &[
        "--to-command", "--checkpoint-action", "--use-compress-program", "--info-script",
        "--new-volume-script", "--rsh-command", "-I", "-F",
    ]),
    ("rsync", &["-e", "--rsh", "--rsync-path"]),
    ("scp", &["-o", "-S", "-F"]),
    ("sftp", &["-o", "-S", "-F", "-D"]),
    ("zip", &["-T", "--unzip-command"]),
    ("wget", &["--use-askpass"]),
];

/// Whether a pattern of `pattern_len` words may stand for the simple command `words`.
pub(super) fn coverable(words: &[&str], pattern_len: usize) -> bool {
    let Some((program, args)) = words.split_first() else {
        return false;
    };
    if RUNNERS.contains(program) {
        return false;
    }
    if *program == "git" && git_runs(args) {
        return false;
    }
    if is_script_host(program) {
        return pattern_len >= 2 && args.first().is_some_and(|a| !a.starts_with('-'));
    }
    RUNNING_ARGUMENTS
        .iter()
        .filter(|(p, _)| p == program)
        .all(|(_, refused)| {
            !args
                .iter()
                .any(|a| refused.iter().any(|r| a.starts_with(r)))
        })
}

/// git subcommands and options that run a program they are given (or let one be configured).
fn git_runs(args: &[&str]) -> bool {
    const SUBCOMMANDS: &[&str] = &[
        "config",
        "submodule",
        "bisect",
        "rebase",
        "difftool",
        "mergetool",
        "filter-branch",
        "daemon",
        "instaweb",
        "send-email",
        "credential",
        "hook",
        "var",
        "web--browse",
    ];
    const OPTIONS: &[&str] = &[
        "--upload-pack",
        "--receive-pack",
        "--exec",
        "--open-files-in-pager",
        "-O",
        "--extcmd",
        "--config",
        "-c",
    ];
    args.first().is_some_and(|sub| SUBCOMMANDS.contains(sub))
        || (args.first() == Some(&"clone") && args.iter().any(|a| a.starts_with("-u")))
        || args
            .iter()
            .any(|a| OPTIONS.iter().any(|o| a.starts_with(o)))
}

/// Interpreters, including versioned names (`python3.12`, `perl5.36`).
fn is_script_host(program: &str) -> bool {
    let family = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    SCRIPT_HOSTS.contains(&program)
        || SCRIPT_HOSTS.contains(&family)
        || matches!(family, "python" | "pypy" | "ipython")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_are_never_covered_and_hosts_only_with_their_script() {
        for (words, pattern_len, want) in [
            (&["env", "ls"][..], 1, false),
            (&["bash", "-c", "ls"][..], 3, false),
            (&["sed", "-n", "1p"][..], 1, false),
            (&["python3", "-c", "x"][..], 1, false),
            (&["python3", "-c", "x"][..], 2, false),
            (&["python3", "manage.py", "test"][..], 2, true),
            (&["python3", "manage.py", "test"][..], 1, false),
            (&["python3.12", "-m", "x"][..], 2, false),
            (&["git", "status"][..], 2, true),
            (&["git", "status"][..], 1, false),
            (&["git", "-c", "core.pager=sh", "log"][..], 2, false),
            (&["git", "config", "core.fsmonitor", "x"][..], 2, false),
            (&["git", "grep", "-Ovim", "x"][..], 2, false),
            (
                &["git", "fetch", "--upload-pack=sh -c x", "."][..],
                2,
                false,
            ),
            (&["git", "clone", "-u", "x", "."][..], 2, false),
            (&["git", "push", "-u", "origin"][..], 2, true),
            (&["find", ".", "-name", "x"][..], 2, true),
            (&["find", ".", "-exec", "sh", ";"][..], 2, false),
            (&["find", ".", "-delete"][..], 2, false),
            (&["printf", "%s", "x"][..], 1, true),
            (&["printf", "-v", "a[$(id)]", "x"][..], 1, false),
            (&["ls", "-la"][..], 1, true),
            (&["find", ".", "-execdir", "x", ";"][..], 2, false),
            (&["find", ".", "-okdir", "x", ";"][..], 2, false),
            (&["tar", "--to-command=sh", "-xf", "a.tar"][..], 1, false),
            (&["tar", "-xf", "a.tar"][..], 1, true),
            (&["rsync", "-e", "sh -c x", "a", "b"][..], 1, false),
            (&["coproc", "x"][..], 1, false),
            (&["hash", "-p", "/bin/sh", "git"][..], 1, false),
        ] {
            assert_eq!(
                coverable(words, pattern_len),
                want,
                "{words:?} / {pattern_len}"
            );
        }
    }
}
