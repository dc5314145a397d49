//! The files to deploy sandpiper, checked as far as this machine can: the image cannot be
//! built without a registry for its base (`.ci/run` builds it where Docker works), so its
//! runtime packages, user, environment and health check are read from the Dockerfile and
//! compared with what docs/operations.md promises; the systemd unit goes through
//! `systemd-analyze verify` where it exists; neither may override the config file's
//! database, which the binary shows in the unit's environment.

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
    // A build stage, Node's runtime, a slim Debian runtime last; a non-root user, a health
    // check on /health.
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(froms.len(), 3, "{froms:?}");
    assert!(froms[0].starts_with("FROM rust:"), "{froms:?}");
    assert!(froms[1].starts_with("FROM node:"), "{froms:?}");
    assert!(
        froms[2].starts_with("FROM debian:") && froms[2].contains("-slim"),
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
    // Everything written is under the volume, so a read-only root filesystem works: the data
    // directory ($XDG_DATA_HOME/sandpiper) is the volume.
    assert_eq!(
        image_env(&dockerfile)
            .get("XDG_DATA_HOME")
            .map(String::as_str),
        Some("/var/lib")
    );
    // The launcher beside the binary, npx for MCP servers, manual pages for the man tool.
    assert!(
        dockerfile.contains("install -m 0755 target/release/sandpiper target/release/sandpiper-confine /usr/local/bin/"),
        "{dockerfile}"
    );
    assert!(
        dockerfile.contains("COPY --from=build /usr/local/bin/sandpiper /usr/local/bin/sandpiper-confine /usr/local/bin/"),
        "{dockerfile}"
    );
    assert!(dockerfile.contains("/usr/local/bin/npx"), "{dockerfile}");
    assert!(
        dockerfile.contains("\\|/usr/share/man|d")
            && dockerfile.contains("/etc/dpkg/dpkg.cfg.d/docker"),
        "slim's path-exclude of /usr/share/man must go"
    );
}

/// The `ENV` instructions of a Dockerfile, `KEY=VALUE` pairs across continued lines.
fn image_env(dockerfile: &str) -> std::collections::BTreeMap<String, String> {
    let mut env = std::collections::BTreeMap::new();
    let mut in_env = false;
    for line in dockerfile.lines() {
        let words = match line.strip_prefix("ENV ") {
            Some(rest) => rest,
            None if in_env => line,
            None => continue,
        };
        in_env = words.trim_end().ends_with('\\');
        for pair in words.split_whitespace().filter(|w| *w != "\\") {
            if let Some((k, v)) = pair.split_once('=') {
                env.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    env
}

/// The `Environment=` lines of a unit, `%S` (the state directories' root) as `state`.
fn unit_env(unit: &str, state: &str) -> std::collections::BTreeMap<String, String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace("%S", state)))
        .collect()
}

/// The variables a deploy file sets that would replace a key of the mounted config file:
/// never the database (an image or unit that set it ran every node on its own SQLite).
fn overriding(env: &std::collections::BTreeMap<String, String>) -> Vec<&'static str> {
    sandpiper_agent::config::ENV_OVERRIDES
        .iter()
        .filter(|o| env.contains_key(o.var))
        .map(|o| o.var)
        .collect()
}

