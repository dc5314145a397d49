//! What tools inherit (issue #10, attacks 3 and 12): bash and stdio MCP servers never see the
//! bot's secrets, only the allow-list and what the operator passes; MCP results are bounded
//! and ambiguous or duplicate MCP tool names are refused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use sandpiper::wiring;
use sandpiper_agent::mcp::{McpManager, McpOptions, McpServerConfig};
use sandpiper_agent::process::env::ChildEnv;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::ConsoleRun;
use serde_json::{Value, json};

use super::{WAIT, contents_with_role, setup};

const SERVER: &str = env!("CARGO_BIN_EXE_mcp_test_server");

/// Secrets the bot holds in its environment; none may reach a tool.
const SECRETS: [&str; 4] = [
    "discord-secret-token",
    "sk-openai-secret",
    "db-password-secret",
    "xoxb-slack-secret",
];

/// The bot's environment as the seam presents it: the allow-list, the secrets, and one
/// variable the operator passes by name.
fn bot_env(path: &str) -> [(&str, &str); 8] {
    [
        ("PATH", path),
        ("HOME", "/home/bot"),
        ("LANG", "C.UTF-8"),
        ("DISCORD_TOKEN", SECRETS[0]),
        ("OPENAI_API_KEY", SECRETS[1]),
        (
            "SANDPIPER_DATABASE_URL",
            "postgres://bot:db-password-secret@db/x",
        ),
        ("SLACK_BOT_TOKEN", SECRETS[3]),
        ("GITHUB_TOKEN", "ghp-passed-on-purpose"),
    ]
}

/// The test server with the security tools on, and a key of its own.
fn server_with_env(extra: &[(&str, &str)]) -> McpServerConfig {
    let mut env = BTreeMap::from([("MCP_TEST_SECURITY_TOOLS".to_owned(), "1".to_owned())]);
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    McpServerConfig::Stdio {
        command: SERVER.into(),
        args: vec!["--stdio".into()],
        env,
        auto_approve: vec![],
    }
}

fn assert_no_secret(text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{secret} reached a tool:\n{text}");
    }
}

/// Variable names of `NAME=value` lines.
fn names(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .filter(|k| !["PWD", "SHLVL", "_", "OLDPWD"].contains(k))
        .collect()
}

both_backends! {
    async fn bash_and_mcp_servers_never_see_the_bots_secrets(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "env | sort"})),
            tool_call("c2", "mcp__s__env", json!({})),
            text("Environment checked."),
        ]).await;
        s.config.tools.pass_env = vec!["GITHUB_TOKEN".into()];
        s.config.tools.env = BTreeMap::from([("CARGO_TERM_COLOR".into(), "never".into())]);
        s.config
            .mcp
            .servers
            .insert("s".into(), server_with_env(&[("SERVER_KEY", "server-own-key")]));
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
        let env = bot_env(&path);
        let host = sandpiper_agent::turn::agent::Host {
            protected_files: Vec::new(),
            env: &env,
        };
        let agent = wiring::build_agent_in(s.config.core.clone(), host)
            .await
            .expect("agent builds");
        sandpiper_tests::harness::mcp_attempted(&agent).await;
        let console = ConsoleRun::start(agent.clone(), "env", "alice", true);
        console.send("show me the environment").await;
        let out = console.finish().await;
        assert!(out.contains("Environment checked."), "{out}");
        s.llm.verify();
        let requests = s.llm.requests();
        let bash = contents_with_role(&requests[1], "tool").pop().unwrap_or_default();
        let mcp = contents_with_role(&requests[2], "tool").pop().unwrap_or_default();
        assert_no_secret(&bash);
        assert_no_secret(&mcp);
        assert_no_secret(&out);
        assert_eq!(
            names(&bash),
            ["CARGO_TERM_COLOR", "GITHUB_TOKEN", "HOME", "LANG", "PATH", "SANDPIPER_CALL_ID"],
            "{bash}"
        );
        assert!(bash.contains("GITHUB_TOKEN=ghp-passed-on-purpose\n"), "{bash}");
        // The server: the allow-list, [tools] env and its own env; never pass_env. (And the
        // marker that finds its processes to end them, like a bash call's.)
        assert_eq!(
            names(&mcp),
            ["CARGO_TERM_COLOR", "HOME", "LANG", "MCP_TEST_SECURITY_TOOLS", "PATH", "SANDPIPER_CALL_ID", "SERVER_KEY"],
            "{mcp}"
        );
        assert!(mcp.contains("SERVER_KEY=server-own-key"), "{mcp}");
        agent.mcp().shutdown().await;
    }
}

fn options() -> McpOptions {
    McpOptions {
        call_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        refresh_interval: Duration::ZERO,
        ..McpOptions::default()
    }
}

async fn start(servers: Vec<(&str, McpServerConfig)>, options: McpOptions) -> Arc<McpManager> {
    let servers = servers
        .into_iter()
        .map(|(n, c)| (n.to_owned(), c))
        .collect();
    let manager = tokio::time::timeout(WAIT, McpManager::start(servers, options))
        .await
        .expect("start in time");
    // Servers connect in the background; these tests begin once each has been tried.
    assert!(manager.first_attempts(WAIT).await, "first attempts in time");
    manager
}

