//! The `write_file` tool: creates or replaces a whole file, atomically.
//!
//! Also home of [`write_atomically`], which `edit_file` uses too: the content goes to a
//! temporary file in the same directory that is then renamed over the target, so a reader
//! never sees a half-written file and a crash leaves the old one intact.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `write_file` tool. Needs approval; the preview shows the content.
#[derive(Debug, Default)]
pub(super) struct WriteFile;

/// Lines of content shown in the preview.
const PREVIEW_LINES: usize = 40;

/// The arguments of `tools/write_file.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    path: String,
    content: String,
}

fn check(args: &Args) -> Result<(), ToolError> {
    if args.path.trim().is_empty() {
        return Err(ToolError::model("`path` is empty; give the file to write"));
    }
    Ok(())
}

#[async_trait::async_trait]
impl Tool for WriteFile {
    type Args = Args;
    type Call = Args;
    const USAGE: &'static str = "send {\"path\": \"<file>\", \"content\": \"<full text>\"}";

    fn name(&self) -> &'static str {
        "write_file"
    }

    fn prepare(&self, parsed: Args, ctx: &ToolContext) -> Result<(Prepared, Args), ToolError> {
        check(&parsed)?;
        // sandpiper's own config and database are off limits, approved or not.
        ctx.check_path(&parsed.path)?;
        if ctx.resolve(&parsed.path).is_dir() {
            return Err(ToolError::model(format!(
                "{} is a directory; give the path of a file inside it",
                parsed.path
            )));
        }
        let lines = parsed.content.lines().count();
        let prepared = Prepared {
            header: format!("write_file: {} ({lines} lines)", parsed.path),
            preview: preview(&parsed.content),
            ask: false,
        };
        Ok((prepared, parsed))
    }

    async fn execute(
        &self,
        args: &Args,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        // Again: a link may have been pointed at a protected file while the call waited.
        ctx.check_path(&args.path)?;
        let path = ctx.resolve(&args.path);
        let bytes = args.content.len();
        write_atomically(&path, args.content.clone().into_bytes())
            .await
            .map_err(|e| ToolError::model(format!("cannot write {}: {e}", args.path)))?;
        // The model wrote the content, so it knows it: edit_file may change it next.
        ctx.files_read.record(&path);
        Ok(ToolOutput::text(format!(
            "wrote {bytes} bytes to {}",
            args.path
        )))
    }
}

/// The first [`PREVIEW_LINES`] lines, with a note of how many more there are.
fn preview(content: &str) -> String {
    let total = content.lines().count();
    if total <= PREVIEW_LINES {
        return content.to_owned();
    }
    let mut shown: String = content.split_inclusive('\n').take(PREVIEW_LINES).collect();
    shown.push_str(&format!("[... {} more lines]", total - PREVIEW_LINES));
    shown
}

/// Writes `bytes` to `path` atomically: parent directories are created, the data goes to a
/// temporary file beside the target (with the target's permissions when it exists) and is
/// renamed over it. A symlink is followed, so the file it points to is replaced.
pub(super) async fn write_atomically(path: &Path, bytes: Vec<u8>) -> std::io::Result<()> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || write_atomically_blocking(&path, &bytes))
        .await
        .map_err(std::io::Error::other)?
}

fn write_atomically_blocking(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let dir = target
        .parent()
        .ok_or_else(|| std::io::Error::other("the path has no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let permissions = std::fs::metadata(&target).ok().map(|m| m.permissions());
    let temp = temp_path(&target);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        if let Some(p) = permissions {
            file.set_permissions(p)?;
        }
        file.sync_all()?;
        std::fs::rename(&temp, &target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// A name beside `target` that no other write (in this process or another) uses.
fn temp_path(target: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.sandpiper-{}-{n}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{NoOutput, prepare_json};
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn prepare_shows_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let args = json!({"path": "a/b.txt", "content": "one\ntwo\n"});
        assert_eq!(
            prepare_json(WriteFile, args.clone(), &ctx)
                .unwrap()
                .prepared,
            Prepared {
                header: "write_file: a/b.txt (2 lines)".into(),
                preview: "one\ntwo\n".into(),
                ask: false,
            }
        );
        let long: String = (1..=50).map(|n| format!("{n}\n")).collect();
        let p = prepare_json(WriteFile, json!({"path": "x", "content": long}), &ctx).unwrap();
        let expected: String = (1..=40).map(|n| format!("{n}\n")).collect();
        assert_eq!(p.preview, expected + "[... 10 more lines]");
        assert!(prepare_json(WriteFile, json!({"path": ".", "content": ""}), &ctx).is_err());
        assert!(prepare_json(WriteFile, json!({"path": " ", "content": ""}), &ctx).is_err());
        assert!(prepare_json(WriteFile, json!({"path": "a"}), &ctx).is_err());
    }

    #[tokio::test]
    async fn writes_creating_parents_and_records_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let p = prepare_json(
            WriteFile,
            json!({"path": "deep/er/new.txt", "content": "héllo\n"}),
            &ctx,
        )
        .unwrap();
        let out = p.execute(&ctx, &NoOutput).await.unwrap();
        assert_eq!(out, ToolOutput::text("wrote 7 bytes to deep/er/new.txt"));
        let path = dir.path().join("deep/er/new.txt");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "héllo\n");
        assert!(ctx.files_read.contains(&path));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("deep/er"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("new.txt")]);
    }

    #[tokio::test]
    async fn overwriting_keeps_permissions_and_follows_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("run.sh");
        std::fs::write(&real, "old").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link.sh")).unwrap();
        write_atomically(&dir.path().join("link.sh"), b"new".to_vec())
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        let mode = std::fs::metadata(&real).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(
            std::fs::symlink_metadata(dir.path().join("link.sh"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[tokio::test]
    async fn protected_files_are_refused_before_and_after_approval() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("sandpiper.toml"), "old").unwrap();
        let mut ctx = ToolContext::for_test(&root);
        ctx.paths = std::sync::Arc::new(crate::tools::PathPolicy::build(
            &crate::config::ToolsConfig::default(),
            &[root.join("sandpiper.toml")],
        ));
        let args = json!({"path": "sandpiper.toml", "content": "new"});
        let err = prepare_json(WriteFile, args.clone(), &ctx).unwrap_err();
        assert!(err.to_string().starts_with("refused:"), "{err}");
        // Prepared when the name was harmless, then pointed at the config file.
        let p = prepare_json(WriteFile, json!({"path": "link", "content": "new"}), &ctx).unwrap();
        std::os::unix::fs::symlink(root.join("sandpiper.toml"), root.join("link")).unwrap();
        let err = p.execute(&ctx, &NoOutput).await.unwrap_err();
        assert!(err.to_string().starts_with("refused:"), "{err}");
        assert_eq!(
            std::fs::read_to_string(root.join("sandpiper.toml")).unwrap(),
            "old"
        );
    }

    #[tokio::test]
    async fn an_unwritable_place_is_a_model_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let p = prepare_json(
            WriteFile,
            json!({"path": "file/inside.txt", "content": "x"}),
            &ctx,
        )
        .unwrap();
        let err = p.execute(&ctx, &NoOutput).await.unwrap_err();
        assert!(
            matches!(&err, ToolError::Model(m) if m.starts_with("cannot write file/inside.txt")),
            "{err}"
        );
    }
}
