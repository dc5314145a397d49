//! The `read_file` tool: text files as numbered lines (like `cat -n`), images as images for
//! models with vision and as a short description otherwise.
//!
//! Text is read line by line, so a huge file costs only the page shown: at most `limit`
//! lines (default [`DEFAULT_LIMIT`]), lines cut at [`MAX_LINE_CHARS`] characters, and no more
//! than `max_output_bytes` in all; a note at the end says which lines were shown.

mod image;

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::path::Path;

use base64::Engine;
use serde::Deserialize;

use super::path_policy::outside_note;
use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::model::ImagePart;

/// The `read_file` tool. Runs unasked inside the workstream's directory, asks outside it, and
/// never reads what the [`PathPolicy`](super::PathPolicy) denies.
#[derive(Debug, Default)]
pub(super) struct ReadFile;

/// Lines shown when the model gives no `limit`.
const DEFAULT_LIMIT: usize = 2000;
/// Longer lines are cut with a note.
const MAX_LINE_CHARS: usize = 2000;
/// Larger images are refused.
const MAX_IMAGE_BYTES: u64 = 4 * 1024 * 1024;
/// Entries of a directory named in the error when the path is a directory.
const DIR_HINT_ENTRIES: usize = 20;

/// The arguments of `tools/read_file.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    path: String,
    offset: Option<i64>,
    limit: Option<i64>,
}

/// Validated arguments.
#[derive(Debug, Clone)]
pub(super) struct Request {
    path: String,
    offset: usize,
    limit: usize,
}

fn parse(args: &Args) -> Result<Request, ToolError> {
    if args.path.trim().is_empty() {
        return Err(ToolError::model("`path` is empty; give the file to read"));
    }
    let offset = match args.offset {
        None | Some(0) => 1,
        Some(n) => usize::try_from(n).map_err(|_| {
            ToolError::model(format!(
                "offset {n} is not a line number; lines count from 1"
            ))
        })?,
    };
    let limit = match args.limit {
        None => DEFAULT_LIMIT,
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
        Some(n) => {
            return Err(ToolError::model(format!(
                "limit {n} is not a line count; give 1 or more, or leave it out"
            )));
        }
    };
    Ok(Request {
        path: args.path.clone(),
        offset,
        limit,
    })
}

#[async_trait::async_trait]
impl Tool for ReadFile {
    type Args = Args;
    type Call = Request;
    const ASKS_FOR: Option<&'static str> = Some("reads outside the workstream's directory");
    const USAGE: &'static str =
        "send {\"path\": \"<file>\"} with optional integer offset and limit";

    fn name(&self) -> &'static str {
        "read_file"
    }

    fn prepare(&self, args: Args, ctx: &ToolContext) -> Result<(Prepared, Request), ToolError> {
        let request = parse(&args)?;
        let checked = ctx.check_path(&request.path)?;
        let prepared = Prepared {
            header: format!("read_file: {}", request.path),
            preview: match checked.outside {
                true => outside_note(&checked, &ctx.workdir),
                false => String::new(),
            },
            ask: checked.outside,
        };
        Ok((prepared, request))
    }

    async fn execute(
        &self,
        request: &Request,
        prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let request = request.clone();
        // Again: the file system may have changed while the call waited.
        let checked = ctx.recheck_read(&request.path, prepared.ask)?;
        let path = checked.resolved;
        let budget = ctx.config.max_output_bytes;
        let vision = ctx.capabilities.supports_vision;
        let task_path = checked.canonical;
        let output =
            tokio::task::spawn_blocking(move || read(&request, &task_path, budget, vision))
                .await
                .map_err(|e| ToolError::model(format!("read_file failed: {e}")))??;
        ctx.files_read.record(&path);
        Ok(output)
    }
}

/// Reads the file `path` (the resolved `request.path`).
fn read(
    request: &Request,
    path: &Path,
    budget: usize,
    vision: bool,
) -> Result<ToolOutput, ToolError> {
    let shown = &request.path;
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => not_found(shown, path),
        _ => ToolError::model(format!("cannot read {shown}: {e}")),
    })?;
    if meta.is_dir() {
        return Err(directory_error(shown, path));
    }
    if !meta.is_file() {
        return Err(ToolError::model(format!(
            "{shown} is not a regular file (a device, socket or pipe); read_file reads files only"
        )));
    }
    let io_error = |e: std::io::Error| ToolError::model(format!("cannot read {shown}: {e}"));
    let mut file = File::open(path).map_err(io_error)?;
    let mut head = [0u8; 64];
    let head_len = read_up_to(&mut file, &mut head).map_err(io_error)?;
    let magic = image::mime_from_magic(&head[..head_len]);
    if let Some(mime) = magic.or_else(|| image::mime_from_extension(path)) {
        if meta.len() > MAX_IMAGE_BYTES {
            return Err(ToolError::model(format!(
                "{shown} is an image of {} bytes; images over 4 MB are not read. Make a smaller \
                 copy (e.g. with ImageMagick in bash) and read that.",
                meta.len()
            )));
        }
        let bytes = std::fs::read(path).map_err(io_error)?;
        return Ok(image_output(shown, mime, &bytes, vision));
    }
    let mut reader = BufReader::with_capacity(64 * 1024, head[..head_len].chain(file));
    let page = read_lines(&mut reader, request, budget).map_err(|e| match e {
        LineError::Io(e) => io_error(e),
        LineError::Binary => ToolError::model(format!(
            "{shown} is a binary file ({} bytes), not text; read_file shows text files and \
             images only. Use bash (e.g. `file` or `xxd | head`) to inspect it.",
            meta.len()
        )),
    })?;
    page.render(request, shown).map(ToolOutput::text)
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn image_output(shown: &str, mime: &str, bytes: &[u8], vision: bool) -> ToolOutput {
    if vision {
        return ToolOutput {
            text: format!("image {shown} ({mime}, {} bytes)", bytes.len()),
            images: vec![ImagePart {
                media_type: mime.to_owned(),
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
            }],
            is_error: false,
        };
    }
    let size = match image::dimensions(mime, bytes) {
        Some((w, h)) => format!(", {w}x{h} pixels"),
        None => String::new(),
    };
    ToolOutput::text(format!(
        "image {shown} ({mime}, {} bytes{size}). The current model cannot see images, so this \
         description is all read_file can return.",
        bytes.len()
    ))
}

