//! Tests of the `read_file` tool.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;
use crate::config::ToolsConfig;
use crate::tools::{NoOutput, prepare_json, typed};

/// A 3×2 PNG header (enough for sniffing and dimensions).
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52, 0, 0, 0,
    3, 0, 0, 0, 2, 8, 6, 0, 0, 0, 0x1F, 0x15, 0xC4, 0x89,
];

async fn read(ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
    let prepared = prepare_json(ReadFile, args, ctx)?;
    prepared.execute(ctx, &NoOutput).await
}

fn model_error(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Err(ToolError::Model(m)) => m,
        other => panic!("expected a model error, got {other:?}"),
    }
}

fn numbered(range: std::ops::RangeInclusive<usize>) -> String {
    range.map(|n| format!("{n:>6}\tline {n}\n")).collect()
}

#[test]
fn prepare_is_auto_approved() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::for_test(dir.path());
    let p = prepare_json(ReadFile, json!({"path": "src/main.rs"}), &ctx).unwrap();
    assert_eq!(
        p.prepared,
        Prepared {
            header: "read_file: src/main.rs".into(),
            preview: String::new(),
            ask: false,
        }
    );
    assert!(prepare_json(ReadFile, json!({"path": ""}), &ctx).is_err());
    assert!(prepare_json(ReadFile, json!({"path": "a", "offset": -3}), &ctx).is_err());
    assert!(prepare_json(ReadFile, json!({"path": "a", "limit": 0}), &ctx).is_err());
}

#[tokio::test]
async fn text_comes_back_numbered_and_the_path_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\r\n\tbeta\n\ngamma").unwrap();
    let ctx = ToolContext::for_test(dir.path());
    let out = read(&ctx, json!({"path": "a.txt"})).await.unwrap();
    assert_eq!(
        out,
        ToolOutput::text("     1\talpha\n     2\t\tbeta\n     3\t\n     4\tgamma\n")
    );
    assert!(ctx.files_read.contains(&dir.path().join("a.txt")));
    assert!(!ctx.files_read.contains(&dir.path().join("b.txt")));
}

#[tokio::test]
async fn offset_and_limit_page_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (1..=5000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(dir.path().join("big.txt"), text).unwrap();
    let mut ctx = ToolContext::for_test(dir.path());
    ctx.config = Arc::new(ToolsConfig {
        max_output_bytes: 1 << 20,
        ..ToolsConfig::default()
    });
    let out = read(&ctx, json!({"path": "big.txt"})).await.unwrap();
    assert_eq!(
        out.text,
        numbered(1..=2000) + "[lines 1-2000 of 5000; use offset to read more]"
    );
    let out = read(&ctx, json!({"path": "big.txt", "offset": 10, "limit": 3}))
        .await
        .unwrap();
    assert_eq!(
        out.text,
        numbered(10..=12) + "[lines 10-12 of 5000; use offset to read more]"
    );
    let out = read(&ctx, json!({"path": "big.txt", "offset": 4999}))
        .await
        .unwrap();
    assert_eq!(out.text, numbered(4999..=5000));
    let err = model_error(read(&ctx, json!({"path": "big.txt", "offset": 6000})).await);
    assert_eq!(
        err,
        "offset 6000 is past the end of big.txt, which has 5000 lines; use an offset from 1 to 5000"
    );
}

#[tokio::test]
async fn output_stays_within_the_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (1..=5000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(dir.path().join("big.txt"), text).unwrap();
    let mut ctx = ToolContext::for_test(dir.path());
    ctx.config = Arc::new(ToolsConfig {
        max_output_bytes: 1024,
        ..ToolsConfig::default()
    });
    let out = read(&ctx, json!({"path": "big.txt"})).await.unwrap();
    // Each numbered line is 7 + "line N\n"; 1024 bytes hold 68 of them.
    assert_eq!(
        out.text,
        numbered(1..=68) + "[lines 1-68 of 5000; use offset to read more]"
    );
}

#[tokio::test]
async fn long_lines_are_cut_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let long = "é".repeat(3000);
    std::fs::write(dir.path().join("min.js"), format!("{long}\nshort\n")).unwrap();
    let ctx = ToolContext::for_test(dir.path());
    let out = read(&ctx, json!({"path": "min.js"})).await.unwrap();
    assert_eq!(
        out.text,
        format!(
            "     1\t{} [... line cut after 2000 characters; 6000 bytes in all]\n     2\tshort\n",
            "é".repeat(2000)
        )
    );
}

