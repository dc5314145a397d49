//! The environment of every process sandpiper starts for a tool: bash, man and stdio MCP
//! servers.
//!
//! sandpiper holds secrets in its own environment (`DISCORD_TOKEN`, `OPENAI_API_KEY`,
//! `SANDPIPER_DATABASE_URL`, …). A child inherits all of it by default, so an approved `env`
//! would print them into the thread. Here a child starts from nothing: an allow-list of
//! harmless variables copied from sandpiper's environment ([`ALLOWED`]), then what the operator
//! names (`[tools] pass_env`, copied by name; `[tools] env`, values). Building it in one place
//! keeps every spawn site to one call, [`ChildEnv::apply`], which clears the inherited
//! environment first.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::config::{Env, ToolsConfig};
use crate::process::confine::tool_process::ToolCommand;
use crate::process::confine::{Confinement, Profile};

/// Variables copied from sandpiper's environment into every child: what programs need to find
/// things and format text, nothing that authenticates.
pub const ALLOWED: &[&str] = &[
    "PATH", "HOME", "LANG", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
];

/// The `LC_*` locale variables glibc knows (the allow-list's `LC_*`). [`Env`] looks variables
/// up by name, so the family is spelled out.
pub const LOCALE: &[&str] = &[
    "LC_ALL",
    "LC_CTYPE",
    "LC_COLLATE",
    "LC_MESSAGES",
    "LC_MONETARY",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_ADDRESS",
    "LC_IDENTIFICATION",
    "LC_MEASUREMENT",
    "LC_NAME",
    "LC_PAPER",
    "LC_TELEPHONE",
];

/// A complete environment for a child process, and how the process is confined
/// ([`crate::process::confine`]). Values may be secrets the operator chose to pass, so `Debug` shows
/// names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChildEnv {
    vars: BTreeMap<String, String>,
    confinement: Confinement,
}

impl fmt::Debug for ChildEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl ChildEnv {
    /// The allow-list ([`ALLOWED`] and [`LOCALE`]) copied from `env`; what an MCP server
    /// starts from.
    pub fn allow_listed(env: &dyn Env) -> Self {
        let vars = ALLOWED
            .iter()
            .chain(LOCALE)
            .filter_map(|name| env.var(name).map(|value| ((*name).to_owned(), value)))
            .collect();
        Self {
            vars,
            confinement: Confinement::none(),
        }
    }

    /// This environment with its processes confined by `confinement`.
    pub fn confined(mut self, confinement: Confinement) -> Self {
        self.confinement = confinement;
        self
    }

    /// How processes started from this environment are confined.
    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }

    /// What bash and man get: the allow-list, then `[tools] pass_env` copied from `env` by
    /// name, then `[tools] env` (values win over everything copied).
    pub fn for_tools(env: &dyn Env, tools: &ToolsConfig) -> Self {
        let mut child = Self::allow_listed(env);
        for name in &tools.pass_env {
            match env.var(name) {
                Some(value) => {
                    child.vars.insert(name.clone(), value);
                }
                None => tracing::debug!(variable = %name, "pass_env variable is not set"),
            }
        }
        child.with_vars(&tools.env)
    }

    /// What a stdio MCP server gets: the allow-list, `[tools] env`, then the server's own
    /// configured `env` (never `pass_env`: a server is given secrets in its own section).
    pub fn for_mcp_servers(env: &dyn Env, tools: &ToolsConfig) -> Self {
        Self::allow_listed(env).with_vars(&tools.env)
    }

    /// This environment plus `vars` (which win).
    pub fn with_vars(mut self, vars: &BTreeMap<String, String>) -> Self {
        self.vars
            .extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }

    /// This environment plus one variable.
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.vars.insert(name.to_owned(), value.to_owned());
        self
    }

    /// The value of `name`, if this environment sets it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The variable names, sorted (for logs: values may be secrets).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vars.keys().map(String::as_str)
    }

    /// A command for `program` that starts from this environment and nothing inherited: how
    /// every product spawn site builds its command. A bare program name is looked up on this
    /// environment's `PATH` here ([`ChildEnv::resolve`]), as the child's `execvp` would.
    pub fn command(&self, program: impl AsRef<OsStr>) -> tokio::process::Command {
        self.command_as(program, Profile::Tool)
    }

    /// [`ChildEnv::command`] confined as `profile` (math's sandbox asks for
    /// [`Profile::Math`]).
    pub fn command_as(
        &self,
        program: impl AsRef<OsStr>,
        profile: Profile,
    ) -> tokio::process::Command {
        let mut command = self
            .confinement
            .command(&self.resolve(program.as_ref()), profile);
        self.apply(&mut command);
        command
    }

    /// A tool's shell process for `program` ([`ToolCommand`]): bash's calls, started through
    /// the standing spawner where there is one.
    pub fn tool_command(&self, program: impl AsRef<OsStr>) -> ToolCommand {
        let env = self
            .vars
            .iter()
            .map(|(n, v)| (n.into(), v.into()))
            .collect();
        ToolCommand::new(
            self.confinement.clone(),
            self.resolve(program.as_ref()).into_owned(),
            env,
        )
    }

    /// `program` as `execvp` would find it on this environment's `PATH`: the first absolute
    /// `PATH` directory holding an executable file of that name. Anything else (a path, no
    /// `PATH`, a relative `PATH` entry reached first, nothing found) is returned as given.
    ///
    /// Why: std starts a child with `posix_spawn` (no copy of sandpiper's address space)
    /// unless the child's environment sets `PATH` and the program is a bare name; then it
    /// forks the whole process to search that `PATH` in the child, the largest part of
    /// sandpiper's own cost of a bash call.
    pub fn resolve<'a>(&self, program: &'a OsStr) -> Cow<'a, OsStr> {
        let bare = !program.is_empty() && !program.as_encoded_bytes().contains(&b'/');
        let Some(path) = self.get("PATH").filter(|_| bare) else {
            return Cow::Borrowed(program);
        };
        for dir in path.split(':').map(Path::new) {
            if !dir.is_absolute() {
                // Relative to the child's working directory: leave the search to the child.
                break;
            }
            let candidate = dir.join(program);
            if is_executable(&candidate) {
                return Cow::Owned(candidate.into_os_string());
            }
        }
        Cow::Borrowed(program)
    }

    /// Makes `command` start from this environment and nothing inherited. Variables set on
    /// `command` afterwards (e.g. `MANPAGER`) are added on top.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        command.env_clear().envs(&self.vars);
    }
}

