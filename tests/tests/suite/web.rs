//! web_fetch, web_search and Anthropic's native web search through the whole turn: the
//! scripted model asks for the call, a person approves (or denies) it, the tool reaches a
//! local server (or is refused), and the result reaches the model.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use sandpiper_agent::config::{Provider, Secret};
use sandpiper_agent::protocol::{Decision, TurnEvent};
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_agent::{Agent, TurnOutcome};
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, RecordingSink, ScriptedApprover};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{contents_with_role, setup};

/// A wiki page on `ip` (`/`), and `/moved` redirecting to `target`.
async fn wiki(ip: &str, target: String) -> SocketAddr {
    let app = Router::new()
        .route(
            "/",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html")],
                    "<html><body><h1>Runbook</h1><p>Restart with <code>systemctl restart api</code>.</p></body></html>",
                )
            }),
        )
        .route(
            "/moved",
            get(move || async move { (StatusCode::FOUND, [(header::LOCATION, target)]) }),
        );
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// What the Tavily double saw: each request's `Authorization` header and JSON body.
type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// A Tavily-shaped search service that records each request's authorization and body.
async fn tavily(seen: Seen) -> SocketAddr {
    let app = Router::new().route(
        "/search",
        post(move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                let auth = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                seen.lock().unwrap_or_else(|e| e.into_inner()).push((auth, body));
                axum::Json(json!({
                    "query": "sandpiper",
                    "results": [
                        {"title": "Sandpiper birds", "url": "https://birds.example/sandpiper", "content": "Small wading birds.", "score": 0.9},
                        {"title": "Sandpiper bot", "url": "https://example.org/bot", "content": "A chat-ops agent.", "score": 0.8}
                    ],
                    "response_time": 0.1
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn turn(
    agent: &Agent,
    ws: &str,
    approver: &ScriptedApprover,
    sink: &RecordingSink,
) -> TurnOutcome {
    agent
        .run_turn(TurnRequest {
            workstream: ws,
            author: Some("alice"),
            text: "look it up".into(),
            sink,
            approver,
            cancel: CancellationToken::new(),
        })
        .await
        .expect("turn runs")
}

/// The text of every tool result event.
fn results(sink: &RecordingSink) -> Vec<String> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            TurnEvent::ToolResult { output, .. } => Some(output),
            _ => None,
        })
        .collect()
}

both_backends! {
    async fn web_fetch_is_approved_fetches_an_allowed_host_and_the_model_answers_from_the_page(db) {
        let private = wiki("127.0.0.1", String::new()).await;
        let allowed = wiki("127.0.0.2", format!("http://{private}/")).await;
        let page = format!("http://{allowed}/");
        let mut s = setup(&db, vec![
            tool_call("f1", "web_fetch", json!({"url": page, "question": "How do I restart?"})),
            text("Run `systemctl restart api`."),
            text("Restart it with systemctl."),
            tool_call("f2", "web_fetch", json!({"url": format!("http://{allowed}/moved"), "question": "q"})),
            text("That page moved somewhere I may not go."),
        ]).await;
        s.config.web.allow_private = vec!["127.0.0.2".into()];
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let approver = ScriptedApprover::new(vec![
            Decision::approve().by("alice"),
            Decision::approve().by("alice"),
        ]);
        turn(&agent, "t:fetch", &approver, &sink).await;
        let asked = approver.asked();
        assert_eq!((asked[0][0].name.as_str(), asked[0][0].header.clone()), ("web_fetch", format!("web_fetch: {page}")));
        assert_eq!(asked[0][0].preview, "How do I restart?");
        // Request #1 is web_fetch's own question about the page, with the page as text.
        let requests = s.llm.requests();
        let reader = contents_with_role(&requests[1], "user").join("\n");
        assert!(reader.contains("Question: How do I restart?") && reader.contains("Restart with systemctl restart api."), "{reader}");
        assert!(!reader.contains("<code>"), "{reader}");
        assert_eq!(requests[1]["tools"], Value::Null, "the page reader gets no tools");
        // The answer, not the page, goes back to the conversation.
        let tool_results = contents_with_role(&requests[2], "tool");
        assert_eq!(tool_results, [format!("Answer from {page}:\nRun `systemctl restart api`.")]);

        // Next turn: an allowed host redirecting to a private address that is not allowed.
        turn(&agent, "t:fetch", &approver, &sink).await;
        let requests = s.llm.requests();
        let refused = contents_with_role(&requests[4], "tool");
        assert!(
            refused.last().is_some_and(|r| r.contains("refused: 127.0.0.1 is 127.0.0.1, a loopback address")),
            "{refused:?}"
        );
        s.llm.verify();
    }

    async fn without_the_allowance_the_same_url_is_refused_and_a_denial_fetches_nothing(db) {
        let allowed = wiki("127.0.0.2", String::new()).await;
        let page = format!("http://{allowed}/");
        let s = setup(&db, vec![
            tool_call("f1", "web_fetch", json!({"url": page, "question": "q"})),
            text("refused"),
            tool_call("f2", "web_fetch", json!({"url": "http://2130706433/", "question": "q"})),
            text("refused again"),
            tool_call("f3", "web_fetch", json!({"url": page, "question": "q"})),
            text("you said no"),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let approver = ScriptedApprover::new(vec![
            Decision::approve().by("alice"),
            Decision::approve().by("alice"),
            Decision::deny(None).by("alice"),
        ]);
        for _ in 0..3 {
            turn(&agent, "t:strict", &approver, &sink).await;
        }
        let out = results(&sink);
        assert!(out[0].contains("refused: 127.0.0.2 is 127.0.0.2, a loopback address"), "{out:?}");
        assert!(out[1].contains("refused: 127.0.0.1 is 127.0.0.1, a loopback address"), "{out:?}");
        assert!(!out[2].contains("Answer from"), "{out:?}");
        // No page reader call was made: three turns of two model calls each.
        assert_eq!(s.llm.requests().len(), 6);
        s.llm.verify();
    }

    async fn web_search_asks_then_queries_the_tavily_double(db) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let search = tavily(seen.clone()).await;
        let mut s = setup(&db, vec![
            tool_call("s1", "web_search", json!({"query": "sandpiper", "max_results": 2, "topic": "news"})),
            text("Found two."),
        ]).await;
        s.config.web.search_base_url = format!("http://{search}");
        s.config.web.tavily_api_key = Some(Secret::new("tvly-test"));
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let approver = ScriptedApprover::new(vec![Decision::approve().by("alice")]);
        turn(&agent, "t:search", &approver, &sink).await;
        assert_eq!(approver.asked()[0][0].header, "web_search (news): sandpiper");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [(
                Some("Bearer tvly-test".to_owned()),
                json!({"query": "sandpiper", "max_results": 2, "topic": "news", "search_depth": "basic"})
            )]
        );
        let result = contents_with_role(&s.llm.requests()[1], "tool");
        assert_eq!(
            result,
            ["Results for \"sandpiper\":\n\n1. Sandpiper birds\n   https://birds.example/sandpiper\n   Small wading birds.\n\n2. Sandpiper bot\n   https://example.org/bot\n   A chat-ops agent.\n"]
        );
        s.llm.verify();
    }

    async fn web_search_without_a_key_tells_the_model(db) {
        let s = setup(&db, vec![
            tool_call("s1", "web_search", json!({"query": "x"})),
            text("No search here."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let approver = ScriptedApprover::new(vec![Decision::approve().by("alice")]);
        turn(&agent, "t:nokey", &approver, &sink).await;
        let result = contents_with_role(&s.llm.requests()[1], "tool");
        assert!(result[0].contains("web_search is not configured: no Tavily API key"), "{result:?}");
        s.llm.verify();
    }

    async fn anthropic_native_search_replaces_the_tool_at_the_api_boundary(db) {
        let answer = text("Rust 1.95 is out.")
            .with_web_citations(&[("Rust Blog", "https://blog.rust-lang.org/")]);
        let mut s = setup(&db, vec![answer]).await;
        s.config.model.provider = Provider::Anthropic;
        s.config.model.base_url = Some(s.llm.anthropic_base_url());
        s.config.model.capabilities.native_web_search = true;
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let approver = ScriptedApprover::new(vec![]);
        let outcome = turn(&agent, "t:native", &approver, &sink).await;
        assert_eq!(outcome.text, "Rust 1.95 is out. ([Rust Blog](https://blog.rust-lang.org/))");
        assert!(approver.asked().is_empty(), "Anthropic ran the search; nothing to approve");
        let tools = s.llm.requests()[0]["tools"].as_array().cloned().unwrap_or_default();
        let search: Vec<&Value> = tools.iter().filter(|t| t["name"] == "web_search").collect();
        assert_eq!(search, [&json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5})]);
        assert!(tools.iter().any(|t| t["name"] == "web_fetch" && t["input_schema"].is_object()));
        s.llm.verify();
    }
}
