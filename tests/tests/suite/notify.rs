//! notify end to end (issue 12), on two gateway nodes sharing one database: each node is
//! [`Node::start`] — what `sandpiper serve` runs — in this process (two in-process nodes, not
//! two processes: the tests crate cannot start the binary, and this is the same code path).
//!
//! Node A is connected to Slack only and runs the workstream (a Slack thread); node B is
//! connected to Discord and Slack. A's model calls `notify(username=alice)`; the registry
//! offers B first (it serves both of alice's platforms), B opens the DMs on the fake Discord
//! and the fake Slack, and alice's replies come back into A's workstream. Then B's HTTP
//! server dies while its registry row is still fresh, and delivery fails over to A.

use std::time::Duration;

use sandpiper::node::Node;
use sandpiper::service_jwt::{CHANNEL_AUDIENCE, Claims, ISSUER, ServiceKey};
use sandpiper_agent::Agent;
use sandpiper_agent::config::{Config, Secret};
use sandpiper_agent::store::services::ServiceRole;
use sandpiper_channels::config::{ChannelsConfig, DiscordConfig, SlackConfig, SlackMode};
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{BOT_USER_ID, CHANNEL_ID, FakeSlack, TEAM_ID};
use sandpiper_tests::slack_harness;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{WAIT, contents_with_role, setup};

const SECRET: &str = "notify-test-secret-0123456789abcdef";
const ALICE_DISCORD: u64 = 900_000_000_000_000_011;

/// One node: its agent built as the binary builds it (the service secret in its
/// environment), then [`Node::start`].
async fn node(
    core: &Config,
    discord: DiscordConfig,
    slack: SlackConfig,
) -> (Node, CancellationToken) {
    let key = ServiceKey::new(SECRET).expect("a strong secret");
    node_with(core, discord, slack, Some(key)).await
}

/// [`node`] with the service key given (`None`: a node without a secret).
async fn node_with(
    core: &Config,
    discord: DiscordConfig,
    slack: SlackConfig,
    key: Option<ServiceKey>,
) -> (Node, CancellationToken) {
    let mut core = core.clone();
    core.server.listen = "127.0.0.1:0".parse().expect("an address");
    let env = [("SANDPIPER_JWT_SECRET", SECRET), ("PATH", "/usr/bin:/bin")];
    let host = sandpiper_agent::turn::agent::Host {
        protected_files: Vec::new(),
        env: &env,
    };
    let agent = sandpiper::wiring::build_agent_in(core, host)
        .await
        .expect("the agent builds");
    let shutdown = CancellationToken::new();
    let node = Node::start(
        agent,
        ChannelsConfig { discord, slack },
        key,
        shutdown.clone(),
    )
    .await
    .expect("the node starts");
    (node, shutdown)
}

fn discord_config(fake: &FakeDiscord) -> DiscordConfig {
    DiscordConfig {
        token: Some(Secret::new("fake-bot-token")),
        api_base_url: fake.base_url(),
        stream_interval: Duration::from_millis(100),
        requests_per_second: 500,
        ..DiscordConfig::default()
    }
}

fn slack_config(fake: &FakeSlack) -> SlackConfig {
    let mut config = sandpiper_tests::harness::TestConfig::default();
    slack_harness::configure(&mut config, fake, SlackMode::Socket);
    config.slack
}

/// Alice on Slack (from her first mention) linked with her Discord account, then renamed
/// `alice` (a first contact is `slack-u0alice`, never the display name).
async fn link_discord(agent: &Agent) {
    let store = agent.store();
    let alice = store
        .user_for_identity("slack", "U0ALICE", "alice")
        .await
        .expect("alice on slack");
    let code = store.create_link_code(&alice.id).await.expect("a code");
    store
        .redeem_link_code("discord", &ALICE_DISCORD.to_string(), "alice", &code)
        .await
        .expect("linked");
    store
        .rename_user(&alice.id, "alice")
        .await
        .expect("renamed");
}

