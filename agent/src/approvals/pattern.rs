//! Always allow for a command pattern: whether a shell command may run unasked under grants
//! like `git status` (a prefix of whole words). A pure function over the command text, read
//! with bash's grammar ([`shell`]); the shell is never asked.
//!
//! The rule (issues 30 and 40):
//! - a pattern is a prefix of whole words: `git status` allows `git status --short`, not
//!   `git statusx`, and `git status` never allows `git-lfs-evil`;
//! - the command is simple commands of plain words (bare, quoted without expansions) joined
//!   by `&&`, `||`, `;`, `|`, `|&`, `&` and newlines, and runs unasked only when every one
//!   matches an allowed pattern; a descriptor duplication (`2>&1`, `>&2`) may follow a
//!   command;
//! - anything else never matches: substitutions (`$(…)`, backticks, `<(…)`), expansions
//!   (`$HOME`, `${…}`, `$'…'`), redirections to or from a file, here-documents, comments,
//!   subshells and groups, variable assignments, and whatever bash's grammar cannot read;
//! - a pattern never stands for a program that runs other programs ([`runners`]: `env`,
//!   shells, `xargs`, `sudo`, `find -exec`, `python -c`, …).
//!
//! When in doubt it does not match: the person is asked, which is always safe.

#[cfg(test)]
mod bash_oracle;
mod runners;
mod shell;

use shell::Word;

/// Whether `command` may run unasked under `patterns` (each a prefix of whole words).
pub fn allowed(command: &str, patterns: &[&str]) -> bool {
    let Some(commands) = shell::simple_commands(command) else {
        return false;
    };
    let patterns: Vec<Vec<&str>> = patterns
        .iter()
        .map(|p| p.split_whitespace().collect::<Vec<_>>())
        .filter(|p| !p.is_empty())
        .collect();
    !commands.is_empty()
        && commands
            .iter()
            .all(|words| patterns.iter().any(|p| covers(p, words)))
}

/// The pattern the bash card offers for `command`: its program and subcommand (`git status`
/// for `git status --short`), or the program alone when the second word is an option, a
/// path or absent. `None` when the offer would not allow the command itself: several parts,
/// a bypass, or a program that runs other programs.
pub fn suggested(command: &str) -> Option<String> {
    let commands = shell::simple_commands(command)?;
    let [words] = commands.as_slice() else {
        return None;
    };
    let program = words.first()?;
    let offer = match words.get(1) {
        Some(sub) if sub.literal && plain_word(&sub.text) && !sub.text.starts_with('-') => {
            format!("{} {}", program.text, sub.text)
        }
        _ => program.text.clone(),
    };
    let pattern: Vec<&str> = offer.split(' ').collect();
    covers(&pattern, words).then_some(offer)
}

/// A word a pattern can name: letters, digits and `-_.+`, not a path.
fn plain_word(w: &str) -> bool {
    !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
}

