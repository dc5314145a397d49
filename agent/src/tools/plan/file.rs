//! The plan file `.plan-<workstream>.md` under the rules the file tools obey: it is judged by
//! [`ToolContext::check_path`] (sandpiper's config and database and `[tools] deny_read` are
//! refused), it must be a regular file of its own inside the working directory (a symlink, a
//! hard link, a FIFO or a device in its place is refused, not followed), and it is opened
//! with `O_NOFOLLOW`, so a link swapped in after the check is not followed either.
//!
//! Writing never goes through what is in the file's place: the plan is written to a new file
//! in the working directory (`O_EXCL | O_NOFOLLOW`) and renamed over the plan file, which
//! replaces a link rather than the file behind it. Nothing is written outside the working
//! directory.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::tools::{ToolContext, ToolError};

/// Most bytes of a previous plan read back (a plan is a page or two of Markdown).
pub(super) const MAX_PLAN_BYTES: u64 = 256 * 1024;

/// The plan file at `path`, checked: `Ok(None)` when there is none yet.
pub(super) async fn read_previous(
    ctx: &ToolContext,
    path: &Path,
) -> Result<Option<String>, ToolError> {
    let shown = shown(path);
    check(ctx, path)?;
    match tokio::fs::symlink_metadata(path).await {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ToolError::model(format!("cannot read {shown}: {e}"))),
        Ok(meta) => judge_kind(&shown, &meta)?,
    }
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        // Not followed if a link was swapped in since; a FIFO does not block the open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .await
        .map_err(|e| {
            refused(
                &shown,
                &format!("it cannot be opened as a plain file ({e})"),
            )
        })?;
    let meta = file
        .metadata()
        .await
        .map_err(|e| ToolError::model(format!("cannot read {shown}: {e}")))?;
    judge_kind(&shown, &meta)?;
    let mut bytes = Vec::new();
    file.take(MAX_PLAN_BYTES)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| ToolError::model(format!("cannot read {shown}: {e}")))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok((!text.trim().is_empty()).then_some(text))
}

/// Saves `text` as the plan file at `path` (in `ctx.workdir`), replacing whatever is in its
/// place without writing through it.
pub(super) async fn save(ctx: &ToolContext, path: &Path, text: &str) -> Result<(), ToolError> {
    let shown = shown(path);
    check(ctx, path)?;
    let dir = path
        .parent()
        .ok_or_else(|| ToolError::model(format!("{shown} has no directory")))?;
    let temp: PathBuf = dir.join(format!(".{}.{}.tmp", shown, uuid::Uuid::new_v4().simple()));
    let written = async {
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)
            .await?;
        file.write_all(text.as_bytes()).await?;
        file.sync_all().await?;
        tokio::fs::rename(&temp, path).await
    }
    .await;
    if let Err(e) = written {
        let _ = tokio::fs::remove_file(&temp).await;
        return Err(ToolError::model(format!(
            "cannot save the plan as {shown}: {e}"
        )));
    }
    Ok(())
}

/// The path rules: denied paths are refused; a path that leads out of the working directory
/// (a link to elsewhere) is refused too, approval or not — the plan file is the thread's own.
fn check(ctx: &ToolContext, path: &Path) -> Result<(), ToolError> {
    let shown = shown(path);
    let checked = ctx.check_path(&path.to_string_lossy())?;
    if checked.outside {
        return Err(refused(
            &shown,
            &format!(
                "it leads outside this workstream's directory, to {}",
                checked.canonical.display()
            ),
        ));
    }
    Ok(())
}

/// A plan file must be a regular file that is nothing else too (no hard link to another).
fn judge_kind(shown: &str, meta: &std::fs::Metadata) -> Result<(), ToolError> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Err(refused(shown, "it is a symbolic link"));
    }
    if !kind.is_file() {
        return Err(refused(shown, "it is not a regular file"));
    }
    if meta.nlink() > 1 {
        return Err(refused(shown, "it is a hard link to another file"));
    }
    Ok(())
}

fn refused(shown: &str, why: &str) -> ToolError {
    ToolError::model(format!(
        "refused: the plan file {shown} is not used because {why}; the plan file must be a \
         plain file in the working directory. Remove it and plan again"
    ))
}

fn shown(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
