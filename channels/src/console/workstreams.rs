//! The console's workstreams follow the project: by default `sandpiper chat` continues the
//! workstream of the directory its tools work in ([`name_for_dir`]), so `cd ../other` does not
//! continue another project's history. `--list` and `/workstreams` list them
//! ([`list`]); `--resume [NAME]` picks one, the last used by default ([`pick`]).

use std::path::Path;

use sandpiper_agent::protocol::ConsoleWorkstream;
use sha2::{Digest, Sha256};

use crate::visible::escape_invisible;

/// Most characters of the directory's name in a workstream name.
const NAME_CHARS: usize = 32;

/// Most characters of the last message shown in a list.
const MESSAGE_CHARS: usize = 60;

/// The default workstream for tools working in `dir`: its name and a short hash of its
/// canonical path (`app-1f3a9c2e`), so two checkouts called `app` stay apart and a symlink
/// to one is the same.
pub fn name_for_dir(dir: &Path) -> String {
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let base: String = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".to_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(NAME_CHARS)
        .collect();
    let digest = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{base}-{short}")
}

/// The workstream `--resume` continues: `wanted` (a name, or its `console:` key), else the
/// last used. The error is what to tell the person.
pub fn pick(workstreams: &[ConsoleWorkstream], wanted: Option<&str>) -> Result<String, String> {
    match wanted {
        Some(wanted) => {
            let name = wanted.strip_prefix("console:").unwrap_or(wanted);
            workstreams
                .iter()
                .find(|w| w.name == name)
                .map(|w| w.name.clone())
                .ok_or_else(|| {
                    format!(
                        "there is no console workstream `{name}`; `sandpiper chat --list` \
                         lists them"
                    )
                })
        }
        None => workstreams
            .iter()
            .find(|w| !w.closed)
            .map(|w| w.name.clone())
            .ok_or_else(|| {
                "there is no console workstream to resume yet; `sandpiper chat` starts one"
                    .to_owned()
            }),
    }
}

/// The list: most recent first, one line each with when it was last active, its directory
/// and a short last message; `current` is marked `*`.
pub fn list(workstreams: &[ConsoleWorkstream], current: Option<&str>) -> String {
    if workstreams.is_empty() {
        return "No console workstreams yet; `sandpiper chat` starts one.\n".to_owned();
    }
    let width = workstreams.iter().map(|w| w.name.len()).max().unwrap_or(0);
    let mut out = String::from(
        "Console workstreams, most recent first (`sandpiper chat --resume NAME` continues one):\n",
    );
    for w in workstreams {
        let mark = if current == Some(w.name.as_str()) {
            '*'
        } else {
            ' '
        };
        let when = chrono::DateTime::from_timestamp_millis(w.last_active_ms)
            .map(|t| {
                t.with_timezone(&chrono::Local)
                    .format("%Y-%m-%d %H:%M")
                    .to_string()
            })
            .unwrap_or_default();
        let dir = w.workdir.as_deref().unwrap_or("(directory not recorded)");
        let closed = if w.closed { " (closed)" } else { "" };
        let said = w
            .last_message
            .as_deref()
            .map(|m| format!("  \"{}\"", short(m)))
            .unwrap_or_default();
        out.push_str(&format!(
            "{mark} {:<width$}  {when}  {}{closed}{said}\n",
            w.name,
            escape_invisible(dir),
        ));
    }
    out
}

/// The first line of a message, cut to [`MESSAGE_CHARS`].
fn short(message: &str) -> String {
    let first = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut cut: String = first.trim().chars().take(MESSAGE_CHARS).collect();
    if cut.len() < first.trim().len() || message.trim().lines().count() > 1 {
        cut.push('…');
    }
    escape_invisible(&cut).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn ws(name: &str, closed: bool) -> ConsoleWorkstream {
        ConsoleWorkstream {
            name: name.into(),
            workdir: Some(format!("/src/{name}")),
            last_active_ms: 0,
            last_message: Some("fix the build\nand the tests".into()),
            closed,
        }
    }

    #[test]
    fn a_directory_names_its_workstream_by_name_and_path() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let app_a = a.path().join("my app");
        let app_b = b.path().join("my app");
        std::fs::create_dir(&app_a).unwrap();
        std::fs::create_dir(&app_b).unwrap();
        let name = name_for_dir(&app_a);
        assert!(name.starts_with("my-app-"), "{name}");
        assert_eq!(name.len(), "my-app-".len() + 8);
        assert_ne!(name, name_for_dir(&app_b));
        // The same directory by another path is the same workstream.
        assert_eq!(name, name_for_dir(&app_a.join("..").join("my app")));
    }

    #[test]
    fn resume_picks_the_named_or_the_last_open_one() {
        let all = [
            ws("closed-one", true),
            ws("app-1", false),
            ws("default", false),
        ];
        assert_eq!(pick(&all, None), Ok("app-1".into()));
        assert_eq!(pick(&all, Some("default")), Ok("default".into()));
        assert_eq!(pick(&all, Some("console:default")), Ok("default".into()));
        assert!(pick(&all, Some("nope")).unwrap_err().contains("--list"));
        assert!(
            pick(&[], None)
                .unwrap_err()
                .contains("no console workstream")
        );
    }

    #[test]
    fn the_list_marks_the_current_one_and_cuts_the_message() {
        let text = list(&[ws("app-1", false), ws("default", true)], Some("app-1"));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("* app-1  "), "{text}");
        assert!(
            lines[1].ends_with("/src/app-1  \"fix the build…\""),
            "{text}"
        );
        assert!(lines[2].starts_with("  default"), "{text}");
        assert!(lines[2].contains("(closed)"), "{text}");
    }
}
