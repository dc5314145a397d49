//! The `search` tool: a regex search over files like `grep -rn`, built on ripgrep's crates.
//!
//! The walk honours `.gitignore` (also outside a git repository) and `.ignore`, searches hidden
//! files and directories (`.github/workflows`, `.gitlab-ci.yml` are where CI lives) but never
//! descends into `.git` (object store and refs: noise, never an answer), visits files in path
//! order so results are stable, skips binary files, stops after `search_max_matches` matches
//! and checks for cancellation between files.
//!
//! It runs unasked inside the workstream's directory and asks outside it (see
//! [`PathPolicy`]). The walk never follows symlinks and skips every file and directory the
//! policy denies (sandpiper's config and database, `deny_read`), so a match inside one of them
//! is never shown, asked or not.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use grep::regex::{RegexMatcher, RegexMatcherBuilder};
use grep::searcher::sinks::Lossy;
use grep::searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkBuilder;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::path_policy::{canonicalize_lenient, outside_note};
use super::{
    OutputSink, PathPolicy, Prepared, Tool, ToolContext, ToolError, ToolOutput, truncate_output,
};

/// The `search` tool. Unasked inside the workstream's directory, asks outside it.
#[derive(Debug, Default)]
pub(super) struct Search;

/// Characters of a matching line shown.
const MAX_LINE_CHARS: usize = 500;

/// The arguments of `tools/search.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    query: String,
    path: Option<String>,
}

/// A search as `prepare` checked it: the arguments and their compiled regex.
#[derive(Debug)]
pub(super) struct Request {
    args: Args,
    matcher: RegexMatcher,
}

fn parse(args: &Args) -> Result<RegexMatcher, ToolError> {
    if args.query.is_empty() {
        return Err(ToolError::model(
            "`query` is empty; give a regular expression to search for",
        ));
    }
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(&args.query)
        .map_err(|e| {
            ToolError::model(format!(
                "invalid regex /{}/: {e}. Escape special characters such as ( [ {{ . * + ? with \
                 a backslash to match them literally; the search works line by line, so the \
                 pattern cannot match a newline.",
                args.query
            ))
        })?;
    Ok(matcher)
}

#[async_trait::async_trait]
impl Tool for Search {
    type Args = Args;
    type Call = Request;
    const ASKS_FOR: Option<&'static str> = Some("searches outside the workstream's directory");
    const USAGE: &'static str = "send {\"query\": \"<regex>\"} and optionally \"path\"";

    fn name(&self) -> &'static str {
        "search"
    }

    fn prepare(&self, args: Args, ctx: &ToolContext) -> Result<(Prepared, Request), ToolError> {
        let matcher = parse(&args)?;
        let parsed = &args;
        let header = match &parsed.path {
            Some(p) => format!("search: /{}/ in {p}", parsed.query),
            None => format!("search: /{}/", parsed.query),
        };
        let checked = ctx.check_path(root_arg(parsed))?;
        let prepared = Prepared {
            header,
            preview: match checked.outside {
                true => outside_note(&checked, &ctx.workdir),
                false => String::new(),
            },
            ask: checked.outside,
        };
        Ok((prepared, Request { args, matcher }))
    }

    async fn execute(
        &self,
        request: &Request,
        prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let (args, matcher) = (&request.args, request.matcher.clone());
        // Again: the file system may have changed while the call waited.
        let root = ctx.recheck_read(root_arg(args), prepared.ask)?.canonical;
        let shown = args
            .path
            .clone()
            .unwrap_or_else(|| ctx.workdir.display().to_string());
        if !tokio::fs::try_exists(&root).await.unwrap_or(false) {
            return Err(ToolError::model(format!(
                "no such file or directory: {shown}"
            )));
        }
        let job = Job {
            matcher,
            root,
            workdir: canonicalize_lenient(&ctx.workdir),
            paths: ctx.paths.clone(),
            max: ctx.config.search_max_matches.max(1),
            cancel: ctx.cancel.clone(),
        };
        let found = tokio::task::spawn_blocking(move || job.run())
            .await
            .map_err(|e| ToolError::model(format!("search failed: {e}")))??;
        if found.lines.is_empty() {
            return Ok(ToolOutput::text(format!(
                "no matches for /{}/ in {shown}",
                args.query
            )));
        }
        let mut text = found.lines.join("\n");
        text.push('\n');
        if found.stopped {
            text.push_str(&format!(
                "[stopped after {} matches; narrow the query or the path to see the rest]",
                found.lines.len()
            ));
        }
        Ok(ToolOutput::text(truncate_output(
            &text,
            ctx.config.max_output_bytes,
        )))
    }
}

