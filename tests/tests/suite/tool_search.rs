//! Dynamic tool search: with many external tools the model sees the built-ins and
//! `tool_search`, finds what it needs, and keeps it for the rest of the workstream.

use sandpiper_agent::config::{Provider, Secret, ToolSearchMode};
use sandpiper_agent::model::ToolSchema;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::{Value, json};

use super::{WAIT, contents_with_role, setup};

/// 25 deferrable tools (never executed: these tests only search for them).
fn synthetic_tools() -> Vec<ToolSchema> {
    let tool = |name: String, description: String| ToolSchema {
        name,
        description,
        parameters: json!({"type": "object", "properties": {}}).into(),
        defer_loading: false,
    };
    let mut tools = vec![
        tool(
            "mcp__github__create_issue".into(),
            "Create a new issue in a GitHub repository.".into(),
        ),
        tool(
            "mcp__github__list_repos".into(),
            "List repositories of a GitHub user.".into(),
        ),
        tool(
            "mcp__jira__create_ticket".into(),
            "Create a Jira ticket in a project.".into(),
        ),
    ];
    tools.extend((0..22).map(|i| {
        tool(
            format!("mcp__weather__forecast_{i}"),
            format!("Weather forecast for region {i}."),
        )
    }));
    tools
}

/// Tool names of an OpenAI request.
fn offered(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    tools
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn with(base: &[String], extra: &[&str]) -> Vec<String> {
    base.iter()
        .cloned()
        .chain(extra.iter().map(|s| (*s).to_owned()))
        .collect()
}

both_backends! {
    async fn found_tools_are_offered_for_good(db) {
        let s = setup(&db, vec![
            tool_call("s1", "tool_search", json!({"query": "create github issue"})),
            text("Found the issue tool."),
            text("Still here."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        agent.set_external_tools(synthetic_tools());
        let builtins: Vec<String> = agent.registry().tools().iter().map(|t| t.name.clone()).collect();
        // No auto-approve: tool_search must never wait for a person.
        let console = ConsoleRun::start(agent, "ts", "alice", false);
        console.send("open an issue on github").await;
        console.wait_for("Found the issue tool.", WAIT).await;
        console.send("anything else?").await;
        let out = console.finish().await;
        assert!(out.contains("tool_search: create github issue"), "{out}");
        assert!(out.contains("Still here."), "{out}");
        s.llm.verify();

        let requests = s.llm.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(offered(&requests[0]), with(&builtins, &["tool_search"]));
        let results = contents_with_role(&requests[1], "tool");
        assert_eq!(results.len(), 1);
        assert!(
            results[0].starts_with("Found 3 tools for \"create github issue\"; you can call them from now on:\n\
                                    - mcp__github__create_issue: Create a new issue in a GitHub repository.\n"),
            "{}",
            results[0]
        );
        // What was found is appended after the tools offered before, in the order it was
        // found, so the request's tool list keeps its prefix.
        let in_found_order: Vec<&str> = results[0]
            .lines()
            .filter_map(|l| l.strip_prefix("- ")?.split(':').next())
            .collect();
        let mut sorted = in_found_order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, ["mcp__github__create_issue", "mcp__github__list_repos", "mcp__jira__create_ticket"]);
        let found = with(&with(&builtins, &["tool_search"]), &in_found_order);
        assert_eq!(offered(&requests[1]), found);
        // A later turn still offers what was found.
        assert_eq!(offered(&requests[2]), found);
    }

    async fn search_off_offers_every_tool(db) {
        let mut s = setup(&db, vec![text("hi")]).await;
        s.config.tools.search = ToolSearchMode::Off;
        let agent = harness::agent(s.config.clone()).await;
        agent.set_external_tools(synthetic_tools());
        let builtins: Vec<String> = agent.registry().tools().iter().map(|t| t.name.clone()).collect();
        let console = ConsoleRun::start(agent, "off", "alice", false);
        console.send("hello").await;
        console.finish().await;
        let requests = s.llm.requests();
        let all: Vec<String> = builtins
            .into_iter()
            .chain(synthetic_tools().into_iter().map(|t| t.name))
            .collect();
        assert_eq!(offered(&requests[0]), all);
        assert!(requests[0]["tools"].as_array().unwrap().iter().all(|t| t.get("defer_loading").is_none()));
    }

    async fn anthropic_native_search_defers_with_the_server_tool(db) {
        let mut s = setup(&db, vec![text("ok")]).await;
        s.config.model.provider = Provider::Anthropic;
        s.config.model.base_url = Some(s.llm.anthropic_base_url());
        s.config.model.api_key = Some(Secret::new("test-key"));
        s.config.model.capabilities.native_tool_search = true;
        let agent = harness::agent(s.config.clone()).await;
        agent.set_external_tools(synthetic_tools());
        let builtins = agent.registry().tools().len();
        let console = ConsoleRun::start(agent, "native", "alice", false);
        console.send("hello").await;
        console.finish().await;
        let requests = s.llm.requests();
        let tools = requests[0]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), builtins + 25 + 1);
        assert!(tools[..builtins].iter().all(|t| t.get("defer_loading").is_none()));
        assert_eq!(
            tools[builtins],
            json!({
                "name": "mcp__github__create_issue",
                "description": "Create a new issue in a GitHub repository.",
                "input_schema": {"type": "object", "properties": {}},
                "defer_loading": true
            })
        );
        assert!(tools[builtins..builtins + 25].iter().all(|t| t["defer_loading"] == true));
        assert_eq!(
            tools[builtins + 25],
            json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"})
        );
        assert!(!tools.iter().any(|t| t["name"] == "tool_search"));
    }
}
