//! Embeds every `tools/*.json` file at build time, so that the registry can check that each
//! JSON file has an implementation and each implementation has a JSON file.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    // Read when the script runs, not when it was compiled: a build script shared by two
    // checkouts through one target directory must read the tools of the checkout it builds.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = PathBuf::from(manifest).join("../tools");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default();
    entries.sort();
    let mut out = String::from(
        "/// `(file stem, JSON text)` of every file in `tools/`.\npub(crate) static TOOL_SCHEMAS: &[(&str, &str)] = &[\n",
    );
    for path in entries {
        println!("cargo:rerun-if-changed={}", path.display());
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let abs = path.canonicalize().unwrap_or(path.clone());
        let _ = writeln!(
            out,
            "    ({stem:?}, include_str!({:?})),",
            abs.display().to_string()
        );
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("tool_schemas.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}
