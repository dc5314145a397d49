//! Talking to a workstream from the status page (issue 44), in the real headless Chromium
//! against a node as `sandpiper serve` runs it, the real serenity client on the fake Discord
//! and a scripted model.
//!
//! alice owns a Discord thread, bob talks in it, carol holds the approver role and is not in
//! it, dave is a stranger. alice writes from the page and watches the answer stream in (the
//! thread shows her message and the answer too); a turn she starts from the page asks for
//! approval, the card is in the thread, and it runs once approved there; bob writes from the
//! page; carol and dave are refused with the thread's words (an approver role decides
//! approvals, it does not make its holder part of the conversation), and so are the operator
//! token, a form without its token, an empty and an oversized message (each refusal gives
//! the text back), and a closed thread. bob starts a conversation on the page (`web:<id>`):
//! it answers there and nowhere else, and dave cannot write into it.
//!
//! The answer is read as a person reads it: the streaming part's rendered text while the
//! turn runs (`#streaming .md`), then the stored answer's.
//!
//! The same four people in a Slack thread (over HTTP, no browser): alice and bob write from
//! the page and the Slack thread shows it, "(from the page)", and the answer; carol, in the
//! approver user group, and dave are refused. A command alice asks for from the page waits on
//! carol's page, which names the thread's channel (`#general on Slack`) and who may decide
//! (`user groups @s0oncall`) as Slack names them. Both run on SQLite and on PostgreSQL.
//!
//! Without chromium and chromedriver the test says so and passes, unless
//! `SANDPIPER_REQUIRE_BROWSER=1` (CI installs them and sets it; see
//! [`sandpiper_tests::browser`]).

use std::time::Duration;

use fantoccini::{Client, Locator};
use sandpiper::node::Node;
use sandpiper_agent::config::Secret;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_tests::both_backends;
use sandpiper_tests::browser::{Browser, WAIT, binaries, console_link, sign_in_as, until};
use sandpiper_tests::discord_harness::{button, open_buttons};
use sandpiper_tests::fake_discord::{BOT_ID, CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{FakeLlm, Reply, said, text, tool_call};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ONCALL: u64 = 700_000_000_000_000_044;
const OPS_TOKEN: &str = "ops-token-for-the-page-chat-test";
/// The answer that streams word by word.
const SLOW: &str = "this answer reaches the page a word at a time until it is whole";
/// Most bytes a message may have here (`agent.max_message_bytes`).
const LIMIT: usize = 2000;

/// The model: `run` asks for a command (approval needed), `slowly` streams [`SLOW`] word by
/// word, anything else is answered with what was said.
fn respond(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return text("the command ran");
    }
    let said = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .map(said)
        .unwrap_or_default()
        .to_owned();
    let asked = messages.iter().filter(|m| m["role"] == "user").count();
    if said.contains("run") {
        return tool_call(
            format!("call-{asked}"),
            "bash",
            json!({ "command": "echo ran-from-the-page" }),
        );
    }
    if said.contains("slowly") {
        return Reply::slow_text(SLOW, Duration::from_millis(200));
    }
    text(format!(
        "heard: {}",
        said.split_whitespace().last().unwrap_or("")
    ))
}

/// The form token in a form of an HTML page (the sign-in link's).
fn csrf_in(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form token") + 19;
    page[at..at + 64].to_owned()
}

/// The session's form token, which every page of a signed-in session carries (the
/// operator's too, whose page has no form to write in).
fn session_csrf(page: &str) -> String {
    let at = page
        .find("name=\"csrf-token\" content=\"")
        .expect("the session's form token")
        + 27;
    page[at..at + 64].to_owned()
}

/// A session over plain HTTP (the refusals need no browser).
struct Session {
    http: reqwest::Client,
    base: String,
    cookie: String,
    csrf: String,
}