/// The path searched: the argument, or the working directory when there is none.
fn root_arg(args: &Args) -> &str {
    match &args.path {
        Some(p) if !p.trim().is_empty() => p,
        _ => ".",
    }
}

/// One search, run on a blocking thread.
struct Job {
    matcher: RegexMatcher,
    /// Canonical.
    root: PathBuf,
    /// Canonical.
    workdir: PathBuf,
    paths: Arc<PathPolicy>,
    max: usize,
    cancel: CancellationToken,
}

struct Found {
    lines: Vec<String>,
    stopped: bool,
}

impl Job {
    fn run(self) -> Result<Found, ToolError> {
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::quit(b'\0'))
            .build();
        let paths = self.paths.clone();
        // Entries under a canonical root, with links never followed, are canonical: the
        // policy can judge them as they come.
        let walk = WalkBuilder::new(&self.root)
            .require_git(false)
            .hidden(false)
            .follow_links(false)
            .sort_by_file_path(|a, b| a.cmp(b))
            .filter_entry(move |entry| {
                !is_git_dir(entry.depth(), entry.file_name())
                    && paths.denial(entry.path()).is_none()
            })
            .build();
        let mut found = Found {
            lines: Vec::new(),
            stopped: false,
        };
        for entry in walk {
            if self.cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            // Unreadable entries (permissions, broken links) are skipped like grep -s does.
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let shown = self.display(entry.path());
            let lines = &mut found.lines;
            let max = self.max;
            let result = searcher.search_path(
                &self.matcher,
                entry.path(),
                Lossy(|number, line| {
                    lines.push(format!("{shown}:{number}:{}", cut_line(line)));
                    Ok(lines.len() < max)
                }),
            );
            if result.is_err() {
                continue;
            }
            if found.lines.len() >= self.max {
                found.stopped = true;
                break;
            }
        }
        Ok(found)
    }

    /// The path relative to the working directory when it is under it.
    fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.workdir)
            .ok()
            .filter(|rel| !rel.as_os_str().is_empty())
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// Whether a walked entry is a repository's `.git` (directory, or the file a worktree has),
/// which the walk skips now that it visits hidden entries. The root itself (depth 0) is
/// searched when asked for by name.
fn is_git_dir(depth: usize, name: &std::ffi::OsStr) -> bool {
    depth > 0 && name == ".git"
}

