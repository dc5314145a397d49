//! The page's handlers without a browser (`oneshot`): nothing without a session, sign-in
//! links used once, the operator token, sign-out, the rate limit, who sees what, escaping,
//! and the event stream following a change.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use http_body_util::BodyExt;
use pretty_assertions::assert_eq;
use sandpiper_agent::Agent;
use sandpiper_agent::config::{Config, Secret};
use sandpiper_agent::model::{Message, ToolCall};
use sandpiper_agent::store::web_access::WebIdentity;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::{WebSource, router};

const OPERATOR_TOKEN: &str = "operator-token-for-the-page-tests";

struct Page {
    agent: Agent,
    app: Router,
    _dir: tempfile::TempDir,
    _stop: tokio_util::sync::DropGuard,
}

async fn page() -> Page {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::for_test();
    config.database.url = format!("sqlite://{}", dir.path().join("web.db").display());
    config.model.base_url = Some("http://127.0.0.1:9/v1".into());
    config.tools.workdir = Some(dir.path().to_owned());
    config.server.ops_token = Some(Secret::new(OPERATOR_TOKEN));
    let agent = crate::wiring::build_agent(config).await.unwrap();
    let stop = CancellationToken::new();
    let app = router(
        WebSource {
            agent: agent.clone(),
            node_id: "node-test".into(),
            platforms: Vec::new(),
            service_key: None,
            discord_guild: Some(5),
        },
        stop.clone(),
    )
    .await
    .unwrap();
    Page {
        agent,
        app,
        _dir: dir,
        _stop: stop.drop_guard(),
    }
}