enum LineError {
    Io(std::io::Error),
    Binary,
}

/// The lines shown and where they sit in the file.
struct Page {
    text: String,
    /// Last line shown (0 when none).
    last: usize,
    /// Lines in the file.
    total: usize,
}

impl Page {
    fn render(self, request: &Request, shown: &str) -> Result<String, ToolError> {
        if self.total == 0 {
            return Ok(format!("[{shown} is empty]"));
        }
        if request.offset > self.total {
            return Err(ToolError::model(format!(
                "offset {} is past the end of {shown}, which has {} lines; use an offset from 1 \
                 to {}",
                request.offset, self.total, self.total
            )));
        }
        let mut text = self.text;
        if self.last < self.total {
            text.push_str(&format!(
                "[lines {}-{} of {}; use offset to read more]",
                request.offset, self.last, self.total
            ));
        }
        Ok(text)
    }
}

/// Reads every line (to count them), keeping those from `offset` on, up to `limit` lines and
/// `budget` bytes of output.
fn read_lines(
    reader: &mut impl BufRead,
    request: &Request,
    budget: usize,
) -> Result<Page, LineError> {
    let keep_bytes = MAX_LINE_CHARS * 4;
    let mut buf = Vec::new();
    let mut page = Page {
        text: String::new(),
        last: 0,
        total: 0,
    };
    let mut full = false;
    while let Some(len) = read_line_capped(reader, &mut buf, keep_bytes).map_err(LineError::Io)? {
        page.total += 1;
        let cut = len > buf.len();
        let line = match std::str::from_utf8(&buf) {
            Ok(s) => s,
            Err(e) if cut && e.error_len().is_none() => {
                std::str::from_utf8(&buf[..e.valid_up_to()]).map_err(|_| LineError::Binary)?
            }
            Err(_) => return Err(LineError::Binary),
        };
        if line.contains('\0') {
            return Err(LineError::Binary);
        }
        if full || page.total < request.offset {
            continue;
        }
        let formatted = format_line(page.total, line, len);
        if page.last >= request.offset
            && (page.last - request.offset + 1 >= request.limit
                || page.text.len() + formatted.len() > budget)
        {
            full = true;
            continue;
        }
        page.text.push_str(&formatted);
        page.last = page.total;
    }
    Ok(page)
}

/// One numbered line, like `cat -n`; `len` is the line's full length in bytes.
fn format_line(number: usize, line: &str, len: usize) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((end, _)) => format!(
            "{number:>6}\t{} [... line cut after {MAX_LINE_CHARS} characters; {len} bytes in all]\n",
            &line[..end]
        ),
        None => format!("{number:>6}\t{line}\n"),
    }
}

/// Reads one line into `buf` without its newline, keeping at most `cap` bytes; returns the
/// line's full length, or `None` at the end of the file.
fn read_line_capped(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<usize>> {
    buf.clear();
    let mut len = 0;
    let mut any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(any.then_some(len));
        }
        any = true;
        let (chunk, used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        len += chunk.len();
        reader.consume(used);
        if done {
            return Ok(Some(len));
        }
    }
}

fn not_found(shown: &str, path: &Path) -> ToolError {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let Ok(entries) = std::fs::read_dir(parent) else {
        return ToolError::model(format!(
            "no such file: {shown} (its directory {} does not exist either)",
            parent.display()
        ));
    };
    let wanted = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut similar: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !wanted.is_empty() && name.to_lowercase().contains(&wanted))
        .collect();
    similar.sort();
    similar.truncate(5);
    match similar.is_empty() {
        true => ToolError::model(format!("no such file: {shown}")),
        false => ToolError::model(format!(
            "no such file: {shown}; similar names in {}: {}",
            parent.display(),
            similar.join(", ")
        )),
    }
}

fn directory_error(shown: &str, path: &Path) -> ToolError {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| {
                    let slash = if e.path().is_dir() { "/" } else { "" };
                    format!("{}{slash}", e.file_name().to_string_lossy())
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let count = names.len();
    let more = match count > DIR_HINT_ENTRIES {
        true => format!(", … ({count} entries)"),
        false => String::new(),
    };
    names.truncate(DIR_HINT_ENTRIES);
    let listing = match count {
        0 => "it is empty".to_owned(),
        _ => format!("it holds {}{more}", names.join(", ")),
    };
    ToolError::model(format!(
        "{shown} is a directory, not a file; {listing}. Read one of its files, or use search \
         or bash `ls` to explore."
    ))
}

#[cfg(test)]
mod tests;
