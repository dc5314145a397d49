use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::model::{ModelError, ModelStream};
use crate::tools::{NoOutput, ToolServices, asks, prepare_json};

/// A model that records what it was asked and answers with a fixed text.
#[derive(Debug, Default)]
struct Reader {
    asked: Mutex<Vec<(String, String)>>,
}

#[async_trait::async_trait]
impl ChatModel for Reader {
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ModelStream, ModelError> {
        let user = request.messages.first().map(|m| m.content.clone());
        if let Ok(mut asked) = self.asked.lock() {
            asked.push((request.system.to_owned(), user.unwrap_or_default()));
        }
        let events = vec![
            Ok(ModelEvent::TextDelta("The answer is ".into())),
            Ok(ModelEvent::TextDelta("42.".into())),
            Ok(ModelEvent::Done {
                finish_reason: None,
            }),
        ];
        Ok(Box::pin(futures::stream::iter(events)))
    }

    fn model_name(&self) -> &str {
        "reader"
    }
}

/// Serves on `ip`:0; `/` is a page, `/to?u=URL` redirects to URL, `/loop` redirects to itself,
/// `/png` is an image, `/big` is 300 KB, `/missing` is a 404.
async fn serve(ip: &str) -> SocketAddr {
    async fn to(
        axum::extract::Query(q): axum::extract::Query<Vec<(String, String)>>,
    ) -> impl IntoResponse {
        let target = q
            .into_iter()
            .find(|(k, _)| k == "u")
            .map(|(_, v)| v)
            .unwrap_or_default();
        (StatusCode::FOUND, [(header::LOCATION, target)])
    }
    let app = Router::new()
        .route(
            "/",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    "<html><head><title>T</title><script>var secret = 1;</script></head>\
                     <body><h1>Deploy guide</h1><p>The port is <b>8443</b>.</p></body></html>",
                )
            }),
        )
        .route("/to", get(to))
        .route(
            "/loop",
            get(|| async { (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, "/loop")]) }),
        )
        .route(
            "/png",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "image/png")],
                    vec![0x89u8, b'P', b'N', b'G'],
                )
            }),
        )
        .route(
            "/big",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "x".repeat(300_000)) }),
        )
        .route(
            "/missing",
            get(|_: HeaderMap| async { (StatusCode::NOT_FOUND, "no such page") }),
        );
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn context(allow: &[&str], reader: Arc<Reader>) -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut ctx = ToolContext::for_test(dir.path());
    let mut services = ToolServices::default();
    services.web.allow_private = allow.iter().map(|s| (*s).to_owned()).collect();
    services.web.max_fetch_bytes = 100_000;
    services.web.max_page_chars = 5_000;
    services.model = Some(reader);
    ctx.services = Arc::new(services);
    (dir, ctx)
}

async fn fetch_url(ctx: &ToolContext, url: &str) -> Result<ToolOutput, ToolError> {
    let prepared = prepare_json(
        WebFetch,
        json!({"url": url, "question": "Which port?"}),
        ctx,
    )?;
    prepared.execute(ctx, &NoOutput).await
}

#[test]
fn prepare_needs_approval_and_refuses_non_web_urls() {
    let (_dir, ctx) = context(&[], Arc::default());
    let p = prepare_json(
        WebFetch,
        json!({"url": "https://Example.COM/a b", "question": " port? "}),
        &ctx,
    )
    .unwrap();
    assert_eq!(p.header, "web_fetch: https://example.com/a%20b");
    assert_eq!(p.preview, "port?");
    assert!(!p.ask && asks("web_fetch", &p));
    for (url, question) in [
        ("file:///etc/passwd", "q"),
        ("ftp://example.com/", "q"),
        ("javascript:alert(1)", "q"),
        ("not a url", "q"),
        ("https://example.com/", "  "),
    ] {
        let err =
            prepare_json(WebFetch, json!({"url": url, "question": question}), &ctx).unwrap_err();
        assert!(matches!(err, ToolError::Model(_)), "{url}: {err}");
    }
}

