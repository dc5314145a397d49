//! The `web_search` tool: a web search through the Tavily API.
//!
//! Models whose provider searches natively never call this: the provider client replaces the
//! function tool at the API boundary (Anthropic's `web_search_20250305` server tool, OpenAI's
//! `web_search_options`; see `model::anthropic::wire` and `model::openai::wire`). Needs
//! approval: the query leaves the machine (the reference is inconsistent here; sandpiper asks).

use std::time::Duration;

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput, truncate_output};

/// The `web_search` tool.
#[derive(Debug, Default)]
pub(super) struct WebSearch;

/// Results when the model does not say.
const DEFAULT_RESULTS: u32 = 5;
/// Most results one search may ask for.
const MAX_RESULTS: u32 = 20;
/// Characters of one result's snippet shown to the model.
const SNIPPET_CHARS: usize = 600;
/// Characters of an error body quoted back.
const ERROR_BODY_CHARS: usize = 300;

/// The arguments of `tools/web_search.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    query: String,
    max_results: Option<u32>,
    topic: Option<String>,
}

/// The request body Tavily's `POST /search` takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct SearchRequest {
    query: String,
    max_results: u32,
    topic: &'static str,
    search_depth: &'static str,
}

fn parse(args: &Args) -> Result<SearchRequest, ToolError> {
    let query = args.query.trim().to_owned();
    if query.is_empty() {
        return Err(ToolError::model("`query` is empty; say what to search for"));
    }
    let max_results = args.max_results.unwrap_or(DEFAULT_RESULTS);
    if !(1..=MAX_RESULTS).contains(&max_results) {
        return Err(ToolError::model(format!(
            "`max_results` is {max_results}; use a number from 1 to {MAX_RESULTS}"
        )));
    }
    let topic = match args.topic.as_deref().map(str::trim) {
        None | Some("" | "general") => "general",
        Some("news") => "news",
        Some("finance") => "finance",
        Some(other) => {
            return Err(ToolError::model(format!(
                "`topic` is `{other}`; use general, news or finance"
            )));
        }
    };
    Ok(SearchRequest {
        query,
        max_results,
        topic,
        search_depth: "basic",
    })
}

#[async_trait::async_trait]
impl Tool for WebSearch {
    type Args = Args;
    type Call = SearchRequest;
    const USAGE: &'static str = "send {\"query\": \"...\"} and optionally \"max_results\" (1-20) and \"topic\" (general, news or finance)";

    fn name(&self) -> &'static str {
        "web_search"
    }

    fn prepare(
        &self,
        args: Args,
        _ctx: &ToolContext,
    ) -> Result<(Prepared, SearchRequest), ToolError> {
        let request = parse(&args)?;
        let header = match request.topic {
            "general" => format!("web_search: {}", request.query),
            topic => format!("web_search ({topic}): {}", request.query),
        };
        let prepared = Prepared {
            header,
            preview: String::new(),
            ask: false,
        };
        Ok((prepared, request))
    }

    async fn execute(
        &self,
        request: &SearchRequest,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let web = &ctx.services.web;
        let key = web.tavily_api_key.as_ref().ok_or_else(|| {
            ToolError::model(format!(
                "web_search is not configured: no Tavily API key (the operator sets \
                 ${}). Answer from what you know, or use web_fetch on a URL you know.",
                web.tavily_api_key_env
            ))
        })?;
        let base = web.search_base_url.trim_end_matches('/');
        let results = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            r = search(base, key.expose(), request, web.search_timeout) => r?,
        };
        Ok(ToolOutput::text(truncate_output(
            &render(&request.query, &results),
            ctx.config.max_output_bytes,
        )))
    }
}

/// One result as Tavily returns it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct SearchResult {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    published_date: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SearchResponse {
    #[serde(default)]
    results: Vec<SearchResult>,
}

async fn search(
    base: &str,
    key: &str,
    request: &SearchRequest,
    timeout: Duration,
) -> Result<Vec<SearchResult>, ToolError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("{base}/search");
    let failed = |e: reqwest::Error| {
        tracing::warn!(error = %e, "web_search request failed");
        ToolError::model(format!("the search service could not be reached: {e}"))
    };
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("sandpiper/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(failed)?;
    let response = client
        .post(&url)
        .bearer_auth(key)
        .json(request)
        .send()
        .await
        .map_err(failed)?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        let body: String = body.chars().take(ERROR_BODY_CHARS).collect();
        tracing::warn!(
            status = status.as_u16(),
            "web_search: the search service refused"
        );
        let hint = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                "the API key was refused; tell the user the operator must fix it"
            }
            StatusCode::TOO_MANY_REQUESTS => "rate limited or out of credits; try again later",
            _ => "try again later or use web_fetch on a URL you know",
        };
        return Err(ToolError::model(format!(
            "the search service answered HTTP {} ({hint}): {}",
            status.as_u16(),
            body.trim()
        )));
    }
    let parsed: SearchResponse = response.json().await.map_err(|e| {
        ToolError::model(format!("the search service sent an unreadable answer: {e}"))
    })?;
    Ok(parsed.results)
}