/// The line without its newline, cut at [`MAX_LINE_CHARS`] characters.
fn cut_line(line: &str) -> String {
    let line = line.trim_end_matches(['\n', '\r']);
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((end, _)) => format!("{}[... line cut]", &line[..end]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ToolsConfig;
    use crate::tools::{NoOutput, prepare_json};
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};
    use std::sync::Arc;

    async fn search(ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let prepared = prepare_json(Search, args, ctx)?;
        prepared.execute(ctx, &NoOutput).await
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {\n    helper();\n}\n").unwrap();
        std::fs::write(root.join("src/deep/lib.rs"), "pub fn helper() {}\n").unwrap();
        std::fs::write(root.join("target/out.rs"), "fn helper_copy() {}\n").unwrap();
        std::fs::write(root.join(".hidden.rs"), "fn helper_hidden() {}\n").unwrap();
        std::fs::write(root.join("blob.bin"), b"helper\0\x01\x02").unwrap();
        dir
    }

    /// [`tree`] plus where CI lives (hidden) and a repository's `.git` (never searched).
    fn repo_tree() -> tempfile::TempDir {
        let dir = tree();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".github/workflows")).unwrap();
        std::fs::create_dir_all(root.join(".git/refs")).unwrap();
        std::fs::create_dir_all(root.join("vendor")).unwrap();
        std::fs::write(root.join(".github/workflows/ci.yml"), "run: helper\n").unwrap();
        std::fs::write(root.join(".gitlab-ci.yml"), "script: helper\n").unwrap();
        std::fs::write(root.join(".git/config"), "helper = x\n").unwrap();
        std::fs::write(root.join(".git/refs/helper"), "helper\n").unwrap();
        // A worktree's or submodule's `.git` is a file: skipped too.
        std::fs::write(root.join("vendor/.git"), "gitdir: helper\n").unwrap();
        dir
    }

    #[test]
    fn prepare_validates_the_regex() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let p = prepare_json(Search, json!({"query": "fn \\w+", "path": "src"}), &ctx).unwrap();
        assert_eq!(
            p.prepared,
            Prepared {
                header: "search: /fn \\w+/ in src".into(),
                preview: String::new(),
                ask: false,
            }
        );
        let err = prepare_json(Search, json!({"query": "foo("}), &ctx).unwrap_err();
        assert!(
            matches!(&err, ToolError::Model(m) if m.starts_with("invalid regex /foo(/")),
            "{err}"
        );
        assert!(prepare_json(Search, json!({"query": ""}), &ctx).is_err());
    }

    #[tokio::test]
    async fn finds_matches_honouring_gitignore_and_binary_searching_hidden() {
        let dir = tree();
        let ctx = ToolContext::for_test(dir.path());
        let out = search(&ctx, json!({"query": "helper"})).await.unwrap();
        assert_eq!(
            out,
            ToolOutput::text(
                ".hidden.rs:1:fn helper_hidden() {}\n\
                 src/deep/lib.rs:1:pub fn helper() {}\n\
                 src/main.rs:2:    helper();\n"
            )
        );
    }

    #[tokio::test]
    async fn finds_ci_files_in_hidden_places_but_never_looks_inside_git() {
        let dir = repo_tree();
        let ctx = ToolContext::for_test(dir.path());
        let out = search(&ctx, json!({"query": "helper"})).await.unwrap();
        assert_eq!(
            out,
            ToolOutput::text(
                ".github/workflows/ci.yml:1:run: helper\n\
                 .gitlab-ci.yml:1:script: helper\n\
                 .hidden.rs:1:fn helper_hidden() {}\n\
                 src/deep/lib.rs:1:pub fn helper() {}\n\
                 src/main.rs:2:    helper();\n"
            )
        );
        // Asked for by name, `.git` is searched: the rule is about walking into it unasked.
        let out = search(&ctx, json!({"query": "helper", "path": ".git"}))
            .await
            .unwrap();
        assert_eq!(
            out,
            ToolOutput::text(".git/config:1:helper = x\n.git/refs/helper:1:helper\n")
        );
    }

    #[tokio::test]
    async fn a_path_may_be_a_file_or_outside_the_workdir_with_approval() {
        let dir = tree();
        let ctx = ToolContext::for_test(&dir.path().join("src"));
        let needs = |path: &str| {
            prepare_json(Search, json!({"query": "fn", "path": path}), &ctx)
                .unwrap()
                .ask
        };
        assert!(!needs("main.rs") && !needs("deep") && !needs("."));
        assert!(needs("../.hidden.rs") && needs("..") && needs("/etc"));
        let out = search(&ctx, json!({"query": "fn", "path": "main.rs"}))
            .await
            .unwrap();
        assert_eq!(out.text, "main.rs:1:fn main() {\n");
        // A hidden file named explicitly is searched.
        let out = search(&ctx, json!({"query": "fn", "path": "../.hidden.rs"}))
            .await
            .unwrap();
        assert_eq!(
            out.text,
            format!(
                "{}:1:fn helper_hidden() {{}}\n",
                dir.path().join(".hidden.rs").display()
            )
        );
        let outside = dir.path().join("target");
        let out = search(
            &ctx,
            json!({"query": "copy", "path": outside.to_str().unwrap()}),
        )
        .await
        .unwrap();
        assert_eq!(
            out.text,
            format!(
                "{}:1:fn helper_copy() {{}}\n",
                outside.join("out.rs").display()
            )
        );
    }

    #[tokio::test]
    async fn no_match_and_missing_path_are_explained() {
        let dir = tree();
        let ctx = ToolContext::for_test(dir.path());
        let out = search(&ctx, json!({"query": "nothing_here", "path": "src"}))
            .await
            .unwrap();
        assert_eq!(
            out,
            ToolOutput::text("no matches for /nothing_here/ in src")
        );
        let err = search(&ctx, json!({"query": "x", "path": "nope"}))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::Model(m) if m == "no such file or directory: nope"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn stops_at_the_match_cap_and_cuts_long_lines() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (1..=50).map(|n| format!("match {n}\n")).collect();
        std::fs::write(dir.path().join("a.txt"), text).unwrap();
        std::fs::write(
            dir.path().join("b.txt"),
            format!("match {}\n", "x".repeat(600)),
        )
        .unwrap();
        let mut ctx = ToolContext::for_test(dir.path());
        let out = search(&ctx, json!({"query": "x{600}"})).await.unwrap();
        assert_eq!(
            out.text,
            format!("b.txt:1:match {}[... line cut]\n", "x".repeat(494))
        );
        ctx.config = Arc::new(ToolsConfig {
            search_max_matches: 3,
            ..ToolsConfig::default()
        });
        let out = search(&ctx, json!({"query": "^match"})).await.unwrap();
        assert_eq!(
            out.text,
            "a.txt:1:match 1\na.txt:2:match 2\na.txt:3:match 3\n\
             [stopped after 3 matches; narrow the query or the path to see the rest]"
        );
    }

    #[tokio::test]
    async fn the_walk_skips_links_out_and_denied_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("work/keys")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("outside/secret.txt"), "token = abc\n").unwrap();
        std::fs::write(root.join("work/keys/id"), "token = key\n").unwrap();
        std::fs::write(root.join("work/sandpiper.toml"), "token = cfg\n").unwrap();
        std::fs::write(root.join("work/sandpiper.db-wal"), "token = wal\n").unwrap();
        std::fs::write(root.join("work/ok.txt"), "token = fine\n").unwrap();
        std::os::unix::fs::symlink(root.join("outside"), root.join("work/dirlink")).unwrap();
        std::os::unix::fs::symlink(root.join("outside/secret.txt"), root.join("work/filelink"))
            .unwrap();
        let mut ctx = ToolContext::for_test(&root.join("work"));
        let tools = ToolsConfig {
            deny_read: vec![root.join("work/keys").display().to_string()],
            ..ToolsConfig::default()
        };
        let mut protected = vec![root.join("work/sandpiper.toml")];
        protected.extend(crate::tools::path_policy::database_files(&format!(
            "sqlite://{}",
            root.join("work/sandpiper.db").display()
        )));
        ctx.paths = Arc::new(PathPolicy::build(&tools, &protected));
        let out = search(&ctx, json!({"query": "token"})).await.unwrap();
        assert_eq!(out.text, "ok.txt:1:token = fine\n");
        // Naming a denied file or directory outright is refused.
        for path in [
            "sandpiper.toml",
            "keys",
            "keys/id",
            "filelink/../sandpiper.toml",
        ] {
            let err =
                prepare_json(Search, json!({"query": "token", "path": path}), &ctx).unwrap_err();
            assert!(err.to_string().starts_with("refused:"), "{path}: {err}");
        }
        // A link that leads out asks.
        let p = prepare_json(Search, json!({"query": "token", "path": "dirlink"}), &ctx).unwrap();
        assert!(p.ask);
    }

    #[tokio::test]
    async fn a_cancelled_search_says_so() {
        let dir = tree();
        let ctx = ToolContext::for_test(dir.path());
        ctx.cancel.cancel();
        let err = search(&ctx, json!({"query": "helper"})).await.unwrap_err();
        assert!(matches!(err, ToolError::Cancelled), "{err:?}");
    }
}
