//! Which paths the file tools may touch, and which of them need a person's approval.
//!
//! The tools that never ask (`read_file`, `search`) are safe only while they stay inside the
//! workstream's own directory: outside it they ask like `write_file` does. Some files are never
//! readable or writable through any tool, asked or not: sandpiper's configuration file, its
//! database files (`-wal`, `-shm` and `-journal` included) and whatever matches
//! `[tools] deny_read`. An approver cannot see what a read would leak into the thread, so
//! approval is no protection for those.
//!
//! Everything is decided on canonical paths (symlinks resolved, `..` applied), so a link or a
//! `..` that leads out of the directory counts as outside; a path that does not exist yet is
//! judged by its nearest existing ancestor. [`PathPolicy`] holds the rules and decides without
//! I/O ([`PathPolicy::judge`]); [`canonicalize_lenient`] is the one place that asks the file
//! system. Tools judge a path twice: in `prepare` (to decide whether to ask) and again in
//! `execute` (the file system may have changed while the call waited for approval).

use std::path::{Component, Path, PathBuf};

use super::{ToolContext, ToolError, normalize};
use crate::config::ToolsConfig;

/// The rules, built once at start-up from the config and the files sandpiper itself uses.
#[derive(Debug, Clone, Default)]
pub struct PathPolicy {
    /// Files no tool may touch (the config file, the database files), each in its given
    /// absolute form and its canonical form.
    protected: Vec<PathBuf>,
    /// `deny_read` patterns, absolute, `~` expanded.
    deny: Vec<DenyPattern>,
}

/// One `deny_read` entry: a path whose components may be `*`-globs matching one component.
/// It denies the path itself and everything under it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DenyPattern {
    /// As written in the config, for messages.
    shown: String,
    /// The absolute pattern, component by component.
    parts: Vec<String>,
}

/// What a tool may do with a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathAccess {
    /// Inside the workstream's directory: reading needs no approval.
    Inside,
    /// Outside it: reading needs approval.
    Outside,
    /// Never, asked or not.
    Denied(Denial),
}

/// Why a path is never accessible through tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// sandpiper's own configuration or database.
    Protected,
    /// It matches this `[tools] deny_read` entry.
    DenyRead(String),
    /// A process's environment or memory under `/proc`, by any path (`/proc/<pid>/environ`,
    /// `/proc/self/task/<tid>/environ`, `/proc/thread-self/mem`, …): always denied, whatever
    /// `deny_read` says, because the bot's own would hold its tokens.
    ProcessSecret,
}

/// The files of `/proc` that hold a process's environment or memory.
const PROCESS_SECRETS: [&str; 2] = ["environ", "mem"];

/// Whether `path` (absolute, normalized) names a process's environment or memory in `/proc`,
/// at any depth (a thread's under `task/<tid>/` too).
pub fn is_process_secret(path: &Path) -> bool {
    let mut names = path.components().filter_map(|c| match c {
        Component::Normal(s) => Some(s),
        _ => None,
    });
    names.next().is_some_and(|first| first == "proc")
        && path
            .file_name()
            .is_some_and(|name| PROCESS_SECRETS.iter().any(|s| name == *s))
        && names.count() >= 2
}

impl PathPolicy {
    /// The policy for `deny_read` patterns (`~` expands to `home`; a relative pattern is
    /// relative to `cwd`) and `protected` files (absolute). Pure: give canonical forms of the
    /// protected files too if they may differ ([`PathPolicy::build`] does).
    pub fn new(
        deny_read: &[String],
        home: Option<&Path>,
        cwd: &Path,
        protected: impl IntoIterator<Item = PathBuf>,
    ) -> Self {
        let deny = deny_read
            .iter()
            .filter_map(|raw| DenyPattern::parse(raw, home, cwd))
            .collect();
        let mut policy = Self {
            protected: Vec::new(),
            deny,
        };
        for p in protected {
            policy.protect(normalize(&cwd.join(p)));
        }
        policy
    }

    /// The policy for `tools` and the files sandpiper must keep to itself (the config file, the
    /// database files): reads `$HOME` and the current directory, and adds the canonical form
    /// of every protected file and deny pattern (a symlinked home must not open a way round).
    pub fn build(tools: &ToolsConfig, protected: &[PathBuf]) -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let mut policy = Self::new(&tools.deny_read, home.as_deref(), &cwd, protected.to_vec());
        for p in policy.protected.clone() {
            policy.protect(canonicalize_lenient(&p));
        }
        let canonical: Vec<DenyPattern> = policy
            .deny
            .iter()
            .filter_map(DenyPattern::canonical)
            .collect();
        for pattern in canonical {
            if !policy.deny.contains(&pattern) {
                policy.deny.push(pattern);
            }
        }
        policy
    }

    fn protect(&mut self, path: PathBuf) {
        if !self.protected.contains(&path) {
            self.protected.push(path);
        }
    }

    /// Why `path` (absolute) may never be touched, if it may not.
    pub fn denial(&self, path: &Path) -> Option<Denial> {
        if self.protected.iter().any(|p| p == path) {
            return Some(Denial::Protected);
        }
        if is_process_secret(path) {
            return Some(Denial::ProcessSecret);
        }
        self.deny
            .iter()
            .find(|d| d.matches(path))
            .map(|d| Denial::DenyRead(d.shown.clone()))
    }

    /// Decides about `path` for a workstream working in `workdir`. Both must be canonical
    /// (see [`canonicalize_lenient`]); `lexical` is the path as resolved before
    /// canonicalization, also checked against the denials.
    pub fn judge(&self, workdir: &Path, lexical: &Path, canonical: &Path) -> PathAccess {
        if let Some(d) = self.denial(canonical).or_else(|| self.denial(lexical)) {
            return PathAccess::Denied(d);
        }
        match canonical.starts_with(workdir) {
            true => PathAccess::Inside,
            false => PathAccess::Outside,
        }
    }
}

