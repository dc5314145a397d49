//! MCP through the whole agent: tools offered to the model, approval, execution, resources and
//! prompts in the system message, `read_resource`, `use_prompt`, prompt governance, `/health`.
//! First against the in-repo rmcp server, then against real servers from npm and PyPI.

use std::collections::BTreeMap;

use sandpiper::serve;
use sandpiper_agent::config::Config;
use sandpiper_agent::mcp::McpServerConfig;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::{WAIT, contents_with_role, setup};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_mcp_test_server");

fn stdio(command: &str, args: &[&str], auto_approve: &[&str]) -> McpServerConfig {
    McpServerConfig::Stdio {
        command: command.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: BTreeMap::new(),
        auto_approve: auto_approve.iter().map(|a| (*a).to_owned()).collect(),
    }
}

fn with_servers(mut config: Config, servers: Vec<(&str, McpServerConfig)>) -> Config {
    for (name, server) in servers {
        config.mcp.servers.insert(name.to_owned(), server);
    }
    config.mcp.refresh_interval = std::time::Duration::ZERO;
    // These tests are about MCP tools going through the pipeline, each offered on every call;
    // with 13 built-in tools the test server's would cross the tool search threshold
    // (suite::tool_search covers deferral).
    config.tools.search = sandpiper_agent::config::ToolSearchMode::Off;
    config
}