#[tokio::test]
async fn binary_missing_directory_and_empty_files_get_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blob.bin"), b"abc\0def").unwrap();
    std::fs::write(dir.path().join("latin1.txt"), b"caf\xe9\n").unwrap();
    std::fs::write(dir.path().join("empty.txt"), b"").unwrap();
    std::fs::write(dir.path().join("notes.md"), b"x").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let ctx = ToolContext::for_test(dir.path());
    let err = model_error(read(&ctx, json!({"path": "blob.bin"})).await);
    assert!(
        err.starts_with("blob.bin is a binary file (7 bytes), not text"),
        "{err}"
    );
    let err = model_error(read(&ctx, json!({"path": "latin1.txt"})).await);
    assert!(err.starts_with("latin1.txt is a binary file"), "{err}");
    let err = model_error(read(&ctx, json!({"path": "note.md"})).await);
    assert_eq!(
        err,
        format!(
            "no such file: note.md; similar names in {}: notes.md",
            dir.path().display()
        )
    );
    let err = model_error(read(&ctx, json!({"path": "nowhere/x.txt"})).await);
    assert!(err.contains("does not exist either"), "{err}");
    let err = model_error(read(&ctx, json!({"path": "."})).await);
    assert_eq!(
        err,
        ". is a directory, not a file; it holds blob.bin, empty.txt, latin1.txt, notes.md, sub/. \
         Read one of its files, or use search or bash `ls` to explore."
    );
    let out = read(&ctx, json!({"path": "empty.txt"})).await.unwrap();
    assert_eq!(out.text, "[empty.txt is empty]");
    assert!(!ctx.files_read.contains(&dir.path().join("blob.bin")));
}

#[tokio::test]
async fn images_without_vision_are_described() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shot.dat"), PNG).unwrap();
    let mut ctx = ToolContext::for_test(dir.path());
    ctx.capabilities.supports_vision = false;
    let out = read(&ctx, json!({"path": "shot.dat"})).await.unwrap();
    assert_eq!(
        out,
        ToolOutput::text(
            "image shot.dat (image/png, 33 bytes, 3x2 pixels). The current model cannot see \
             images, so this description is all read_file can return."
        )
    );
}

#[tokio::test]
async fn images_with_vision_are_sent_as_images() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shot.png"), PNG).unwrap();
    let mut ctx = ToolContext::for_test(dir.path());
    ctx.capabilities.supports_vision = true;
    let out = read(&ctx, json!({"path": "shot.png"})).await.unwrap();
    assert_eq!(
        out,
        ToolOutput {
            text: "image shot.png (image/png, 33 bytes)".into(),
            images: vec![ImagePart {
                media_type: "image/png".into(),
                data: base64::engine::general_purpose::STANDARD.encode(PNG),
            }],
            is_error: false,
        }
    );
}

#[tokio::test]
async fn large_images_are_refused_and_svg_is_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = PNG.to_vec();
    big.resize(5 * 1024 * 1024, 0);
    std::fs::write(dir.path().join("big.png"), big).unwrap();
    std::fs::write(dir.path().join("logo.svg"), "<svg/>\n").unwrap();
    let ctx = ToolContext::for_test(dir.path());
    let err = model_error(read(&ctx, json!({"path": "big.png"})).await);
    assert!(
        err.starts_with("big.png is an image of 5242880 bytes; images over 4 MB"),
        "{err}"
    );
    let out = read(&ctx, json!({"path": "logo.svg"})).await.unwrap();
    assert_eq!(out.text, "     1\t<svg/>\n");
}

/// A workdir beside a protected config file and a secret outside it.
fn guarded() -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("work")).unwrap();
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::write(root.join("outside/secret.txt"), "s3cret\n").unwrap();
    std::fs::write(root.join("sandpiper.toml"), "token = \"xoxb\"\n").unwrap();
    std::fs::write(root.join("work/notes.txt"), "hello\n").unwrap();
    let mut ctx = ToolContext::for_test(&root.join("work"));
    ctx.paths = Arc::new(crate::tools::PathPolicy::build(
        &ToolsConfig::default(),
        &[root.join("sandpiper.toml")],
    ));
    (dir, ctx)
}

#[tokio::test]
async fn reads_outside_the_workdir_ask_and_show_where() {
    let (dir, ctx) = guarded();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    assert!(
        !prepare_json(ReadFile, json!({"path": "notes.txt"}), &ctx)
            .unwrap()
            .ask
    );
    let p = prepare_json(ReadFile, json!({"path": "../outside/secret.txt"}), &ctx).unwrap();
    assert!(p.ask);
    assert_eq!(
        p.preview,
        format!(
            "reads {} — outside this workstream's directory ({})",
            root.join("outside/secret.txt").display(),
            root.join("work").display()
        )
    );
    let p = prepare_json(ReadFile, json!({"path": "/etc/passwd"}), &ctx).unwrap();
    assert!(p.ask);
    // Once approved, it runs.
    let p = prepare_json(ReadFile, json!({"path": "../outside/secret.txt"}), &ctx).unwrap();
    let out = p.execute(&ctx, &NoOutput).await.unwrap();
    assert_eq!(out.text, "     1\ts3cret\n");
}

#[tokio::test]
async fn the_config_file_is_refused_even_when_approved() {
    let (_dir, ctx) = guarded();
    let err = model_error(read(&ctx, json!({"path": "../sandpiper.toml"})).await);
    assert!(
        err.starts_with("refused: ../sandpiper.toml is sandpiper's own configuration"),
        "{err}"
    );
    // A prepared call that was approved (it asked) is checked again when it runs.
    let approved = Prepared {
        header: "read_file: ../sandpiper.toml".into(),
        preview: String::new(),
        ask: true,
    };
    let call = super::parse(&typed(json!({"path": "../sandpiper.toml"}))).unwrap();
    let err = model_error(ReadFile.execute(&call, &approved, &ctx, &NoOutput).await);
    assert!(err.starts_with("refused:"), "{err}");
    let err = model_error(read(&ctx, json!({"path": "/etc/shadow"})).await);
    assert!(err.contains("deny_read"), "{err}");
}
