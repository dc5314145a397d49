//! The files to deploy sandpiper, checked as far as this machine can: the image cannot be
//! built without a registry for its base, so its runtime packages, user and health check
//! are read from the Dockerfile and compared with what docs/operations.md promises; the
//! systemd unit goes through `systemd-analyze verify` where it exists.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The words after `marker` on the line that holds it.
fn listed_after(text: &str, marker: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no `{marker}` in:\n{text}"));
    let mut words: Vec<String> = line
        .split_once(marker)
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split(|c: char| c.is_whitespace() || c == ',' || c == '`' || c == '.')
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    words.sort();
    words
}

#[test]
fn the_image_installs_what_the_docs_say_and_runs_as_its_own_user() {
    let dockerfile = read("deploy/Dockerfile");
    let docs = read("docs/operations.md");
    let declared = listed_after(&dockerfile, "# runtime-packages:");
    let installed = listed_after(&dockerfile, "apt-get install -y --no-install-recommends");
    let installed: Vec<String> = installed
        .into_iter()
        .filter(|w| w != "&&" && w != "\\")
        .collect();
    let installed: Vec<String> = installed
        .into_iter()
        .take_while(|w| !w.starts_with("rm"))
        .collect();
    assert_eq!(
        installed, declared,
        "the install line and its comment differ"
    );
    assert_eq!(
        listed_after(&docs, "Runtime packages:"),
        declared,
        "docs/operations.md lists other packages than the image installs"
    );
    for tool in ["bash", "git", "coreutils", "python3", "man-db"] {
        assert!(declared.iter().any(|p| p == tool), "{tool} missing");
    }
    // Two stages, a slim Debian runtime, a non-root user, a health check on /health.
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(
        froms[1].starts_with("FROM debian:") && froms[1].contains("-slim"),
        "{froms:?}"
    );
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert_eq!(user, "sandpiper:sandpiper");
    assert!(
        docs.contains("runs as the user `sandpiper` (uid 10001)"),
        "docs name the user"
    );
    assert!(dockerfile.contains("--uid 10001"));
    let health = dockerfile
        .split("HEALTHCHECK")
        .nth(1)
        .expect("a HEALTHCHECK");
    assert!(health.contains("/health"), "{health}");
    assert!(dockerfile.contains("VOLUME [\"/var/lib/sandpiper\"]"));
    // Everything written is under the volume, so a read-only root filesystem works.
    assert!(dockerfile.contains("SANDPIPER_DATABASE_URL=sqlite:///var/lib/sandpiper/"));
}

#[test]
fn compose_runs_it_read_only_beside_postgres() {
    let compose = read("deploy/compose.yaml");
    for needle in [
        "image: postgres:",
        "dockerfile: deploy/Dockerfile",
        "SANDPIPER_DATABASE_URL: postgres://",
        "read_only: true",
        "- /tmp",
        "no-new-privileges:true",
        "condition: service_healthy",
    ] {
        assert!(
            compose.contains(needle),
            "{needle} missing from compose.yaml"
        );
    }
}

#[test]
fn the_systemd_unit_is_hardened_and_verifies() {
    let unit = read("deploy/sandpiper.service");
    for directive in [
        "User=sandpiper",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/sandpiper",
        "EnvironmentFile=/etc/sandpiper/sandpiper.env",
        "SystemCallFilter=",
        "CapabilityBoundingSet=\n",
    ] {
        assert!(unit.contains(directive), "{directive:?} missing");
    }
    let Ok(version) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze is not installed: the unit's syntax is not verified here");
        return;
    };
    assert!(version.status.success());
    // verify wants the binary to exist: point it at the one just built.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("sandpiper.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/sandpiper", env!("CARGO_BIN_EXE_sandpiper")),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("systemd-analyze runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // verify exits 0 on unknown keys and bad values, but says so: it must say nothing.
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn release_builds_strip_debug_symbols() {
    let manifest = read("Cargo.toml");
    let release = manifest
        .split("[profile.release]")
        .nth(1)
        .expect("a release profile");
    assert!(
        release.lines().any(|l| l.trim() == "strip = true"),
        "{release}"
    );
}