/// Whether `path` is a regular file someone may execute (what `execvp` would try).
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const SECRETS: [(&str, &str); 9] = [
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/bot"),
        ("LC_TIME", "C"),
        ("DISCORD_TOKEN", "discord-secret"),
        ("OPENAI_API_KEY", "sk-secret"),
        ("SANDPIPER_DATABASE_URL", "postgres://u:pw@db/x"),
        ("SLACK_BOT_TOKEN", "xoxb-secret"),
        ("GITHUB_TOKEN", "ghp-passed"),
        ("LD_PRELOAD", "/tmp/evil.so"),
    ];

    fn pairs(env: &ChildEnv) -> Vec<(&str, &str)> {
        env.vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn only_the_allow_list_is_copied() {
        assert_eq!(
            pairs(&ChildEnv::allow_listed(&SECRETS)),
            [
                ("HOME", "/home/bot"),
                ("LC_TIME", "C"),
                ("PATH", "/usr/bin:/bin")
            ]
        );
    }

    #[test]
    fn tools_get_pass_env_by_name_and_configured_values() {
        let tools = ToolsConfig {
            pass_env: vec!["GITHUB_TOKEN".into(), "NOT_SET".into()],
            env: BTreeMap::from([
                ("CARGO_TERM_COLOR".into(), "never".into()),
                ("PATH".into(), "/opt/bin".into()),
            ]),
            ..ToolsConfig::default()
        };
        assert_eq!(
            pairs(&ChildEnv::for_tools(&SECRETS, &tools)),
            [
                ("CARGO_TERM_COLOR", "never"),
                ("GITHUB_TOKEN", "ghp-passed"),
                ("HOME", "/home/bot"),
                ("LC_TIME", "C"),
                ("PATH", "/opt/bin"),
            ]
        );
    }

    #[test]
    fn mcp_servers_never_get_pass_env() {
        let tools = ToolsConfig {
            pass_env: vec!["GITHUB_TOKEN".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
            ..ToolsConfig::default()
        };
        let server = ChildEnv::for_mcp_servers(&SECRETS, &tools)
            .with_vars(&BTreeMap::from([("API_KEY".into(), "server-own".into())]));
        assert_eq!(
            pairs(&server),
            [
                ("A", "1"),
                ("API_KEY", "server-own"),
                ("HOME", "/home/bot"),
                ("LC_TIME", "C"),
                ("PATH", "/usr/bin:/bin"),
            ]
        );
    }

    #[test]
    fn debug_shows_names_not_values() {
        let env = ChildEnv::default().with("GITHUB_TOKEN", "ghp-passed");
        assert_eq!(format!("{env:?}"), "{\"GITHUB_TOKEN\"}");
    }

    #[tokio::test]
    async fn a_child_sees_nothing_else() {
        let env = ChildEnv::allow_listed(&SECRETS).with("MARK", "1");
        let mut command = tokio::process::Command::new("/usr/bin/env");
        env.apply(&mut command);
        let out = command.output().await.expect("env runs");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        assert_eq!(
            lines,
            [
                "HOME=/home/bot",
                "LC_TIME=C",
                "MARK=1",
                "PATH=/usr/bin:/bin"
            ]
        );
    }

    #[test]
    fn a_bare_name_is_found_on_the_childs_path_as_execvp_would() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("a temp dir");
        let (first, second) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&first, &second] {
            std::fs::create_dir(d).expect("a dir");
        }
        // Not executable in the first directory: skipped, as execvp skips it.
        std::fs::write(first.join("tool"), "").expect("a file");
        std::fs::write(second.join("tool"), "#!/bin/sh\n").expect("a file");
        std::fs::set_permissions(second.join("tool"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let path = format!("{}:{}", first.display(), second.display());
        let env = ChildEnv::default().with("PATH", &path);
        let found = second.join("tool");
        assert_eq!(env.resolve(OsStr::new("tool")), found.as_os_str());
        // Paths, unknown names, no PATH and a relative entry first are left to the child.
        assert_eq!(env.resolve(OsStr::new("./tool")), OsStr::new("./tool"));
        assert_eq!(env.resolve(OsStr::new("nope")), OsStr::new("nope"));
        assert_eq!(
            ChildEnv::default().resolve(OsStr::new("tool")),
            OsStr::new("tool")
        );
        let relative_first = ChildEnv::default().with("PATH", &format!("bin:{path}"));
        assert_eq!(
            relative_first.resolve(OsStr::new("tool")),
            OsStr::new("tool")
        );
    }
}
