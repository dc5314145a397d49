use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;
use crate::service_jwt::{CHANNEL_AUDIENCE, ServiceKey};
use crate::store::Store;
use crate::store::services::{ServiceRecord, ServiceRole};
use crate::tools::{NoOutput, ToolServices, prepare_json};

const SECRET: &str = "0123456789abcdef0123456789abcdef";

/// What a fake gateway saw: the verified token's subject and the body.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A gateway answering `status` with `body`, checking the token as the real one does.
async fn gateway(status: StatusCode, body: Value) -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/v1/api/notify",
        post(move |headers: HeaderMap, Json(request): Json<Value>| {
            let log = log.clone();
            let body = body.clone();
            async move {
                let key = ServiceKey::new(SECRET).unwrap();
                let bearer = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or_default();
                let Ok(claims) = key.verify(bearer, CHANNEL_AUDIENCE) else {
                    return (
                        StatusCode::UNAUTHORIZED,
                        Json(json!({"error": "bad token"})),
                    );
                };
                log.lock().unwrap().push((claims.sub, request));
                (status, Json(body))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// An address nothing listens on.
async fn dead() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

async fn register(store: &Store, id: &str, addr: SocketAddr, started_at: i64, platforms: &[&str]) {
    store
        .register_service(&ServiceRecord {
            id: id.into(),
            role: ServiceRole::Gateway,
            url: format!("http://{addr}"),
            version: "test".into(),
            platforms: platforms.iter().map(|p| (*p).to_owned()).collect(),
            started_at,
            heartbeat_at: 0,
        })
        .await
        .unwrap();
}

fn sent(targets: &[&str]) -> Value {
    json!({"results": targets.iter().map(|t| json!({"target": t, "status": "sent"})).collect::<Vec<_>>()})
}

async fn context(store: &Store, key: bool) -> ToolContext {
    let mut ctx = ToolContext::for_test(std::path::Path::new("/tmp"));
    ctx.store = Some(store.clone());
    ctx.workstream = "slack:T1:C1:1.5".into();
    ctx.services = Arc::new(ToolServices {
        service_key: key.then(|| ServiceKey::new(SECRET).unwrap()),
        ..ToolServices::default()
    });
    ctx
}

async fn notify(ctx: &ToolContext, args: Value) -> Result<ToolOutput, String> {
    let ready = prepare_json(Notify, args, ctx).map_err(|e| e.to_string())?;
    ready
        .execute(ctx, &NoOutput)
        .await
        .map_err(|e| e.to_string())
}

/// Alice on Discord and Slack, who chose the name `alice`; her user id.
async fn alice(store: &Store) -> String {
    let user = store
        .user_for_identity("discord", "1001", "alice")
        .await
        .unwrap();
    let code = store.create_link_code(&user.id).await.unwrap();
    store
        .redeem_link_code("slack", "U1001", "alice", &code)
        .await
        .unwrap();
    store.rename_user(&user.id, "alice").await.unwrap();
    user.id
}

#[tokio::test]
async fn prepare_checks_the_target_and_never_asks() {
    let store = Store::memory().await.unwrap();
    let ctx = context(&store, true).await;
    let ready = prepare_json(
        Notify,
        json!({"message": "deploy done", "username": "alice", "title": "CI"}),
        &ctx,
    )
    .unwrap();
    assert_eq!(
        ready.prepared,
        Prepared {
            header: "notify: @alice".into(),
            preview: "CI\ndeploy done".into(),
            ask: false,
        }
    );
    assert!(!crate::tools::asks("notify", &ready.prepared));
    for (args, error) in [
        (json!({"message": "x"}), "give either `username`"),
        (
            json!({"message": "x", "username": "a", "channel_type": "slack", "channel_id": "C1"}),
            "give either `username`",
        ),
        (
            json!({"message": "x".repeat(2001), "username": "a"}),
            "limit is 2000",
        ),
        (
            json!({"message": "x", "channel_type": "irc", "channel_id": "1"}),
            "must be `discord` or `slack`",
        ),
    ] {
        let Err(e) = prepare_json(Notify, args.clone(), &ctx) else {
            panic!("{args} was accepted");
        };
        assert!(e.to_string().contains(error), "{args}: {e}");
    }
}

#[tokio::test]
async fn a_dead_gateway_fails_over_to_the_next_and_the_token_is_for_channels() {
    let store = Store::memory().await.unwrap();
    let alice_id = alice(&store).await;
    let bob = store.user_for_identity("slack", "U2", "Bob").await.unwrap();
    let (live, seen) = gateway(StatusCode::OK, sent(&["discord:@alice", "slack:@alice"])).await;
    // The dead node started first, so it is tried first.
    register(&store, "dead", dead().await, 1, &["discord", "slack"]).await;
    register(&store, "live", live, 2, &["discord", "slack"]).await;
    // A node without Discord is tried last even though it started before both.
    let (slack_only, slack_seen) = gateway(StatusCode::OK, sent(&[])).await;
    register(&store, "slack-only", slack_only, 0, &["slack"]).await;
    let mut ctx = context(&store, true).await;
    ctx.user_id = Some(bob.id.clone());
    let out = notify(&ctx, json!({"message": "deploy done", "username": "alice"}))
        .await
        .unwrap();
    assert_eq!(
        out.text,
        "notification to @alice:\n- discord:@alice: sent\n- slack:@alice: sent"
    );
    assert!(!out.is_error);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![(
            "notify".to_owned(),
            json!({
                "message": "deploy done", "username": "alice", "workstream": "slack:T1:C1:1.5",
                "user_id": alice_id, "requested_by": "Bob (@slack-u2)",
            })
        )]
    );
    assert!(slack_seen.lock().unwrap().is_empty());
    assert_eq!(ctx.notify_budget.sent(), 1);
}

#[tokio::test]
async fn unknown_people_and_refusals_are_errors_for_the_model() {
    let store = Store::memory().await.unwrap();
    let ctx = context(&store, true).await;
    let e = notify(&ctx, json!({"message": "x", "username": "nobody"}))
        .await
        .unwrap_err();
    assert!(e.contains("there is no user `nobody`"), "{e}");
    // Someone who only shows the name "mallory" is not `mallory`: the model hears whom the
    // name could mean and that it is not for it to pick, and nothing is sent.
    store
        .user_for_identity("discord", "666", "Mallory")
        .await
        .unwrap();
    let (gw, seen) = gateway(StatusCode::OK, sent(&["discord:@mallory"])).await;
    register(&store, "gw", gw, 1, &["discord"]).await;
    let e = notify(&ctx, json!({"message": "x", "username": "mallory"}))
        .await
        .unwrap_err();
    assert!(
        e.contains("`mallory` is ambiguous")
            && e.contains("`discord-666`")
            && e.contains("I do not pick one"),
        "{e}"
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing reached a gateway");
    assert_eq!(ctx.notify_budget.sent(), 0);
    store.deregister_service("gw").await.unwrap();
    let (refusing, _) = gateway(
        StatusCode::BAD_REQUEST,
        json!({"error": "I don't post in channel 5"}),
    )
    .await;
    register(&store, "g", refusing, 1, &["discord"]).await;
    let e = notify(
        &ctx,
        json!({"message": "x", "channel_type": "discord", "channel_id": "5"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e, "I don't post in channel 5");
    assert_eq!(ctx.notify_budget.sent(), 0);
    let no_key = context(&store, false).await;
    let e = notify(
        &no_key,
        json!({"message": "x", "channel_type": "discord", "channel_id": "5"}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("not set up"), "{e}");
}

#[tokio::test]
async fn five_notifications_per_turn_and_failures_do_not_count() {
    let store = Store::memory().await.unwrap();
    let ctx = context(&store, true).await;
    let (failing, _) = gateway(
        StatusCode::OK,
        json!({"results": [{"target": "slack:C1", "status": "failed: channel_not_found"}]}),
    )
    .await;
    register(&store, "g", failing, 1, &["slack"]).await;
    let to_slack = json!({"message": "x", "channel_type": "slack", "channel_id": "C1"});
    let out = notify(&ctx, to_slack.clone()).await.unwrap();
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "notification to slack:C1:\n- slack:C1: failed: channel_not_found"
    );
    assert_eq!(ctx.notify_budget.sent(), 0);
    store.deregister_service("g").await.unwrap();
    let (ok, _) = gateway(StatusCode::OK, sent(&["slack:C1"])).await;
    register(&store, "ok", ok, 1, &["slack"]).await;
    for _ in 0..MAX_PER_TURN {
        assert!(!notify(&ctx, to_slack.clone()).await.unwrap().is_error);
    }
    let e = notify(&ctx, to_slack).await.unwrap_err();
    assert!(e.contains("at most 5 notifications per turn"), "{e}");
}

#[tokio::test(start_paused = false)]
async fn with_no_gateway_every_target_fails_after_the_retries() {
    let store = Store::memory().await.unwrap();
    alice(&store).await;
    let ctx = context(&store, true).await;
    let started = std::time::Instant::now();
    let out = notify(&ctx, json!({"message": "x", "username": "alice"}))
        .await
        .unwrap();
    // Three rounds: at once, after 1 s, after 3 s more.
    assert!(started.elapsed() >= std::time::Duration::from_secs(4));
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "notification to @alice:\n\
         - discord:@alice: failed: no healthy gateway node is registered\n\
         - slack:@alice: failed: no healthy gateway node is registered"
    );
    assert_eq!(ctx.notify_budget.sent(), 0);
}
