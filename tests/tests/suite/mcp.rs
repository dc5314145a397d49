//! The MCP client against a real rmcp server (`mcp_test_server`) over stdio and HTTP.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use sandpiper_agent::mcp::{
    McpCallOutput, McpCatalog, McpError, McpManager, McpOptions, McpServerConfig,
};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use super::WAIT;

mod lifecycle;

const SERVER: &str = env!("CARGO_BIN_EXE_mcp_test_server");

fn stdio() -> McpServerConfig {
    McpServerConfig::Stdio {
        command: SERVER.into(),
        args: vec!["--stdio".into()],
        env: BTreeMap::new(),
        auto_approve: vec![],
    }
}

fn options() -> McpOptions {
    McpOptions {
        call_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        refresh_interval: Duration::ZERO,
        failure_threshold: 3,
        cooldown_base: Duration::from_millis(700),
        cooldown_max: Duration::from_secs(2),
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

async fn call(
    manager: &McpManager,
    tool: &str,
    arguments: Value,
) -> Result<McpCallOutput, McpError> {
    manager.call_tool(tool, args(arguments)).await
}

fn text(output: McpCallOutput) -> String {
    assert!(!output.is_error, "unexpected isError: {}", output.text);
    output.text
}

/// Waits (on `generation()`) until the catalog satisfies `done`.
async fn wait_catalog(manager: &McpManager, within: Duration, done: impl Fn(&McpCatalog) -> bool) {
    let mut generation = manager.generation();
    tokio::time::timeout(within, async {
        while !done(&manager.catalog()) {
            generation.changed().await.expect("manager alive");
        }
    })
    .await
    .expect("catalog changed in time");
}

fn has_tool(catalog: &McpCatalog, full_name: &str) -> bool {
    catalog.tool(full_name).is_some()
}

/// Starts `mcp_test_server --http` and returns it (killed on drop) with its URL.
async fn http_server() -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(SERVER)
        .args(["--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn http server");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::time::timeout(WAIT, tokio::io::BufReader::new(stdout).lines().next_line())
        .await
        .expect("server announced itself")
        .expect("read")
        .expect("a line");
    let url = line
        .strip_prefix("listening ")
        .expect("listening line")
        .to_owned();
    (child, url)
}

#[tokio::test]
async fn stdio_tools_resources_and_prompts() {
    let manager = start(vec![("test", stdio())], options()).await;
    let names: Vec<String> = manager
        .catalog()
        .tools
        .iter()
        .map(|t| t.full_name.clone())
        .collect();
    assert_eq!(
        names,
        [
            "add",
            "add_tool",
            "crash",
            "echo",
            "fail",
            "remove_tool",
            "slow"
        ]
        .map(|t| format!("mcp__test__{t}"))
        .to_vec()
    );
    assert_eq!(
        text(
            call(&manager, "mcp__test__echo", json!({"text": "hi there"}))
                .await
                .expect("echo")
        ),
        "hi there"
    );
    assert_eq!(
        text(
            call(&manager, "mcp__test__add", json!({"a": 2, "b": 3}))
                .await
                .expect("add")
        ),
        "5"
    );
    let failed = call(&manager, "mcp__test__fail", json!({}))
        .await
        .expect("fail runs");
    assert_eq!(
        (failed.is_error, failed.text.as_str()),
        (true, "this tool always fails")
    );
    let unknown = call(&manager, "mcp__test__nope", json!({}))
        .await
        .expect_err("unknown");
    assert!(matches!(unknown, McpError::UnknownTool { .. }), "{unknown}");
    let unknown = call(&manager, "mcp__other__echo", json!({}))
        .await
        .expect_err("unknown server");
    assert!(
        matches!(unknown, McpError::UnknownServer { .. }),
        "{unknown}"
    );

    let catalog = manager.catalog();
    assert_eq!(
        catalog
            .resources
            .iter()
            .map(|r| r.uri.as_str())
            .collect::<Vec<_>>(),
        ["test://greeting"]
    );
    assert_eq!(catalog.templates[0].uri_template, "test://items/{id}");
    assert_eq!(catalog.prompts[0].arguments[0].name, "name");
    let greeting = manager
        .read_resource("test://greeting")
        .await
        .expect("read");
    assert_eq!(greeting.text, "Hello from the test server");
    assert_eq!(
        manager
            .read_resource("test://items/42")
            .await
            .expect("template")
            .text,
        "item 42"
    );
    let missing = manager
        .read_resource("test://nowhere")
        .await
        .expect_err("unknown uri");
    assert!(
        matches!(missing, McpError::UnknownResource { .. }),
        "{missing}"
    );

    let expected = "[user]: Please greet Ada.\n\n[assistant]: Hello, Ada!";
    let arguments = BTreeMap::from([("name".to_owned(), "Ada".to_owned())]);
    assert_eq!(
        manager
            .get_prompt("greet", arguments.clone())
            .await
            .expect("prompt"),
        expected
    );
    assert_eq!(
        manager
            .get_prompt("test/greet", arguments)
            .await
            .expect("prompt"),
        expected
    );
    assert!(matches!(
        manager.get_prompt("nope", BTreeMap::new()).await,
        Err(McpError::UnknownPrompt { .. })
    ));

    let status = manager.status();
    assert_eq!(
        (
            status.len(),
            status[0].connected,
            status[0].tools,
            status[0].resources,
            status[0].prompts
        ),
        (1, true, 7, 2, 1)
    );
    manager.shutdown().await;
    assert!(!manager.status()[0].connected);
}

#[tokio::test]
async fn http_transport_calls_and_push_refresh() {
    let (_server, url) = http_server().await;
    let config = McpServerConfig::Http {
        url,
        headers: BTreeMap::from([("X-Test".to_owned(), "secret".to_owned())]),
        auto_approve: vec!["echo".into()],
    };
    let manager = start(vec![("web", config)], options()).await;
    assert_eq!(
        manager.server_config("web").expect("config").auto_approve(),
        ["echo".to_owned()]
    );
    assert!(
        has_tool(&manager.catalog(), "mcp__web__echo"),
        "{:?}",
        manager.status()
    );
    assert_eq!(
        text(
            call(&manager, "mcp__web__echo", json!({"text": "over http"}))
                .await
                .expect("echo")
        ),
        "over http"
    );
    assert_eq!(
        text(
            call(&manager, "mcp__web__add", json!({"a": 1.5, "b": 1}))
                .await
                .expect("add")
        ),
        "2.5"
    );
    call(&manager, "mcp__web__add_tool", json!({"name": "pushed"}))
        .await
        .expect("add_tool");
    wait_catalog(&manager, Duration::from_secs(2), |c| {
        has_tool(c, "mcp__web__pushed")
    })
    .await;
    assert_eq!(
        manager
            .read_resource("test://greeting")
            .await
            .expect("read")
            .text,
        "Hello from the test server"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn call_timeout_cancels_slow_calls() {
    let manager = start(
        vec![("test", stdio())],
        McpOptions {
            call_timeout: Duration::from_millis(300),
            ..options()
        },
    )
    .await;
    let started = Instant::now();
    let error = call(&manager, "mcp__test__slow", json!({"ms": 3000}))
        .await
        .expect_err("timeout");
    assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("300 ms"), "{error}");
    assert_eq!(
        text(
            call(&manager, "mcp__test__echo", json!({"text": "still here"}))
                .await
                .expect("echo")
        ),
        "still here"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn crashed_server_reconnects_on_next_call() {
    let manager = start(vec![("test", stdio())], options()).await;
    let error = call(&manager, "mcp__test__crash", json!({}))
        .await
        .expect_err("crash");
    assert!(matches!(error, McpError::Disconnected { .. }), "{error}");
    assert!(error.to_string().contains("disconnected"), "{error}");
    assert_eq!(
        text(
            call(&manager, "mcp__test__echo", json!({"text": "back"}))
                .await
                .expect("recovered")
        ),
        "back"
    );
    assert!(manager.status()[0].connected);
    manager.shutdown().await;
}

#[tokio::test]
async fn circuit_breaker_trips_and_recovers() {
    let options = McpOptions {
        call_timeout: Duration::from_millis(300),
        ..options()
    };
    let manager = start(vec![("test", stdio())], options).await;
    for _ in 0..3 {
        let error = call(&manager, "mcp__test__slow", json!({"ms": 2000}))
            .await
            .expect_err("timeout");
        assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    }
    let started = Instant::now();
    let error = call(&manager, "mcp__test__echo", json!({"text": "x"}))
        .await
        .expect_err("cut off");
    assert!(matches!(error, McpError::CoolingOff { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_millis(100));
    assert!(manager.status()[0].cooling_off_until.is_some());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        text(
            call(&manager, "mcp__test__echo", json!({"text": "ok"}))
                .await
                .expect("recovered")
        ),
        "ok"
    );
    assert_eq!(manager.status()[0].cooling_off_until, None);
    manager.shutdown().await;
}
