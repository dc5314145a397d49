//! Tests of the `edit_file` tool.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;
use crate::tools::{NoOutput, prepare_json};

/// A context in a temp dir with `name` written and recorded as read.
fn setup(name: &str, content: &str) -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    let ctx = ToolContext::for_test(dir.path());
    ctx.files_read.record(&path);
    (dir, ctx)
}

fn model_error<T: std::fmt::Debug>(result: Result<T, ToolError>) -> String {
    match result {
        Err(ToolError::Model(m)) => m,
        other => panic!("expected a model error, got {other:?}"),
    }
}

fn args(old: &str, new: &str) -> Value {
    json!({"path": "f.rs", "old_string": old, "new_string": new})
}

const SOURCE: &str = "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n";

#[tokio::test]
async fn a_unique_match_is_previewed_and_replaced() {
    let (dir, ctx) = setup("f.rs", SOURCE);
    let p = prepare_json(EditFile, args("let x = 1;", "let x = 2;"), &ctx).unwrap();
    assert_eq!(
        p.prepared,
        Prepared {
            header: "edit_file: f.rs (line 2)".into(),
            preview: "-    2     let x = 1;\n+    2     let x = 2;\n".into(),
            ask: false,
        }
    );
    let out = p.execute(&ctx, &NoOutput).await.unwrap();
    assert_eq!(out, ToolOutput::text("edited f.rs: replaced lines 2-2"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.rs")).unwrap(),
        SOURCE.replace("x = 1", "x = 2")
    );
}

#[test]
fn multi_line_edits_show_context_and_new_numbers() {
    let (_dir, ctx) = setup("f.rs", SOURCE);
    let old = "fn main() {\n    let x = 1;\n    println!(\"{x}\");";
    let new = "fn main() {\n    let x = 1;\n    let y = x + 1;\n    println!(\"{y}\");";
    let p = prepare_json(EditFile, args(old, new), &ctx).unwrap();
    assert_eq!(p.header, "edit_file: f.rs (lines 1-3)");
    assert_eq!(
        p.preview,
        "     1 fn main() {\n     2     let x = 1;\n-    3     println!(\"{x}\");\n\
         +    3     let y = x + 1;\n+    4     println!(\"{y}\");\n"
    );
    // Deleting a whole line keeps the next line as context.
    let p = prepare_json(EditFile, args("    let x = 1;\n", ""), &ctx).unwrap();
    assert_eq!(
        p.preview,
        "-    2     let x = 1;\n     2     println!(\"{x}\");\n"
    );
}

#[test]
fn a_file_not_read_first_is_refused() {
    let (dir, _) = setup("f.rs", SOURCE);
    let ctx = ToolContext::for_test(dir.path());
    let err = model_error(prepare_json(EditFile, args("x", "y"), &ctx));
    assert_eq!(
        err,
        "f.rs has not been read in this workstream; read it with read_file first, then edit it"
    );
}

#[test]
fn bad_arguments_are_refused() {
    let (_dir, ctx) = setup("f.rs", SOURCE);
    assert!(
        model_error(prepare_json(EditFile, args("", "y"), &ctx)).starts_with("old_string is empty")
    );
    assert_eq!(
        model_error(prepare_json(EditFile, args("x", "x"), &ctx)),
        "old_string and new_string are the same, so nothing would change"
    );
    let near_zero = json!({"path": "f.rs", "old_string": "x", "new_string": "y", "near_line": 0});
    assert!(prepare_json(EditFile, near_zero, &ctx).is_err());
}

#[test]
fn not_found_gives_hints() {
    let (_dir, ctx) = setup("f.rs", SOURCE);
    let err = model_error(prepare_json(EditFile, args("let y = 1;", "z"), &ctx));
    assert_eq!(
        err,
        "old_string was not found in f.rs. Copy the text exactly from read_file output (read \
         the file again if it may have changed)."
    );
    let err = model_error(prepare_json(EditFile, args("let x = 1;  \n", "z"), &ctx));
    assert!(
        err.contains("It matches at line 2 when leading/trailing whitespace is ignored"),
        "{err}"
    );
    let err = model_error(prepare_json(
        EditFile,
        args("let x = 1;\nprintln!(\"{x}\");", "z"),
        &ctx,
    ));
    assert!(
        err.contains("It matches at line 2 when indentation is ignored"),
        "{err}"
    );
    let err = model_error(prepare_json(
        EditFile,
        args("     2\t    let x = 1;", "z"),
        &ctx,
    ));
    assert!(
        err.contains("include the line numbers read_file shows"),
        "{err}"
    );
}

#[test]
fn several_matches_need_near_line() {
    let text = "a = 1\nb = 2\na = 1\nc = 3\na = 1\n";
    let (_dir, ctx) = setup("f.rs", text);
    let err = model_error(prepare_json(EditFile, args("a = 1", "a = 9"), &ctx));
    assert_eq!(
        err,
        "old_string matches 3 places in f.rs (lines 1, 3, 5); include more of the surrounding \
         text to make it unique, or give near_line to pick one"
    );
    let near = |n: i64| json!({"path": "f.rs", "old_string": "a = 1", "new_string": "a = 9", "near_line": n});
    let p = prepare_json(EditFile, near(4), &ctx).unwrap_err();
    assert!(
        matches!(&p, ToolError::Model(m) if m.contains("equally near line 4")),
        "{p}"
    );
    let p = prepare_json(EditFile, near(6), &ctx).unwrap();
    assert_eq!(p.preview, "-    5 a = 1\n+    5 a = 9\n");
}

#[tokio::test]
async fn execute_rechecks_a_changed_file() {
    let (dir, ctx) = setup("f.rs", SOURCE);
    let p = prepare_json(EditFile, args("let x = 1;", "let x = 2;"), &ctx).unwrap();
    std::fs::write(dir.path().join("f.rs"), "fn main() {}\n").unwrap();
    let err = model_error(p.execute(&ctx, &NoOutput).await);
    assert!(
        err.starts_with("old_string was not found in f.rs."),
        "{err}"
    );
    // Moved but still unique: the edit applies where the text is now.
    std::fs::write(dir.path().join("f.rs"), format!("// header\n{SOURCE}")).unwrap();
    let out = p.execute(&ctx, &NoOutput).await.unwrap();
    assert_eq!(out.text, "edited f.rs: replaced lines 3-3");
}

#[tokio::test]
async fn crlf_files_match_lf_old_strings_and_stay_crlf() {
    let (dir, ctx) = setup("f.rs", "one\r\ntwo\r\nthree\r\n");
    let p = prepare_json(EditFile, args("one\ntwo", "uno\ndos"), &ctx).unwrap();
    assert_eq!(
        p.preview,
        "-    1 one\n-    2 two\n+    1 uno\n+    2 dos\n"
    );
    let out = p.execute(&ctx, &NoOutput).await.unwrap();
    assert_eq!(out.text, "edited f.rs: replaced lines 1-2");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.rs")).unwrap(),
        "uno\r\ndos\r\nthree\r\n"
    );
}