impl Session {
    async fn start(base: &str, signed_in: reqwest::Response, http: reqwest::Client) -> Self {
        assert_eq!(signed_in.status(), 303, "signed in");
        let cookie = signed_in
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .expect("a session cookie")
            .to_owned();
        let page = http
            .get(format!("{base}/"))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("the page")
            .text()
            .await
            .expect("its text");
        Self {
            http,
            base: base.to_owned(),
            csrf: session_csrf(&page),
            cookie,
        }
    }

    /// `user` signs in with their `/console` link.
    async fn of(base: &str, fake: &FakeDiscord, user: &FakeUser) -> Self {
        Self::with_link(base, &console_link(fake, user).await).await
    }

    /// Signs in with the sign-in link `link` (its path): opening it, then its button.
    async fn with_link(base: &str, link: &str) -> Self {
        let http = client();
        let page = http
            .get(format!("{base}{link}"))
            .send()
            .await
            .expect("the link's page")
            .text()
            .await
            .expect("its text");
        let signed_in = http
            .post(format!("{base}{link}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", &csrf_in(&page))]))
            .send()
            .await
            .expect("the button");
        Self::start(base, signed_in, http).await
    }

    /// The operator signs in with the operator token.
    async fn operator(base: &str) -> Self {
        let http = client();
        let signed_in = http
            .post(format!("{base}/sign-in"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("token", OPS_TOKEN)]))
            .send()
            .await
            .expect("signs in");
        Self::start(base, signed_in, http).await
    }

    /// The page at `path`, as this person sees it.
    async fn get(&self, path: &str) -> String {
        self.http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .expect("the page")
            .text()
            .await
            .expect("its text")
    }

    /// POSTs `text` to `path` with the form token (or without: `csrf` false); the status and
    /// the page.
    async fn post(&self, path: &str, text: &str, csrf: bool) -> (u16, String) {
        let mut pairs = vec![("text", text)];
        if csrf {
            pairs.push(("csrf", &self.csrf));
        }
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&pairs))
            .send()
            .await
            .expect("posts");
        let status = res.status().as_u16();
        (status, res.text().await.expect("the answer"))
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn say_path(key: &str) -> String {
    format!("/w/{}/say", key.replace(':', "%3A"))
}

/// Types `text` into the box `area` and presses `button`.
async fn write(client: &Client, area: &str, button: &str, text: &str) {
    client
        .find(Locator::Id(area))
        .await
        .expect("the box")
        .send_keys(text)
        .await
        .expect("types");
    client
        .find(Locator::Id(button))
        .await
        .expect("the button")
        .click()
        .await
        .expect("sends");
}

/// Waits until the page's conversation shows a stored answer containing `needle`.
async fn answered(client: &Client, needle: &str) {
    let script = format!(
        "return [...document.querySelectorAll('#conversation .msg.assistant:not(.streaming) .md')]\
         .some(m => m.innerText.includes({needle:?}))"
    );
    until(client, needle, &script).await;
}

/// Waits until the bot said something containing `needle` in `thread`.
async fn bot_said(fake: &FakeDiscord, thread: u64, needle: &str) {
    fake.wait_until(WAIT, needle, |f| {
        f.messages(thread)
            .iter()
            .any(|m| m.author_id == BOT_ID && m.content.contains(needle))
            .then_some(())
    })
    .await;
}

