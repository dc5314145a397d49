//! The page's handlers without a browser (`oneshot`): nothing without a session, sign-in
//! links used once and only by their button, the operator token and service tokens (to view,
//! once), sign-out, the rate limit per client, who sees what, escaping, deciding by the
//! thread's rules with the platform's roles now, and the event stream following a change.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
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
use sandpiper_agent::service_jwt::ServiceKey;
use sandpiper_agent::store::web_access::WebIdentity;
use sandpiper_agent::workstream::{KeyPlatform, WorkstreamKey};
use sandpiper_channels::membership::Membership;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::{WebSource, router};

const OPERATOR_TOKEN: &str = "operator-token-for-the-page-tests";
const JWT_SECRET: &str = "a-service-secret-for-the-page-tests";
/// The reverse proxy the page trusts in these tests.
const PROXY: &str = "10.0.0.1:40000";

/// Discord as the page asks it about roles, in these tests: each person's roles by their
/// Discord id, changed as a test takes a role away.
#[derive(Debug, Default)]
struct Roles(Mutex<HashMap<String, Vec<String>>>);

impl Roles {
    fn set(&self, user: &str, roles: &[&str]) {
        self.0
            .lock()
            .unwrap()
            .insert(user.into(), roles.iter().map(|r| (*r).to_owned()).collect());
    }
}

#[async_trait::async_trait]
impl Membership for Roles {
    fn platform(&self) -> KeyPlatform {
        KeyPlatform::Discord
    }

    fn approver_roles(&self) -> &[String] {
        &[]
    }

    async fn roles_of(
        &self,
        user: &str,
        _workstream: &WorkstreamKey,
        _candidates: &[String],
    ) -> Result<Vec<String>, String> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .get(user)
            .cloned()
            .unwrap_or_default())
    }
}

struct Page {
    agent: Agent,
    app: Router,
    roles: Arc<Roles>,
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
    config.server.trusted_proxies = vec!["10.0.0.0/8".into()];
    let agent = crate::wiring::build_agent(config).await.unwrap();
    let stop = CancellationToken::new();
    let roles = Arc::new(Roles::default());
    let app = router(
        WebSource {
            agent: agent.clone(),
            node_id: "node-test".into(),
            platforms: Vec::new(),
            service_key: Some(ServiceKey::new(JWT_SECRET).unwrap()),
            discord_guild: Some(5),
            memberships: vec![roles.clone()],
            starters: Default::default(),
        },
        stop.clone(),
    )
    .await
    .unwrap();
    Page {
        agent,
        app,
        roles,
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

    /// Sends `req` as if from the TCP peer `peer`.
    async fn from(&self, peer: &str, mut req: Request<Body>) -> axum::response::Response {
        let peer: SocketAddr = peer.parse().unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        self.app.clone().oneshot(req).await.unwrap()
    }

    /// Opens the link `path` (GET) and presses its button (POST) from `peer`, with
    /// `headers`; the button's answer.
    async fn press_link(
        &self,
        path: &str,
        peer: &str,
        headers: &[(&str, &str)],
    ) -> axum::response::Response {
        let (status, page) = self.get(path, None).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "opening a link answers its page: {page}"
        );
        let at = page.find("name=\"csrf\" value=\"").expect("a form token") + 19;
        let form = format!("csrf={}", &page[at..at + 64]);
        let mut req =
            Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        self.from(peer, req.body(Body::from(form)).unwrap()).await
    }

    /// Signs in with a fresh link for `who`; returns the cookie to send.
    async fn sign_in(&self, who: WebIdentity) -> String {
        let link = self.agent.sign_in_link(&who).await.unwrap();
        let token = link.url.split_once("/sign-in/").unwrap().1;
        let res = self
            .press_link(&format!("/sign-in/{token}"), "192.0.2.1:5000", &[])
            .await;
        assert_eq!(res.status(), StatusCode::SEE_OTHER);
        cookie_of(&res)
    }

