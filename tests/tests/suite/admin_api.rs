//! The admin API on the real HTTP server: connector tiers of threads and channels behind a
//! service JWT (audience `sandpiper-admin`), with explicit `null` clearing a tier.

use std::time::Duration;

use base64::Engine as _;
use sandpiper::service_jwt::{ADMIN_AUDIENCE, Claims, ServiceKey};
use sandpiper_agent::config::ServerConfig;
use sandpiper_tests::both_backends;
use sandpiper_tests::harness;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::setup;

const SECRET: &str = "an admin secret of at least 32 bytes!";

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("test setup")
        .as_secs()
}

struct Api {
    base: String,
    client: reqwest::Client,
    stop: CancellationToken,
}

impl Api {
    async fn start(agent: sandpiper_agent::Agent) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let router =
            sandpiper::admin_api::router(agent, ServiceKey::new(SECRET).expect("test setup"));
        let stop = CancellationToken::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let listen = "127.0.0.1:0".parse().expect("test setup");
            sandpiper::http_server::run(listen, router, &ServerConfig::default(), shutdown, tx)
                .await
        });
        let addr = rx.await.expect("test setup");
        Self {
            base: format!("http://{addr}"),
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("test setup"),
            stop,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("test setup");
        let status = resp.status().as_u16();
        let value = resp.json().await.unwrap_or(Value::Null);
        (status, value)
    }
}

fn good() -> String {
    ServiceKey::new(SECRET)
        .expect("test setup")
        .sign(ADMIN_AUDIENCE, "ops", Duration::from_secs(60))
        .expect("test setup")
}