both_backends! {
    async fn talking_to_a_workstream_from_the_page(db) {
        let Some(binaries) = binaries("web_chat") else {
            return;
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let llm = FakeLlm::start(vec![]).await;
        llm.respond_with(respond);
        let work = tempfile::tempdir().expect("work dir");
        let mut config = sandpiper_tests::harness::config(&db, &llm.openai_base_url(), work.path());
        config.server.listen = "127.0.0.1:0".parse().expect("an address");
        config.server.ops_token = Some(Secret::new(OPS_TOKEN));
        config.core.agent.max_message_bytes = LIMIT;
        let fake = FakeDiscord::start().await;
        config.discord.token = Some(Secret::new("fake-bot-token"));
        config.discord.api_base_url = fake.base_url();
        config.discord.stream_interval = Duration::from_millis(100);
        config.discord.requests_per_second = 500;
        config.discord.approver_roles = vec![ONCALL.to_string()];
        let env = [("PATH", "/usr/bin:/bin")];
        let host = sandpiper_agent::turn::agent::Host {
            protected_files: Vec::new(),
            env: &env,
        };
        let agent = sandpiper::wiring::build_agent_in(config.core.clone(), host)
            .await
            .expect("the agent builds");
        let channels = ChannelsConfig {
            discord: config.discord.clone(),
            slack: Default::default(),
        };
        let node = Node::start(agent, channels, None, CancellationToken::new())
            .await
            .expect("the node starts");
        fake.wait_ready(WAIT).await;
        let base = format!("http://{}", node.addr);
        let alice = FakeUser::new(820_000_000_000_000_001, "alice");
        let bob = FakeUser::new(820_000_000_000_000_002, "bob");
        let carol = FakeUser::new(820_000_000_000_000_003, "carol").with_roles(&[ONCALL]);
        let dave = FakeUser::new(820_000_000_000_000_004, "dave");

        // alice opens a thread in Discord; bob talks in it.
        let content = format!("{} hello", fake.mention());
        let started = fake.user_message(CHANNEL_ID, &alice, &content).await;
        let thread = fake
            .wait_until(WAIT, "a thread for the mention", |f| {
                f.threads()
                    .into_iter()
                    .find(|t| t.starter_message_id == Some(started))
                    .map(|t| t.id)
            })
            .await;
        let key = format!("discord:{thread}");
        bot_said(&fake, thread, "heard: hello").await;
        fake.user_message(thread, &bob, "bob-was-here").await;
        bot_said(&fake, thread, "heard: bob-was-here").await;

        let client = Browser::open(&binaries).await;

        // alice writes from the page and watches the answer grow there.
        sign_in_as(&client, &fake, &base, &alice).await;
        let detail = format!("{base}/w/{}", key.replace(':', "%3A"));
        client.goto(&detail).await.expect("the workstream's page");
        until(
            &client,
            "the live stream",
            "return document.getElementById('conn').textContent === 'live'",
        )
        .await;
        write(&client, "say-text", "say", "tell me slowly").await;
        until(&client, "the page again, following", "return !!document.getElementById('say-text') && document.getElementById('conn').textContent === 'live'").await;
        until(
            &client,
            "part of the answer, streaming",
            &format!(
                "const s = document.querySelector('#streaming .md'); const t = s ? s.innerText.trim() : ''; \
                 return t.length > 0 && t.length < {} && {:?}.startsWith(t);",
                SLOW.len(),
                SLOW
            ),
        )
        .await;
        until(
            &client,
            "the whole answer, stored",
            &format!(
                "return !document.getElementById('streaming') && [...document.querySelectorAll('#conversation .msg.assistant .md')].some(p => p.innerText.includes({SLOW:?}))"
            ),
        )
        .await;
        let said_by_alice = fake
            .wait_until(WAIT, "the thread to show alice's message", |f| {
                f.messages(thread)
                    .into_iter()
                    .find(|m| m.content.contains("(from the page): tell me slowly"))
            })
            .await;
        assert!(
            said_by_alice.content.contains("alice"),
            "{}",
            said_by_alice.content
        );
        bot_said(&fake, thread, SLOW).await;

        // A turn from the page that needs approval: the card is in the thread (and on the
        // page), and the turn runs once it is approved there.
        client.goto(&detail).await.expect("the workstream's page");
        write(&client, "say-text", "say", "run the check").await;
        until(
            &client,
            "waiting for approval on the page",
            "return !!document.querySelector('#streaming .waiting-for-approval')",
        )
        .await;
        let card = fake
            .wait_until(WAIT, "the approval card", |f| {
                f.messages(thread)
                    .into_iter()
                    .rev()
                    .find(|m| m.author_id == BOT_ID && !open_buttons(m).is_empty())
            })
            .await;
        fake.click(thread, card.id, &alice, &button(&card, "Approve", 0))
            .await;
        bot_said(&fake, thread, "the command ran").await;
        answered(&client, "the command ran").await;

        // bob takes part: he writes from the page too.
        sign_in_as(&client, &fake, &base, &bob).await;
        client.goto(&detail).await.expect("the workstream's page");
        write(&client, "say-text", "say", "bob-from-the-page").await;
        fake.wait_until(WAIT, "the thread to show bob's message", |f| {
            f.messages(thread)
                .iter()
                .any(|m| {
                    m.content.contains("bob")
                        && m.content.contains("(from the page): bob-from-the-page")
                })
                .then_some(())
        })
        .await;
        bot_said(&fake, thread, "heard: bob-from-the-page").await;

        // carol (an approver, not in the thread), dave (a stranger) and the operator token are
        // refused, and their text comes back to them; nothing reaches the thread.
        let say = say_path(&key);
        for (who, session) in [
            ("carol", Session::of(&base, &fake, &carol).await),
            ("dave", Session::of(&base, &fake, &dave).await),
        ] {
            let (status, page) = session.post(&say, &format!("{who}-sneaks-in"), true).await;
            assert_eq!(status, 403, "{who}: {page}");
            assert!(
                page.contains("Only the people in this thread can write to it"),
                "{who}: {page}"
            );
            assert!(
                page.contains(&format!("{who}-sneaks-in</textarea>")),
                "{who}: the text comes back"
            );
        }
        let operator = Session::operator(&base).await;
        let (status, page) = operator.post(&say, "operator-sneaks-in", true).await;
        assert_eq!(status, 403, "{page}");
        assert!(page.contains("only view the page"), "{page}");

        // alice's own mistakes: no form token, nothing written, too much written.
        let alice_http = Session::of(&base, &fake, &alice).await;
        let (status, page) = alice_http.post(&say, "forged-post", false).await;
        assert_eq!(status, 403, "{page}");
        assert!(page.contains("token is missing or wrong"), "{page}");
        let (status, page) = alice_http.post(&say, "   ", true).await;
        assert_eq!(status, 400, "{page}");
        assert!(page.contains("the message is empty"), "{page}");
        let long = "x".repeat(LIMIT + 1);
        let (status, page) = alice_http.post(&say, &long, true).await;
        assert_eq!(status, 413);
        assert!(
            page.contains(&format!("the limit is {LIMIT} bytes")),
            "{page}"
        );
        assert!(
            page.contains(&format!("{long}</textarea>")),
            "the text comes back"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        for sneaked in [
            "carol-sneaks-in",
            "dave-sneaks-in",
            "operator-sneaks-in",
            "forged-post",
            "xxxxxxxxxx",
        ] {
            assert!(
                !fake
                    .messages(thread)
                    .iter()
                    .any(|m| m.content.contains(sneaked)),
                "{sneaked} reached the thread"
            );
        }

        // bob starts a conversation on the page: it answers there, and nowhere else.
        let discord_before = fake.messages(thread).len();
        client.goto(&format!("{base}/")).await.expect("the page");
        write(&client, "new-text", "start", "hello-from-the-web").await;
        until(
            &client,
            "the conversation's page",
            "return location.pathname.startsWith('/w/web%3A')",
        )
        .await;
        answered(&client, "heard: hello-from-the-web").await;
        let web_key = client
            .execute(
                "return decodeURIComponent(location.pathname.slice(3))",
                vec![],
            )
            .await
            .expect("runs");
        let web_key = web_key.as_str().expect("a key").to_owned();
        assert!(web_key.starts_with("web:"), "{web_key}");
        let owner = node
            .agent
            .workstream(&web_key)
            .await
            .expect("reads")
            .expect("stored")
            .owner;
        let (_, bob_user) = node
            .agent
            .store()
            .users_with_handle("bob")
            .await
            .expect("reads")
            .pop()
            .expect("bob");
        let bob_id = bob_user.id;
        assert_eq!(owner, Some(bob_id), "bob owns it");
        write(&client, "say-text", "say", "second-web-message").await;
        answered(&client, "heard: second-web-message").await;
        assert_eq!(
            fake.messages(thread).len(),
            discord_before,
            "nothing went to Discord"
        );
        assert!(
            !fake
                .requests()
                .iter()
                .any(|r| r.body.to_string().contains("hello-from-the-web")),
            "Discord never heard of the page's conversation"
        );
        let dave_http = Session::of(&base, &fake, &dave).await;
        let (status, page) = dave_http
            .post(&say_path(&web_key), "dave-in-bobs-chat", true)
            .await;
        assert_eq!(status, 403, "{page}");
        assert!(page.contains("Only @bob can talk to me"), "{page}");

        // A closed thread takes nothing more, from the page either.
        node.agent.close_workstream(&key).await.expect("closes");
        let (status, page) = alice_http.post(&say, "after-the-close", true).await;
        assert_eq!(status, 409, "{page}");
        assert!(page.contains("This thread is closed"), "{page}");
        assert!(page.contains("after-the-close</textarea>"));

        client.close().await;
        node.shutdown();
        node.join(Duration::from_secs(10)).await;
    }

    // The same from a Slack thread, over HTTP (the browser's part is the Discord test's): alice
    // owns the thread and bob talks in it, carol is in the approver user group and not in it,
    // dave is a stranger. alice and bob write from the page: the thread shows each message
    // marked as from the page, and the answer; carol and dave are refused with the thread's
    // words, and nothing of theirs reaches Slack.
    async fn talking_to_a_slack_thread_from_the_page(db) {
        use sandpiper_agent::store::web_access::WebIdentity;
        use sandpiper_channels::config::SlackMode;
        use sandpiper_tests::fake_slack::{self, FakeSlack};
        use sandpiper_tests::slack_harness;

        const ONCALL_GROUP: &str = "S0ONCALL";
        let _ = rustls::crypto::ring::default_provider().install_default();
        let llm = FakeLlm::start(vec![]).await;
        llm.respond_with(respond);
        let work = tempfile::tempdir().expect("work dir");
        let mut config = sandpiper_tests::harness::config(&db, &llm.openai_base_url(), work.path());
        config.server.listen = "127.0.0.1:0".parse().expect("an address");
        let slack = FakeSlack::start().await;
        slack_harness::configure(&mut config, &slack, SlackMode::Socket);
        config.slack.approver_usergroups = vec![ONCALL_GROUP.into()];
        let env = [("PATH", "/usr/bin:/bin")];
        let host = sandpiper_agent::turn::agent::Host {
            protected_files: Vec::new(),
            env: &env,
        };
        let agent = sandpiper::wiring::build_agent_in(config.core.clone(), host)
            .await
            .expect("the agent builds");
        let channels = ChannelsConfig {
            discord: Default::default(),
            slack: config.slack.clone(),
        };
        let alice = slack.user("U0ALICE", "alice");
        let bob = slack.user("U0BOB", "bob");
        let carol = slack.user("U0CAROL", "carol");
        let dave = slack.user("U0DAVE", "dave");
        slack.set_usergroup(ONCALL_GROUP, &[&carol.id]);
        let node = Node::start(agent, channels, None, CancellationToken::new())
            .await
            .expect("the node starts");
        slack.wait_connected(WAIT).await;
        let base = format!("http://{}", node.addr);
        let channel = fake_slack::CHANNEL_ID;
        let bot_said = async |root: &str, needle: &str| {
            slack
                .wait_until(WAIT, needle, |s| {
                    s.messages(channel)
                        .into_iter()
                        .find(|m| {
                            m.user == fake_slack::BOT_USER_ID
                                && m.thread_ts.as_deref() == Some(root)
                                && m.text.contains(needle)
                        })
                })
                .await
        };

        // alice opens a thread in Slack; bob talks in it.
        let root = slack.app_mention(channel, &alice, "hello").await;
        bot_said(&root, "heard: hello").await;
        slack.thread_message(channel, &root, &bob, "bob-was-here").await;
        bot_said(&root, "heard: bob-was-here").await;
        let key = format!("slack:{}:{channel}:{root}", fake_slack::TEAM_ID);

        // Everyone signs in with a link of their own (what /console hands out).
        let mut sessions = Vec::new();
        for who in [&alice, &bob, &carol, &dave] {
            let user = node
                .agent
                .store()
                .user_for_identity("slack", &who.id, &who.name)
                .await
                .expect("the person");
            let identity = WebIdentity {
                user_id: Some(user.id),
                admin: false,
            };
            let link = node.agent.sign_in_link(&identity).await.expect("a link");
            let at = link.url.find("/sign-in/").expect("a sign-in path");
            sessions.push(Session::with_link(&base, &link.url[at..]).await);
        }
        let [alice_page, bob_page, carol_page, dave_page] =
            <[Session; 4]>::try_from(sessions).unwrap_or_else(|_| panic!("four sessions"));

        // The owner and the participant write from the page: the thread shows it, and answers.
        let say = say_path(&key);
        for (who, page) in [("alice", &alice_page), ("bob", &bob_page)] {
            let text = format!("{who}-from-the-page");
            let (status, body) = page.post(&say, &text, true).await;
            assert_eq!(status, 303, "{who}: {body}");
            let shown = bot_said(&root, &format!("(from the page): {text}")).await;
            assert!(shown.text.contains(who), "{who}: {}", shown.text);
            bot_said(&root, &format!("heard: {text}")).await;
        }

        // The approver who is not in the thread, and the stranger: the thread's words, the text
        // back, nothing in Slack.
        for (who, page) in [("carol", &carol_page), ("dave", &dave_page)] {
            let text = format!("{who}-sneaks-in");
            let (status, body) = page.post(&say, &text, true).await;
            assert_eq!(status, 403, "{who}: {body}");
            assert!(
                body.contains("Only the people in this thread can write to it"),
                "{who}: {body}"
            );
            assert!(body.contains(&format!("{text}</textarea>")), "{who}: {body}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let sneaked: Vec<String> = slack
            .messages(channel)
            .into_iter()
            .map(|m| m.text)
            .filter(|t| t.contains("sneaks-in"))
            .collect();
        assert_eq!(sneaked, Vec::<String>::new(), "nothing reached Slack");

        // The page names the thread's channel and who may decide its card as Slack names them
        // (`conversations.info`, `usergroups.list`), not by their ids: alice's command waits
        // for a decision, and carol, who may decide it without being in the thread, sees it.
        let (status, body) = alice_page.post(&say, "please run it", true).await;
        assert_eq!(status, 303, "alice: {body}");
        bot_said(&root, "echo ran-from-the-page").await;
        let deadline = std::time::Instant::now() + WAIT;
        let listed = loop {
            let page = carol_page.get("/").await;
            if page.contains("may be decided by") {
                break page;
            }
            assert!(std::time::Instant::now() < deadline, "no card on carol's page: {page}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            listed.contains("or user groups @s0oncall"),
            "who may decide, by name: {listed}"
        );
        assert!(listed.contains("hello · #general on Slack"), "the thread: {listed}");
        let own = alice_page.get("/").await;
        assert!(own.contains("#general on Slack"), "the workstream list: {own}");
        assert!(!own.contains("#C0GENERAL"), "no channel id: {own}");

        node.shutdown();
        node.join(Duration::from_secs(10)).await;
    }
}