    /// Types `token` into the sign-in form from `peer`.
    async fn type_token(&self, peer: &str, token: &str) -> axum::response::Response {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .finish();
        let req = Request::post("/sign-in")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form))
            .unwrap();
        self.from(peer, req).await
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
    // Opening the link (a previewer, a mail scanner) spends nothing and sets no cookie.
    for _ in 0..3 {
        let res = page
            .app
            .clone()
            .oneshot(Request::get(&path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert!(res.headers().get(header::SET_COOKIE).is_none());
    }
    // A POST that is not from the link's page (no form token) spends nothing either.
    let forged = Request::post(&path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("csrf=0000"))
        .unwrap();
    let res = page.from("192.0.2.1:5000", forged).await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let res = page.press_link(&path, "192.0.2.1:5000", &[]).await;
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
    let res = page.press_link(&path, "192.0.2.1:5000", &[]).await;
    assert_eq!(res.status(), StatusCode::GONE);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("already used"));
    let res = page
        .press_link("/sign-in/0000", "192.0.2.1:5000", &[])
        .await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    // Behind the trusted TLS proxy the cookie is Secure; a stranger saying so is not believed.
    for (peer, secure) in [(PROXY, true), ("192.0.2.1:5000", false)] {
        let link = page.agent.sign_in_link(&person(&alice)).await.unwrap();
        let path = format!("/sign-in/{}", link.url.rsplit('/').next().unwrap());
        let res = page
            .press_link(&path, peer, &[("x-forwarded-proto", "https")])
            .await;
        let set = res.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(set.contains("Secure"), secure, "{peer}: {set}");
    }
}

/// Ten wrong tries a minute from one client lock out that client, not everyone; a forged
/// `X-Forwarded-For` is ignored from a stranger and gives no fresh count; behind the trusted
/// proxy each client it names counts on its own.
#[tokio::test]
async fn wrong_tries_are_limited_per_client_not_for_everyone() {
    let page = page().await;
    let attacker = "192.0.2.66:4000";
    for i in 0..10 {
        let res = page.type_token(attacker, &format!("guess-{i}")).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "try {i}");
    }
    let res = page.type_token(attacker, OPERATOR_TOKEN).await;
    assert_eq!(
        res.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the attacker waits"
    );
    let res = page.press_link("/sign-in/wrong", attacker, &[]).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "links too");
    // Another port, and a forged X-Forwarded-For: the same client.
    let forged = page
        .press_link(
            "/sign-in/wrong",
            "192.0.2.66:4001",
            &[("x-forwarded-for", "203.0.113.1")],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::TOO_MANY_REQUESTS);
    // Everyone else still signs in.
    let res = page.type_token("192.0.2.7:5000", OPERATOR_TOKEN).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER, "another client");
    // Behind the trusted proxy: the client it names is counted, each on its own.
    let behind = |client: &'static str| [("x-forwarded-for", client)];
    for i in 0..10 {
        let res = page
            .press_link(&format!("/sign-in/w{i}"), PROXY, &behind("198.51.100.9"))
            .await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    }
    let res = page
        .press_link("/sign-in/again", PROXY, &behind("198.51.100.9"))
        .await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let alice = page.user("alice").await;
    let link = page.agent.sign_in_link(&person(&alice)).await.unwrap();
    let path = format!("/sign-in/{}", link.url.rsplit('/').next().unwrap());
    let res = page
        .press_link(&path, PROXY, &behind("198.51.100.10"))
        .await;
    assert_eq!(
        res.status(),
        StatusCode::SEE_OTHER,
        "another client behind the proxy"
    );
}

