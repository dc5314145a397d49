//! `sandpiper doctor` against the fakes: a deployment where everything works passes every
//! check; one where each party is broken in its own way fails each check with what to do.

use std::collections::BTreeMap;

use sandpiper::doctor::{self, Check, Verdict};
use sandpiper_agent::Config;
use sandpiper_agent::config::Secret;
use sandpiper_agent::mcp::McpServerConfig;
use sandpiper_channels::config::{ChannelsConfig, SlackMode};
use sandpiper_tests::db::TestDb;
use sandpiper_tests::fake_discord::{Failure, FakeDiscord};
use sandpiper_tests::fake_llm::FakeLlm;
use sandpiper_tests::fake_slack::FakeSlack;

const MCP_SERVER: &str = env!("CARGO_BIN_EXE_mcp_test_server");

struct World {
    llm: FakeLlm,
    discord: FakeDiscord,
    slack: FakeSlack,
    db: TestDb,
    _work: tempfile::TempDir,
}

/// A deployment that has run before: its database exists (doctor never creates one).
async fn world() -> World {
    let db = TestDb::sqlite();
    sandpiper_agent::store::Store::connect(&db.url, 1)
        .await
        .expect("the test database is created")
        .close()
        .await;
    World {
        llm: FakeLlm::start(vec![]).await,
        discord: FakeDiscord::start().await,
        slack: FakeSlack::start().await,
        db,
        _work: tempfile::tempdir().expect("a work dir"),
    }
}

fn configs(w: &World, mcp: McpServerConfig) -> (Config, ChannelsConfig) {
    let mut config =
        sandpiper_tests::harness::config(&w.db, &w.llm.openai_base_url(), w._work.path()).core;
    config.model.api_key = Some(Secret::new("sk-doctor"));
    config.server.listen = "127.0.0.1:0".parse().expect("an address");
    config.mcp.servers = BTreeMap::from([("test".to_owned(), mcp)]);
    config.mcp.connect_timeout = std::time::Duration::from_secs(10);
    let mut channels = ChannelsConfig::default();
    channels.discord.token = Some(Secret::new("discord-doctor-token"));
    channels.discord.api_base_url = w.discord.base_url();
    channels.slack.bot_token = Some(Secret::new("xoxb-doctor"));
    channels.slack.app_token = Some(Secret::new("xapp-doctor"));
    channels.slack.mode = SlackMode::Socket;
    channels.slack.api_base_url = format!("{}/api", w.slack.base_url());
    (config, channels)
}

fn stdio(command: &str, args: &[&str]) -> McpServerConfig {
    McpServerConfig::Stdio {
        command: command.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: BTreeMap::new(),
        auto_approve: vec![],
    }
}

async fn run(config: &Config, channels: &ChannelsConfig) -> Vec<Check> {
    let mut seen = Vec::new();
    let checks = doctor::checks(config, channels, &[], &mut |c| seen.push(c.line())).await;
    assert_eq!(
        seen,
        checks.iter().map(Check::line).collect::<Vec<_>>(),
        "each line is handed on as it is known"
    );
    checks
}

fn verdict<'a>(checks: &'a [Check], name: &str) -> &'a Verdict {
    &checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} check in {checks:#?}"))
        .verdict
}

fn ok_text<'a>(checks: &'a [Check], name: &str) -> &'a str {
    match verdict(checks, name) {
        Verdict::Ok(text) => text,
        other => panic!("{name}: {other:?}\n{checks:#?}"),
    }
}

