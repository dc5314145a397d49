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
        ] {
            let body = (method == reqwest::Method::PATCH).then(|| json!({"connector_ids": []}));
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
    api.stop.cancel();
}