fn system_of(request: &serde_json::Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn offered(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// Where a server installed by `.ci/run` lives, or `None` (with a notice) when it is not
/// installed here and not required.
fn installed(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(path) if !path.is_empty() => Some(path),
        _ if std::env::var("SANDPIPER_REQUIRE_MCP").is_ok_and(|v| v == "1") => {
            panic!("{var} must point at the installed MCP server (SANDPIPER_REQUIRE_MCP=1)")
        }
        _ => {
            eprintln!(
                "NOTICE: {var} is not set; skipping the test against that real MCP server (.ci/run installs it)"
            );
            None
        }
    }
}

both_backends! {
    async fn mcp_tools_resources_and_prompts_go_through_the_pipeline(db) {
        let s = setup(&db, vec![
            tool_call("c1", "mcp__t__echo", json!({"text": "over the wire"})),
            tool_call("c2", "mcp__t__add", json!({"a": 2, "b": 40})),
            tool_call("c3", "read_resource", json!({"uri": "test://greeting"})),
            tool_call("c4", "use_prompt", json!({"name": "mcp__t__greet", "arguments": {"name": "Ada"}})),
            text("all four worked"),
        ]).await;
        let config = with_servers(s.config.core.clone(), vec![("t", stdio(TEST_SERVER, &["--stdio"], &["add"]))]);
        let agent = harness::agent(config).await;
        let console = ConsoleRun::start(agent.clone(), "mcp", "alice", false);
        console.send("exercise the test server").await;
        console.wait_for("approve mcp__t__echo", WAIT).await;
        console.send("y").await;
        // `add` is on the server's auto_approve list: no question.
        console.wait_for("approve read_resource", WAIT).await;
        console.send("y").await;
        console.wait_for("approve use_prompt", WAIT).await;
        console.send("y").await;
        let out = console.finish().await;
        assert!(out.contains("all four worked"), "{out}");
        assert!(!out.contains("approve mcp__t__add"), "{out}");
        s.llm.verify();

        let requests = s.llm.requests();
        let tools = offered(&requests[0]);
        for name in ["bash", "read_resource", "use_prompt", "mcp__t__echo", "mcp__t__add"] {
            assert!(tools.contains(&name.to_owned()), "{name} not offered: {tools:?}");
        }
        let system = system_of(&requests[0]);
        assert!(system.contains("<mcp-resources>\ntest://greeting A friendly greeting\n"), "{system}");
        assert!(system.contains("<mcp-prompts>\nmcp__t__greet — Greet someone (arguments: name*)\n"), "{system}");
        let results: Vec<String> = (1..=4).map(|i| contents_with_role(&requests[i], "tool").pop().unwrap()).collect();
        assert!(results[0].contains("over the wire"), "{results:?}");
        assert!(results[1].contains("42"), "{results:?}");
        assert!(results[2].contains("Hello from the test server"), "{results:?}");
        assert!(results[3].contains("Please greet Ada.") && results[3].contains("[assistant]: Hello, Ada!"), "{results:?}");

        // Prompt governance: the server's prompt is a read-only MCP template.
        let mut synced = Vec::new();
        for _ in 0..50 {
            synced = agent.store().prompt_templates().await.unwrap();
            if !synced.is_empty() { break; }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(synced.len(), 1, "{synced:?}");
        assert_eq!((synced[0].name.as_str(), synced[0].origin.as_str(), synced[0].readonly), ("mcp__t__greet", "mcp", true));
        assert_eq!(synced[0].mcp_server.as_deref(), Some("t"));

        // /health counts what is connected.
        let health = serve::health_of(agent.mcp());
        assert_eq!(serde_json::to_value(&health).unwrap(), json!({"status": "ok", "mcp": {"servers": 1, "resources": 2, "prompts": 1}}));
        agent.mcp().shutdown().await;
    }

    async fn tools_a_server_adds_are_offered_on_the_next_model_call(db) {
        let s = setup(&db, vec![
            tool_call("c1", "mcp__t__add_tool", json!({"name": "fresh"})),
            text("added"),
            tool_call("c2", "mcp__t__fresh", json!({})),
            text("called it"),
        ]).await;
        let config = with_servers(s.config.core.clone(), vec![("t", stdio(TEST_SERVER, &["--stdio"], &["add_tool", "fresh"]))]);
        let agent = harness::agent(config).await;
        let console = ConsoleRun::start(agent.clone(), "live", "alice", false);
        console.send("add a tool").await;
        console.wait_for("added", WAIT).await;
        // The server announced the change; the agent's catalog follows it.
        let start = std::time::Instant::now();
        while !agent.catalog().tools().iter().any(|t| t.name == "mcp__t__fresh") {
            assert!(start.elapsed() < WAIT, "the new tool never reached the catalog");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        console.send("now use it").await;
        let out = console.finish().await;
        assert!(out.contains("called it"), "{out}");
        let requests = s.llm.requests();
        assert!(!offered(&requests[0]).contains(&"mcp__t__fresh".to_owned()));
        assert!(offered(&requests[2]).contains(&"mcp__t__fresh".to_owned()));
        s.llm.verify();
        agent.mcp().shutdown().await;
    }

    async fn health_endpoint_serves_the_counts(db) {
        let s = setup(&db, vec![]).await;
        let config = with_servers(s.config.core.clone(), vec![("t", stdio(TEST_SERVER, &["--stdio"], &[]))]);
        let agent = harness::agent(config).await;
        let mcp = agent.mcp().clone();
        let health: serve::HealthSource = std::sync::Arc::new(move || serve::health_of(&mcp));
        let shutdown = tokio_util::sync::CancellationToken::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let limits = sandpiper_agent::config::ServerConfig::default();
        let stop = shutdown.clone();
        let server = tokio::spawn(async move {
            sandpiper::http_server::run("127.0.0.1:0".parse().unwrap(), serve::router(health), &limits, stop, tx).await
        });
        let addr = rx.await.unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let body: serde_json::Value = reqwest::Client::builder().no_proxy().build().unwrap()
            .get(format!("http://{addr}/health")).send().await.unwrap().json().await.unwrap();
        assert_eq!(body, json!({"status": "ok", "mcp": {"servers": 1, "resources": 2, "prompts": 1}}));
        shutdown.cancel();
        server.await.unwrap().unwrap();
        agent.mcp().shutdown().await;
    }

    async fn a_broken_server_is_a_clear_error_and_blocks_nothing(db) {
        let s = setup(&db, vec![
            tool_call("c1", "mcp__t__fail", json!({})),
            text("noted"),
        ]).await;
        let config = with_servers(s.config.core.clone(), vec![
            ("t", stdio(TEST_SERVER, &["--stdio"], &["fail"])),
            ("gone", stdio("/nonexistent/mcp-server", &[], &[])),
        ]);
        let agent = harness::agent(config).await;
        let console = ConsoleRun::start(agent.clone(), "broken", "alice", false);
        console.send("try it").await;
        let out = console.finish().await;
        assert!(out.contains("noted"), "{out}");
        let result = contents_with_role(&s.llm.requests()[1], "tool").pop().unwrap();
        assert!(!result.is_empty());
        let status = agent.mcp().status();
        let gone = status.iter().find(|s| s.name == "gone").unwrap();
        assert!(!gone.connected && gone.error.is_some(), "{gone:?}");
        let health = serve::health_of(agent.mcp());
        assert_eq!(health.mcp.unwrap().servers, 1);
        agent.mcp().shutdown().await;
    }
}

/// The real `@modelcontextprotocol/server-everything` (npm) over stdio and over streamable
/// HTTP, and `mcp-server-time` (PyPI), through the full pipeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_servers_from_npm_and_pypi() {
    let (Some(everything), Some(time)) = (
        installed("SANDPIPER_TEST_MCP_EVERYTHING"),
        installed("SANDPIPER_TEST_MCP_TIME"),
    ) else {
        return;
    };
    // streamable HTTP: the same package, started as an HTTP server on a free port.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut http_child = tokio::process::Command::new(&everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start server-everything over HTTP");
    let start = std::time::Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < WAIT,
            "server-everything did not listen on {port}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let db = sandpiper_tests::db::TestDb::sqlite();
    let s = setup(
        &db,
        vec![
            tool_call(
                "c1",
                "mcp__ev__echo",
                json!({"message": "hello everything"}),
            ),
            tool_call(
                "c2",
                "mcp__evhttp__echo",
                json!({"message": "hello over http"}),
            ),
            tool_call(
                "c3",
                "mcp__time__get_current_time",
                json!({"timezone": "UTC"}),
            ),
            tool_call(
                "c4",
                "read_resource",
                json!({"uri": "demo://resource/static/document/architecture.md"}),
            ),
            tool_call(
                "c5",
                "use_prompt",
                json!({"name": "mcp__ev__simple-prompt"}),
            ),
            text("done with real servers"),
        ],
    )
    .await;
    let mut config = with_servers(
        s.config.core.clone(),
        vec![
            ("ev", stdio(&everything, &["stdio"], &[])),
            ("time", stdio(&time, &[], &[])),
            (
                "evhttp",
                McpServerConfig::Http {
                    url: format!("http://127.0.0.1:{port}/mcp"),
                    headers: BTreeMap::new(),
                    auto_approve: vec![],
                },
            ),
        ],
    );
    config.mcp.connect_timeout = std::time::Duration::from_secs(60);
    let agent = harness::agent(config).await;
    let status = agent.mcp().status();
    assert!(status.iter().all(|s| s.connected), "{status:?}");
    let console = ConsoleRun::start(agent.clone(), "real", "alice", true);
    console.send("use the real servers").await;
    let out = console.finish().await;
    assert!(out.contains("done with real servers"), "{out}");
    s.llm.verify();
    let requests = s.llm.requests();
    let result = |i: usize| contents_with_role(&requests[i], "tool").pop().unwrap();
    assert!(result(1).contains("hello everything"), "{}", result(1));
    assert!(result(2).contains("hello over http"), "{}", result(2));
    assert!(
        result(3).contains("UTC") || result(3).contains("+00:00"),
        "{}",
        result(3)
    );
    assert!(!result(4).starts_with("error"), "{}", result(4));
    assert!(result(5).contains("[user]:"), "{}", result(5));
    let system = system_of(&requests[0]);
    assert!(
        system.contains("<mcp-resources>") && system.contains("<mcp-prompts>"),
        "{system}"
    );
    let health = serve::health_of(agent.mcp());
    let counts = health.mcp.unwrap();
    assert_eq!(counts.servers, 3);
    assert!(counts.resources > 0 && counts.prompts > 0, "{counts:?}");
    agent.mcp().shutdown().await;
    let _ = http_child.kill().await;
}
