//! Where a workstream's tools work: `<root>/<safe name>` per workstream, or `root` itself in
//! shared mode.
//!
//! Separate directories keep one thread's files out of another's unasked reads (the file tools
//! read without approval only inside their own directory). The directory name is the key
//! escaped so that it is a single safe file name — never empty, `.` or `..`, never hidden —
//! and so that two different keys never share a directory: every byte outside `[A-Za-z0-9-.]`
//! (and a leading `.`) becomes `_` and two hex digits, so `discord:123` is `discord_3a123`
//! and `discord_123` is `discord_5f123`. Names that would grow too long keep a prefix and
//! add a hash of the whole key.

use std::path::{Path, PathBuf};

use crate::config::WorkdirMode;

/// Longest directory name made from a key (well under the usual 255-byte limit).
const MAX_NAME_BYTES: usize = 120;

/// How working directories are laid out under one root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkdirLayout {
    /// Absolute root (`[tools] workdir`, default `./workstreams` made absolute at start).
    pub root: PathBuf,
    /// Per workstream, or one shared directory.
    pub mode: WorkdirMode,
}

impl WorkdirLayout {
    /// The layout for `[tools] workdir` (`None` = `./workstreams`), made absolute against
    /// `cwd`.
    pub fn new(workdir: Option<&Path>, mode: WorkdirMode, cwd: &Path) -> Self {
        let root = workdir.unwrap_or(Path::new("workstreams"));
        Self {
            root: super::super::tools::normalize(&cwd.join(root)),
            mode,
        }
    }

    /// The working directory of workstream `key`.
    pub fn dir_for(&self, key: &str) -> PathBuf {
        match self.mode {
            WorkdirMode::Shared => self.root.clone(),
            WorkdirMode::PerWorkstream => self.root.join(safe_name(key)),
        }
    }
}

/// `key` as one file name, injective (see the module docs).
pub fn safe_name(key: &str) -> String {
    if key.is_empty() {
        // Escaped names never are a lone `_`: it stands for the empty key.
        return "_".into();
    }
    let mut out = String::with_capacity(key.len());
    for (i, b) in key.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'-' || (b == b'.' && i > 0);
        if plain {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    if out.len() > MAX_NAME_BYTES {
        let mut cut = MAX_NAME_BYTES - 17;
        // Never cut inside an escape (`_` and two hex digits are ASCII, so any byte is a
        // char boundary; only the escape must stay whole to keep names readable).
        while out[..cut].ends_with('_') || out[..cut.saturating_sub(1)].ends_with('_') {
            cut -= 1;
        }
        out = format!("{}~{:016x}", &out[..cut], fnv1a(key.as_bytes()));
    }
    out
}

/// FNV-1a, 64 bits: stable across builds and platforms (unlike std's hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::collections::HashSet;

    #[test]
    fn names_are_escaped_and_distinct() {
        assert_eq!(safe_name("discord:123"), "discord_3a123");
        assert_eq!(safe_name("discord_123"), "discord_5f123");
        assert_eq!(
            safe_name("slack:T1:C2:1700000000.000100"),
            "slack_3aT1_3aC2_3a1700000000.000100"
        );
        assert_eq!(safe_name("."), "_2e");
        assert_eq!(safe_name(".."), "_2e.");
        assert_eq!(safe_name("a/../b"), "a_2f.._2fb");
        assert_eq!(safe_name(""), "_");
        assert_eq!(safe_name("é"), "_c3_a9");
        let keys = [
            "discord:123",
            "discord_123",
            "discord.123",
            "discord-123",
            "discord%3a123",
            "discord_3a123",
            "",
            "_",
            ".",
            "..",
            "_2e",
            "a",
            "A",
        ];
        let names: HashSet<String> = keys.iter().map(|k| safe_name(k)).collect();
        assert_eq!(names.len(), keys.len(), "{names:?}");
        for name in &names {
            assert!(!name.is_empty() && name != "." && name != ".." && !name.starts_with('.'));
            assert!(!name.contains('/') && !name.contains('\0'));
        }
    }

    #[test]
    fn long_keys_are_cut_with_a_hash() {
        let a = format!("console:{}", ":".repeat(200));
        let b = format!("console:{}x", ":".repeat(200));
        let (na, nb) = (safe_name(&a), safe_name(&b));
        assert!(
            na.len() <= MAX_NAME_BYTES && nb.len() <= MAX_NAME_BYTES,
            "{na}"
        );
        assert_ne!(na, nb);
        assert!(na.starts_with("console_3a_3a"), "{na}");
    }

    #[test]
    fn per_workstream_and_shared_layouts() {
        let per = WorkdirLayout::new(None, WorkdirMode::PerWorkstream, Path::new("/srv/sp"));
        assert_eq!(per.root, PathBuf::from("/srv/sp/workstreams"));
        assert_eq!(
            per.dir_for("discord:1"),
            PathBuf::from("/srv/sp/workstreams/discord_3a1")
        );
        let shared = WorkdirLayout::new(
            Some(Path::new("../checkout")),
            WorkdirMode::Shared,
            Path::new("/srv/sp"),
        );
        assert_eq!(shared.dir_for("discord:1"), PathBuf::from("/srv/checkout"));
        assert_eq!(shared.dir_for("discord:2"), PathBuf::from("/srv/checkout"));
    }
}