impl DenyPattern {
    fn parse(raw: &str, home: Option<&Path>, cwd: &Path) -> Option<Self> {
        let trimmed = raw.trim();
        let absolute = if trimmed == "~" || trimmed.starts_with("~/") {
            let Some(home) = home else {
                tracing::warn!(pattern = raw, "tools.deny_read: no home directory for `~`");
                return None;
            };
            home.join(trimmed.trim_start_matches('~').trim_start_matches('/'))
        } else {
            cwd.join(trimmed)
        };
        let parts = normalize(&absolute)
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect::<Vec<_>>();
        Some(Self {
            shown: raw.to_owned(),
            parts,
        })
    }

    /// The same pattern with its literal prefix (up to the first glob) canonicalized, when
    /// that differs.
    fn canonical(&self) -> Option<Self> {
        let literal = self.parts.iter().take_while(|p| !p.contains('*')).count();
        let prefix: PathBuf = std::iter::once("/".to_owned())
            .chain(self.parts[..literal].iter().cloned())
            .collect();
        let resolved = canonicalize_lenient(&prefix);
        let mut parts: Vec<String> = resolved
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        parts.extend(self.parts[literal..].iter().cloned());
        (parts != self.parts).then(|| Self {
            shown: self.shown.clone(),
            parts,
        })
    }

    /// Whether `path` is this pattern or under it.
    fn matches(&self, path: &Path) -> bool {
        let mut components = path.components().filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy()),
            _ => None,
        });
        self.parts.iter().all(|part| {
            components
                .next()
                .is_some_and(|name| glob_component(part, &name))
        })
    }
}

/// `*` matches any run of characters within one path component; everything else literally.
fn glob_component(pattern: &str, name: &str) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(i) => rest = &rest[i + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// `path` (absolute) with symlinks resolved and `..` applied; a path that does not exist yet
/// is its nearest existing ancestor, canonicalized, with the rest appended.
pub fn canonicalize_lenient(path: &Path) -> PathBuf {
    let path = normalize(path);
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            let mut out = canonical;
            out.extend(rest.iter().rev());
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path,
        }
    }
}

/// The files of a SQLite database URL (`sqlite://FILE`, `sqlite:FILE`, with or without a
/// `?query`): the file and its `-wal`, `-shm` and `-journal`. Nothing for other databases.
pub fn database_files(url: &str) -> Vec<PathBuf> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        return Vec::new();
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let file = rest.split('?').next().unwrap_or_default();
    if file.is_empty() || file == ":memory:" {
        return Vec::new();
    }
    ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| PathBuf::from(format!("{file}{suffix}")))
        .collect()
}

/// A path argument as a tool sees it: resolved, canonical, and judged.
#[derive(Debug, Clone)]
pub struct CheckedPath {
    /// Resolved against the working directory and normalized (what the model named).
    pub resolved: PathBuf,
    /// Symlinks resolved: what is actually opened.
    pub canonical: PathBuf,
    /// Whether it needs approval (`Outside`); `Denied` never comes back from the checks.
    pub outside: bool,
}

impl ToolContext {
    /// Judges a path argument. A denied path is an error for the model; `outside` says a
    /// tool that reads without asking inside the workstream's directory must ask for this one.
    pub fn check_path(&self, path: &str) -> Result<CheckedPath, ToolError> {
        let resolved = self.resolve(path);
        let canonical = canonicalize_lenient(&resolved);
        let workdir = canonicalize_lenient(&self.workdir);
        match self.paths.judge(&workdir, &resolved, &canonical) {
            PathAccess::Denied(d) => Err(denied(path, &d)),
            access => Ok(CheckedPath {
                resolved,
                canonical,
                outside: access == PathAccess::Outside,
            }),
        }
    }

    /// The check again at execute time: `approved_outside` is whether the call was prepared
    /// as one that asks (so a person, a grant or `--yes` let it through). A path that was
    /// inside when prepared but leads outside now (a link swapped meanwhile) is refused.
    pub fn recheck_read(
        &self,
        path: &str,
        approved_outside: bool,
    ) -> Result<CheckedPath, ToolError> {
        let checked = self.check_path(path)?;
        if checked.outside && !approved_outside {
            return Err(ToolError::model(format!(
                "refused: {path} now leads outside the working directory ({}), which it did \
                 not when the call was prepared; call again to ask for approval",
                self.workdir.display()
            )));
        }
        Ok(checked)
    }
}

/// The refusal the model sees.
pub fn denied(shown: &str, denial: &Denial) -> ToolError {
    match denial {
        Denial::Protected => ToolError::model(format!(
            "refused: {shown} is sandpiper's own configuration or database; no tool may read or \
             change it, with or without approval"
        )),
        Denial::ProcessSecret => ToolError::model(format!(
            "refused: {shown} is a process's environment or memory, which may hold sandpiper's \
             tokens; no tool may read it, with or without approval"
        )),
        Denial::DenyRead(pattern) => ToolError::model(format!(
            "refused: {shown} is covered by `{pattern}` in [tools] deny_read; no tool may read \
             or change it, with or without approval"
        )),
    }
}

/// The note an approval card shows for a read outside the working directory.
pub fn outside_note(checked: &CheckedPath, workdir: &Path) -> String {
    format!(
        "reads {} — outside this workstream's directory ({})",
        checked.canonical.display(),
        workdir.display()
    )
}

#[cfg(test)]
mod tests;
