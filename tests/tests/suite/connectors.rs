//! Connector policy through the whole agent and the in-repo MCP server: refused servers are
//! never offered, never found, never listed in the system message and never run (by name,
//! through `read_resource`/`use_prompt`, or on their `auto_approve` list); the policy is read
//! fresh before every call; a task's `[]` wins over a thread that allows the server; and an
//! unreadable policy refuses the call.

use std::collections::BTreeMap;

use sandpiper_agent::Agent;
use sandpiper_agent::config::Config;
use sandpiper_agent::mcp::McpServerConfig;
use sandpiper_agent::protocol::{ApprovalItem, Approver, Decision, TurnEvent};
use sandpiper_agent::store::Store;
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, RecordingSink, ScriptedApprover};
use serde_json::json;
use sqlx::{Connection, Executor};
use tokio_util::sync::CancellationToken;

use super::{contents_with_role, setup};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_mcp_test_server");
const REFUSED: &str = "Connector t is not enabled for this task";

/// The test server as `t` (its `add` runs unasked), and a second copy as `u`.
fn with_servers(mut config: Config) -> Config {
    for name in ["t", "u"] {
        config.mcp.servers.insert(
            name.to_owned(),
            McpServerConfig::Stdio {
                command: TEST_SERVER.into(),
                args: vec!["--stdio".into()],
                env: BTreeMap::new(),
                auto_approve: vec!["add".into()],
            },
        );
    }
    config.mcp.refresh_interval = std::time::Duration::ZERO;
    config.tools.search = sandpiper_agent::config::ToolSearchMode::Off;
    config
}