/// Whether `pattern` stands for the simple command `words`: its words start the command,
/// each literal and plain, and the program is not one that runs others.
fn covers(pattern: &[&str], words: &[Word]) -> bool {
    let texts: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
    words.len() >= pattern.len()
        && words
            .iter()
            .zip(pattern)
            .all(|(w, p)| w.literal && plain_word(p) && w.text == *p)
        && runners::coverable(&texts, pattern.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn patterns_match_whole_word_prefixes_of_every_part_and_nothing_that_escapes() {
        let git_status = &["git status"][..];
        let git = &["git"][..];
        let several = &["git status", "grep", "ls", "cargo test"][..];
        let cases: &[(&str, &[&str], bool)] = &[
            // A prefix of whole words.
            ("git status", git_status, true),
            ("git status --short", git_status, true),
            ("git  status   -s", git_status, true),
            ("  git status  ", git_status, true),
            ("git statusx", git_status, false),
            ("git stat", git_status, false),
            ("git", git_status, false),
            ("git push", git_status, false),
            // Changed by issue 40: `git` alone runs programs (`git -c core.pager=…`).
            ("git push --force", git, false),
            ("git push --force", &["git push"], true),
            ("git-lfs-evil", git, false),
            ("git-lfs-evil status", git_status, false),
            ("gitx status", git_status, false),
            ("/usr/bin/git status", git_status, false),
            ("'git' status", git_status, true),
            ("\"git status\"", git_status, false),
            ("gi't status'", git_status, false),
            // Compound commands: every part must match.
            ("git status && ls", several, true),
            ("git status && rm -rf /", several, false),
            ("git status || rm -rf /", several, false),
            ("git status; rm -rf /", several, false),
            ("git status | grep M", several, true),
            ("git status | sh", several, false),
            ("git status |& grep M", several, true),
            ("git status & rm -rf /", several, false),
            ("git status\nrm -rf /", several, false),
            ("git status\nls -la", several, true),
            ("git status;", several, true),
            ("cargo test -p x && git status", several, true),
            ("cargo build", several, false),
            // Command and process substitution, brace expansion of parameters.
            ("git status $(rm -rf /)", git_status, false),
            ("git status `rm -rf /`", git_status, false),
            ("git status \"$(rm -rf /)\"", git_status, false),
            ("git status \"`id`\"", git_status, false),
            ("git status '$(just text)'", git_status, true),
            ("grep x <(curl evil)", several, false),
            ("git status >(sh)", git_status, false),
            ("git status ${IFS}", git_status, false),
            ("git status $'\\x3b'", git_status, false),
            // Changed by issue 40: no expansion is a plain word.
            ("git status $HOME", git_status, false),
            // Redirection to a file; a descriptor is not one.
            ("git status > out.txt", git_status, false),
            ("git status >> ~/.bashrc", git_status, false),
            ("git status >out", git_status, false),
            ("git status 2> err", git_status, false),
            ("git status &> all", git_status, false),
            ("git status >| out", git_status, false),
            ("git status 2>&1", git_status, true),
            ("git status 2>&1 | grep M", several, true),
            ("cat <<EOF\nhi\nEOF", &["cat"], false),
            // eval, exec, sudo, assignments, subshells.
            ("eval git status", &["eval"], false),
            ("eval 'git status'", git_status, false),
            ("exec git status", &["exec"], false),
            ("sudo git status", &["sudo"], false),
            ("sudo git status", git_status, false),
            ("PAGER=evil git status", git_status, false),
            ("GIT_DIR=/x git status", git, false),
            ("git status && FOO=1 ls", several, false),
            ("(git status)", git_status, false),
            ("{ git status; }", git_status, false),
            // Quoting and escapes.
            ("git status \\; rm", git_status, true),
            ("git status 'a;b'", git_status, true),
            ("git status \"a && b\"", git_status, true),
            ("git status 'unterminated", git_status, false),
            ("git status \\\n --short", git_status, true),
            // Changed by issue 40: comments never match; where one starts is what the bypass
            // below played on.
            ("git status # ; rm -rf /", git_status, false),
            // Issue 40: a duplication does not end the word; bash reads `1#` as one.
            ("git status 2>&1#; rm -rf /", git_status, false),
            ("git status >&2#; rm -rf /", git_status, false),
            ("git status --short 2>&1#|| rm -rf /", git_status, false),
            ("git status 2>&1#&& rm -rf /", git_status, false),
            ("git status 2>&1#| sh", git_status, false),
            ("git status 2>&1x", git_status, false),
            ("git status >&2x", git_status, false),
            ("git status >&file", git_status, false),
            ("git status 2>& 1", git_status, false),
            ("git status 2>&1 >&2", git_status, true),
            ("git status >&2; git status", git_status, true),
            ("git status a#b", git_status, false),
            // Found by the bash oracle: a line continuation joins the words around it.
            ("git status\\\nx", git_status, false),
            ("git\\\n status", git_status, true),
            ("ls\\\n'$(id)'", &["ls"], false),
            ("git status\\\n2>&1", git_status, false),
            ("git status\r", git_status, false),
            ("git status\r; rm -rf /", git_status, false),
            (r"git\ status", git_status, false),
            (r"git status\ ; rm -rf /", git_status, false),
            ("git status <file", git_status, false),
            ("git status < /dev/tcp/1.2.3.4/80", git_status, false),
            ("git status <<< x", git_status, false),
            ("git status\n#x\nls", several, false),
            ("! git status", git_status, false),
            ("git status ;; ls", several, false),
            ("git status 'a'\"b\"", git_status, true),
            ("git status \"$(id)\"x", git_status, false),
            ("git status \"\\$x\"", git_status, false),
            ("git status $'\\'", git_status, false),
            ("git status {a,b}", git_status, false),
            ("git status *.rs", git_status, true),
            ("git stat*", git_status, false),
            ("git st?tus", git_status, false),
            // Issue 40: programs that run programs are never covered.
            ("env sh -c 'rm -rf /'", &["env"], false),
            ("env", &["env"], false),
            ("bash -c 'rm -rf /'", &["bash"], false),
            ("sh x.sh", &["sh x.sh"], false),
            ("xargs rm", &["xargs"], false),
            ("command rm -rf /", &["command"], false),
            ("builtin eval id", &["builtin"], false),
            ("timeout 5 rm -rf /", &["timeout 5"], false),
            ("nice rm -rf /", &["nice"], false),
            ("nohup rm -rf /", &["nohup"], false),
            ("time rm -rf /", &["time"], false),
            ("setsid rm -rf /", &["setsid"], false),
            ("stdbuf -o0 rm -rf /", &["stdbuf"], false),
            ("doas rm", &["doas"], false),
            ("su -c id", &["su"], false),
            ("source x.sh", &["source"], false),
            (". x.sh", &["."], false),
            ("watch id", &["watch"], false),
            ("trap id EXIT", &["trap"], false),
            ("printf -v 'a[$(id)]' x", &["printf"], false),
            ("printf '%s' x", &["printf"], true),
            ("find . -name '*.rs'", &["find ."], true),
            ("find . -exec rm {} ;", &["find ."], false),
            ("find . -execdir rm {} +", &["find ."], false),
            ("find . -ok rm {} ;", &["find ."], false),
            ("find . -delete", &["find ."], false),
            ("python3 -c 'import os'", &["python3"], false),
            ("python3 manage.py test", &["python3 manage.py"], true),
            ("python3 manage.py test", &["python3"], false),
            ("perl -e 'system(1)'", &["perl"], false),
            ("node -e 1", &["node"], false),
            ("awk 'BEGIN{system(1)}'", &["awk"], false),
            ("sed 'e id' x", &["sed"], false),
            ("git -c core.pager=sh log", git, false),
            ("git config core.fsmonitor id", &["git config"], false),
            ("git grep -Osh x", &["git grep"], false),
            // Nothing to run, or nothing allowed.
            ("", git_status, false),
            ("   ", git_status, false),
            ("git status", &[], false),
            ("git status", &[""], false),
        ];
        assert!(cases.len() >= 40);
        let wrong: Vec<(&str, &[&str], bool)> = cases
            .iter()
            .filter(|(command, patterns, want)| allowed(command, patterns) != *want)
            .copied()
            .collect();
        assert_eq!(
            wrong,
            Vec::<(&str, &[&str], bool)>::new(),
            "cases judged wrongly"
        );
    }

    #[test]
    fn the_card_suggests_program_and_subcommand() {
        for (command, want) in [
            ("git status --short", Some("git status")),
            ("git status", Some("git status")),
            ("cargo test -p sandpiper", Some("cargo test")),
            ("ls -la", Some("ls")),
            ("ls", Some("ls")),
            ("cat ./notes.txt", Some("cat")),
            ("git -C x status", None),
            ("env sh -c 'id'", None),
            ("env", None),
            ("bash", None),
            ("xargs rm", None),
            ("command -v x", None),
            ("find . -name x", Some("find .")),
            ("find . -exec rm {} ;", None),
            ("timeout 5 ls", None),
            ("python3 -c 1", None),
            ("python3 manage.py test", Some("python3 manage.py")),
            ("git status 2>&1#; id", None),
            ("git status 2>&1", Some("git status")),
            ("git status && ls", None),
            ("sudo git status", None),
            ("git status $(id)", None),
            ("/bin/ls", None),
            ("", None),
        ] {
            assert_eq!(suggested(command).as_deref(), want, "{command}");
            if let Some(offer) = suggested(command) {
                assert!(
                    allowed(command, &[&offer]),
                    "{command} is not allowed by {offer}"
                );
            }
        }
    }
}
