//! The catastrophic-command blocklist in front of `bash`.
//!
//! A safety net for commands that can wreck the machine in one keystroke (`rm -rf /`, fork
//! bombs, writing to a disk device, powering off), not a sandbox: approval is the real gate,
//! and a determined command can always get around a list like this.
//!
//! The command is split into simple commands the way a shell would (quotes, `;`, `&&`, `|`,
//! `$( )`, backticks), and each one is checked by its command word after wrappers such as
//! `sudo`, `env`, `nohup` or `timeout`. Quoted text is data (`echo "rm -rf /"` and
//! `grep -rn "shutdown" src` run), except in the arguments of a shell (`bash -c '…'`,
//! `sh -c`, `ssh host '…'`, `eval '…'`), which are checked as commands too. Fork bombs are
//! matched anywhere in the text.

use std::sync::LazyLock;

use regex::Regex;

/// Why `command` must not run, or `None` when the blocklist has nothing against it.
pub(crate) fn blocked_reason(command: &str) -> Option<String> {
    if is_fork_bomb(command) {
        return Some("a fork bomb".into());
    }
    check_script(command, 0)
}

/// Shells whose arguments are scripts in their own right.
const SHELLS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "fish", "eval", "su", "ssh",
];

/// Words that come before the real command word.
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "nohup", "exec", "command", "builtin", "time", "nice", "ionice",
    "xargs", "timeout", "stdbuf", "setsid", "unbuffer", "busybox", "eval", "then", "do", "else",
    "elif", "if", "while", "until", "!",
];

/// Wrapper flags that take a value (`sudo -u root`, `nice -n 5`, `timeout -s KILL`).
const FLAGS_WITH_VALUE: &[&str] = &[
    "-u", "-g", "-C", "-D", "-p", "-r", "-t", "-U", "-n", "-s", "-k",
];

/// Top-level directories whose recursive removal (or chmod) breaks the system.
const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
    "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// Device names (under `/dev/`) that are whole disks or partitions.
const DISK_PREFIXES: &[&str] = &[
    "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk/", "mapper/", "md", "dm-",
];

#[derive(Debug, Clone, Default, PartialEq)]
struct Word {
    text: String,
    quoted: bool,
}

fn check_script(script: &str, depth: usize) -> Option<String> {
    for words in split_commands(script) {
        let Some(start) = command_start(&words) else {
            continue;
        };
        let name = basename(&words[start].text);
        let args = &words[start + 1..];
        if let Some(reason) = check_command(name, args) {
            return Some(reason);
        }
        if let Some(reason) = check_redirections(&words) {
            return Some(reason);
        }
        if depth < 4 && SHELLS.contains(&name) {
            for arg in args {
                if let Some(reason) = check_script(&arg.text, depth + 1) {
                    return Some(reason);
                }
            }
        }
    }
    None
}

fn check_command(name: &str, args: &[Word]) -> Option<String> {
    let texts: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    match name {
        "rm" => {
            if texts.contains(&"--no-preserve-root") {
                return Some("`rm --no-preserve-root`".into());
            }
            let (recursive, targets) = flags_and_targets(&texts, &["--recursive"], &['r', 'R']);
            let target = targets.into_iter().find(|t| is_critical_path(t))?;
            recursive.then(|| format!("`rm -r` on `{target}`"))
        }
        "chmod" | "chown" | "chgrp" => {
            let (recursive, targets) = flags_and_targets(&texts, &["--recursive"], &['R']);
            let target = targets.into_iter().find(|t| is_critical_path(t))?;
            recursive.then(|| format!("a recursive `{name}` on `{target}`"))
        }
        "mke2fs" | "mkswap" | "wipefs" => device_arg(&texts).map(|d| format!("`{name}` on `{d}`")),
        _ if name.starts_with("mkfs") => device_arg(&texts).map(|d| format!("`{name}` on `{d}`")),
        "dd" => texts
            .iter()
            .filter_map(|a| a.strip_prefix("of="))
            .find(|d| is_disk_device(d))
            .map(|d| format!("`dd` writing to `{d}`")),
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(format!("`{name}`")),
        "systemctl" => texts
            .iter()
            .find(|a| matches!(**a, "poweroff" | "reboot" | "halt" | "kexec"))
            .map(|a| format!("`systemctl {a}`")),
        "init" | "telinit" => texts
            .first()
            .filter(|a| matches!(**a, "0" | "6"))
            .map(|a| format!("`{name} {a}`")),
        _ => None,
    }
}