fn offered(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

fn system_of(request: &serde_json::Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The results of the tool calls, in order, from the last recorded request.
fn tool_results(requests: &[serde_json::Value]) -> Vec<String> {
    requests
        .last()
        .map(|r| contents_with_role(r, "tool"))
        .unwrap_or_default()
}

async fn run(
    agent: &Agent,
    key: &str,
    approver: &dyn Approver,
    task: Option<Vec<String>>,
) -> RecordingSink {
    let sink = RecordingSink::default();
    let req = TurnRequest {
        workstream: key,
        author: Some("alice"),
        text: "go".into(),
        sink: &sink,
        approver,
        cancel: CancellationToken::new(),
    };
    let _ = agent.run_task_turn(req, task).await;
    sink
}

/// Whether `mcp__t__add_tool` ever ran: it adds `mcp__t__<name>` to the server's tools.
async fn tool_was_added(agent: &Agent, name: &str) -> bool {
    agent.mcp().refresh(Some("t")).await;
    agent
        .mcp()
        .catalog()
        .tool(&format!("mcp__t__{name}"))
        .is_some()
}

/// While asked, changes the workstream's tier or breaks the policy's table; then approves.
struct ChangeThenApprove {
    store: Store,
    workstream: String,
    to: Option<Vec<String>>,
    /// Drop `channel_connectors` instead (the policy query then fails; the rest works).
    break_policy: Option<String>,
}

#[async_trait::async_trait]
impl Approver for ChangeThenApprove {
    async fn approve(&self, items: &[ApprovalItem]) -> Vec<Decision> {
        match &self.break_policy {
            Some(url) => {
                let mut conn = sqlx::AnyConnection::connect(url).await.expect("test setup");
                conn.execute("DROP TABLE IF EXISTS channel_connectors")
                    .await
                    .expect("test setup");
            }
            None => {
                self.store
                    .set_workstream_connectors(&self.workstream, self.to.as_deref())
                    .await
                    .expect("test setup");
            }
        }
        items
            .iter()
            .map(|_| Decision::approve().by("alice"))
            .collect()
    }
}

both_backends! {
    async fn a_refused_server_is_not_offered_listed_or_run_even_when_called_by_name(db) {
        let s = setup(&db, vec![
            tool_call("c1", "mcp__t__add_tool", json!({"name": "sneaky"})),
            tool_call("c2", "mcp__t__add", json!({"a": 1, "b": 2})),
            tool_call("c3", "read_resource", json!({"uri": "test://greeting"})),
            tool_call("c4", "read_resource", json!({"uri": "test://items/7"})),
            tool_call("c5", "use_prompt", json!({"name": "mcp__t__greet", "arguments": {"name": "Ada"}})),
            tool_call("c6", "mcp__u__add", json!({"a": 40, "b": 2})),
            text("done"),
        ]).await;
        let agent = harness::agent(with_servers(s.config.core.clone())).await;
        let key = "t:refused";
        agent.store().ensure_workstream(key, Some("alice")).await.unwrap();
        agent.store().set_workstream_connectors(key, Some(&ids(&["u"]))).await.unwrap();
        // Nothing may be asked about: every refused call is answered before approval.
        let approver = ScriptedApprover::new(Vec::new());
        let sink = run(&agent, key, &approver, None).await;
        s.llm.verify();
        let requests = s.llm.requests();
        let tools = offered(&requests[0]);
        assert!(tools.iter().all(|t| !t.starts_with("mcp__t__")), "{tools:?}");
        assert!(tools.contains(&"mcp__u__add".to_owned()), "{tools:?}");
        // Both servers offer the same resources and prompt; only u's are listed.
        let system = system_of(&requests[0]);
        assert!(system.contains("mcp__u__greet") && !system.contains("mcp__t__greet"), "{system}");
        let results: Vec<String> = (1..=6).map(|i| contents_with_role(&requests[i], "tool").pop().unwrap()).collect();
        assert_eq!(results[0], REFUSED);
        // On t's auto_approve list, and still refused.
        assert_eq!(results[1], REFUSED);
        // The resource and prompt resolve to t first (the catalog lists servers in order).
        assert_eq!(results[2], REFUSED);
        assert_eq!(results[3], REFUSED);
        assert_eq!(results[4], REFUSED);
        assert!(results[5].contains("42"), "{results:?}");
        assert!(approver.asked().is_empty(), "{:?}", approver.asked());
        assert!(sink.events().iter().any(|e| matches!(e, TurnEvent::ToolResult { output, is_error: true, .. } if output == REFUSED)));
        assert!(!tool_was_added(&agent, "sneaky").await);
        agent.mcp().shutdown().await;
    }

    async fn a_change_mid_turn_applies_to_the_very_next_call(db) {
        let s = setup(&db, vec![
            tool_call("c1", "mcp__t__add", json!({"a": 1, "b": 2})),
            tool_call("c2", "mcp__t__add_tool", json!({"name": "late"})),
            tool_call("c3", "mcp__t__add", json!({"a": 3, "b": 4})),
            text("done"),
        ]).await;
        let agent = harness::agent(with_servers(s.config.core.clone())).await;
        let key = "t:midturn";
        agent.store().ensure_workstream(key, Some("alice")).await.unwrap();
        // add_tool asks; while it waits, someone sets the thread to `u` only.
        let approver = ChangeThenApprove {
            store: agent.store().clone(),
            workstream: key.into(),
            to: Some(ids(&["u"])),
            break_policy: None,
        };
        run(&agent, key, &approver, None).await;
        s.llm.verify();
        let requests = s.llm.requests();
        assert!(offered(&requests[0]).contains(&"mcp__t__add".to_owned()));
        assert!(contents_with_role(&requests[1], "tool")[0].contains('3'));
        // Approved, but the policy changed during the wait: refused before it ran.
        assert_eq!(contents_with_role(&requests[2], "tool").pop().unwrap(), REFUSED);
        assert!(!tool_was_added(&agent, "late").await);
        // The next call and the next model call see the change too.
        assert_eq!(contents_with_role(&requests[3], "tool").pop().unwrap(), REFUSED);
        assert!(offered(&requests[3]).iter().all(|t| !t.starts_with("mcp__t__")), "{:?}", offered(&requests[3]));
        agent.mcp().shutdown().await;
    }

    async fn a_task_with_an_empty_list_cannot_call_a_server_its_thread_and_channel_allow(db) {
        let s = setup(&db, vec![
            tool_call("c1", "mcp__t__add", json!({"a": 1, "b": 2})),
            text("task done"),
            tool_call("c2", "mcp__t__add", json!({"a": 20, "b": 22})),
            text("chat done"),
        ]).await;
        let agent = harness::agent(with_servers(s.config.core.clone())).await;
        let key = "discord:100";
        let store = agent.store();
        store.ensure_workstream_in(key, Some("alice"), Some("discord:10")).await.unwrap();
        store.set_workstream_connectors(key, Some(&ids(&["t", "u"]))).await.unwrap();
        store.set_channel_connectors("discord:10", Some(&ids(&["t"])), None).await.unwrap();
        let approver = ScriptedApprover::new(Vec::new());
        run(&agent, key, &approver, Some(Vec::new())).await;
        run(&agent, key, &approver, None).await;
        s.llm.verify();
        let requests = s.llm.requests();
        let task_tools = offered(&requests[0]);
        assert!(task_tools.iter().all(|t| !t.starts_with("mcp__")), "{task_tools:?}");
        assert!(!system_of(&requests[0]).contains("<mcp-resources>"));
        assert_eq!(contents_with_role(&requests[1], "tool"), [REFUSED]);
        // The same thread outside the task: t is allowed by thread and channel; u is not
        // (the channel narrowed the thread's list).
        let chat_tools = offered(&requests[2]);
        assert!(chat_tools.contains(&"mcp__t__add".to_owned()), "{chat_tools:?}");
        assert!(chat_tools.iter().all(|t| !t.starts_with("mcp__u__")), "{chat_tools:?}");
        assert!(tool_results(&requests).pop().unwrap().contains("42"));
        let view = agent.workstream_connectors(key).await.unwrap();
        assert_eq!(view.effective.describe(), "t");
        agent.mcp().shutdown().await;
    }

    async fn a_model_without_tools_says_so_when_a_thread_has_a_selection(db) {
        let mut s = setup(&db, vec![text("from memory")]).await;
        s.config.model.capabilities.supports_tools = false;
        let agent = harness::agent(s.config.clone()).await;
        let key = "t:notools";
        agent.store().ensure_workstream(key, Some("alice")).await.unwrap();
        agent.store().set_workstream_connectors(key, Some(&ids(&["github"]))).await.unwrap();
        let approver = ScriptedApprover::new(Vec::new());
        let sink = run(&agent, key, &approver, None).await;
        let notices: Vec<String> = sink.events().into_iter().filter_map(|e| match e {
            TurnEvent::Notice(n) => Some(n),
            _ => None,
        }).collect();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(notices[0].contains("cannot call tools") && notices[0].contains("github"), "{notices:?}");
        assert!(notices[0].contains("fake-model"), "{notices:?}");
        // Without a selection: no notice.
        let s2 = setup(&db, vec![text("again")]).await;
        let mut config = s2.config.clone();
        config.model.capabilities.supports_tools = false;
        let agent = harness::agent(config).await;
        let sink = run(&agent, "t:plain", &approver, None).await;
        assert!(!sink.events().iter().any(|e| matches!(e, TurnEvent::Notice(_))));
    }

    async fn an_unreadable_policy_refuses_the_call_and_offers_no_server(db) {
        let s = setup(&db, vec![
            tool_call("c1", "mcp__t__add_tool", json!({"name": "unchecked"})),
            tool_call("c2", "bash", json!({"command": "echo still here"})),
            text("done"),
        ]).await;
        let agent = harness::agent(with_servers(s.config.core.clone())).await;
        let key = "t:dbfail";
        agent.store().ensure_workstream(key, Some("alice")).await.unwrap();
        let approver = ChangeThenApprove {
            store: agent.store().clone(),
            workstream: key.into(),
            to: None,
            break_policy: Some(db.url.clone()),
        };
        run(&agent, key, &approver, None).await;
        s.llm.verify();
        let requests = s.llm.requests();
        let refused = contents_with_role(&requests[1], "tool").pop().unwrap();
        assert!(
            refused.starts_with("error: the connector policy of this thread could not be read")
                && refused.contains("MCP server t was refused and did not run"),
            "{refused}"
        );
        assert!(!tool_was_added(&agent, "unchecked").await);
        // The turn goes on with the built-ins; no MCP tool is offered while unreadable.
        let tools = offered(&requests[1]);
        assert!(tools.contains(&"bash".to_owned()) && tools.iter().all(|t| !t.starts_with("mcp__")), "{tools:?}");
        assert!(contents_with_role(&requests[2], "tool").pop().unwrap().contains("still here"));
        agent.mcp().shutdown().await;
    }

    async fn the_migration_fills_in_the_channel_of_existing_slack_workstreams(db) {
        let store = Store::connect(&db.url, 2).await.unwrap();
        let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
        for key in ["slack:T1:C2:1700000000.000100", "discord:5", "console:default"] {
            conn.execute(sqlx::AssertSqlSafe(format!(
                "INSERT INTO workstreams (key, created_at, updated_at) VALUES ('{key}', 0, 0)"
            ))).await.unwrap();
        }
        // The migration's own statement, as it ran on databases with older rows.
        let dir = match store.backend() {
            sandpiper_agent::store::Backend::Sqlite => "sqlite",
            sandpiper_agent::store::Backend::Postgres => "postgres",
        };
        let path = format!("{}/../migrations/{dir}/0008_connectors.sql", env!("CARGO_MANIFEST_DIR"));
        let sql = std::fs::read_to_string(path).unwrap();
        let start = sql.find("UPDATE workstreams").unwrap();
        let update = &sql[start..start + sql[start..].find(';').unwrap()];
        conn.execute(sqlx::AssertSqlSafe(update.to_owned())).await.unwrap();
        let channel = |key: &'static str| {
            let store = store.clone();
            async move { store.connector_tiers(key).await.unwrap().channel }
        };
        assert_eq!(channel("slack:T1:C2:1700000000.000100").await.as_deref(), Some("slack:T1:C2"));
        assert_eq!(channel("discord:5").await, None);
        assert_eq!(channel("console:default").await, None);
    }
}