impl Page {
    async fn get(&self, path: &str, cookie: Option<&str>) -> (StatusCode, String) {
        let mut req = Request::get(path);
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        let res = self
            .app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Signs in with a fresh link for `who`; returns the cookie to send.
    async fn sign_in(&self, who: WebIdentity) -> String {
        let link = self.agent.sign_in_link(&who).await.unwrap();
        let path = link.url.split_once("/sign-in/").unwrap().1;
        let res = self
            .app
            .clone()
            .oneshot(
                Request::get(format!("/sign-in/{path}"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SEE_OTHER);
        cookie_of(&res)
    }

    async fn user(&self, name: &str) -> String {
        self.agent
            .store()
            .user_for_identity("discord", name, name)
            .await
            .unwrap()
            .id
    }
}

fn cookie_of(res: &axum::response::Response) -> String {
    let set = res
        .headers()
        .get(header::SET_COOKIE)
        .expect("a session cookie")
        .to_str()
        .unwrap();
    set.split(';').next().unwrap().to_owned()
}

fn person(id: &str) -> WebIdentity {
    WebIdentity {
        user_id: Some(id.to_owned()),
        admin: false,
    }
}

#[tokio::test]
async fn every_route_is_refused_without_a_session() {
    let page = page().await;
    let forged = "sandpiper_session=not-a-real-session";
    for path in [
        "/",
        "/api/status",
        "/events",
        "/w/discord%3A1",
        "/w/discord%3A1/events",
    ] {
        for cookie in [None, Some(forged)] {
            let (status, body) = page.get(path, cookie).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} {cookie:?}");
            assert!(!body.contains("discord:1"), "{path}: {body}");
        }
    }
    let (status, body) = page.get("/", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        body.contains("/console"),
        "the sign-in page says how: {body}"
    );
}

#[tokio::test]
async fn a_link_signs_in_once_with_a_strict_http_only_cookie() {
    let page = page().await;
    let alice = page.user("alice").await;
    let link = page.agent.sign_in_link(&person(&alice)).await.unwrap();
    assert!(
        link.url.starts_with("http://127.0.0.1:8090/sign-in/"),
        "{}",
        link.url
    );
    let path = format!("/sign-in/{}", link.url.rsplit('/').next().unwrap());
    let res = page
        .app
        .clone()
        .oneshot(Request::get(&path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let set = res.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    let cookie = cookie_of(&res);
    let (status, body) = page.get("/", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("signed in as"), "{body}");
    assert!(body.contains("discord-alice"), "{body}");
    // Used: refused, and said so.
    let (status, body) = page.get(&path, None).await;
    assert_eq!(status, StatusCode::GONE);
    assert!(body.contains("already used"), "{body}");
    let (status, body) = page.get("/sign-in/0000", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("not valid"), "{body}");
    // Behind a TLS proxy the cookie is Secure.
    let link = page.agent.sign_in_link(&person(&alice)).await.unwrap();
    let res = page
        .app
        .clone()
        .oneshot(
            Request::get(format!("/sign-in/{}", link.url.rsplit('/').next().unwrap()))
                .header("x-forwarded-proto", "https")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(
        res.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Secure")
    );
}

#[tokio::test]
async fn wrong_links_are_rate_limited() {
    let page = page().await;
    for i in 0..10 {
        let (status, _) = page.get(&format!("/sign-in/wrong{i}"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, body) = page.get("/sign-in/wrong-again", None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body.contains("Too many"), "{body}");
}

#[tokio::test]
async fn the_operator_token_signs_in_as_admin_and_sign_out_ends_the_session() {
    let page = page().await;
    let post = |token: &str| {
        Request::post("/sign-in")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("token={token}")))
            .unwrap()
    };
    let res = page.app.clone().oneshot(post("nope")).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let res = page
        .app
        .clone()
        .oneshot(post(OPERATOR_TOKEN))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let cookie = cookie_of(&res);
    let (status, body) = page.get("/api/status", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (json["viewer"].as_str(), json["admin"].as_bool()),
        (Some("operator"), Some(true))
    );
    let res = page
        .app
        .clone()
        .oneshot(
            Request::post("/sign-out")
                .header(header::COOKIE, &cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let (status, _) = page.get("/api/status", Some(&cookie)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the old cookie no longer works"
    );
}

#[tokio::test]
async fn owner_participant_and_admin_see_a_thread_and_a_stranger_does_not() {
    let page = page().await;
    let store = page.agent.store();
    let owner = page.user("owner").await;
    let participant = page.user("participant").await;
    let stranger = page.user("stranger").await;
    let approver = page.user("approver").await;
    store
        .ensure_workstream("discord:42", Some(&owner))
        .await
        .unwrap();
    store
        .append_message("discord:42", 0, &Message::user("hello"), Some(&owner))
        .await
        .unwrap();
    store
        .append_message(
            "discord:42",
            1,
            &Message::user("me too"),
            Some(&participant),
        )
        .await
        .unwrap();
    let admin = WebIdentity {
        user_id: Some(approver),
        admin: true,
    };
    for (who, sees) in [
        (person(&owner), true),
        (person(&participant), true),
        (admin, true),
        (person(&stranger), false),
    ] {
        let cookie = page.sign_in(who.clone()).await;
        let (_, body) = page.get("/api/status", Some(&cookie)).await;
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        let keys: Vec<&str> = json["workstreams"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w["key"].as_str())
            .collect();
        assert_eq!(keys.contains(&"discord:42"), sees, "{who:?}: {body}");
        let (status, body) = page.get("/w/discord%3A42", Some(&cookie)).await;
        let expected = if sees {
            StatusCode::OK
        } else {
            StatusCode::NOT_FOUND
        };
        assert_eq!(status, expected, "{who:?}");
        assert_eq!(body.contains("me too"), sees, "{who:?}");
        if sees {
            assert!(
                body.contains("https://discord.com/channels/5/42"),
                "the thread link opens Discord: {body}"
            );
        }
    }
}

#[tokio::test]
async fn tool_arguments_and_output_are_text_not_markup() {
    let page = page().await;
    let store = page.agent.store();
    let owner = page.user("owner").await;
    store
        .ensure_workstream("discord:7", Some(&owner))
        .await
        .unwrap();
    store
        .append_message("discord:7", 0, &Message::user("run it"), Some(&owner))
        .await
        .unwrap();
    let mut call = Message::assistant("");
    call.tool_calls.push(ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: r#"{"command":"echo '<img src=x onerror=alert(1)>'"}"#.into(),
    });
    store
        .append_message("discord:7", 1, &call, None)
        .await
        .unwrap();
    store
        .append_message(
            "discord:7",
            2,
            &Message::tool_result("c1", "bash", "<script>alert('pwned')</script>"),
            None,
        )
        .await
        .unwrap();
    let cookie = page.sign_in(person(&owner)).await;
    let (status, body) = page.get("/w/discord%3A7", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("&lt;script&gt;alert('pwned')&lt;/script&gt;"),
        "{body}"
    );
    assert!(!body.contains("<script>alert"), "{body}");
    assert!(!body.contains("<img src=x"), "{body}");
}

#[tokio::test]
async fn the_event_stream_sends_an_update_after_a_change() {
    let page = page().await;
    let owner = page.user("owner").await;
    let cookie = page.sign_in(person(&owner)).await;
    let res = page
        .app
        .clone()
        .oneshot(
            Request::get("/events")
                .header(header::COOKIE, &cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut frames = res.into_body().into_data_stream();
    let mut next = async || {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(10), frames.next())
                .await
                .expect("an update within 10 s")
                .expect("the stream stays open")
                .unwrap();
            let text = String::from_utf8_lossy(&frame).into_owned();
            if text.contains("event: update") {
                return text;
            }
        }
    };
    let first = next().await;
    assert!(
        first.contains("No workstreams you take part in yet"),
        "{first}"
    );
    page.agent
        .store()
        .ensure_workstream("discord:99", Some(&owner))
        .await
        .unwrap();
    let second = next().await;
    assert!(second.contains("discord:99"), "{second}");
    // A turn moving on this node is followed too (the activity hook), without the database.
    let sink = sandpiper_agent::protocol::NullSink;
    let observed = page.agent.activity().observe("discord:99", &sink);
    sandpiper_agent::protocol::TurnSink::event(
        &observed,
        sandpiper_agent::protocol::TurnEvent::TextDelta("hm".into()),
    );
    let third = next().await;
    assert!(third.contains("thinking"), "{third}");
}
