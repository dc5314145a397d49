//! Always allow for a command pattern: whether a shell command may run unasked under grants
//! like `git status` (a prefix of whole words). A pure function over the command text; the
//! shell is never asked.
//!
//! The rule, as issue 30 states it:
//! - a pattern is a prefix of whole words: `git status` allows `git status --short`, not
//!   `git statusx`, and `git` never allows `git-lfs-evil`;
//! - a compound command (`&&`, `||`, `;`, `|`, `&`, newlines) runs unasked only when every
//!   part matches an allowed pattern;
//! - command substitution (`$(…)`, backticks), process substitution (`<(…)`, `>(…)`),
//!   parameter expansion with braces (`${…}`, which can hide either), redirection to a file
//!   (`>`, `>>`, `&>`; `2>&1` is not a file), here-documents, subshells, `eval`, `exec`,
//!   `sudo` and leading variable assignments (`PAGER=evil git log`) never match.
//!
//! When in doubt it does not match: the person is asked, which is always safe.

/// Whether `command` may run unasked under `patterns` (each a prefix of whole words).
pub fn allowed(command: &str, patterns: &[&str]) -> bool {
    let Some(parts) = parts(command) else {
        return false;
    };
    let patterns: Vec<Vec<&str>> = patterns
        .iter()
        .map(|p| p.split_whitespace().collect::<Vec<_>>())
        .filter(|p| !p.is_empty())
        .collect();
    !parts.is_empty()
        && parts
            .iter()
            .all(|words| patterns.iter().any(|p| part_matches(words, p)))
}

/// The pattern the bash card offers for `command`: its program and subcommand (`git status`
/// for `git status --short`), or the program alone when the second word is an option, a
/// path or absent. `None` when no pattern could ever match it (a bypass, several parts).
pub fn suggested(command: &str) -> Option<String> {
    let parts = parts(command)?;
    let [words] = parts.as_slice() else {
        return None;
    };
    let program = words.first()?;
    if !plain_word(program) || is_blocked(program) {
        return None;
    }
    match words.get(1) {
        Some(sub) if plain_word(sub) && !sub.starts_with('-') => Some(format!("{program} {sub}")),
        _ => Some(program.clone()),
    }
}

/// A word a pattern can name: letters, digits and `-_.+`, not a path.
fn plain_word(w: &str) -> bool {
    !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
}

/// Programs that run other commands as they please: never allowed by a pattern.
fn is_blocked(program: &str) -> bool {
    matches!(program, "eval" | "exec" | "sudo" | "doas" | "su")
}

fn part_matches(words: &[String], pattern: &[&str]) -> bool {
    let Some(program) = words.first() else {
        return false;
    };
    if is_blocked(program) || is_assignment(program) {
        return false;
    }
    words.len() >= pattern.len() && words.iter().zip(pattern).all(|(w, p)| w == p)
}

/// `NAME=value`: a variable assignment before the program.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The simple commands of `command`, each as its words after quote removal; `None` when it
/// holds anything that never matches (see the module docs) or does not parse.
fn parts(command: &str) -> Option<Vec<Vec<String>>> {
    let mut parts: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    // Whether `word` holds a word (an empty quoted string is one).
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    let end_word = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    let end_part = |parts: &mut Vec<Vec<String>>, words: &mut Vec<String>| {
        if !words.is_empty() {
            parts.push(std::mem::take(words));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(next) => {
                    word.push(next);
                    in_word = true;
                }
                None => return None,
            },
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        inner => word.push(inner),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '`' => return None,
                        '$' if matches!(chars.peek(), Some('(' | '{')) => return None,
                        '\\' => match chars.next()? {
                            '\n' => {}
                            e @ ('"' | '\\' | '$' | '`') => word.push(e),
                            e => {
                                word.push('\\');
                                word.push(e);
                            }
                        },
                        inner => word.push(inner),
                    }
                }
            }
            '`' | '(' | ')' => return None,
            '$' if matches!(chars.peek(), Some('(' | '{' | '\'')) => return None,
            '<' => {
                if matches!(chars.peek(), Some('(' | '<')) {
                    return None;
                }
                end_word(&mut words, &mut word, &mut in_word);
                // Input from a file reads it; the word after is its name, not an argument.
                word.push('<');
                in_word = true;
            }
            '>' => {
                // Only a duplication onto a descriptor (`2>&1`, `>&2`) is not a file.
                let fd_only = word.chars().all(|d| d.is_ascii_digit());
                if chars.peek() != Some(&'&') || !fd_only {
                    return None;
                }
                chars.next();
                let mut target = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit() || **d == '-') {
                    target.push(*d);
                    chars.next();
                }
                if target.is_empty() {
                    return None;
                }
                // The redirection is not a word of the command.
                word.clear();
                in_word = false;
            }
            '&' => {
                if chars.peek() == Some(&'>') {
                    return None;
                }
                if chars.peek() == Some(&'&') {
                    chars.next();
                }
                end_word(&mut words, &mut word, &mut in_word);
                end_part(&mut parts, &mut words);
            }
            '|' => {
                if matches!(chars.peek(), Some('|' | '&')) {
                    chars.next();
                }
                end_word(&mut words, &mut word, &mut in_word);
                end_part(&mut parts, &mut words);
            }
            ';' | '\n' => {
                end_word(&mut words, &mut word, &mut in_word);
                end_part(&mut parts, &mut words);
            }
            '#' if !in_word => {
                // A comment runs to the end of the line.
                for rest in chars.by_ref() {
                    if rest == '\n' {
                        break;
                    }
                }
                end_word(&mut words, &mut word, &mut in_word);
                end_part(&mut parts, &mut words);
            }
            c if c.is_whitespace() => end_word(&mut words, &mut word, &mut in_word),
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    end_part(&mut parts, &mut words);
    Some(parts)
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
            ("git push --force", git, true),
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
            ("git status $HOME", git_status, true),
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
            ("git status # ; rm -rf /", git_status, true),
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
            ("git status && ls", None),
            ("sudo git status", None),
            ("git status $(id)", None),
            ("/bin/ls", None),
            ("", None),
        ] {
            assert_eq!(suggested(command).as_deref(), want, "{command}");
        }
    }
}