fn args(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

#[tokio::test]
async fn an_mcp_server_gets_the_allow_list_and_its_own_env_only() {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let options = McpOptions {
        child_env: ChildEnv::allow_listed(&bot_env(&path)),
        ..options()
    };
    let manager = start(
        vec![("s", server_with_env(&[("API_KEY", "mine")]))],
        options,
    )
    .await;
    let out = manager
        .call_tool("mcp__s__env", args(json!({})))
        .await
        .expect("env runs");
    assert_no_secret(&out.text);
    assert_eq!(
        names(&out.text),
        [
            "API_KEY",
            "HOME",
            "LANG",
            "MCP_TEST_SECURITY_TOOLS",
            "PATH",
            "SANDPIPER_CALL_ID"
        ],
        "{}",
        out.text
    );
    manager.shutdown().await;
}

/// Issue 24: a stdio MCP server started confined (as `serve` starts them) cannot read the
/// bot's environment (this test process stands in for the bot) nor its config file, which
/// the same server reads unconfined.
#[tokio::test]
async fn a_confined_mcp_server_reads_neither_the_bots_environment_nor_its_config() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sandpiper.toml");
    std::fs::write(&config, "token = \"config-secret-for-mcp\"\n").expect("config");
    let environ = format!("/proc/{}/environ", std::process::id());
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let mut seen = Vec::new();
    for confinement in [
        sandpiper_agent::process::confine::Confinement::none(),
        sandpiper_agent::process::confine::Confinement::probe(std::slice::from_ref(&config)),
    ] {
        let options = McpOptions {
            child_env: ChildEnv::allow_listed(&bot_env(&path)).confined(confinement),
            ..options()
        };
        let manager = start(vec![("s", server_with_env(&[]))], options).await;
        let mut texts = Vec::new();
        for target in [environ.clone(), config.display().to_string()] {
            let out = manager
                .call_tool("mcp__s__read_path", args(json!({ "path": target })))
                .await
                .expect("read_path runs");
            texts.push(out.text);
        }
        manager.shutdown().await;
        seen.push(texts);
    }
    // Unconfined, both reads work: the test can fail.
    assert!(seen[0][0].starts_with("read: "), "{:?}", seen[0]);
    assert!(
        seen[0][1].contains("config-secret-for-mcp"),
        "{:?}",
        seen[0]
    );
    assert!(seen[1][0].contains("Permission denied"), "{:?}", seen[1]);
    assert_eq!(seen[1][1], "read: ", "{:?}", seen[1]);
}

#[tokio::test]
async fn mcp_results_are_capped_like_built_in_output_and_big_images_become_notes() {
    let options = McpOptions {
        max_output_bytes: 4096,
        ..options()
    };
    let manager = start(vec![("s", server_with_env(&[]))], options).await;
    let out = manager
        .call_tool("mcp__s__big", args(json!({"bytes": 100_000})))
        .await
        .expect("big runs");
    assert!(out.text.len() <= 4096 + 100, "{}", out.text.len());
    assert!(
        out.text
            .contains("bytes of output cut (100000 bytes in all) ...]"),
        "{}",
        &out.text[..200]
    );

    let small = manager
        .call_tool("mcp__s__image", args(json!({"bytes": 1000})))
        .await
        .expect("image runs");
    assert_eq!(small.images.len(), 1);
    let over = 4 * 1024 * 1024 + 1;
    let big = manager
        .call_tool("mcp__s__image", args(json!({"bytes": over})))
        .await
        .expect("image runs");
    assert_eq!(big.images, vec![]);
    assert_eq!(
        big.text,
        format!(
            "[image image/png of {over} bytes left out: larger than the 4194304 bytes an MCP \
             image may be]"
        )
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn ambiguous_server_names_are_refused_naming_both() {
    let manager = start(
        vec![("a", server_with_env(&[])), ("a_", server_with_env(&[]))],
        options(),
    )
    .await;
    let status: BTreeMap<String, Option<String>> = manager
        .status()
        .into_iter()
        .map(|s| (s.name, s.error))
        .collect();
    assert_eq!(status["a"], None);
    let refused = status["a_"].clone().unwrap_or_default();
    assert!(
        refused.contains("MCP servers `a_` and `a` would make the same tool names")
            && refused.contains("`mcp__a___b` is also `a`'s tool `_b`"),
        "{refused}"
    );
    // Only `a`'s tools are offered; `a_`'s would have been read as `a`'s.
    let catalog = manager.catalog();
    assert!(catalog.tools.iter().all(|t| t.server == "a"));
    assert!(catalog.tool("mcp__a__echo").is_some());
    manager.shutdown().await;
}

#[tokio::test]
async fn a_duplicate_tool_name_is_refused_not_overwritten() {
    let manager = start(vec![("t", server_with_env(&[]))], options()).await;
    // The server now lists `echo` twice: its own and a dynamic one.
    manager
        .call_tool("mcp__t__add_tool", args(json!({"name": "echo"})))
        .await
        .expect("add_tool");
    manager.refresh(Some("t")).await;
    let catalog = manager.catalog();
    let echoes = catalog
        .tools
        .iter()
        .filter(|t| t.full_name == "mcp__t__echo")
        .count();
    assert_eq!(echoes, 1);
    let error = manager.status()[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("MCP tool `echo` of server `t` is refused: its name `mcp__t__echo` is already taken by `echo` of server `t`"),
        "{error}"
    );
    // The first one still works.
    let out = manager
        .call_tool("mcp__t__echo", args(json!({"text": "still here"})))
        .await
        .expect("echo");
    assert_eq!(out.text, "still here");
    manager.shutdown().await;
}