/// A service token for sandpiper-admin signs in to view, once, and its session ends when the
/// token would.
#[tokio::test]
async fn a_service_token_signs_in_once_and_no_longer_than_it_lives() {
    let page = page().await;
    let key = ServiceKey::new(JWT_SECRET).unwrap();
    let token = key
        .sign(
            crate::service_jwt::ADMIN_AUDIENCE,
            "ops",
            Duration::from_secs(60),
        )
        .unwrap();
    let claims = key
        .verify(&token, crate::service_jwt::ADMIN_AUDIENCE)
        .unwrap();
    let res = page.type_token("192.0.2.1:5000", &token).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let cookie = cookie_of(&res);
    let id = {
        let jar = axum_extra::extract::cookie::PrivateCookieJar::from_headers(
            &[(header::COOKIE, cookie.parse().unwrap())]
                .into_iter()
                .collect(),
            super::auth::key_from(&page.agent.store().web_cookie_secret().await.unwrap()),
        );
        jar.get(super::auth::COOKIE).unwrap().value().to_owned()
    };
    let session = page.agent.store().web_session(&id).await.unwrap().unwrap();
    assert_eq!(
        session.expires_at,
        i64::try_from(claims.exp * 1000).unwrap(),
        "the session ends with the token"
    );
    let (status, _) = page.get("/api/status", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    // Used once: refused the second time, on this node or any other of the database.
    let res = page.type_token("192.0.2.1:5000", &token).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    // A token without an id (not one sandpiper signed) is refused.
    let bare = key
        .sign_claims(&crate::service_jwt::Claims {
            jti: None,
            ..claims
        })
        .unwrap();
    let res = page.type_token("192.0.2.1:5000", &bare).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_operator_token_signs_in_as_admin_and_sign_out_ends_the_session() {
    let page = page().await;
    let res = page.type_token("192.0.2.1:5000", "nope").await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let res = page.type_token("192.0.2.1:5000", OPERATOR_TOKEN).await;
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

/// The form token of a session, as its page carries it.
async fn csrf_of(page: &Page, cookie: &str) -> String {
    let (status, body) = page.get("/", Some(cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let at = body
        .find("name=\"csrf-token\" content=\"")
        .expect("a form token")
        + 27;
    body[at..at + 64].to_owned()
}

impl Page {
    async fn post(&self, path: &str, cookie: &str, form: &[(&str, &str)]) -> (StatusCode, String) {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let res = self
            .app
            .clone()
            .oneshot(
                Request::post(path)
                    .header(header::COOKIE, cookie)
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(Body::from(body))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Stores a pending request in `workstream` (owner `owner`, approvers of role `ops`).
    async fn pending(
        &self,
        id: &str,
        workstream: &str,
        owner: &str,
        kind: sandpiper_agent::protocol::ApprovalKind,
    ) {
        use sandpiper_agent::approvals::NewRequest;
        use sandpiper_agent::store::approvals::AllowedApprovers;
        self.agent
            .store()
            .ensure_workstream(workstream, Some(owner))
            .await
            .unwrap();
        let args = serde_json::json!({ "command": "ls" });
        let request = NewRequest {
            kind,
            workstream,
            call_id: format!("call-{id}"),
            tool: "bash",
            header: "bash: ls".into(),
            preview: "ls".into(),
            requested_by: Some(owner),
            fingerprint: sandpiper_agent::approvals::fingerprint("bash", &args),
            approvers: AllowedApprovers {
                owner: Some(owner.into()),
                roles: vec!["ops".into()],
            },
        }
        .build_as(id.into());
        let asked = [request];
        sandpiper_agent::approvals::ledger::record(
            self.agent.store(),
            sandpiper_agent::approvals::ledger::Change::Asked(&asked),
        )
        .await
        .unwrap();
    }

    async fn status_of(&self, id: &str) -> sandpiper_agent::protocol::ApprovalView {
        self.agent.approval(id).await.unwrap().unwrap()
    }
}

/// Owner, approver, participant and stranger deciding from the page: each is offered the
/// requests they may decide (the owner and the approver, while they hold the role), by the
/// engine's rules (owner or approver; Always allow the owner's), a confirmation first, and
/// the form token on every POST.
#[tokio::test]
async fn deciding_from_the_page_follows_the_thread_rules_for_four_people() {
    use sandpiper_agent::protocol::ApprovalStatus;
    use sandpiper_agent::protocol::{ApprovalKind, Verdict};
    let page = page().await;
    let owner = page.user("owner").await;
    let approver = page.user("approver").await;
    let participant = page.user("participant").await;
    let stranger = page.user("stranger").await;
    page.pending("ap_one", "discord:50", &owner, ApprovalKind::ToolCall)
        .await;
    page.pending("ap_two", "discord:50", &owner, ApprovalKind::ToolCall)
        .await;
    page.agent
        .store()
        .append_message("discord:50", 0, &Message::user("hi"), Some(&participant))
        .await
        .unwrap();
    // The turn that asked waits for both.
    let waiting = page
        .agent
        .live()
        .register("discord:50", &["ap_one".to_owned(), "ap_two".to_owned()]);

    // The approver holds the approver role on Discord (as the page asks it now); the admin of
    // the page holds none, as a chat admin without the approver role.
    page.roles.set("approver", &["ops"]);
    page.roles.set("admin", &["moderators"]);
    let admin = page.user("admin").await;
    let owner_cookie = page.sign_in(person(&owner)).await;
    let approver_cookie = page.sign_in(person(&approver)).await;
    let admin_cookie = page
        .sign_in(WebIdentity {
            user_id: Some(admin.clone()),
            admin: true,
        })
        .await;
    let admin_csrf = csrf_of(&page, &admin_cookie).await;
    let operator = page.type_token("192.0.2.1:5000", OPERATOR_TOKEN).await;
    let operator_cookie = cookie_of(&operator);
    let operator_csrf = csrf_of(&page, &operator_cookie).await;
    let participant_cookie = page.sign_in(person(&participant)).await;
    let stranger_cookie = page.sign_in(person(&stranger)).await;
    let owner_csrf = csrf_of(&page, &owner_cookie).await;
    let approver_csrf = csrf_of(&page, &approver_cookie).await;
    let participant_csrf = csrf_of(&page, &participant_cookie).await;
    let stranger_csrf = csrf_of(&page, &stranger_cookie).await;

    // The owner's page carries the card's buttons; the participant's lists nothing to decide.
    let (_, body) = page.get("/", Some(&owner_cookie)).await;
    for label in [
        "Approve",
        "Deny",
        "Always allow",
        "action=\"/approvals/ap_one\"",
    ] {
        assert!(body.contains(label), "{label}: {body}");
    }
    // The approver's page lists them too, with the buttons (the role, as Discord says now);
    // the participant's and the stranger's list nothing to decide.
    let (_, body) = page.get("/", Some(&approver_cookie)).await;
    for request in [
        "action=\"/approvals/ap_one\"",
        "action=\"/approvals/ap_two\"",
    ] {
        assert!(body.contains(request), "{request}: {body}");
    }
    for cookie in [&participant_cookie, &stranger_cookie] {
        let (_, body) = page.get("/", Some(cookie)).await;
        assert!(!body.contains("/approvals/ap_"), "{body}");
        assert!(!body.contains("bash: ls"), "{body}");
    }

    // No token, another session's token, a token in another cookie: 403, nothing changes.
    for (cookie, token) in [
        (&owner_cookie, None),
        (&owner_cookie, Some(stranger_csrf.as_str())),
        (&owner_cookie, Some("")),
        (&stranger_cookie, Some(owner_csrf.as_str())),
    ] {
        let mut form = vec![("action", "a")];
        if let Some(t) = token {
            form.push(("csrf", t));
        }
        for path in ["/approvals/ap_one", "/approvals/ap_one/decide"] {
            let (status, body) = page.post(path, cookie, &form).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path} {token:?}: {body}");
        }
    }
    assert_eq!(
        page.status_of("ap_one").await.status,
        ApprovalStatus::Pending
    );

    // A press asks for confirmation first, and decides nothing.
    let (status, body) = page
        .post(
            "/approvals/ap_one",
            &owner_cookie,
            &[("csrf", &owner_csrf), ("action", "a"), ("note", "go <b>")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Confirm: Approve with note"), "{body}");
    assert!(body.contains("go &lt;b&gt;"), "escaped: {body}");
    assert_eq!(
        page.status_of("ap_one").await.status,
        ApprovalStatus::Pending
    );

    // The participant, the stranger and the admin without the approver role may not decide,
    // whatever they send: the card's refusal, word for word.
    for (cookie, csrf) in [
        (&participant_cookie, &participant_csrf),
        (&stranger_cookie, &stranger_csrf),
        (&admin_cookie, &admin_csrf),
    ] {
        let (status, body) = page
            .post(
                "/approvals/ap_one/decide",
                cookie,
                &[("csrf", csrf), ("action", "a")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(
            body.contains("only the person who started this thread"),
            "{body}"
        );
    }
    // The operator token views the page; it decides nothing, and its page offers no button.
    let (_, body) = page.get("/", Some(&operator_cookie)).await;
    assert!(
        body.contains("bash: ls"),
        "the operator sees the request: {body}"
    );
    assert!(!body.contains("action=\"/approvals/ap_one\""), "{body}");
    for path in ["/approvals/ap_one", "/approvals/ap_one/decide"] {
        let (status, body) = page
            .post(
                path,
                &operator_cookie,
                &[("csrf", &operator_csrf), ("action", "a")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert!(body.contains("only view the page"), "{body}");
    }
    assert_eq!(
        page.status_of("ap_one").await.status,
        ApprovalStatus::Pending
    );
    // The approver may approve but not always allow (the owner's).
    let (status, body) = page
        .post(
            "/approvals/ap_one/decide",
            &approver_cookie,
            &[("csrf", &approver_csrf), ("action", "aa")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        page.status_of("ap_one").await.status,
        ApprovalStatus::Pending
    );
    let (status, body) = page
        .post(
            "/approvals/ap_one/decide",
            &approver_cookie,
            &[
                ("csrf", &approver_csrf),
                ("action", "d"),
                ("note", "use staging"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("Denied by approver (@discord-approver) from the status page"),
        "{body}"
    );
    let one = page.status_of("ap_one").await;
    assert_eq!(one.status, ApprovalStatus::Denied);
    assert_eq!(
        one.decided_via,
        Some(sandpiper_agent::protocol::DecisionPath::Web)
    );
    assert_eq!(one.feedback.as_deref(), Some("use staging"));
    // Once decided, nobody decides it again.
    let (status, body) = page
        .post(
            "/approvals/ap_one/decide",
            &owner_cookie,
            &[("csrf", &owner_csrf), ("action", "a")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        page.status_of("ap_one").await.status,
        ApprovalStatus::Denied
    );

    // The role taken away in chat: the approver's page lists and decides nothing more.
    page.roles.set("approver", &[]);
    let (_, body) = page.get("/", Some(&approver_cookie)).await;
    assert!(!body.contains("/approvals/ap_two"), "{body}");
    let (status, body) = page
        .post(
            "/approvals/ap_two/decide",
            &approver_cookie,
            &[("csrf", &approver_csrf), ("action", "a")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.contains("only the person who started this thread"),
        "{body}"
    );

    // The owner always allows the other.
    let (status, body) = page
        .post(
            "/approvals/ap_two/decide",
            &owner_cookie,
            &[("csrf", &owner_csrf), ("action", "aa")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("Always allowed by owner (@discord-owner) from the status page"),
        "{body}"
    );

    // The waiting turn got both decisions.
    let decisions = waiting.all().await;
    assert_eq!(decisions[0].verdict, Verdict::Deny);
    assert_eq!(
        decisions[0].decided_by.as_deref(),
        Some("approver (@discord-approver)")
    );
    assert_eq!(decisions[1].verdict, Verdict::AlwaysAllow);

    // A forged or unknown request, a button the page has not: refused, nothing stored.
    let (status, _) = page
        .post(
            "/approvals/ap_forged/decide",
            &owner_cookie,
            &[("csrf", &owner_csrf), ("action", "a")],
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = page
        .post(
            "/approvals/ap_forged",
            &owner_cookie,
            &[("csrf", &owner_csrf), ("action", "a")],
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = page
        .post(
            "/approvals/ap_two/decide",
            &owner_cookie,
            &[("csrf", &owner_csrf), ("action", "zz")],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Without a session, nothing.
    let (status, _) = page
        .post(
            "/approvals/ap_two/decide",
            "sandpiper_session=forged",
            &[("csrf", &owner_csrf), ("action", "a")],
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A review gets Accept, Reject and Annotate; Annotate needs its note; a tool call's button on
/// a review is refused by the engine.
#[tokio::test]
async fn a_review_is_accepted_rejected_or_annotated_from_the_page() {
    use sandpiper_agent::protocol::ApprovalKind;
    use sandpiper_agent::protocol::ApprovalStatus;
    let page = page().await;
    let owner = page.user("owner").await;
    page.pending("ap_plan", "discord:51", &owner, ApprovalKind::Review)
        .await;
    let _waiting = page
        .agent
        .live()
        .register("discord:51", &["ap_plan".to_owned()]);
    let cookie = page.sign_in(person(&owner)).await;
    let csrf = csrf_of(&page, &cookie).await;
    let (_, body) = page.get("/", Some(&cookie)).await;
    for label in ["Accept", "Reject", "Annotate"] {
        assert!(body.contains(label), "{label}: {body}");
    }
    let decide = "/approvals/ap_plan/decide";
    let (status, body) = page
        .post(decide, &cookie, &[("csrf", &csrf), ("action", "nt")])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = page
        .post(decide, &cookie, &[("csrf", &csrf), ("action", "a")])
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "Approve is no answer to a review"
    );
    let (status, body) = page
        .post(
            decide,
            &cookie,
            &[
                ("csrf", &csrf),
                ("action", "nt"),
                ("note", "mind the migration"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("Annotated by owner (@discord-owner) from the status page"),
        "{body}"
    );
    let r = page.status_of("ap_plan").await;
    assert_eq!(r.status, ApprovalStatus::Annotated);
    assert_eq!(r.feedback.as_deref(), Some("mind the migration"));
}

/// The page lists prompt templates with their origin (an MCP prompt's server, read-only).
#[tokio::test]
async fn the_page_lists_prompt_templates_with_their_origin() {
    let page = page().await;
    page.agent
        .store()
        .sync_mcp_templates(
            "fixture",
            &[sandpiper_agent::store::prompt_templates::McpPromptSpec {
                name: "mcp__fixture__greet".into(),
                description: Some("say <b>hi</b>".into()),
                arguments: "[]".into(),
            }],
        )
        .await
        .unwrap();
    let alice = page.user("alice").await;
    let cookie = page.sign_in(person(&alice)).await;
    let (status, body) = page.get("/", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("data-name=\"mcp__fixture__greet\""), "{body}");
    assert!(body.contains("data-origin=\"mcp\""), "{body}");
    assert!(body.contains("read-only"), "{body}");
    assert!(
        body.contains("say &lt;b&gt;hi&lt;/b&gt;"),
        "escaped: {body}"
    );
    let (_, json) = page.get("/api/status", Some(&cookie)).await;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        json["templates"],
        serde_json::json!([{"name": "mcp__fixture__greet", "origin": "mcp", "mcp_server": "fixture"}])
    );
}
