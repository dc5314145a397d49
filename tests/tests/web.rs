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

use std::path::Path;
use std::time::Duration;

use fantoccini::{Client, Locator};
use sandpiper::node::Node;
use sandpiper_agent::config::Secret;
use sandpiper_channels::config::ChannelsConfig;
use sandpiper_tests::browser::{
    Browser, WAIT, binaries, console_link, sign_in_as, sign_in_with, text_of, until,
};
use sandpiper_tests::db::TestDb;
use sandpiper_tests::discord_harness::button;
use sandpiper_tests::fake_discord::{BOT_ID, CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{FakeLlm, Reply, text, tool_call};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What the approved command prints: markup that must stay text.
const HOSTILE: &str = "<script>window.pwned=1</script><b>bold</b>";

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

/// A node as `sandpiper serve` runs it, with the fake Discord and a model answering with
/// `respond`; `tweak` adjusts the configuration first.
struct Served {
    node: Node,
    fake: FakeDiscord,
    base: String,
    _db: TestDb,
    _llm: FakeLlm,
    _work: tempfile::TempDir,
}

async fn serve(
    respond: fn(&Value) -> Reply,
    tweak: impl FnOnce(&mut sandpiper_tests::harness::TestConfig),
) -> Served {
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
    tweak(&mut config);
    for role in &config.discord.approver_roles {
        fake.add_role(role.parse().expect("a role id"));
    }
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
    Served {
        node,
        fake,
        base,
        _db: db,
        _llm: llm,
        _work: work,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_a_real_browser() {
    let Some(binaries) = binaries("web") else {
        return;
    };
    let Served {
        node,
        fake,
        base,
        _db,
        _llm,
        _work,
    } = serve(respond, |_| {}).await;

    let client = Browser::open(&binaries).await;

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
    client.close().await;
    node.shutdown();
    node.join(Duration::from_secs(10)).await;
}

/// What the model says to anything but `run`: Markdown, with markup and a `javascript:` link
/// that must stay inert.
const MARKDOWN_ANSWER: &str = "Here is **the plan**:\n\n```sh\ncargo test <all>\n```\n\
- first `step one`\n- read [the guide](https://docs.example/guide)\n\
- never [this](javascript:window.pwned=1)\n\n<img src=x onerror=\"window.pwned=1\">";

/// The model of the page-reading test: `run` asks for a command (an approval), anything else
/// is answered with [`MARKDOWN_ANSWER`].
fn respond_markdown(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return text("done");
    }
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    match last.contains("run the check") {
        true => tool_call(
            "call-run",
            "bash",
            json!({ "command": "printf '%s' checked" }),
        ),
        false => text(MARKDOWN_ANSWER),
    }
}

/// Opens `/` with the query `query`; the keys of the workstreams listed.
async fn listed(client: &Client, base: &str, query: &str) -> Vec<String> {
    client
        .goto(&format!("{base}/?{query}"))
        .await
        .expect("the page");
    until(
        client,
        "the page",
        "return !!document.getElementById('workstreams')",
    )
    .await;
    let keys = client
        .execute(
            "return [...document.querySelectorAll('tr.workstream')].map(r => r.dataset.key);",
            vec![],
        )
        .await
        .expect("runs");
    serde_json::from_value(keys).expect("keys")
}

/// Posts a budget change from the page's own session (its form token): the status.
async fn post_budget(client: &Client, subject: &str, tokens: &str) -> u64 {
    let status = client
        .execute_async(
            "const [subject, tokens, done] = arguments;
             const csrf = document.querySelector('meta[name=csrf-token]').content;
             fetch('/budget', { method: 'POST', body: new URLSearchParams(
                 { csrf, scope: 'person', subject, daily_tokens: tokens }) })
               .then(r => done(r.status));",
            vec![json!(subject), json!(tokens)],
        )
        .await
        .expect("posts");
    status.as_u64().expect("a status")
}

/// The page as people read it (issues 42 and 44): alice owns a thread, bob wrote in it, carol
/// holds the approver role, dave is a stranger with a thread of his own, erin is an admin.
/// People are named by their public names, threads by their first message and channel (no
/// raw key on the page), the approval says who *may* decide it and is offered to alice and
/// carol (not to bob, not to dave), "1 node"; the conversation's Markdown is rendered and its
/// markup runs nothing; a search finds only what each may see; the usage panel shows each
/// their own, and only the admin may set a budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_names_renders_finds_and_counts_for_each_person() {
    const ONCALL: u64 = 700_000_000_000_000_078;
    let Some(binaries) = binaries("web") else {
        return;
    };
    let served = serve(respond_markdown, |config| {
        config.discord.approver_roles = vec![ONCALL.to_string()];
    })
    .await;
    let (fake, base) = (&served.fake, served.base.as_str());
    let alice = FakeUser::new(820_000_000_000_001_001, "alice").showing("Alice Liddell");
    let bob = FakeUser::new(820_000_000_000_001_002, "bob");
    let carol = FakeUser::new(820_000_000_000_001_003, "carol").with_roles(&[ONCALL]);
    let dave = FakeUser::new(820_000_000_000_001_004, "dave");
    let erin = FakeUser::new(820_000_000_000_001_005, "erin").as_admin();

    // alice's thread, where bob writes too; then a command waits for approval. dave's own.
    let thread_of = async |user: &FakeUser, content: &str| {
        let text = format!("{} {content}", fake.mention());
        let started = fake.user_message(CHANNEL_ID, user, &text).await;
        fake.wait_until(WAIT, "a thread", |f| {
            f.threads()
                .into_iter()
                .find(|t| t.starter_message_id == Some(started))
                .map(|t| t.id)
        })
        .await
    };
    let answers = async |thread: u64, n: usize| {
        fake.wait_until(WAIT, "the answers", |f| {
            (f.messages(thread)
                .iter()
                .filter(|m| m.author_id == BOT_ID && m.content.contains("the plan"))
                .count()
                >= n)
                .then_some(())
        })
        .await
    };
    let ours = thread_of(&alice, "deploy the marmalade service to staging").await;
    answers(ours, 1).await;
    fake.user_message(ours, &bob, "and the quince job too")
        .await;
    answers(ours, 2).await;
    fake.user_message(ours, &alice, "run the check").await;
    let theirs = thread_of(&dave, "my own marmalade plan").await;
    answers(theirs, 1).await;
    let (ours, theirs) = (format!("discord:{ours}"), format!("discord:{theirs}"));

    let client = Browser::open(&binaries).await;

    // alice, the owner: names, titles, the approval, "1 node".
    sign_in_as(&client, fake, base, &alice).await;
    assert_eq!(text_of(&client, "#viewer").await, "Alice Liddell (@alice)");
    let row = format!("tr.workstream[data-key='{ours}']");
    until(
        &client,
        "the approval",
        &format!(
            "return !!document.querySelector(\"#approvals .approval[data-workstream='{ours}']\")"
        ),
    )
    .await;
    assert_eq!(
        text_of(&client, &format!("{row} a.title")).await,
        "deploy the marmalade service to staging"
    );
    assert_eq!(
        text_of(&client, &format!("{row} td.channel")).await,
        "#general on Discord"
    );
    assert!(
        text_of(&client, &row)
            .await
            .contains("Alice Liddell (@alice)")
    );
    let approval = text_of(&client, "#approvals .approval .meta").await;
    assert!(
        approval.contains("may be decided by Alice Liddell (@alice)")
            && approval.contains("in deploy the marmalade service to staging"),
        "{approval}"
    );
    let bar = text_of(&client, "#cluster-bar").await;
    assert!(
        bar.starts_with("1 node") && !bar.starts_with("1 nodes"),
        "{bar}"
    );
    let shown = text_of(&client, &row).await;
    assert!(
        !shown.contains("discord:"),
        "no raw key in the workstream's row: {shown}"
    );

    // The conversation: Markdown rendered, who said what, and nothing of the markup ran.
    client
        .goto(&format!("{base}/w/{}", ours.replace(':', "%3A")))
        .await
        .expect("the conversation");
    until(
        &client,
        "the conversation",
        "return !!document.querySelector('#conversation .md strong')",
    )
    .await;
    assert_eq!(
        text_of(&client, "#title").await,
        "deploy the marmalade service to staging"
    );
    let checks = client
        .execute(
            "const c = document.getElementById('conversation');
             const authors = [...c.querySelectorAll('.msg.user .author')].map(a => a.textContent);
             const links = [...c.querySelectorAll('a')];
             return {
               authors,
               strong: c.querySelector('.md strong').textContent,
               code: c.querySelector('.md pre.md-code code').textContent,
               inline: c.querySelector('.md li code').textContent,
               links: links.map(a => [a.getAttribute('href'), a.getAttribute('rel'), a.textContent]),
               images: c.querySelectorAll('img').length,
               pwned: window.pwned === undefined ? null : window.pwned,
               text: c.innerText,
             };",
            vec![],
        )
        .await
        .expect("runs");
    assert_eq!(
        checks["authors"],
        json!(["Alice Liddell (@alice)", "@bob", "Alice Liddell (@alice)"]),
        "{checks}"
    );
    assert_eq!(checks["strong"], "the plan");
    assert_eq!(checks["code"], "cargo test <all>");
    assert_eq!(checks["inline"], "step one");
    let links = checks["links"].as_array().expect("links");
    assert!(
        links
            .iter()
            .all(|l| l[0] == "https://docs.example/guide" && l[1] == "noopener noreferrer"),
        "only the http link is a link: {checks}"
    );
    assert!(!links.is_empty());
    assert_eq!(
        (checks["images"].clone(), checks["pwned"].clone()),
        (json!(0), Value::Null)
    );
    assert!(
        checks["text"]
            .as_str()
            .unwrap_or_default()
            .contains("<img src=x"),
        "{checks}"
    );

    // Search and filters, as alice: her thread by bob's words, not dave's by the same word.
    assert_eq!(listed(&client, base, "q=quince").await, vec![ours.clone()]);
    assert_eq!(
        listed(&client, base, "q=marmalade").await,
        vec![ours.clone()]
    );
    assert_eq!(
        listed(&client, base, "q=marmalade&state=waiting").await,
        vec![ours.clone()]
    );
    assert_eq!(
        listed(&client, base, "q=marmalade&state=closed").await,
        Vec::<String>::new()
    );
    assert!(text_of(&client, "#no-match").await.contains("matches"));
    let people = text_of(&client, "#search-person").await;
    assert!(
        people.contains("@bob") && !people.contains("dave"),
        "{people}"
    );
    // The same search typed into the form.
    client.goto(&format!("{base}/")).await.expect("the page");
    client
        .find(Locator::Id("search-q"))
        .await
        .expect("the box")
        .send_keys("quince")
        .await
        .expect("types");
    client
        .find(Locator::Id("search-go"))
        .await
        .expect("the button")
        .click()
        .await
        .expect("searches");
    until(
        &client,
        "the search",
        "return location.search.includes('q=quince')",
    )
    .await;
    until(
        &client,
        "the live stream with the search",
        "return document.getElementById('conn').textContent === 'live'",
    )
    .await;
    let typed = client
        .execute("return document.getElementById('search-q').value;", vec![])
        .await
        .expect("runs");
    assert_eq!(typed, json!("quince"), "the box keeps the search");
    let rows = client
        .execute(
            "return [...document.querySelectorAll('tr.workstream')].map(r => r.dataset.key);",
            vec![],
        )
        .await
        .expect("runs");
    assert_eq!(rows, json!([ours]), "the live part keeps the search");

    // The usage panel: hers, no budget form, and she may not set one.
    assert_eq!(
        text_of(&client, "#usage-whose").await,
        "you and your workstreams"
    );
    assert!(!text_of(&client, "#usage-today").await.starts_with("0 "));
    assert!(client.find(Locator::Id("budget-form")).await.is_err());
    assert_eq!(post_budget(&client, "bob", "5").await, 403);

    // bob, who wrote in alice's thread, finds it, and is offered no approval to decide;
    // carol (an approver, not in it) is offered its approval and finds nothing of it else;
    // dave (a stranger) finds nothing of it, whatever he searches.
    let offered = format!(
        "return !!document.querySelector(\"#approvals .approval[data-workstream='{ours}'] form.decide\")"
    );
    sign_in_as(&client, fake, base, &bob).await;
    assert_eq!(
        listed(&client, base, "q=marmalade").await,
        vec![ours.clone()]
    );
    let to_bob = client.execute(&offered, vec![]).await.expect("runs");
    assert_eq!(to_bob, json!(false), "bob may not decide");
    assert_eq!(post_budget(&client, "bob", "5").await, 403);
    sign_in_as(&client, fake, base, &carol).await;
    until(&client, "the approval, offered to the approver", &offered).await;
    let approval = text_of(&client, "#approvals .approval .meta").await;
    assert!(
        approval.contains(&format!(
            "may be decided by Alice Liddell (@alice) or roles role-{ONCALL}"
        )),
        "{approval}"
    );
    assert_eq!(
        listed(&client, base, "q=marmalade").await,
        Vec::<String>::new()
    );
    assert_eq!(listed(&client, base, "").await, Vec::<String>::new());
    sign_in_as(&client, fake, base, &dave).await;
    assert_eq!(
        listed(&client, base, "q=marmalade").await,
        vec![theirs.clone()]
    );
    assert_eq!(
        listed(&client, base, "q=quince").await,
        Vec::<String>::new()
    );
    assert!(!client.source().await.expect("source").contains(&ours));
    assert_eq!(
        text_of(&client, "#usage-whose").await,
        "you and your workstreams"
    );

    // erin, an admin: everything, everyone's usage, and she sets bob's budget from the page.
    sign_in_as(&client, fake, base, &erin).await;
    let all = listed(&client, base, "q=marmalade").await;
    assert!(all.contains(&ours) && all.contains(&theirs), "{all:?}");
    assert_eq!(text_of(&client, "#usage-whose").await, "everyone");
    assert!(client.find(Locator::Id("budget-form")).await.is_ok());
    // The form names a person by their sandpiper username (not yet by a platform handle).
    let (_, bob_user) = served
        .node
        .agent
        .store()
        .users_with_handle("bob")
        .await
        .expect("reads")
        .pop()
        .expect("bob");
    assert_eq!(post_budget(&client, &bob_user.username, "5000").await, 200);
    let bob_id = bob_user.id;
    let change = served
        .node
        .agent
        .store()
        .budget_of(sandpiper_agent::store::usage::BudgetScope::Person, &bob_id)
        .await
        .expect("reads");
    assert_eq!(
        change.iter().map(|c| c.daily_cap).collect::<Vec<_>>(),
        [Some(5000)]
    );
    // bob's panel shows it.
    sign_in_as(&client, fake, base, &bob).await;
    assert!(text_of(&client, "#my-budget").await.contains("5000 tokens"));

    client.close().await;
    served.node.shutdown();
    served.node.join(Duration::from_secs(10)).await;
}