fn fail_text<'a>(checks: &'a [Check], name: &str) -> &'a str {
    match verdict(checks, name) {
        Verdict::Fail(text) => text,
        other => panic!("{name} should fail: {other:?}\n{checks:#?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_deployment_passes_every_check() {
    let w = world().await;
    let (config, channels) = configs(&w, stdio(MCP_SERVER, &["--stdio"]));
    let checks = run(&config, &channels).await;
    assert!(ok_text(&checks, "database").ends_with(": opened, migrations current"));
    assert_eq!(
        ok_text(&checks, "model"),
        format!("fake-model at {}/models: answers", w.llm.openai_base_url())
    );
    let discord = ok_text(&checks, "discord");
    assert!(discord.starts_with("bot "), "{discord}");
    assert!(discord.contains("Message Content intent on"), "{discord}");
    assert!(
        discord.contains(&format!(
            "invite: https://discord.com/oauth2/authorize?client_id={}&scope=bot+applications.commands&permissions=326417632256",
            sandpiper_tests::fake_discord::APP_ID
        )),
        "{discord}"
    );
    assert_eq!(
        ok_text(&checks, "slack"),
        "bot sandpiper in Fake Team, scopes match the manifest, Socket Mode on"
    );
    let mcp = ok_text(&checks, "mcp test");
    assert!(
        mcp.starts_with("started, ") && mcp.ends_with(" tools"),
        "{mcp}"
    );
    assert!(ok_text(&checks, "http listen").ends_with(" is free"));
    // The sandbox is whatever this machine allows: a verdict either way, never a skip.
    assert!(!matches!(
        verdict(&checks, "tool sandbox"),
        Verdict::Skip(_)
    ));
    let requests = w.discord.requests();
    assert!(requests.iter().any(|r| r.path == "/api/v10/users/@me"));
    assert!(
        requests
            .iter()
            .any(|r| r.path == "/api/v10/oauth2/applications/@me")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_broken_party_fails_its_check_with_what_to_do() {
    let w = world().await;
    let (mut config, mut channels) = configs(
        &w,
        stdio("sh", &["-c", "echo 'fatal: no token' >&2; exit 1"]),
    );
    // The model endpoint is a closed port: bound but not listening, so it refuses and no
    // other test's server can take it meanwhile (a freed port was reused by one under load).
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = closed.local_addr().unwrap().port();
    config.model.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
    // The listen address is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    config.server.listen = taken.local_addr().unwrap();
    // Discord: the Message Content intent is off.
    w.discord.set_application_flags(0);
    // Slack: installed without four of the manifest's scopes (two of them new since the app
    // was made, as for an app installed from an older manifest), and no app token.
    w.slack.grant_scopes(&[
        "app_mentions:read",
        "chat:write",
        "channels:history",
        "groups:history",
        "im:history",
        "im:write",
        "files:write",
        "reactions:write",
        "commands",
    ]);
    channels.slack.app_token = None;
    let checks = run(&config, &channels).await;
    assert!(
        fail_text(&checks, "model")
            .starts_with(&format!("http://127.0.0.1:{port}/v1/models is unreachable")),
        "{checks:#?}"
    );
    let discord = fail_text(&checks, "discord");
    assert!(
        discord.contains(
            "the Message Content intent is off: turn it on under Bot → Privileged Gateway Intents"
        ),
        "{discord}"
    );
    assert_eq!(
        fail_text(&checks, "slack"),
        "bot sandpiper in Fake Team: the token lacks the manifest's scopes channels:read, \
         groups:read, users:read, usergroups:read: add them under OAuth & Permissions and \
         reinstall the app"
    );
    let mcp = fail_text(&checks, "mcp test");
    assert!(mcp.contains("its stderr: fatal: no token"), "{mcp}");
    assert!(
        mcp.ends_with("— check its command and arguments, or run it by hand"),
        "{mcp}"
    );
    assert!(
        fail_text(&checks, "http listen").contains("stop what holds it or change [server] listen"),
        "{checks:#?}"
    );
    assert!(matches!(verdict(&checks, "database"), Verdict::Ok(_)));

    // A token Discord refuses, a Slack token that is revoked, no model key.
    w.discord
        .fail_next("GET", "/users/@me", Failure::Status(401), 1);
    w.slack
        .refuse_calls_containing("auth.test", "", "invalid_auth");
    config.model.base_url = None;
    config.model.api_key = None;
    channels.slack.app_token = Some(Secret::new("xapp-doctor"));
    let checks = run(&config, &channels).await;
    assert_eq!(
        fail_text(&checks, "discord"),
        "the token in DISCORD_TOKEN is not valid (401): reset it under Bot in the developer portal"
    );
    assert_eq!(
        fail_text(&checks, "slack"),
        "auth.test: invalid_auth — check SLACK_BOT_TOKEN (the Bot User OAuth Token, xoxb-…)"
    );
    assert_eq!(
        fail_text(&checks, "model"),
        "no API key: set OPENAI_API_KEY (or [model] api_key_env to the variable that holds it)"
    );
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfigured_platforms_and_servers_are_skipped_not_failed() {
    let w = world().await;
    let (mut config, _) = configs(&w, stdio(MCP_SERVER, &["--stdio"]));
    config.mcp.servers.clear();
    let checks = run(&config, &ChannelsConfig::default()).await;
    for (name, text) in [
        ("discord", "not configured (set DISCORD_TOKEN)"),
        ("slack", "not configured (set SLACK_BOT_TOKEN)"),
        (
            "mcp",
            "no servers configured ([mcp.servers.NAME] or --mcp-config)",
        ),
    ] {
        assert_eq!(
            verdict(&checks, name),
            &Verdict::Skip(text.into()),
            "{name}"
        );
    }
}