both_backends! {
    async fn connector_tiers_over_http(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        agent.store().ensure_workstream_in("discord:100", Some("alice"), Some("discord:10")).await.unwrap();
        let api = Api::start(agent.clone()).await;
        let token = good();
        let ws = "/v1/api/workstreams/discord%3A100/connectors";
        let ch = "/v1/api/channels/discord%3A10/connectors";
        use reqwest::Method;

        let (status, body) = api.call(Method::GET, ws, Some(&token), None).await;
        assert_eq!((status, body), (200, json!({
            "id": "discord:100", "connector_ids": null, "channel": "discord:10",
            "effective": null, "source": "all"
        })));
        let (status, body) = api.call(Method::PATCH, ws, Some(&token), Some(json!({"connector_ids": ["jira", "github", "jira"]}))).await;
        assert_eq!((status, body["connector_ids"].clone(), body["effective"].clone(), body["source"].clone()),
            (200, json!(["github", "jira"]), json!(["github", "jira"]), json!("workstream")));
        let (status, body) = api.call(Method::PATCH, ch, Some(&token), Some(json!({"connector_ids": []}))).await;
        assert_eq!((status, body["effective"].clone(), body["source"].clone()), (200, json!([]), json!("channel")));
        // The thread cannot widen what its channel banned.
        let (_, body) = api.call(Method::GET, ws, Some(&token), None).await;
        assert_eq!((body["connector_ids"].clone(), body["effective"].clone()), (json!(["github", "jira"]), json!([])));
        // An explicit null clears a tier.
        let (status, body) = api.call(Method::PATCH, ch, Some(&token), Some(json!({"connector_ids": null}))).await;
        assert_eq!((status, body["connector_ids"].clone(), body["effective"].clone(), body["source"].clone()),
            (200, Value::Null, Value::Null, json!("all")));
        let (_, body) = api.call(Method::PATCH, ws, Some(&token), Some(json!({"connector_ids": null}))).await;
        assert_eq!(body["effective"], Value::Null);
        assert_eq!(agent.workstream_connectors("discord:100").await.unwrap().tiers, Default::default());

        // Bad bodies and unknown things.
        for bad in [json!({}), json!({"connector_ids": "github"}), json!({"connector_ids": [1]}), json!({"connector_ids": ["a__b"]})] {
            let (status, body) = api.call(Method::PATCH, ws, Some(&token), Some(bad.clone())).await;
            assert_eq!(status, 400, "{bad}: {body}");
            assert!(body["error"].is_string(), "{body}");
        }
        let (status, _) = api.call(Method::GET, "/v1/api/workstreams/discord%3A404/connectors", Some(&token), None).await;
        assert_eq!(status, 404);
        let (status, _) = api.call(Method::GET, "/v1/api/channels/nonsense/connectors", Some(&token), None).await;
        assert_eq!(status, 400);
        let (status, body) = api.call(Method::GET, "/v1/api/channels/slack%3AT1%3AC2/connectors", Some(&token), None).await;
        assert_eq!((status, body["source"].clone()), (200, json!("all")));
        api.stop.cancel();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_refuses_bad_tokens_with_401() {
    let db = sandpiper_tests::db::TestDb::sqlite();
    let s = setup(&db, vec![]).await;
    let agent = harness::agent(s.config.clone()).await;
    agent
        .store()
        .ensure_workstream("discord:1", None)
        .await
        .unwrap();
    let api = Api::start(agent).await;
    let key = ServiceKey::new(SECRET).unwrap();
    let t = now();
    let claims = |aud: &str, iss: &str, iat: u64, exp: u64| Claims {
        jti: None,
        iss: iss.into(),
        aud: aud.into(),
        sub: "ops".into(),
        iat,
        exp,
    };
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let payload =
        b64.encode(serde_json::to_vec(&claims(ADMIN_AUDIENCE, "sandpiper", t, t + 60)).unwrap());
    let alg_none = format!("{}.{payload}.", b64.encode(r#"{"alg":"none","typ":"JWT"}"#));
    let good = key
        .sign_claims(&claims(ADMIN_AUDIENCE, "sandpiper", t, t + 60))
        .unwrap();
    // The first character of the signature changed (the last one carries unused bits).
    let (signed, signature) = good.rsplit_once('.').unwrap();
    let first = if signature.starts_with('A') { 'B' } else { 'A' };
    let bad_signature = format!("{signed}.{first}{}", &signature[1..]);
    let other_key = ServiceKey::new("some other secret, also 32 bytes long").unwrap();
    let cases: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        ("alg none", Some(alg_none)),
        (
            "wrong audience",
            Some(
                key.sign_claims(&claims("sandpiper-channel", "sandpiper", t, t + 60))
                    .unwrap(),
            ),
        ),
        (
            "wrong issuer",
            Some(
                key.sign_claims(&claims(ADMIN_AUDIENCE, "mallory", t, t + 60))
                    .unwrap(),
            ),
        ),
        (
            "expired",
            Some(
                key.sign_claims(&claims(ADMIN_AUDIENCE, "sandpiper", t - 400, t - 60))
                    .unwrap(),
            ),
        ),
        (
            "too long",
            Some(
                key.sign_claims(&claims(ADMIN_AUDIENCE, "sandpiper", t, t + 3600))
                    .unwrap(),
            ),
        ),
        ("bad signature", Some(bad_signature)),
        (
            "other key",
            Some(
                other_key
                    .sign_claims(&claims(ADMIN_AUDIENCE, "sandpiper", t, t + 60))
                    .unwrap(),
            ),
        ),
    ];
    for (what, token) in cases {
        for (method, path) in [
            (
                reqwest::Method::GET,
                "/v1/api/workstreams/discord:1/connectors",
            ),
            (
                reqwest::Method::PATCH,
                "/v1/api/channels/discord:1/connectors",
            ),
            (reqwest::Method::GET, "/v1/api/prompt-templates"),
            (reqwest::Method::POST, "/v1/api/prompt-templates"),
            (reqwest::Method::GET, "/v1/api/prompt-templates/standup"),
            (reqwest::Method::PUT, "/v1/api/prompt-templates/standup"),
            (reqwest::Method::DELETE, "/v1/api/prompt-templates/standup"),
        ] {
            let body = match method {
                reqwest::Method::PATCH => Some(json!({"connector_ids": []})),
                reqwest::Method::POST | reqwest::Method::PUT => {
                    Some(json!({"name": "standup", "content": "forged"}))
                }
                _ => None,
            };
            let (status, body) = api.call(method, path, token.as_deref(), body).await;
            assert_eq!(status, 401, "{what}: {body}");
            assert!(
                body["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{what}: {body}"
            );
        }
    }
    // Nothing was changed by the refused PATCHes; the good token works.
    let (status, body) = api
        .call(
            reqwest::Method::GET,
            "/v1/api/channels/discord:1/connectors",
            Some(&good),
            None,
        )
        .await;
    assert_eq!((status, body["connector_ids"].clone()), (200, Value::Null));
    let (status, body) = api
        .call(
            reqwest::Method::GET,
            "/v1/api/prompt-templates",
            Some(&good),
            None,
        )
        .await;
    assert_eq!(
        (status, body),
        (200, json!({"templates": []})),
        "nothing was created"
    );
    api.stop.cancel();
}

both_backends! {
    async fn prompt_templates_over_http(db) {
        use reqwest::Method;
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        // An MCP server's prompts, as the sync stores them.
        let spec = |name: &str| sandpiper_agent::store::prompt_templates::McpPromptSpec {
            name: name.into(),
            description: Some("from the server".into()),
            arguments: r#"[{"name":"who"}]"#.into(),
        };
        agent.store().sync_mcp_templates("fixture", &[spec("mcp__fixture__greet"), spec("mcp__fixture__review")]).await.unwrap();
        let api = Api::start(agent.clone()).await;
        let token = good();
        let all = "/v1/api/prompt-templates";

        let (status, body) = api.call(Method::GET, all, Some(&token), None).await;
        assert_eq!(status, 200, "{body}");
        let names: Vec<&str> = body["templates"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["mcp__fixture__greet", "mcp__fixture__review"]);
        assert_eq!(body["templates"][0]["origin"], "mcp");
        assert_eq!(body["templates"][0]["mcp_server"], "fixture");
        assert_eq!(body["templates"][0]["readonly"], true);
        assert_eq!(body["templates"][0]["arguments"], json!([{"name": "who"}]));

        // Create, read, conflict, update, delete a manual template.
        let standup = json!({"name": "standup", "content": "What did {who} do?", "description": "daily",
            "arguments": [{"name": "who", "required": true}]});
        let (status, body) = api.call(Method::POST, all, Some(&token), Some(standup.clone())).await;
        assert_eq!(status, 201, "{body}");
        assert_eq!((body["origin"].clone(), body["readonly"].clone()), (json!("manual"), json!(false)));
        let (status, _) = api.call(Method::POST, all, Some(&token), Some(standup.clone())).await;
        assert_eq!(status, 409);
        let one = "/v1/api/prompt-templates/standup";
        let (status, body) = api.call(Method::GET, one, Some(&token), None).await;
        assert_eq!((status, body["content"].clone()), (200, json!("What did {who} do?")));
        let (status, body) = api.call(Method::PUT, one, Some(&token), Some(json!({"content": "And today?"}))).await;
        assert_eq!((status, body["content"].clone(), body["description"].clone()), (200, json!("And today?"), Value::Null));
        let (status, body) = api.call(Method::PUT, one, Some(&token), Some(json!({"name": "other", "content": "x"}))).await;
        assert_eq!(status, 400, "{body}");

        // MCP prompts are read-only: 403 with a JSON error, nothing changed.
        let theirs = "/v1/api/prompt-templates/mcp__fixture__greet";
        for (method, body) in [(Method::PUT, Some(json!({"content": "mine now"}))), (Method::DELETE, None)] {
            let (status, answer) = api.call(method.clone(), theirs, Some(&token), body).await;
            assert_eq!(status, 403, "{method}: {answer}");
            assert!(answer["error"].as_str().is_some_and(|e| e.contains("read-only")), "{answer}");
        }
        let (_, body) = api.call(Method::GET, theirs, Some(&token), None).await;
        assert_eq!((body["origin"].clone(), body["description"].clone()), (json!("mcp"), json!("from the server")));

        // A manual template of an MCP prompt's name wins, and the next sync skips the prompt.
        let (status, body) = api.call(Method::POST, all, Some(&token), Some(json!({"name": "mcp__fixture__review", "content": "our review"}))).await;
        assert_eq!((status, body["origin"].clone()), (201, json!("manual")), "{body}");
        let sync = agent.store().sync_mcp_templates("fixture", &[spec("mcp__fixture__greet"), spec("mcp__fixture__review")]).await.unwrap();
        assert_eq!(sync.skipped, ["mcp__fixture__review"]);
        let (_, body) = api.call(Method::GET, "/v1/api/prompt-templates/mcp__fixture__review", Some(&token), None).await;
        assert_eq!((body["origin"].clone(), body["content"].clone()), (json!("manual"), json!("our review")));

        // Unknown names, bad bodies.
        let (status, body) = api.call(Method::GET, "/v1/api/prompt-templates/nope", Some(&token), None).await;
        assert_eq!(status, 404);
        assert!(body["error"].is_string(), "{body}");
        let (status, _) = api.call(Method::PUT, "/v1/api/prompt-templates/nope", Some(&token), Some(json!({"content": "x"}))).await;
        assert_eq!(status, 404);
        let (status, _) = api.call(Method::DELETE, "/v1/api/prompt-templates/nope", Some(&token), None).await;
        assert_eq!(status, 404);
        for bad in [json!({}), json!({"name": "a b", "content": "x"}), json!({"name": "x", "content": ""}),
            json!({"name": "x", "content": "y", "extra": 1}), json!({"name": "x", "content": "y", "arguments": "who"}), json!([1])] {
            let (status, body) = api.call(Method::POST, all, Some(&token), Some(bad.clone())).await;
            assert_eq!(status, 400, "{bad}: {body}");
            assert!(body["error"].is_string(), "{body}");
        }
        let raw = api.client.post(format!("{}{all}", api.base)).bearer_auth(&token).body("not json").send().await.unwrap();
        assert_eq!(raw.status().as_u16(), 400);
        let (status, _) = api.call(Method::DELETE, one, Some(&token), None).await;
        assert_eq!(status, 204);
        let (status, _) = api.call(Method::GET, one, Some(&token), None).await;
        assert_eq!(status, 404);
        api.stop.cancel();
    }
}
