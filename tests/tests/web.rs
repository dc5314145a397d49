//! The status page in a real headless browser (Debian's `chromium` driven through
//! `chromedriver` over WebDriver, with fantoccini): a node as `sandpiper serve` runs it, the
//! real serenity client against the fake Discord, an MCP server, and a scripted model.
//!
//! One browser session walks through what a person does: `/console` in Discord gives a link,
//! the link's button signs the browser in, a thread opened in Discord appears on the page without a
//! reload, its approval appears and goes when it is decided in the thread (and a second one
//! is decided from the page, the card in the thread saying so), a tool's
//! `<script>` output is shown as text and runs nothing, the MCP counts are those of
//! `/health`, and a person who is not in the thread does not see it. A screenshot is kept
//! under `target/`.
//!
//! Without chromium and chromedriver the test says so and passes, unless
//! `SANDPIPER_REQUIRE_BROWSER=1` (CI installs them and sets it).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use sandpiper::node::Node;
use sandpiper_agent::config::Secret;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_tests::db::TestDb;
use sandpiper_tests::discord_harness::{button, response_text};
use sandpiper_tests::fake_discord::{BOT_ID, CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{FakeLlm, Reply, text, tool_call};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
/// What the approved command prints: markup that must stay text.
const HOSTILE: &str = "<script>window.pwned=1</script><b>bold</b>";

/// `name` on PATH, or at one of Debian's places.
fn find(name: &str, also: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name));
    on_path
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// A chromedriver on a free local port, killed on drop.
struct Driver {
    child: tokio::process::Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn start_driver(chromedriver: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = tokio::process::Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Driver { child, url }
}

async fn browser(driver: &Driver, chromium: &Path, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                "--window-size=1280,1400",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}

/// Waits until `script` (a JS function body) returns true in the page.
async fn until(client: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let ok = client.execute(script, vec![]).await.expect("script runs");
        if ok == Value::Bool(true) {
            return;
        }
        if Instant::now() > deadline {
            let page = client.source().await.unwrap_or_default();
            panic!("timed out waiting for {what}; page:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rendered text of the element `css` names, read in one script (the live part is
/// replaced as updates arrive, so a found element can go stale before it is read).
async fn text_of(client: &Client, css: &str) -> String {
    let got = client
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            vec![json!(css)],
        )
        .await
        .expect("script runs");
    match got {
        Value::String(s) => s.trim().to_owned(),
        _ => panic!("no element {css}"),
    }
}

/// The model: a mention with `run` asks for the hostile echo (approval needed), then answers.
fn respond(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return text("the command printed some markup");
    }
    let asked_run = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .is_some_and(|c| c.contains("run"));
    let asked = messages.iter().filter(|m| m["role"] == "user").count();
    match asked_run {
        true => tool_call(
            format!("call-{asked}"),
            "bash",
            json!({ "command": format!("printf '%s' '{HOSTILE}'") }),
        ),
        false => text("hello"),
    }
}

/// `user` types `/console` in the channel; the private answer's link, made relative.
async fn console_link(fake: &FakeDiscord, user: &FakeUser) -> String {
    let id = fake.slash(CHANNEL_ID, user, "console", json!([])).await;
    let reply = fake
        .wait_until(WAIT, "the /console answer", |f| {
            f.interaction_responses(id).pop()
        })
        .await;
    assert_eq!(reply["data"]["flags"], json!(64), "only the person sees it");
    let answer = response_text(&[reply]);
    let at = answer.find("/sign-in/").expect("a sign-in link");
    answer[at..].trim().to_owned()
}

/// Opens the sign-in link `link`: opening it signs nobody in (the session cookie is what it
/// was), its button does.
async fn sign_in_with(client: &Client, base: &str, link: &str) {
    let session = async || {
        client
            .get_named_cookie("sandpiper_session")
            .await
            .ok()
            .map(|c| c.value().to_owned())
    };
    let before = session().await;
    client
        .goto(&format!("{base}{link}"))
        .await
        .expect("the link");
    until(
        client,
        "the link's page",
        "return !!document.getElementById('sign-in')",
    )
    .await;
    assert_eq!(session().await, before, "opening the link signed nobody in");
    client
        .find(Locator::Id("sign-in"))
        .await
        .expect("the button")
        .click()
        .await
        .expect("signs in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_a_real_browser() {
    let chromium = find("chromium", &["/usr/lib/chromium/chromium"]);
    let chromedriver = find("chromedriver", &["/usr/lib/chromium/chromedriver"]);
    let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) else {
        assert!(
            std::env::var("SANDPIPER_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "SANDPIPER_REQUIRE_BROWSER=1 but chromium or chromedriver is missing \
             (apt-get install chromium chromium-driver)"
        );
        eprintln!(
            "web: skipped: chromium and chromedriver are not installed \
             (apt-get install chromium chromium-driver)"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let db = TestDb::sqlite();
    let llm = FakeLlm::start(vec![]).await;
    llm.respond_with(respond);
    let work = tempfile::tempdir().expect("work dir");
    let mut config = sandpiper_tests::harness::config(&db, &llm.openai_base_url(), work.path());
    config.server.listen = "127.0.0.1:0".parse().expect("an address");
    config.mcp.servers.insert(
        "fixture".into(),
        sandpiper_agent::mcp::McpServerConfig::Stdio {
            command: env!("CARGO_BIN_EXE_mcp_test_server").into(),
            args: vec!["--stdio".into()],
            env: Default::default(),
            auto_approve: vec![],
        },
    );
    let fake = FakeDiscord::start().await;
    config.discord.token = Some(Secret::new("fake-bot-token"));
    config.discord.api_base_url = fake.base_url();
    config.discord.stream_interval = Duration::from_millis(100);
    config.discord.requests_per_second = 500;
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
    let shutdown = CancellationToken::new();
    let node = Node::start(agent, channels, None, shutdown.clone())
        .await
        .expect("the node starts");
    fake.wait_ready(WAIT).await;
    fake.wait_until(WAIT, "slash commands registered", |f| {
        f.requests()
            .iter()
            .any(|r| r.method == "PUT" && r.path.ends_with("/commands"))
            .then_some(())
    })
    .await;
    let base = format!("http://{}", node.addr);

    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().expect("a browser profile");
    let client = browser(&driver, &chromium, profile.path()).await;

    // Without a session: the sign-in page, nothing else.
    client.goto(&format!("{base}/")).await.expect("the page");
    assert!(text_of(&client, "main").await.contains("/console"));

    // alice signs in with the link /console gave her in Discord.
    let alice = FakeUser::new(810_000_000_000_001_001, "alice");
    let link = console_link(&fake, &alice).await;
    sign_in_with(&client, &base, &link).await;
    until(
        &client,
        "alice's page",
        "return !!document.getElementById('viewer')",
    )
    .await;
    assert_eq!(text_of(&client, "#viewer").await, "@alice");
    until(
        &client,
        "the live stream",
        "return document.getElementById('conn').textContent === 'live'",
    )
    .await;
    client
        .execute("window.notReloaded = true; return true;", vec![])
        .await
        .expect("marks the page");
    // The link worked once: its page still opens, its button says it was used.
    let page = reqwest::get(format!("{base}{link}"))
        .await
        .expect("asks")
        .text()
        .await
        .expect("the link's page");
    let at = page.find("name=\"csrf\" value=\"").expect("a form token") + 19;
    let reused = reqwest::Client::new()
        .post(format!("{base}{link}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}", &page[at..at + 64]))
        .send()
        .await
        .expect("asks");
    assert_eq!(reused.status(), 410);

    // MCP counts as /health has them.
    let health: Value = reqwest::get(format!("{base}/health"))
        .await
        .expect("health")
        .json()
        .await
        .expect("json");
    until(
        &client,
        "the MCP server connected",
        "return document.getElementById('mcp-servers').textContent === '1'",
    )
    .await;
    for (id, field) in [
        ("#mcp-servers", "servers"),
        ("#mcp-resources", "resources"),
        ("#mcp-prompts", "prompts"),
    ] {
        assert_eq!(
            text_of(&client, id).await,
            health["mcp"][field].to_string(),
            "{field}: {health}"
        );
    }

    // A thread opened in Discord appears without a reload, waiting for approval.
    let content = format!("{} run the check", fake.mention());
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
    let row = format!("tr.workstream[data-key='{key}']");
    until(
        &client,
        "the workstream row",
        &format!("return !!document.querySelector(\"{row}\")"),
    )
    .await;
    until(
        &client,
        "the pending approval",
        &format!(
            "return !!document.querySelector(\"#approvals .approval[data-workstream='{key}']\")"
        ),
    )
    .await;
    assert!(text_of(&client, "#approvals").await.contains("bash"));
    assert!(
        text_of(&client, &row)
            .await
            .contains("waiting for approval")
    );
    let shot = client.screenshot().await.expect("a screenshot");

    // alice approves in the thread: the approval goes, the page never reloaded.
    let card = fake
        .wait_until(WAIT, "the approval card", |f| {
            f.messages(thread).into_iter().rev().find(|m| {
                m.author_id == BOT_ID
                    && !sandpiper_tests::discord_harness::open_buttons(m).is_empty()
            })
        })
        .await;
    fake.click(thread, card.id, &alice, &button(&card, "Approve", 0))
        .await;
    until(
        &client,
        "the approval to go",
        &format!(
            "return !document.querySelector(\"#approvals .approval[data-workstream='{key}']\")"
        ),
    )
    .await;
    until(
        &client,
        "the turn to end",
        &format!("return document.querySelector(\"{row}\").textContent.includes('idle')"),
    )
    .await;
    assert_eq!(
        client
            .execute("return window.notReloaded === true", vec![])
            .await
            .expect("runs"),
        Value::Bool(true),
        "the page followed without a reload"
    );

    // Asked again in the thread, alice decides from the page this time: Approve, confirm,
    // and the thread's card says who decided and that it was from the web; the turn goes on.
    fake.user_message(thread, &alice, "run it again").await;
    let approval = format!("#approvals .approval[data-workstream='{key}']");
    until(
        &client,
        "the second approval with its buttons",
        &format!("return !!document.querySelector(\"{approval} form.decide button[value='a']\")"),
    )
    .await;
    // Found and pressed in one script: the live part may be redrawn between two calls.
    client
        .execute(
            "document.querySelector(arguments[0]).click(); return true;",
            vec![json!(format!("{approval} form.decide button[value='a']"))],
        )
        .await
        .expect("presses Approve");
    until(
        &client,
        "the confirmation",
        "return !!document.getElementById('confirm-decision')",
    )
    .await;
    assert!(text_of(&client, "#confirm").await.contains("bash"));
    client
        .find(Locator::Id("confirm-decision"))
        .await
        .expect("the confirm button")
        .click()
        .await
        .expect("confirms");
    until(
        &client,
        "the decision",
        "return !!document.getElementById('outcome')",
    )
    .await;
    let outcome = text_of(&client, "#outcome").await;
    assert!(
        outcome.contains("Approved by @alice from the status page"),
        "{outcome}"
    );
    let card = fake
        .wait_until(WAIT, "the card to say it was decided from the web", |f| {
            f.messages(thread).into_iter().find(|m| {
                m.author_id == BOT_ID
                    && sandpiper_tests::discord_harness::card_text(m)
                        .contains("from the status page")
            })
        })
        .await;
    assert!(
        sandpiper_tests::discord_harness::card_text(&card)
            .contains("Approved by @alice from the status page"),
        "{}",
        sandpiper_tests::discord_harness::card_text(&card)
    );
    assert!(
        sandpiper_tests::discord_harness::open_buttons(&card).is_empty(),
        "the card has no buttons left"
    );
    fake.wait_until(WAIT, "the turn to continue after the web's decision", |f| {
        (f.messages(thread)
            .iter()
            .filter(|m| {
                m.author_id == BOT_ID && m.content.contains("the command printed some markup")
            })
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    client.goto(&format!("{base}/")).await.expect("the page");
    until(
        &client,
        "the turn to end again",
        &format!("return !!document.querySelector(\"{row}\") && document.querySelector(\"{row}\").textContent.includes('idle')"),
    )
    .await;

    // The tool's output is text on the workstream's page, and ran nothing.
    // Found and followed in one script (the live part is redrawn as the turn's ages tick).
    client
        .execute(
            "document.querySelector(arguments[0]).click(); return true;",
            vec![json!(format!("{row} a"))],
        )
        .await
        .expect("opens it");
    until(
        &client,
        "the conversation",
        "return !!document.querySelector('.tool-output')",
    )
    .await;
    let output = text_of(&client, ".tool-output").await;
    assert!(output.contains(HOSTILE), "shown as text: {output}");
    assert_eq!(
        client
            .execute(
                "return window.pwned === undefined && ![...document.querySelectorAll('#conversation b')].some(b => b.textContent === 'bold')",
                vec![]
            )
            .await
            .expect("runs"),
        Value::Bool(true),
        "the output's markup did nothing"
    );

    // bob, who is not in the thread, does not see it.
    client.goto(&format!("{base}/")).await.expect("the page");
    client
        .find(Locator::Css("form.signout button"))
        .await
        .expect("sign out")
        .click()
        .await
        .expect("signs out");
    until(
        &client,
        "the sign-in page",
        "return !!document.getElementById('token')",
    )
    .await;
    let bob = FakeUser::new(810_000_000_000_001_002, "bob");
    let link = console_link(&fake, &bob).await;
    sign_in_with(&client, &base, &link).await;
    until(
        &client,
        "bob's page",
        "return !!document.getElementById('workstreams')",
    )
    .await;
    assert_eq!(text_of(&client, "#viewer").await, "@bob");
    assert!(
        !client.source().await.expect("source").contains(&key),
        "bob sees no trace of the thread"
    );
    client
        .goto(&format!("{base}/w/{}", key.replace(':', "%3A")))
        .await
        .expect("asks");
    assert!(
        text_of(&client, "main")
            .await
            .contains("No such workstream")
    );

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot folder");
    std::fs::write(dir.join("status-page.png"), shot).expect("the screenshot");
    client.close().await.expect("the browser closes");
    node.shutdown();
    node.join(Duration::from_secs(10)).await;
}