#[test]
fn missing_and_binary_files_are_clear_errors() {
    let (dir, ctx) = setup("f.rs", SOURCE);
    ctx.files_read.record(&dir.path().join("gone.rs"));
    let err = model_error(prepare_json(
        EditFile,
        json!({"path": "gone.rs", "old_string": "a", "new_string": "b"}),
        &ctx,
    ));
    assert_eq!(
        err,
        "no such file: gone.rs; to create a file, use write_file"
    );
    std::fs::write(dir.path().join("bin"), b"\xff\xfe").unwrap();
    ctx.files_read.record(&dir.path().join("bin"));
    let err = model_error(prepare_json(
        EditFile,
        json!({"path": "bin", "old_string": "a", "new_string": "b"}),
        &ctx,
    ));
    assert_eq!(
        err,
        "bin is not UTF-8 text; edit_file edits text files only"
    );
}

#[test]
fn protected_files_are_refused_even_when_read() {
    let (dir, mut ctx) = setup("sandpiper.toml", "token = 1\n");
    ctx.paths = std::sync::Arc::new(crate::tools::PathPolicy::build(
        &crate::config::ToolsConfig::default(),
        &[dir.path().join("sandpiper.toml")],
    ));
    let err = model_error(prepare_json(
        EditFile,
        json!({"path": "sandpiper.toml", "old_string": "1", "new_string": "2"}),
        &ctx,
    ));
    assert!(err.starts_with("refused: sandpiper.toml"), "{err}");
}