/// Splits arguments into "has a recursive flag" and the operands.
fn flags_and_targets<'a>(args: &[&'a str], long: &[&str], short: &[char]) -> (bool, Vec<&'a str>) {
    let mut recursive = false;
    let mut targets = Vec::new();
    let mut options_done = false;
    for arg in args {
        if options_done || !arg.starts_with('-') || *arg == "-" {
            targets.push(*arg);
        } else if *arg == "--" {
            options_done = true;
        } else if arg.starts_with("--") {
            recursive |= long.contains(arg);
        } else {
            recursive |= arg.chars().skip(1).any(|c| short.contains(&c));
        }
    }
    (recursive, targets)
}

fn device_arg<'a>(args: &[&'a str]) -> Option<&'a str> {
    args.iter().copied().find(|a| is_disk_device(a))
}

fn is_disk_device(path: &str) -> bool {
    path.strip_prefix("/dev/")
        .is_some_and(|dev| DISK_PREFIXES.iter().any(|p| dev.starts_with(p)))
}

/// `/`, the home directory or a top-level system directory, in any spelling the shell accepts
/// (`/*`, `//`, `/.`, `~/`, `$HOME`, `/usr/`).
fn is_critical_path(target: &str) -> bool {
    let collapsed = target.replace("//", "/");
    let mut t = collapsed.as_str();
    loop {
        let before = t.len();
        for suffix in ["/*", "/..", "/.", "/"] {
            if let Some(rest) = t.strip_suffix(suffix) {
                t = rest;
            }
        }
        if t.len() == before {
            break;
        }
    }
    t.is_empty() || matches!(t, "~" | "$HOME" | "${HOME}") || SYSTEM_DIRS.contains(&t)
}

/// `> /dev/sda`, `2>/dev/nvme0n1`, `>> /dev/sdb1` outside quotes.
fn check_redirections(words: &[Word]) -> Option<String> {
    for (i, word) in words.iter().enumerate() {
        if word.quoted {
            continue;
        }
        let Some(pos) = word.text.rfind('>') else {
            continue;
        };
        let after = word.text[pos + 1..].trim_start_matches(['|', '&']);
        let target = match after.is_empty() {
            true => words.get(i + 1).map(|w| w.text.as_str()),
            false => Some(after),
        };
        if let Some(t) = target.filter(|t| is_disk_device(t)) {
            return Some(format!("a redirection into `{t}`"));
        }
    }
    None
}

