//! MCP catalog life cycle: list-changed pushes, manual refresh, broken servers, `mcp.json`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use sandpiper_agent::mcp::{
    McpError, McpManager, McpOptions, McpServerConfig, ServerState, load_mcp_json,
};
use serde_json::json;

use super::{call, has_tool, options, start, stdio, text, wait_catalog};

#[tokio::test]
async fn list_changed_notifications_update_the_catalog() {
    let manager = start(vec![("test", stdio())], options()).await;
    let before = *manager.generation().borrow();
    call(&manager, "mcp__test__add_tool", json!({"name": "fresh"}))
        .await
        .expect("add_tool");
    wait_catalog(&manager, Duration::from_secs(1), |c| {
        has_tool(c, "mcp__test__fresh")
    })
    .await;
    assert!(*manager.generation().borrow() > before);
    assert_eq!(
        text(
            call(&manager, "mcp__test__fresh", json!({}))
                .await
                .expect("new tool")
        ),
        "dynamic tool fresh"
    );
    call(&manager, "mcp__test__remove_tool", json!({"name": "fresh"}))
        .await
        .expect("remove_tool");
    wait_catalog(&manager, Duration::from_secs(1), |c| {
        !has_tool(c, "mcp__test__fresh")
    })
    .await;
    // A burst of changes ends in one consistent catalog.
    for name in ["b1", "b2", "b3"] {
        call(&manager, "mcp__test__add_tool", json!({"name": name}))
            .await
            .expect("add_tool");
    }
    wait_catalog(&manager, Duration::from_secs(1), |c| {
        ["b1", "b2", "b3"]
            .iter()
            .all(|n| has_tool(c, &format!("mcp__test__{n}")))
    })
    .await;
    manager.shutdown().await;
}