#[test]
fn the_image_and_the_unit_never_override_the_configs_database() {
    let image = image_env(&read("deploy/Dockerfile"));
    let unit = unit_env(&read("deploy/sandpiper.service"), "/var/lib");
    // Where a container or journald expects them; a file that says otherwise is warned about.
    assert_eq!(
        overriding(&image),
        vec!["SANDPIPER_LISTEN", "SANDPIPER_LOG_FORMAT"]
    );
    assert_eq!(overriding(&unit), vec!["SANDPIPER_LOG_FORMAT"]);
    // The data directory, where the database goes when the file names none, is the volume
    // and the state directory.
    assert_eq!(
        image.get("XDG_DATA_HOME").map(String::as_str),
        Some("/var/lib")
    );
    assert_eq!(
        unit.get("XDG_DATA_HOME").map(String::as_str),
        Some("/var/lib")
    );

    // Through the binary, in the unit's environment: the file's database is the one used,
    // and without one it is in the data directory.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("lib");
    let unit = unit_env(
        &read("deploy/sandpiper.service"),
        &state.display().to_string(),
    );
    let database_of = |config: &str| {
        let file = dir.path().join("sandpiper.toml");
        std::fs::write(&file, config).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandpiper"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .envs(&unit)
            .arg("--config")
            .arg(&file)
            .args(["config", "check"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(!stderr.contains("overrides the config file"), "{stderr}");
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("# database: "))
            .unwrap_or_else(|| panic!("no database line:\n{stdout}"))
            .to_owned()
    };
    assert_eq!(
        database_of("[database]\nurl = \"postgres://sp@db.internal/sp\"\n"),
        "postgres://<redacted>@db.internal/sp"
    );
    assert_eq!(
        database_of("[model]\nmodel = \"m\"\n"),
        format!(
            "{} (SQLite; not created yet: the first chat or serve creates it)",
            state.join("sandpiper/sandpiper.db").display()
        )
    );
}

#[test]
fn the_build_context_leaves_out_the_build_directory_history_and_caches() {
    let ignored = read(".dockerignore");
    for entry in ["target/", ".git/", ".ci/", "deploy/sandpiper.env"] {
        assert!(
            ignored.lines().any(|l| l.trim() == entry),
            "{entry} missing from .dockerignore"
        );
    }
}

#[test]
fn the_seccomp_profile_allows_the_sandboxs_namespaces_and_compose_uses_it() {
    let profile: serde_json::Value =
        serde_json::from_str(&read("deploy/seccomp.json")).expect("deploy/seccomp.json is JSON");
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ALLOW");
    let denied: Vec<&str> = profile["syscalls"]
        .as_array()
        .expect("syscalls")
        .iter()
        .filter(|rule| rule["action"] == "SCMP_ACT_ERRNO")
        .flat_map(|rule| rule["names"].as_array().expect("names").iter())
        .filter_map(|n| n.as_str())
        .collect();
    // What the tool sandbox calls (agent/src/process/confine/sys.rs).
    for needed in [
        "unshare",
        "clone",
        "clone3",
        "mount",
        "umount2",
        "seccomp",
        "prctl",
        "landlock_create_ruleset",
    ] {
        assert!(!denied.contains(&needed), "{needed} is refused");
    }
    for refused in [
        "kexec_load",
        "init_module",
        "bpf",
        "perf_event_open",
        "keyctl",
    ] {
        assert!(denied.contains(&refused), "{refused} is allowed");
    }
    assert!(read("deploy/compose.yaml").contains("- seccomp=./seccomp.json"));
    let docs = read("docs/operations.md");
    assert!(
        docs.contains("--security-opt seccomp=deploy/seccomp.json"),
        "docs show the flag"
    );
}

#[test]
fn compose_runs_it_read_only_beside_postgres() {
    let compose = read("deploy/compose.yaml");
    for needle in [
        "image: postgres:",
        "dockerfile: deploy/Dockerfile",
        "SANDPIPER_DATABASE_URL: postgres://",
        "read_only: true",
        "- seccomp=./seccomp.json",
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
        "StateDirectory=sandpiper\n",
        "Environment=XDG_DATA_HOME=%S\n",
        "target/release/sandpiper-confine /usr/local/bin/",
    ] {
        assert!(unit.contains(directive), "{directive:?} missing");
    }
    // Node's JIT (MCP servers from npm) needs writable executable memory.
    assert!(
        !unit.contains("\nMemoryDenyWriteExecute=yes"),
        "MemoryDenyWriteExecute stops Node-based MCP servers"
    );
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