async fn get(url: String) -> (u16, String) {
    let response = reqwest::get(&url).await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// The last tool result the model was sent.
fn last_tool_result(request: &Value) -> String {
    contents_with_role(request, "tool")
        .pop()
        .unwrap_or_default()
}

both_backends! {
    async fn a_notification_reaches_alice_on_both_platforms_through_another_node_and_her_replies_continue_the_thread(db) {
        let s = setup(&db, vec![
            // 1. A's turn: notify alice, then say so.
            tool_call("n1", "notify", json!({"username": "alice", "title": "CI", "message": "Deploy finished @everyone <!channel> <@&1>"})),
            text("I told alice."),
            // 2. Her Slack DM reply, continued on A.
            text("Glad you saw it."),
            // 3. With B's HTTP server dead: notify alice again; B is tried first (it serves
            //    both her platforms) and fails, A (Slack only) delivers what it can.
            tool_call("n2", "notify", json!({"username": "alice", "message": "all clear"})),
            text("Posted."),
            // 4. Her Discord reply to the first notification, taken by B (the only Discord
            //    connection) into A's Slack thread.
            text("Thanks for confirming on Discord."),
        ]).await;
        let discord = FakeDiscord::start().await;
        let slack = FakeSlack::start().await;
        // A first: its Slack connection is the first, so the fake sends events there.
        let (a, a_stop) = node(&s.config.core, DiscordConfig::default(), slack_config(&slack)).await;
        slack.wait_connected(WAIT).await;
        let (b, b_stop) = node(&s.config.core, discord_config(&discord), slack_config(&slack)).await;
        discord.wait_ready(WAIT).await;
        discord.wait_until(WAIT, "slash commands registered", |f| (!f.registered_commands().is_empty()).then_some(())).await;
        // Both register in the background at start.
        let mut services = Vec::new();
        for _ in 0..200 {
            services = a.agent.store().all_services().await.unwrap();
            if services.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(services.len(), 2, "both nodes registered: {services:?}");

        let alice_slack = slack.user("U0ALICE", "alice");
        let alice_discord = FakeUser::new(ALICE_DISCORD, "alice");
        link_discord(&a.agent).await;
        let root = slack.app_mention(CHANNEL_ID, &alice_slack, "tell me on every platform when CI is done").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let in_thread = |what: &'static str, needle: &'static str| {
            let slack = slack.clone();
            let root = root.clone();
            async move {
                slack.wait_until(WAIT, what, |f| {
                    f.messages(CHANNEL_ID).into_iter().find(|m| {
                        m.user == BOT_USER_ID && m.thread_ts.as_deref() == Some(root.as_str()) && m.text.contains(needle)
                    })
                }).await
            }
        };
        in_thread("A's answer", "I told alice.").await;

        // The DMs arrived, with nothing that could ping.
        let dm = discord.dm_channel(&alice_discord);
        let discord_dm = discord.wait_until(WAIT, "the Discord DM", |f| f.messages(dm).into_iter().next()).await;
        // Who asked and from which thread comes first, then the message.
        assert_eq!(discord_dm.content, format!("**CI**\n[sandpiper, asked by @alice in thread {key}]\nDeploy finished @\u{200b}everyone <!channel> <@\u{200b}&1>"));
        let posted = discord.requests().into_iter().find(|r| r.method == "POST" && r.path.ends_with(&format!("/channels/{dm}/messages"))).expect("posted");
        assert_eq!(posted.body["allowed_mentions"]["parse"], json!([]), "{}", posted.body);
        assert!(discord.requests().iter().any(|r| r.method == "POST" && r.path.ends_with("/users/@me/channels")));
        let slack_dm = slack.dm_channel("U0ALICE");
        let slack_notice = slack.wait_until(WAIT, "the Slack DM", |f| f.messages(&slack_dm).into_iter().find(|m| m.user == BOT_USER_ID)).await;
        assert_eq!(slack_notice.text, format!("*CI*\n[sandpiper, asked by @alice in thread {key}]\nDeploy finished @everyone &lt;!channel&gt; &lt;@&amp;1&gt;"));
        // B delivered both (its registry row serves both platforms), and the model was told.
        let requests = s.llm.requests();
        assert_eq!(
            last_tool_result(&requests[1]),
            "notification to @alice:\n- discord:@alice: sent\n- slack:@alice: sent"
        );
        // B's /ready sees both platforms connected.
        let (status, ready) = get(format!("http://{}/ready", b.addr)).await;
        let ready: Value = serde_json::from_str(&ready).unwrap();
        assert_eq!(status, 200, "{ready}");
        assert_eq!(
            ready["platforms"],
            json!({"discord": {"connected": true, "state": "connected"}, "slack": {"connected": true, "state": "socket mode"}})
        );
        assert_eq!(ready["workstreams"]["stored"], json!(1));
        let metrics = |node: &Node| format!("http://{}/metrics", node.addr);
        let (_, b_metrics) = get(metrics(&b)).await;
        assert!(b_metrics.contains("sandpiper_notify_deliveries_total{status=\"sent\"} 2"), "{b_metrics}");
        let (_, a_metrics) = get(metrics(&a)).await;
        assert!(a_metrics.contains("sandpiper_notify_deliveries_total{status=\"sent\"} 0"), "{a_metrics}");
        assert!(a_metrics.contains("sandpiper_tool_calls_total{tool=\"notify\",outcome=\"ok\"} 1"), "{a_metrics}");

        // Her Slack reply in the notification's thread continues A's workstream (DMs are off).
        slack.dm_message(&alice_slack, "thanks, looking", Some(&slack_notice.ts)).await;
        in_thread("the reply shown in the thread", "alice replied to a notification").await;
        in_thread("the answer to the reply", "Glad you saw it.").await;
        let requests = s.llm.requests();
        assert_eq!(
            contents_with_role(&requests[2], "user").last().map(String::as_str),
            Some("[alice replied to your notification, in a slack DM]\nthanks, looking")
        );

        // B's gateway dies; its row is still fresh, so A tries it, then fails over to itself.
        b.stop_http();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(reqwest::get(format!("http://{}/health", b.addr)).await.is_err(), "B no longer serves");
        slack.thread_message(CHANNEL_ID, &root, &alice_slack, "tell me again").await;
        in_thread("the failover answer", "Posted.").await;
        let requests = s.llm.requests();
        assert_eq!(
            last_tool_result(&requests[4]),
            "notification to @alice:\n- discord:@alice: failed: discord is not connected on this gateway\n- slack:@alice: sent"
        );
        assert!(slack.messages(&slack_dm).iter().any(|m| m.user == BOT_USER_ID && m.text.ends_with("]\nall clear")));
        // A delivered it (B's count did not move): the failover happened.
        let (_, a_metrics) = get(metrics(&a)).await;
        assert!(a_metrics.contains("sandpiper_notify_deliveries_total{status=\"sent\"} 1"), "{a_metrics}");
        assert!(a_metrics.contains("sandpiper_notify_deliveries_total{status=\"failed\"} 1"), "{a_metrics}");

        // Her Discord reply to the first notification: B has the only Discord connection and
        // continues A's workstream in its Slack thread, from the stored map.
        discord.user_reply(dm, &alice_discord, "on it", discord_dm.id).await;
        in_thread("the Discord reply's answer", "Thanks for confirming on Discord.").await;
        let requests = s.llm.requests();
        assert_eq!(
            contents_with_role(&requests[5], "user").last().map(String::as_str),
            Some("[alice replied to your notification, in a discord DM]\non it")
        );
        let history = b.agent.history(&key).await.unwrap();
        assert!(history.iter().any(|m| m.content.ends_with("on it")), "the reply is in the workstream");
        s.llm.verify();

        // Everything else in a DM follows the DM rules (off here): a plain DM on either
        // platform, a reply to a message that is no notification, and a stranger quoting
        // alice's notification from his own DM.
        let ignored_before = discord.requests().len();
        let mine = discord.dm(&alice_discord, "anyone there?").await.1;
        discord.user_reply(dm, &alice_discord, "re", mine).await;
        let bob = FakeUser::new(900_000_000_000_000_012, "bob");
        let bob_dm = discord.dm_channel(&bob);
        discord.user_reply(bob_dm, &bob, "let me in", discord_dm.id).await;
        slack.dm_message(&alice_slack, "plain", None).await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(s.llm.requests().len(), 6, "no turn for any of them");
        let answered: Vec<_> = discord.requests().into_iter().skip(ignored_before).filter(|r| r.method == "POST").collect();
        assert!(answered.is_empty(), "no answer in a DM: {answered:?}");

        a_stop.cancel();
        b_stop.cancel();
        let id_a = a.service_id.clone().unwrap();
        a.join(WAIT).await.served.unwrap();
        b.join(WAIT).await.served.unwrap();
        // A clean shutdown leaves the registry.
        let store = sandpiper_agent::store::Store::connect(&db.url, 1).await.unwrap();
        assert!(store.all_services().await.unwrap().iter().all(|n| n.id != id_a));
    }

    async fn the_notify_endpoint_takes_only_channel_tokens_and_well_formed_bodies(db) {
        let s = setup(&db, vec![]).await;
        let slack = FakeSlack::start().await;
        let mut slack_cfg = slack_config(&slack);
        slack_cfg.channels = vec![CHANNEL_ID.to_owned()];
        let (n, stop) = node(&s.config.core, DiscordConfig::default(), slack_cfg).await;
        slack.wait_connected(WAIT).await;
        let store = n.agent.store();
        let alice = store.user_for_identity("slack", "U0ALICE", "alice").await.unwrap();
        store.rename_user(&alice.id, "alice").await.unwrap();
        let bob = store.user_for_identity("console", "bob", "bob").await.unwrap();
        store.rename_user(&bob.id, "bob").await.unwrap();
        let url = format!("http://{}/v1/api/notify", n.addr);
        let client = reqwest::Client::new();
        let key = ServiceKey::new(SECRET).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let claims = |f: &dyn Fn(&mut Claims)| {
            let mut c = Claims { iss: ISSUER.into(), aud: CHANNEL_AUDIENCE.into(), sub: "test".into(), iat: now, exp: now + 60, jti: None };
            f(&mut c);
            c
        };
        let good = key.sign(CHANNEL_AUDIENCE, "test", Duration::from_secs(60)).unwrap();
        let body = json!({"username": "alice", "message": "hi"});
        let post = |token: Option<String>, body: String| {
            let mut req = client.post(&url).header("content-type", "application/json").body(body);
            if let Some(t) = token {
                req = req.header("authorization", format!("Bearer {t}"));
            }
            async move {
                let r = req.send().await.expect("POST");
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        use base64::Engine as _;
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let payload = b64(&serde_json::to_value(claims(&|_| {})).unwrap());
        let hs_signed = |header: Value| {
            use hmac::{KeyInit as _, Mac as _};
            let signing = format!("{}.{payload}", b64(&header));
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
            mac.update(signing.as_bytes());
            let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
            format!("{signing}.{sig}")
        };
        let other = ServiceKey::new("another-secret-that-is-long-enough!!").unwrap();
        let refused = [
            ("no token", None),
            ("wrong audience", Some(key.sign("sandpiper-admin", "test", Duration::from_secs(60)).unwrap())),
            ("wrong issuer", Some(key.sign_claims(&claims(&|c| c.iss = "someone".into())).unwrap())),
            ("expired", Some(key.sign_claims(&claims(&|c| { c.iat = now - 400; c.exp = now - 100; })).unwrap())),
            ("more than 5 minutes", Some(key.sign_claims(&claims(&|c| c.exp = now + 3600)).unwrap())),
            ("bad signature", Some(other.sign_claims(&claims(&|_| {})).unwrap())),
            ("alg none", Some(format!("{}.{payload}.", b64(&json!({"alg": "none", "typ": "JWT"}))))),
            // The secret used as if it were an RS256 public key: the HS/RS confusion attack.
            ("HS/RS confusion", Some(hs_signed(json!({"alg": "RS256", "typ": "JWT"})))),
            ("HS512", Some(hs_signed(json!({"alg": "HS512", "typ": "JWT"})))),
        ];
        for (what, token) in refused {
            let (status, answer) = post(token, body.to_string()).await;
            assert_eq!(status, 401, "{what}: {answer}");
            assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()), "{what}: a JSON error: {answer}");
        }
        // The same HMAC construction with HS256 passes: the refusals above are about the claims
        // and the algorithm, not the test's signing.
        let (status, _) = post(Some(hs_signed(json!({"alg": "HS256", "typ": "JWT"}))), json!({"channel_type": "slack", "channel_id": CHANNEL_ID, "message": "x"}).to_string()).await;
        assert_eq!(status, 200);

        for (what, bad) in [
            ("not JSON", "{".to_owned()),
            ("no message", json!({"username": "alice"}).to_string()),
            ("both targets", json!({"username": "alice", "channel_type": "slack", "channel_id": "C1", "message": "x"}).to_string()),
            ("neither target", json!({"message": "x"}).to_string()),
            ("too long", json!({"username": "alice", "message": "x".repeat(2001)}).to_string()),
            ("unknown field", json!({"username": "alice", "message": "x", "ping": "@everyone"}).to_string()),
        ] {
            let (status, answer) = post(Some(good.clone()), bad).await;
            assert_eq!(status, 400, "{what}: {answer}");
        }
        let (status, answer) = post(Some(good.clone()), json!({"username": "nobody", "message": "x"}).to_string()).await;
        assert_eq!((status, answer["error"].as_str()), (404, Some("there is no user `nobody`")));
        let (status, answer) = post(Some(good.clone()), json!({"username": "bob", "message": "x"}).to_string()).await;
        assert_eq!((status, answer["error"].as_str()), (404, Some("`bob` has no linked Discord or Slack identity")));
        // A channel the bot does not work in, and a platform this node is not connected to.
        let (status, answer) = post(Some(good.clone()), json!({"channel_type": "slack", "channel_id": "C0OTHER", "message": "x"}).to_string()).await;
        assert_eq!(status, 200);
        assert_eq!(answer, json!({"results": [{"target": "slack:C0OTHER", "status": "failed: I don't work in that channel, so I don't post there"}]}));
        let (status, answer) = post(Some(good.clone()), json!({"channel_type": "discord", "channel_id": "5", "message": "x"}).to_string()).await;
        assert_eq!((status, answer["results"][0]["status"].as_str()), (200, Some("failed: discord is not connected on this gateway")));
        let (status, answer) = post(Some(good), body.to_string()).await;
        assert_eq!((status, answer), (200, json!({"results": [{"target": "slack:@alice", "status": "sent"}]})));
        let dm = slack.dm_channel("U0ALICE");
        assert!(slack.messages(&dm).iter().any(|m| m.text == "[sandpiper]\nhi"), "{:?}", slack.messages(&dm));

        // /ready: the database and Slack; 503 once the database is gone. /health stays up.
        let (status, ready) = get(format!("http://{}/ready", n.addr)).await;
        let ready: Value = serde_json::from_str(&ready).unwrap();
        assert_eq!(status, 200, "{ready}");
        assert_eq!(ready["status"], "ready");
        assert_eq!(ready["database"], json!({"ok": true}));
        assert_eq!(ready["platforms"], json!({"slack": {"connected": true, "state": "socket mode"}}));
        assert_eq!(ready["workstreams"]["stored"], json!(0));
        assert!(ready["version"].as_str().is_some_and(|v| !v.is_empty()));
        n.agent.store().close().await;
        let (status, ready) = get(format!("http://{}/ready", n.addr)).await;
        assert_eq!(status, 503, "{ready}");
        let ready: Value = serde_json::from_str(&ready).unwrap();
        assert_eq!((ready["status"].as_str(), ready["database"]["ok"].as_bool()), (Some("not ready"), Some(false)));
        let (status, _) = get(format!("http://{}/health", n.addr)).await;
        assert_eq!(status, 200);
        stop.cancel();
        n.join(WAIT).await.served.unwrap();

        // A node without a secret serves no notify route and does not register as a gateway.
        let (plain, stop) = node_with(&s.config.core, DiscordConfig::default(), SlackConfig::default(), None).await;
        assert_eq!(plain.service_id, None);
        let r = client.post(format!("http://{}/v1/api/notify", plain.addr)).body("{}").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 404);
        let store = sandpiper_agent::store::Store::connect(&db.url, 1).await.unwrap();
        // Only the first node's row among the gateways: it could not leave, its database was
        // closed under it. The node without a secret registers as a plain node.
        let mut rows = Vec::new();
        for _ in 0..200 {
            rows = store.all_services().await.unwrap();
            if rows.iter().any(|r| r.role == ServiceRole::Node) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let gateways = rows.iter().filter(|r| r.role == ServiceRole::Gateway).count();
        assert_eq!(gateways, 1, "{rows:?}");
        assert!(rows.iter().any(|r| r.role == ServiceRole::Node), "{rows:?}");
        stop.cancel();
        plain.join(WAIT).await.served.unwrap();
    }

    async fn a_squatted_display_name_an_impostors_reply_another_thread_and_a_flood_are_all_refused(db) {
        let alice_discord = FakeUser::new(ALICE_DISCORD, "alice");
        let impostor = FakeUser::new(900_000_000_000_000_666, "alice");
        let alice_handle = format!("discord-{ALICE_DISCORD}");
        let other_thread: u64 = 900_000_000_000_000_777;
        let s = setup(&db, vec![
            // 1. "notify alice": nobody is `alice`; two accounts show the name.
            tool_call("n1", "notify", json!({"username": "alice", "message": "prod is down"})),
            text("Which alice?"),
            // 2. By her handle; then into another workstream's Discord thread.
            tool_call("n2", "notify", json!({"username": "alice-w", "message": "prod is down"})),
            tool_call("n3", "notify", json!({"channel_type": "discord", "channel_id": other_thread.to_string(), "message": "psst"})),
            text("Told her."),
            // 3. After a flood: refused per recipient.
            tool_call("n4", "notify", json!({"username": "alice-w", "message": "again"})),
            text("Limited."),
            // 4. Alice's own reply.
            text("Thanks, alice."),
        ]).await;
        let discord = FakeDiscord::start().await;
        let slack = FakeSlack::start().await;
        let (n, stop) = node(&s.config.core, discord_config(&discord), slack_config(&slack)).await;
        slack.wait_connected(WAIT).await;
        discord.wait_ready(WAIT).await;
        let store = n.agent.store();
        for _ in 0..200 {
            if !store.all_services().await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        // The impostor shows up first as "alice", then the real one: neither is `alice`.
        let fake = store.user_for_identity("discord", &impostor.id.to_string(), "alice").await.unwrap();
        let real = store.user_for_identity("discord", &ALICE_DISCORD.to_string(), "alice").await.unwrap();
        assert_eq!((fake.username.as_str(), real.username.as_str()), ("discord-900000000000000666", alice_handle.as_str()));
        // Nor can the impostor rename into her handle before she arrives, or into a taken name.
        let err = store.rename_user(&fake.id, &format!("discord-{}", ALICE_DISCORD + 1)).await.unwrap_err();
        assert!(matches!(err, sandpiper_agent::store::users::IdentityError::ReservedUsername(_)), "{err:?}");
        store.ensure_workstream(&format!("discord:{other_thread}"), None).await.unwrap();

        let bob = slack.user("U0BOB", "bob");
        let root = slack.app_mention(CHANNEL_ID, &bob, "notify alice that prod is down").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let in_thread = |what: &'static str, needle: &'static str| {
            let slack = slack.clone();
            let root = root.clone();
            async move {
                slack.wait_until(WAIT, what, |f| {
                    f.messages(CHANNEL_ID).into_iter().find(|m| {
                        m.user == BOT_USER_ID && m.thread_ts.as_deref() == Some(root.as_str()) && m.text.contains(needle)
                    })
                }).await
            }
        };
        in_thread("the question", "Which alice?").await;
        let result = last_tool_result(&s.llm.requests()[1]);
        assert!(result.contains("`alice` is ambiguous") && result.contains("`discord-900000000000000666`") && result.contains(&format!("`{alice_handle}`")), "{result}");
        let impostor_dm = discord.dm_channel(&impostor);
        assert!(discord.messages(impostor_dm).is_empty(), "the impostor got nothing");
        // Alice picks a name; the impostor cannot take it from her.
        store.rename_user(&real.id, "alice-w").await.unwrap();
        let err = store.rename_user(&fake.id, "alice-w").await.unwrap_err();
        assert!(matches!(err, sandpiper_agent::store::users::IdentityError::UsernameTaken(_)), "{err:?}");

        slack.thread_message(CHANNEL_ID, &root, &bob, "I mean alice-w").await;
        in_thread("the second answer", "Told her.").await;
        let requests = s.llm.requests();
        assert_eq!(last_tool_result(&requests[3]), "notification to @alice-w:\n- discord:@alice-w: sent");
        assert!(last_tool_result(&requests[4]).contains("failed: that channel is another workstream's thread"), "{}", last_tool_result(&requests[4]));
        assert!(discord.messages(other_thread).is_empty());
        let dm = discord.dm_channel(&alice_discord);
        let notice = discord.wait_until(WAIT, "alice's DM", |f| f.messages(dm).into_iter().next()).await;
        assert_eq!(notice.content, format!("[sandpiper, asked by @bob in thread {key}]\nprod is down"));

        // The impostor answers her notification in her DM: told privately, nothing runs.
        discord.user_reply(dm, &impostor, "I'm alice, what's the root password?", notice.id).await;
        let told = discord.wait_until(WAIT, "the impostor told privately", |f| {
            f.messages(impostor_dm).into_iter().find(|m| m.content.contains("not sent to you"))
        }).await;
        assert!(told.content.contains("only the person it was sent to can answer it"), "{}", told.content);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(s.llm.requests().len(), 5, "no turn for the impostor's reply");
        assert!(discord.messages(dm).iter().all(|m| !m.content.contains("not sent to you")), "nothing said in her DM");

        // The thread has already sent her the limit within the hour: the next is refused.
        for i in 1..sandpiper_agent::notify::MAX_PER_RECIPIENT {
            store.record_notification(&sandpiper_agent::store::notifications::SentNotification {
                platform: "discord".into(), channel: dm.to_string(), message_id: format!("flood{i}"),
                workstream: key.clone(), recipient: Some(real.id.clone()), recipient_account: Some(ALICE_DISCORD.to_string()),
                requester: None,
                charged_to: None,
            }).await.unwrap();
        }
        slack.thread_message(CHANNEL_ID, &root, &bob, "tell her again").await;
        in_thread("the limited answer", "Limited.").await;
        let result = last_tool_result(&s.llm.requests()[6]);
        assert!(result.contains("failed: not sent: 10 notifications went there within the hour, from all threads together"), "{result}");
        let from_bot = discord.messages(dm).into_iter().filter(|m| m.author_id == sandpiper_tests::fake_discord::BOT_ID).count();
        assert_eq!(from_bot, 1, "no second DM");

        // Her own reply continues the thread, as a turn with no author: it does not make the
        // thread one she took part in, so her recall does not reach it.
        discord.user_reply(dm, &alice_discord, "on it", notice.id).await;
        in_thread("the answer to alice", "Thanks, alice.").await;
        let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
        let authors: Vec<(Option<String>,)> = sqlx::query_as("SELECT author FROM messages WHERE workstream = $1 AND content LIKE '%on it'")
            .bind(&key).fetch_all(&pool).await.unwrap();
        assert_eq!(authors, vec![(None,)]);
        let found = store.recall("prod", Some(&real.id), "discord:elsewhere", 10).await.unwrap();
        assert!(found.is_empty(), "{found:?}");
        pool.close().await;
        s.llm.verify();
        stop.cancel();
        n.join(WAIT).await.served.unwrap();
    }

    async fn people_are_named_by_their_discord_username_and_slack_handle_never_by_a_shown_name(db) {
        let s = setup(&db, vec![
            text("hi alice"), text("hi mallory"), text("hi dana"),
            text("hi carol"), text("hi eve"), text("hi dana on slack"),
            tool_call("n1", "notify", json!({"username": "alice", "message": "deploy done"})),
            tool_call("n2", "notify", json!({"username": "@Carol", "message": "deploy done"})),
            tool_call("n3", "notify", json!({"username": "dana", "message": "deploy done"})),
            tool_call("n4", "notify", json!({"username": "Alice W", "message": "deploy done"})),
            text("Sent to two of them."),
        ]).await;
        let discord = FakeDiscord::start().await;
        let slack = FakeSlack::start().await;
        let (n, stop) = node(&s.config.core, discord_config(&discord), slack_config(&slack)).await;
        slack.wait_connected(WAIT).await;
        discord.wait_ready(WAIT).await;
        for _ in 0..200 {
            if !n.agent.store().all_services().await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        // Each speaks once, so sandpiper has seen them as their platforms name them. The
        // squatters show the others' names; dana is two different people.
        let alice = FakeUser::new(2001, "alice").showing("Alice W");
        let mallory = FakeUser::new(2666, "mallory").showing("alice");
        let dana = FakeUser::new(2002, "dana");
        let channel = sandpiper_tests::fake_discord::CHANNEL_ID;
        for (who, answer) in [(&alice, "hi alice"), (&mallory, "hi mallory"), (&dana, "hi dana")] {
            discord.user_message(channel, who, &format!("{} hello", discord.mention())).await;
            discord.wait_until(WAIT, answer, |f| f.threads().into_iter().find(|t| f.messages(t.id).iter().any(|m| m.content.contains(answer)))).await;
        }
        let carol = slack.user_showing("U0CAROL", "carol", "Carol C");
        let eve = slack.user_showing("U0EVE", "eve", "carol");
        let dana_slack = slack.user("U0DANA", "dana");
        for (who, answer) in [(&carol, "hi carol"), (&eve, "hi eve"), (&dana_slack, "hi dana on slack")] {
            slack.app_mention(CHANNEL_ID, who, "hello").await;
            slack.wait_until(WAIT, answer, |f| f.messages(CHANNEL_ID).into_iter().find(|m| m.text.contains(answer))).await;
        }
        let bob = slack.user("U0BOB", "bob");
        slack.app_mention(CHANNEL_ID, &bob, "tell alice, carol and dana the deploy is done").await;
        slack.wait_until(WAIT, "the answer", |f| f.messages(CHANNEL_ID).into_iter().find(|m| m.text.contains("Sent to two of them."))).await;
        let results = contents_with_role(&s.llm.requests()[7..].iter().last().cloned().unwrap(), "tool");
        let results: Vec<&String> = results.iter().rev().take(4).rev().collect();
        assert_eq!(results[0], "notification to @alice:\n- discord:@alice: sent");
        assert_eq!(results[1], "notification to @Carol:\n- slack:@Carol: sent");
        assert!(results[2].contains("`dana` is ambiguous: it is the Discord username of `discord-2002` and the Slack handle of `slack-u0dana`"), "{}", results[2]);
        assert!(results[3].contains("`Alice W` is not a valid username"), "a display name never names anyone: {}", results[3]);
        // Delivered to the people who hold the handles, never to those showing the names.
        let sent = discord.wait_until(WAIT, "alice's DM", |f| f.messages(f.dm_channel(&alice)).into_iter().next()).await;
        assert!(sent.content.contains("deploy done"), "{}", sent.content);
        assert!(discord.messages(discord.dm_channel(&mallory)).is_empty(), "the squatter got nothing");
        assert!(discord.messages(discord.dm_channel(&dana)).is_empty());
        let carol_dm = slack.dm_channel("U0CAROL");
        slack.wait_until(WAIT, "carol's DM", |f| f.messages(&carol_dm).into_iter().find(|m| m.text.contains("deploy done"))).await;
        assert!(slack.messages(&slack.dm_channel("U0EVE")).is_empty(), "the squatter got nothing");
        // /whoami names the handles too.
        let people = n.agent.people();
        let alice_user = people.by_username("discord-2001").await.unwrap().expect("alice");
        let who = sandpiper_channels::commands::account::whoami(&people, sandpiper_channels::commands::account::Person {
            platform: "discord", platform_user_id: "2001", display_name: "Alice W", handle: Some("alice"),
        }).await.unwrap();
        assert_eq!(who, "discord-2001 (discord:2001 @alice)");
        assert_eq!(alice_user.display_name.as_deref(), Some("Alice W"));
        s.llm.verify();
        stop.cancel();
        n.join(WAIT).await.served.unwrap();
    }
}

/// A platform double for the limits: it posts by recording, and numbers its messages.
struct Recording(std::sync::Mutex<Vec<String>>);

#[async_trait::async_trait]
impl sandpiper_channels::notify::NotifyPlatform for Recording {
    fn platform(&self) -> sandpiper_agent::notify::ChannelType {
        sandpiper_agent::notify::ChannelType::Slack
    }

    fn listens_in(&self, _channel: &str) -> bool {
        true
    }

    async fn open_dm(&self, user: &str) -> Result<String, sandpiper_channels::notify::PostError> {
        Ok(format!("D{user}"))
    }

    async fn post(
        &self,
        channel: &str,
        _title: Option<&str>,
        _message: &str,
    ) -> Result<String, sandpiper_channels::notify::PostError> {
        let mut posted = self.0.lock().expect("not poisoned");
        posted.push(channel.to_owned());
        Ok(format!("{}.000", posted.len()))
    }
}

both_backends! {
    async fn the_hourly_limits_hold_across_threads(db) {
        use sandpiper_agent::notify::{MAX_PER_RECIPIENT, MAX_PER_REQUESTER, NotifyRequest};
        let store = sandpiper_agent::store::Store::connect(&db.url, 4).await.unwrap();
        let posted = std::sync::Arc::new(Recording(std::sync::Mutex::new(Vec::new())));
        let notifier = sandpiper_channels::notify::Notifier::new(
            sandpiper_agent::people::People::new(store.clone()),
            sandpiper_agent::notify::Ledger::new(store.clone()),
            vec![posted.clone()],
        );
        let threads = ["slack:T1:C1:1.0", "slack:T1:C1:2.0", "slack:T1:C1:3.0"];
        let to = |channel: &str, thread: &str, by: Option<&str>| NotifyRequest {
            message: "ping".into(),
            channel_type: Some("slack".into()),
            channel_id: Some(channel.into()),
            workstream: Some(thread.into()),
            requested_by: by.map(str::to_owned),
            ..NotifyRequest::default()
        };
        let status = |request: NotifyRequest| {
            let notifier = notifier.clone();
            async move {
                let results = notifier.deliver(&request).await.unwrap();
                assert_eq!(results.len(), 1);
                results[0].status.clone()
            }
        };
        // One recipient, three people in three threads: the recipient's share holds across
        // them all.
        for i in 0..MAX_PER_RECIPIENT {
            let n = usize::try_from(i).unwrap();
            let by = ["bob", "carol", "dave"][n % 3];
            assert_eq!(status(to("CALICE", threads[n % 3], Some(by))).await, "sent", "{i}");
        }
        let refused = status(to("CALICE", threads[2], Some("erin"))).await;
        assert_eq!(refused, format!("failed: not sent: {MAX_PER_RECIPIENT} notifications went there within the hour, from all threads together (at most {MAX_PER_RECIPIENT}); wait, or tell the person in one message"));
        // One person in three threads, to many recipients: their share holds across threads.
        for i in 0..MAX_PER_REQUESTER {
            let n = usize::try_from(i).unwrap();
            let channel = format!("CTEAM{n}");
            assert_eq!(status(to(&channel, threads[n % 3], Some("mallory"))).await, "sent", "{i}");
        }
        let refused = status(to("CTEAMX", threads[0], Some("mallory"))).await;
        assert_eq!(refused, format!("failed: not sent: mallory asked for {MAX_PER_REQUESTER} notifications within the hour, across their threads (at most {MAX_PER_REQUESTER}); wait, or combine what is left into one message"));
        // Someone else still gets through, and nothing refused was posted.
        assert_eq!(status(to("CTEAMX", threads[0], Some("bob"))).await, "sent");
        let posted = posted.0.lock().unwrap().len();
        assert_eq!(posted, usize::try_from(MAX_PER_RECIPIENT + MAX_PER_REQUESTER).unwrap() + 1);
        store.close().await;
    }
}