/// Results as a numbered list for the model.
fn render(query: &str, results: &[SearchResult]) -> String {
    if results.is_empty() {
        return format!("No results for \"{query}\".");
    }
    let mut out = format!("Results for \"{query}\":\n");
    for (i, r) in results.iter().enumerate() {
        let title = match r.title.trim() {
            "" => "(untitled)",
            t => t,
        };
        out.push_str(&format!("\n{}. {title}\n   {}\n", i + 1, r.url));
        if let Some(date) = r.published_date.as_deref().filter(|d| !d.is_empty()) {
            out.push_str(&format!("   published {date}\n"));
        }
        let snippet: String = r.content.split_whitespace().collect::<Vec<_>>().join(" ");
        if !snippet.is_empty() {
            let mut short: String = snippet.chars().take(SNIPPET_CHARS).collect();
            if short.len() < snippet.len() {
                short.push('…');
            }
            out.push_str(&format!("   {short}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use crate::tools::{NoOutput, ToolServices, asks, prepare_json, typed};
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn arguments_are_checked_and_defaulted() {
        assert_eq!(
            parse(&typed(json!({"query": " rust 1.95 "}))).unwrap(),
            SearchRequest {
                query: "rust 1.95".into(),
                max_results: 5,
                topic: "general",
                search_depth: "basic",
            }
        );
        let news = parse(&typed(
            json!({"query": "q", "max_results": 20, "topic": "news"}),
        ))
        .unwrap();
        assert_eq!((news.max_results, news.topic), (20, "news"));
        for bad in [
            json!({"query": "  "}),
            json!({"query": "q", "max_results": 0}),
            json!({"query": "q", "max_results": 21}),
            json!({"query": "q", "topic": "sports"}),
            json!({"max_results": 3}),
        ] {
            let refused = match serde_json::from_value::<Args>(bad.clone()) {
                Ok(args) => parse(&args).is_err(),
                Err(_) => true,
            };
            assert!(refused, "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let p = prepare_json(
            WebSearch,
            json!({"query": "rates", "topic": "finance"}),
            &ctx,
        )
        .unwrap();
        assert_eq!(p.header, "web_search (finance): rates");
        assert!(!p.ask && asks("web_search", &p));
    }

    #[tokio::test]
    async fn without_a_key_the_model_is_told_it_is_not_configured() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_test(dir.path());
        let p = prepare_json(WebSearch, json!({"query": "x"}), &ctx).unwrap();
        let err = p.execute(&ctx, &NoOutput).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("web_search is not configured: no Tavily API key (the operator sets $TAVILY_API_KEY)"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_refused_key_is_explained() {
        use axum::{Router, http::StatusCode, routing::post};
        let app = Router::new().route(
            "/search",
            post(|| async { (StatusCode::UNAUTHORIZED, "{\"detail\":\"Unauthorized\"}") }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = ToolContext::for_test(dir.path());
        let mut services = ToolServices::default();
        services.web.search_base_url = format!("http://{addr}");
        services.web.tavily_api_key = Some(Secret::new("bad"));
        ctx.services = Arc::new(services);
        let p = prepare_json(WebSearch, json!({"query": "x"}), &ctx).unwrap();
        let err = p.execute(&ctx, &NoOutput).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the search service answered HTTP 401 (the API key was refused"),
            "{err}"
        );
    }

    #[test]
    fn results_render_as_a_numbered_list() {
        let results = [
            SearchResult {
                title: "Rust 1.95".into(),
                url: "https://blog.rust-lang.org/".into(),
                content: "Released\n today.".into(),
                published_date: Some("2026-11-27".into()),
            },
            SearchResult {
                title: " ".into(),
                url: "https://x.example/".into(),
                content: String::new(),
                published_date: None,
            },
        ];
        assert_eq!(
            render("rust", &results),
            "Results for \"rust\":\n\n1. Rust 1.95\n   https://blog.rust-lang.org/\n   \
             published 2026-11-27\n   Released today.\n\n2. (untitled)\n   https://x.example/\n"
        );
        assert_eq!(render("zz", &[]), "No results for \"zz\".");
    }
}