/// Index of the command word: the first word after assignments and wrappers.
fn command_start(words: &[Word]) -> Option<usize> {
    let mut i = 0;
    let mut after_wrapper = false;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        let assignment = !word.quoted
            && t.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        if WRAPPERS.contains(&basename(t)) {
            after_wrapper = true;
        } else if after_wrapper && t.starts_with('-') {
            if FLAGS_WITH_VALUE.contains(&t) {
                i += 1;
            }
        } else if !(assignment || (after_wrapper && t.starts_with(|c: char| c.is_ascii_digit()))) {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Splits a script into simple commands of words, roughly as bash does.
fn split_commands(script: &str) -> Vec<Vec<Word>> {
    let mut commands = Vec::new();
    let mut words: Vec<Word> = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = script.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next().filter(|n| *n != '\n') {
                    word.get_or_insert_default().text.push(next);
                }
            }
            '\'' | '"' => {
                let w = word.get_or_insert_default();
                w.quoted = true;
                while let Some(q) = chars.next() {
                    match q {
                        _ if q == c => break,
                        '\\' if c == '"' => {
                            if let Some(next) = chars.next() {
                                w.text.push(next);
                            }
                        }
                        _ => w.text.push(q),
                    }
                }
            }
            '$' if chars.peek() == Some(&'{') => {
                let w = word.get_or_insert_default();
                w.text.push('$');
                for q in chars.by_ref() {
                    w.text.push(q);
                    if q == '}' {
                        break;
                    }
                }
            }
            '#' if word.is_none() => {
                for q in chars.by_ref() {
                    if q == '\n' {
                        break;
                    }
                }
                words.extend(word.take());
                commands.push(std::mem::take(&mut words));
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '`' | '{' | '}' => {
                words.extend(word.take());
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
            }
            _ if c.is_whitespace() => words.extend(word.take()),
            _ => word.get_or_insert_default().text.push(c),
        }
    }
    words.extend(word.take());
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

fn is_fork_bomb(command: &str) -> bool {
    static BOMB: LazyLock<Option<Regex>> = LazyLock::new(|| {
        let name = r"([A-Za-z_:.][A-Za-z0-9_:.]*)";
        Regex::new(&format!(r"{name}(?:\(\))?\{{{name}\|{name}&;?\}}")).ok()
    });
    let Some(re) = BOMB.as_ref() else {
        return false;
    };
    let squeezed: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    re.captures_iter(&squeezed).any(|caps| {
        let (Some(def), Some(a), Some(b)) = (caps.get(1), caps.get(2), caps.get(3)) else {
            return false;
        };
        let def = def.as_str();
        let def = def
            .strip_prefix("function")
            .filter(|d| *d == a.as_str())
            .unwrap_or(def);
        def == a.as_str() && def == b.as_str()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catastrophic_commands_are_blocked() {
        let blocked = [
            "rm -rf /",
            "rm -rf /*",
            "rm -fr /",
            "rm -r -f /",
            "rm -Rf //",
            "rm -rf / --no-preserve-root",
            "rm --no-preserve-root -rf /",
            "sudo rm -rf /",
            "sudo -u root rm -rf /",
            "/bin/rm -rf /",
            "rm -rf -- /",
            "rm -rf \"/\"",
            "rm -rf ~",
            "rm -rf ~/",
            "rm -rf $HOME",
            "rm -rf \"${HOME}\"/*",
            "rm -rf /usr",
            "rm -rf /etc/",
            "cd /tmp && rm -rf /",
            "echo hi; rm -rf /*",
            "true && sudo rm -rf / &",
            "bash -c 'rm -rf /'",
            "sh -c \"sudo rm -rf /\"",
            "ssh host 'rm -rf /'",
            "eval rm -rf /",
            "echo $(rm -rf /)",
            ":(){ :|:& };:",
            ":() { : | : & } ; :",
            "bomb(){ bomb|bomb& };bomb",
            "function f { f|f& }; f",
            "mkfs.ext4 /dev/sda1",
            "sudo mkfs -t ext4 /dev/nvme0n1p1",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            "dd if=image.iso of=/dev/nvme0n1",
            "echo x > /dev/sda",
            "cat img >/dev/sdb",
            "chmod -R 777 /",
            "sudo chown -R nobody /",
            "shutdown -h now",
            "sudo reboot",
            "halt",
            "poweroff",
            "systemctl reboot",
            "nohup shutdown now &",
            "timeout 5 reboot",
            "if true; then reboot; fi",
        ];
        for cmd in blocked {
            assert!(blocked_reason(cmd).is_some(), "should block: {cmd}");
        }
    }

    #[test]
    fn ordinary_commands_run() {
        let allowed = [
            "rm -rf ./build",
            "rm -rf build/ target",
            "rm -rf /tmp/x",
            "rm -rf /var/tmp/cache",
            "rm -f /tmp/a.txt",
            "rm -rf ~/project/target",
            "rm /",
            "echo \"rm -rf /\"",
            "git commit -m 'reboot the widget on shutdown'",
            "grep -rn \"shutdown\" src/",
            "grep -rn halt .",
            "systemctl status reboot.target",
            "dd if=/dev/zero of=./disk.img bs=1M count=10",
            "dd if=/dev/sda of=backup.img",
            "mkfs.ext4 ./disk.img",
            "echo x > /dev/null",
            "ls 2>/dev/null",
            "chmod -R 755 ./dist",
            "chmod 777 /tmp/x",
            "cargo test -- --nocapture",
            "cat file | sort | uniq -c",
            "find . -name '*.rs' -exec rm {} \\;",
        ];
        for cmd in allowed {
            assert_eq!(blocked_reason(cmd), None, "should run: {cmd}");
        }
    }

    #[test]
    fn reasons_name_the_problem() {
        assert_eq!(
            blocked_reason("rm -rf /*").as_deref(),
            Some("`rm -r` on `/*`")
        );
        assert_eq!(
            blocked_reason(":(){ :|:& };:").as_deref(),
            Some("a fork bomb")
        );
        assert_eq!(
            blocked_reason("dd if=x of=/dev/sdb").as_deref(),
            Some("`dd` writing to `/dev/sdb`")
        );
    }
}