#[tokio::test]
async fn manual_refresh_reports_changes() {
    let manager = start(vec![("test", stdio())], options()).await;
    // Refresh right away, before the debounced push refresh runs.
    call(&manager, "mcp__test__add_tool", json!({"name": "manual"}))
        .await
        .expect("add_tool");
    let reports = manager.refresh(Some("test")).await;
    assert_eq!(
        (
            reports[0].added.clone(),
            reports[0].removed.clone(),
            reports[0].error.clone()
        ),
        (vec!["mcp__test__manual".to_owned()], vec![], None)
    );
    call(
        &manager,
        "mcp__test__remove_tool",
        json!({"name": "manual"}),
    )
    .await
    .expect("remove_tool");
    let reports = manager.refresh(None).await;
    assert_eq!(reports[0].removed, ["mcp__test__manual".to_owned()]);
    let unknown = manager.refresh(Some("nope")).await;
    assert!(
        unknown[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("unknown MCP server"))
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn broken_servers_do_not_block_the_good_one() {
    let missing = McpServerConfig::Stdio {
        command: "/nonexistent/mcp-server".into(),
        args: vec![],
        env: BTreeMap::from([("SECRET".to_owned(), "hunter2".to_owned())]),
        auto_approve: vec![],
    };
    let hanging = McpServerConfig::Stdio {
        command: "sleep".into(),
        args: vec!["30".into()],
        env: BTreeMap::new(),
        auto_approve: vec![],
    };
    let options = McpOptions {
        connect_timeout: Duration::from_secs(2),
        ..options()
    };
    let started = Instant::now();
    let manager = start(
        vec![
            ("good", stdio()),
            ("missing", missing),
            ("bad__name", stdio()),
            ("hang", hanging),
        ],
        options,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        text(
            call(&manager, "mcp__good__echo", json!({"text": "fine"}))
                .await
                .expect("good works")
        ),
        "fine"
    );
    assert!(manager.catalog().tools.iter().all(|t| t.server == "good"));
    let status: BTreeMap<String, _> = manager
        .status()
        .into_iter()
        .map(|s| (s.name.clone(), s))
        .collect();
    assert!(status["good"].connected);
    for name in ["missing", "bad__name", "hang"] {
        assert!(!status[name].connected, "{name}");
    }
    let error = |n: &str| status[n].error.clone().unwrap_or_default();
    assert!(
        error("missing").contains("cannot start"),
        "{}",
        error("missing")
    );
    assert!(!error("missing").contains("hunter2"));
    assert!(
        error("bad__name").contains("`__`"),
        "{}",
        error("bad__name")
    );
    assert!(
        error("hang").contains("no answer within"),
        "{}",
        error("hang")
    );
    let bad = manager.refresh(Some("bad__name")).await;
    assert!(bad[0].error.is_some());
    manager.shutdown().await;
}

/// A server that takes a moment to start is waited for (a turn then offers its tools); one
/// still starting after `startup_timeout` is reported as still connecting, a failed one as
/// failed, and nothing waits once the start-up time is over.
#[tokio::test]
async fn turns_wait_for_servers_still_starting_until_the_startup_timeout() {
    let late = McpServerConfig::Stdio {
        command: "sh".into(),
        args: vec![
            "-c".into(),
            format!("sleep 1; exec {} --stdio", super::SERVER),
        ],
        env: BTreeMap::new(),
        auto_approve: vec![],
    };
    let hanging = McpServerConfig::Stdio {
        command: "sleep".into(),
        args: vec!["30".into()],
        env: BTreeMap::new(),
        auto_approve: vec![],
    };
    let missing = McpServerConfig::Stdio {
        command: "/nonexistent/mcp-server".into(),
        args: vec![],
        env: BTreeMap::new(),
        auto_approve: vec![],
    };
    let options = McpOptions {
        startup_timeout: Duration::from_secs(4),
        ..options()
    };
    let servers = [("late", late), ("hang", hanging), ("missing", missing)]
        .into_iter()
        .map(|(n, c)| (n.to_owned(), c))
        .collect();
    let manager = McpManager::start(servers, options).await;
    assert!(manager.catalog().tools.is_empty(), "nothing listed yet");
    // A call to a tool the late server has not listed yet waits for it.
    assert!(manager.await_server("late").await);
    assert!(has_tool(&manager.catalog(), "mcp__late__echo"));
    let unavailable = manager
        .await_startup()
        .await
        .expect("servers were starting");
    let states: BTreeMap<String, ServerState> = unavailable
        .into_iter()
        .map(|u| (u.server, u.state))
        .collect();
    assert_eq!(
        states,
        BTreeMap::from([
            ("hang".to_owned(), ServerState::Connecting),
            ("missing".to_owned(), ServerState::Failed),
        ])
    );
    // The start-up time is over: nothing waits any more.
    let now = Instant::now();
    assert!(!manager.await_server("hang").await);
    assert!(now.elapsed() < Duration::from_secs(1));
    manager.shutdown().await;
}

#[tokio::test]
async fn load_mcp_json_reads_the_standard_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("mcp.json");
    std::fs::write(
        &path,
        r#"{"mcpServers": {
            "github": {"command": "npx", "args": ["-y", "server-github"], "env": {"TOKEN": "x"}},
            "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t"}}
        }}"#,
    )
    .expect("write");
    let servers = load_mcp_json(&path).expect("parse");
    assert_eq!(
        servers,
        BTreeMap::from([
            (
                "github".to_owned(),
                McpServerConfig::Stdio {
                    command: "npx".into(),
                    args: vec!["-y".into(), "server-github".into()],
                    env: BTreeMap::from([("TOKEN".to_owned(), "x".to_owned())]),
                    auto_approve: vec![],
                }
            ),
            (
                "remote".to_owned(),
                McpServerConfig::Http {
                    url: "https://mcp.example.com/mcp".into(),
                    headers: BTreeMap::from([("Authorization".to_owned(), "Bearer t".to_owned())]),
                    auto_approve: vec![],
                }
            ),
        ])
    );
    assert!(matches!(
        load_mcp_json(&dir.path().join("missing.json")),
        Err(McpError::BadConfig(_))
    ));
}
