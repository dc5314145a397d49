//! Who decides from the status page (issue 40): the page is never stronger than the card. A
//! real node (what `sandpiper serve` runs) with the fake Discord, over real HTTP on loopback:
//! alice owns the thread, carol holds the approver role, bob talks in alice's thread, dave is
//! a stranger, erin administers the Discord server without the approver role; each signs in
//! with the link `/console` gave them (opening the link, then pressing its button). erin,
//! bob, dave and the operator token are refused with the card's words; carol approves; when
//! carol's role is taken away in Discord her page decides nothing more; alice decides.

use std::time::Duration;

use sandpiper::node::Node;
use sandpiper_agent::config::Secret;
use sandpiper_agent::protocol::ApprovalStatus;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::response_text;
use sandpiper_tests::fake_discord::{CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{WAIT, setup};

const ONCALL: u64 = 700_000_000_000_000_077;
const OPS_TOKEN: &str = "ops-token-for-the-page-decision-test";
const NOT_YOURS: &str = "only the person who started this thread, or an approver, can decide this";

fn alice() -> FakeUser {
    FakeUser::new(910_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(910_000_000_000_000_002, "bob")
}

fn carol() -> FakeUser {
    FakeUser::new(910_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}

fn dave() -> FakeUser {
    FakeUser::new(910_000_000_000_000_004, "dave")
}

fn erin() -> FakeUser {
    FakeUser::new(910_000_000_000_000_005, "erin").as_admin()
}

/// An HTTP client that keeps redirects for the test to see.
pub(crate) fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

/// Opens the sign-in link `path` on `base` and presses its button; the session cookie.
pub(crate) async fn press_link(http: &reqwest::Client, base: &str, path: &str) -> String {
    let page = http
        .get(format!("{base}{path}"))
        .send()
        .await
        .expect("the link's page");
    assert_eq!(page.status(), 200, "opening a link spends nothing");
    assert!(page.headers().get("set-cookie").is_none());
    let page = page.text().await.expect("its text");
    let at = page.find("name=\"csrf\" value=\"").expect("a form token") + 19;
    let signed_in = http
        .post(format!("{base}{path}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("csrf", &page[at..at + 64])]))
        .send()
        .await
        .expect("the button");
    assert_eq!(signed_in.status(), 303, "the button signs in");
    cookie_of(&signed_in)
}

/// A form body, as a browser sends it.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// The session cookie a sign-in set.
pub(crate) fn cookie_of(res: &reqwest::Response) -> String {
    let set = res
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .expect("text");
    set.split(';').next().unwrap_or_default().to_owned()
}

/// `user` types `/console`; the path of the link in the private answer.
async fn console_link(fake: &FakeDiscord, user: &FakeUser) -> String {
    let id = fake.slash(CHANNEL_ID, user, "console", json!([])).await;
    let reply = fake
        .wait_until(WAIT, "the /console answer", |f| {
            f.interaction_responses(id).pop()
        })
        .await;
    let answer = response_text(&[reply]);
    let at = answer.find("/sign-in/").expect("a sign-in link");
    answer[at..].trim().to_owned()
}

/// One signed-in browser.
struct Browser {
    cookie: String,
    csrf: String,
}

impl Browser {
    async fn open(http: &reqwest::Client, base: &str, cookie: String) -> Self {
        let page = http
            .get(format!("{base}/"))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("the page")
            .text()
            .await
            .expect("its text");
        let at = page
            .find("name=\"csrf-token\" content=\"")
            .expect("a form token")
            + 27;
        let csrf = page[at..at + 64].to_owned();
        Self { cookie, csrf }
    }

    /// Presses Approve on `request` and confirms; the answer's status and text.
    async fn approve(&self, http: &reqwest::Client, base: &str, request: &str) -> (u16, String) {
        let res = http
            .post(format!("{base}/approvals/{request}/decide"))
            .header("cookie", &self.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", self.csrf.as_str()), ("action", "a")]))
            .send()
            .await
            .expect("an answer");
        let status = res.status().as_u16();
        (status, res.text().await.expect("its text"))
    }
}

/// The one request waiting now.
async fn pending(node: &Node) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let waiting = node.agent.store().pending_approvals().await.expect("reads");
        if let [one] = waiting.as_slice() {
            return one.id.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no request waits");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status_of(node: &Node, id: &str) -> ApprovalStatus {
    node.agent
        .approval(id)
        .await
        .expect("reads")
        .expect("the request")
        .status
}

both_backends! {
    async fn the_page_decides_by_the_threads_rules_for_four_people_and_an_admin(db) {
        let s = setup(&db, vec![
            text("hello alice"),
            text("hello bob"),
            tool_call("c1", "bash", json!({"command": "echo one"})),
            text("ran one"),
            tool_call("c2", "bash", json!({"command": "echo two"})),
            text("ran two"),
        ]).await;
        let fake = FakeDiscord::start().await;
        let mut config = s.config.clone();
        config.discord.token = Some(Secret::new("fake-bot-token"));
        config.discord.api_base_url = fake.base_url();
        config.discord.stream_interval = Duration::from_millis(100);
        config.discord.requests_per_second = 500;
        config.discord.approver_roles = vec![ONCALL.to_string()];
        let mut core = config.core.clone();
        core.server.listen = "127.0.0.1:0".parse().expect("an address");
        core.server.ops_token = Some(Secret::new(OPS_TOKEN));
        let env = [("PATH", "/usr/bin:/bin")];
        let host = sandpiper_agent::turn::agent::Host { protected_files: Vec::new(), env: &env };
        let agent = sandpiper::wiring::build_agent_in(core, host).await.expect("the agent builds");
        let channels = ChannelsConfig { discord: config.discord.clone(), slack: Default::default() };
        let shutdown = CancellationToken::new();
        let node = Node::start(agent, channels, None, shutdown.clone()).await.expect("the node starts");
        fake.wait_ready(WAIT).await;
        fake.wait_until(WAIT, "slash commands registered", |f| {
            (!f.registered_commands().is_empty()).then_some(())
        }).await;
        let base = format!("http://{}", node.addr);
        let http = client();

        // alice opens the thread; bob talks in it.
        let started = fake.user_message(CHANNEL_ID, &alice(), &format!("{} hi", fake.mention())).await;
        let thread = fake.wait_until(WAIT, "the thread", |f| {
            f.threads().into_iter().find(|t| t.starter_message_id == Some(started)).map(|t| t.id)
        }).await;
        let said = |what: &'static str| move |f: &FakeDiscord| {
            f.messages(thread).iter().any(|m| m.content.contains(what)).then_some(())
        };
        fake.wait_until(WAIT, "the first answer", said("hello alice")).await;
        fake.user_message(thread, &bob(), "me too").await;
        fake.wait_until(WAIT, "bob's answer", said("hello bob")).await;

        // Everyone signs in as themselves; the operator with the operations token.
        let mut browsers = Vec::new();
        for who in [alice(), carol(), bob(), dave(), erin()] {
            let link = console_link(&fake, &who).await;
            let cookie = press_link(&http, &base, &link).await;
            browsers.push(Browser::open(&http, &base, cookie).await);
        }
        let [alice_page, carol_page, bob_page, dave_page, erin_page] =
            <[Browser; 5]>::try_from(browsers).unwrap_or_else(|_| panic!("five browsers"));
        let operator = http.post(format!("{base}/sign-in"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("token", OPS_TOKEN)]))
            .send().await.expect("the operator signs in");
        assert_eq!(operator.status(), 303);
        let operator_page = Browser::open(&http, &base, cookie_of(&operator)).await;

        fake.user_message(thread, &alice(), "run one").await;
        let one = pending(&node).await;
        // The admin without the approver role, the participant and the stranger: the card's
        // refusal. The operator token views only.
        for (who, page) in [("erin", &erin_page), ("bob", &bob_page), ("dave", &dave_page)] {
            let (status, body) = page.approve(&http, &base, &one).await;
            assert_eq!(status, 403, "{who}: {body}");
            assert!(body.contains(NOT_YOURS), "{who}: {body}");
        }
        let (status, body) = operator_page.approve(&http, &base, &one).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("only view the page"), "{body}");
        assert_eq!(status_of(&node, &one).await, ApprovalStatus::Pending);
        // The approver, whose role Discord reports now, approves.
        let (status, body) = carol_page.approve(&http, &base, &one).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(status_of(&node, &one).await, ApprovalStatus::Approved);
        fake.wait_until(WAIT, "the approved call to run", said("ran one")).await;

        // carol's role is taken away in Discord (her next interaction shows her without it).
        let _ = console_link(&fake, &FakeUser::new(carol().id, "carol")).await;
        fake.user_message(thread, &alice(), "run two").await;
        let two = pending(&node).await;
        let (status, body) = carol_page.approve(&http, &base, &two).await;
        assert_eq!(status, 403, "a role taken away ends its power on the page: {body}");
        assert!(body.contains(NOT_YOURS), "{body}");
        let (status, body) = alice_page.approve(&http, &base, &two).await;
        assert_eq!(status, 200, "the owner decides: {body}");
        fake.wait_until(WAIT, "the owner's call to run", said("ran two")).await;
        s.llm.verify();

        shutdown.cancel();
        node.join(WAIT).await;
    }
}