#[tokio::test]
async fn an_allowed_private_host_is_fetched_and_the_page_reaches_the_model() {
    let addr = serve("127.0.0.2").await;
    let reader = Arc::new(Reader::default());
    let (_dir, ctx) = context(&["127.0.0.2"], reader.clone());
    let url = format!("http://{addr}/");
    let out = fetch_url(&ctx, &url).await.unwrap();
    assert_eq!(out.text, format!("Answer from {url}:\nThe answer is 42."));
    let asked = reader.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    let (system, user) = &asked[0];
    assert!(system.contains("untrusted data"), "{system}");
    assert!(
        user.starts_with(&format!("URL: {url}\nQuestion: Which port?\n\n<page>\n")),
        "{user}"
    );
    assert!(
        user.contains("Deploy guide") && user.contains("The port is 8443."),
        "{user}"
    );
    assert!(
        !user.contains("<b>") && !user.contains("var secret"),
        "{user}"
    );

    // The same URL without the allowance is refused before any connection.
    let (_dir, strict) = context(&[], reader.clone());
    let err = fetch_url(&strict, &url).await.unwrap_err().to_string();
    assert!(
        err.starts_with("refused: 127.0.0.2 is 127.0.0.2, a loopback address"),
        "{err}"
    );
    assert_eq!(reader.asked.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn every_redirect_is_checked_again() {
    let allowed = serve("127.0.0.2").await;
    let private = serve("127.0.0.1").await;
    let (_dir, ctx) = context(&["127.0.0.2"], Arc::default());
    // Allowed host → not-allowed private address: refused at the redirect.
    for target in [
        format!("http://{private}/"),
        format!("http://localhost:{}/", private.port()),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let url = format!("http://{allowed}/to?u={target}");
        let err = fetch_url(&ctx, &url).await.unwrap_err().to_string();
        assert!(err.starts_with("refused: "), "{target}: {err}");
    }
    // A redirect between allowed pages is followed.
    let url = format!("http://{allowed}/to?u=/");
    let out = fetch_url(&ctx, &url).await.unwrap();
    assert!(
        out.text
            .starts_with(&format!("Answer from http://{allowed}/:")),
        "{}",
        out.text
    );
    // At most five.
    let err = fetch_url(&ctx, &format!("http://{allowed}/loop"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("too many redirects (more than 5)"), "{err}");
    // A redirect to another scheme.
    let err = fetch_url(&ctx, &format!("http://{allowed}/to?u=file:///etc/passwd"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("only http:// and https:// URLs"), "{err}");
}

#[tokio::test]
async fn private_targets_are_refused_in_every_spelling() {
    let (_dir, ctx) = context(&[], Arc::default());
    let table = [
        ("http://127.0.0.1:9/", "127.0.0.1", "loopback"),
        ("http://localhost:9/", "localhost", "loopback"),
        ("http://2130706433/", "127.0.0.1", "loopback"),
        ("http://0177.0.0.1/", "127.0.0.1", "loopback"),
        ("http://0x7f.1/", "127.0.0.1", "loopback"),
        ("http://127.1/", "127.0.0.1", "loopback"),
        ("http://[::1]/", "[::1]", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "[::ffff:7f00:1]", "loopback"),
        ("http://[::127.0.0.1]/", "[::7f00:1]", "loopback"),
        (
            "http://[64:ff9b::127.0.0.1]/",
            "[64:ff9b::7f00:1]",
            "loopback",
        ),
        ("http://0.0.0.0/", "0.0.0.0", "unspecified (this-host)"),
        ("http://[::]/", "[::]", "unspecified (this-host)"),
        ("http://10.0.0.1/", "10.0.0.1", "private (RFC 1918)"),
        ("http://172.16.5.4/", "172.16.5.4", "private (RFC 1918)"),
        ("http://192.168.1.1/", "192.168.1.1", "private (RFC 1918)"),
        (
            "http://[::ffff:192.168.1.1]/",
            "[::ffff:c0a8:101]",
            "private (RFC 1918)",
        ),
        ("http://100.64.0.1/", "100.64.0.1", "carrier-grade NAT"),
        ("http://169.254.1.1/", "169.254.1.1", "link-local"),
        ("http://[fe80::1]/", "[fe80::1]", "link-local"),
        ("http://[fc00::1]/", "[fc00::1]", "unique-local"),
        ("http://[fd12::1]/", "[fd12::1]", "unique-local"),
        ("http://224.0.0.1/", "224.0.0.1", "multicast"),
        ("http://[ff02::1]/", "[ff02::1]", "multicast"),
        ("http://255.255.255.255/", "255.255.255.255", "broadcast"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254",
            "cloud metadata",
        ),
        ("http://2852039166/", "169.254.169.254", "cloud metadata"),
        (
            "http://[fd00:ec2::254]/",
            "[fd00:ec2::254]",
            "cloud metadata",
        ),
        (
            "http://[::ffff:169.254.169.254]/",
            "[::ffff:a9fe:a9fe]",
            "cloud metadata",
        ),
        (
            "http://100.100.100.200/",
            "100.100.100.200",
            "cloud metadata",
        ),
    ];
    for (url, host, class) in table {
        let err = fetch_url(&ctx, url).await.unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("refused: {host} is "))
                && err.contains(&format!(", a {class} address")),
            "{url}: {err}"
        );
    }
}

#[tokio::test]
async fn sizes_types_and_statuses_are_handled() {
    let addr = serve("127.0.0.2").await;
    let reader = Arc::new(Reader::default());
    let (_dir, ctx) = context(&["127.0.0.2"], reader.clone());
    let out = fetch_url(&ctx, &format!("http://{addr}/big"))
        .await
        .unwrap();
    assert!(
        out.text.contains("(only the first 100000 bytes were downloaded; the page text was cut at 5000 characters)"),
        "{}",
        out.text
    );
    let page = reader.asked.lock().unwrap()[0].1.clone();
    assert_eq!(page.matches('x').count(), 5000);
    let err = fetch_url(&ctx, &format!("http://{addr}/png"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is `image/png`, not a web page or text"),
        "{err}"
    );
    let err = fetch_url(&ctx, &format!("http://{addr}/missing"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("answered HTTP 404: no such page"), "{err}");
}

#[tokio::test]
async fn without_a_model_the_tool_says_so() {
    let addr = serve("127.0.0.2").await;
    let (_dir, mut ctx) = context(&["127.0.0.2"], Arc::default());
    let mut services = (*ctx.services).clone();
    services.model = None;
    ctx.services = Arc::new(services);
    let err = fetch_url(&ctx, &format!("http://{addr}/"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no model is available"), "{err}");
}
