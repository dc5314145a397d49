//! Discord slash commands, forged buttons and thread access, end to end.

use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button, card_text, response_text};
use sandpiper_tests::fake_discord::{CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::text;
use serde_json::json;

use super::setup;

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

both_backends! {
    async fn ask_opens_a_thread_and_status_and_close_work_in_it(db) {
        let s = setup(&db, vec![text("Pong from /ask.").with_usage(120, 30)]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let names: Vec<String> = rig.fake.registered_commands().iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_owned()).collect();
        for name in ["ask", "stop", "status", "close", "link", "memory", "mcp"] {
            assert!(names.contains(&name.to_owned()), "{names:?}");
        }
        rig.fake.slash(CHANNEL_ID, &alice(), "ask", json!([{"name": "prompt", "type": 3, "value": "ping please"}])).await;
        let thread = rig.fake.wait_until(WAIT, "a thread from /ask", |f| f.threads().first().map(|t| t.id)).await;
        rig.wait_text(thread, "Pong from /ask.").await;

        // Token usage is stored just after the answer is shown (it never costs an answer), so
        // ask again until the turn has recorded it.
        let deadline = std::time::Instant::now() + WAIT;
        let text = loop {
            let status = rig.fake.slash(thread, &bob(), "status", json!([])).await;
            let reply = rig.fake.wait_until(WAIT, "status", |f| f.interaction_responses(status).pop()).await;
            let text = reply["data"]["content"].as_str().unwrap().to_owned();
            if text.contains("Tokens used: 120") || std::time::Instant::now() > deadline {
                break text;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert!(text.contains(&format!("discord:{thread}")) && text.contains("Owner: @alice")
            && text.contains("Tokens used: 120 in / 30 out") && text.contains("Always allowed: none"), "{text}");

        let refused = rig.fake.slash(thread, &bob(), "close", json!([])).await;
        let reply = rig.fake.wait_until(WAIT, "close refused", |f| f.interaction_responses(refused).pop()).await;
        assert!(response_text(&[reply]).contains("Only the person who started"));
        rig.fake.slash(thread, &alice(), "close", json!([])).await;
        let closed = rig.fake.wait_until(WAIT, "the thread archived", |f| {
            f.threads().into_iter().find(|t| t.id == thread && t.archived && t.locked)
        }).await;
        assert_eq!(closed.id, thread);
        let ws = rig.agent.workstream(&format!("discord:{thread}")).await.unwrap().unwrap();
        assert!(ws.closed);
    }

    async fn forged_and_unknown_buttons_change_nothing(db) {
        let s = setup(&db, vec![text("hi")]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hello").await;
        let msg = rig.wait_text(thread, "hi").await;
        for forged in ["ap:ap_doesnotexist:a", "ap:../../etc:a", "totally-not-ours", "ap:ap_1:zz"] {
            let click = rig.fake.click(thread, msg.id, &bob(), forged).await;
            let reply = rig.fake.wait_until(WAIT, "a refusal", |f| f.interaction_responses(click).pop()).await;
            assert_eq!(reply["data"]["flags"], json!(64), "{forged}: {reply}");
            assert!(reply["data"]["content"].as_str().unwrap().contains("nothing changed"), "{reply}");
        }
        let llm_calls = s.llm.requests().len();
        assert_eq!(llm_calls, 1);
    }

    async fn an_owner_only_thread_tells_others_once(db) {
        let mut s = setup(&db, vec![text("hello alice"), text("still only alice")]).await;
        s.config.discord.thread_access = sandpiper_channels::config::ThreadAccess::Owner;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        rig.wait_text(thread, "hello alice").await;
        rig.fake.user_message(thread, &bob(), "can I join?").await;
        rig.fake.user_message(thread, &bob(), "hello??").await;
        rig.wait_text(thread, "Only @alice can talk to me").await;
        rig.fake.user_message(thread, &alice(), "one more").await;
        rig.wait_text(thread, "still only alice").await;
        let notices = rig.bot_messages(thread).into_iter().filter(|m| m.content.contains("Only @alice")).count();
        assert_eq!(notices, 1);
        assert!(!s.llm.requests().iter().any(|r| r.to_string().contains("can I join")));
    }

    async fn link_gives_a_code_that_joins_a_console_identity(db) {
        let s = setup(&db, vec![]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let link = rig.fake.slash(CHANNEL_ID, &alice(), "link", json!([])).await;
        let reply = rig.fake.wait_until(WAIT, "a link code", |f| f.interaction_responses(link).pop()).await;
        let text = reply["data"]["content"].as_str().unwrap().to_owned();
        assert_eq!(reply["data"]["flags"], json!(64));
        let code = text.split_whitespace().nth(4).unwrap().to_owned();
        let console = sandpiper_channels::commands::account::Person { platform: "console", platform_user_id: "alice-laptop", display_name: "alice-laptop", handle: None };
        let joined = sandpiper_channels::commands::account::link(&rig.agent.people(), console, Some(&code), false).await.unwrap();
        assert!(joined.contains("discord:") && joined.contains("console:alice-laptop"), "{joined}");
    }

    async fn mcp_refresh_takes_one_server_or_all(db) {
        let s = setup(&db, vec![]).await;
        let mut config = s.config.clone();
        for name in ["a", "b"] {
            config.mcp.servers.insert(name.into(), sandpiper_agent::mcp::McpServerConfig::Stdio {
                command: env!("CARGO_BIN_EXE_mcp_test_server").into(),
                args: vec!["--stdio".into()],
                env: Default::default(),
                auto_approve: vec![],
            });
        }
        config.mcp.refresh_interval = std::time::Duration::ZERO;
        let rig = DiscordRig::start(FakeDiscord::start().await, config).await;
        let mcp = |options: serde_json::Value| {
            let rig = &rig;
            async move {
                let id = rig.fake.slash(CHANNEL_ID, &alice(), "mcp", options).await;
                let reply = rig.fake.wait_until(WAIT, "the mcp answer", |f| f.interaction_responses(id).pop()).await;
                response_text(&[reply])
            }
        };
        let action = |a: &str| json!({"name": "action", "type": 3, "value": a});
        let server = |s: &str| json!({"name": "server", "type": 3, "value": s});
        assert_eq!(mcp(json!([action("refresh"), server("b")])).await, "```\nb: no changes\n```");
        assert_eq!(mcp(json!([action("refresh")])).await, "```\na: no changes\nb: no changes\n```");
        // Why a refresh failed is for admins; alice is none.
        let unknown = mcp(json!([action("refresh"), server("nope")])).await;
        assert_eq!(unknown, "```\nnope: failed (an admin sees why)\n```");
        let refused = mcp(json!([action("list"), server("a")])).await;
        assert!(refused.contains("mcp list takes no server"), "{refused}");
    }
}

const ONCALL: u64 = 700_000_000_000_000_001;

fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}

both_backends! {
    async fn an_approver_role_may_decide_but_only_the_owner_may_always_allow(db) {
        let mut s = setup(&db, vec![
            sandpiper_tests::fake_llm::tool_call("c1", "bash", json!({"command": "seq 1 40"})),
            text("counted"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "count to forty").await;
        let card = rig.card(thread).await;
        let always = rig.fake.click(thread, card.id, &carol(), &button(&card, "Always allow", 0)).await;
        let reply = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(always).pop()).await;
        assert!(response_text(&[reply]).contains("only the person who started this thread can choose Always allow"));
        rig.fake.click(thread, card.id, &carol(), &button(&card, "Approve", 0)).await;
        rig.wait_text(thread, "counted").await;
        let decided = rig.wait_message(thread, card.id, "Approved by @carol").await;
        assert!(card_text(&decided).contains("Approved by @carol"), "{}", card_text(&decided));
        // 40 lines of output go as a file, not cut.
        let upload = rig.fake.messages(thread).into_iter().find(|m| !m.attachments.is_empty()).expect("an attachment");
        let (name, bytes) = &upload.attachments[0];
        assert_eq!(name, "bash-output.txt");
        let body = String::from_utf8_lossy(bytes);
        assert!(body.contains("\n1\n") || body.starts_with("1\n"), "{body}");
        assert!(body.contains("40"), "{body}");
        let line = rig.wait_text(thread, "full output attached").await;
        assert!(line.content.contains("40") && !line.content.contains("\n1\n"), "{}", line.content);
    }

    async fn the_stop_button_stops_a_turn_and_a_late_click_says_the_turn_is_gone(db) {
        let s = setup(&db, vec![
            sandpiper_tests::fake_llm::tool_call("c1", "bash", json!({"command": "echo never"})),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "wait for me").await;
        let card = rig.card(thread).await;
        let stop = rig.fake.click(thread, card.id, &alice(), &format!("stop:discord:{thread}")).await;
        let reply = rig.fake.wait_until(WAIT, "the stop reply", |f| f.interaction_responses(stop).pop()).await;
        assert!(response_text(&[reply]).contains("Stopping"));
        let gone = rig.fake.wait_until(WAIT, "the card to say the turn is gone", |f| {
            f.messages(thread).into_iter().find(|m| m.id == card.id && card_text(m).contains("Not run"))
        }).await;
        assert!(sandpiper_tests::discord_harness::open_buttons(&gone).is_empty());
        let late = rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        let reply = rig.fake.wait_until(WAIT, "the late click answered", |f| f.interaction_responses(late).pop()).await;
        assert_eq!(reply["type"], json!(7), "the card is redrawn: {reply}");
        assert!(!s.llm.requests().iter().any(|r| r.to_string().contains("never\\n")), "the call never ran");
    }
}

/// The four people, in a thread alice started and bob asked in (each answered): alice, bob,
/// carol (holding the approver role) and dave.
async fn four_in_a_thread(rig: &DiscordRig) -> ([FakeUser; 4], u64) {
    let (owner, participant) = (alice(), bob());
    let approver = FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL]);
    let stranger = FakeUser::new(900_000_000_000_000_004, "dave");
    let thread = rig.mention(&owner, "first question").await;
    rig.wait_text(thread, "first answer").await;
    rig.fake
        .user_message(thread, &participant, "second question")
        .await;
    rig.wait_text(thread, "second answer").await;
    ([owner, participant, approver, stranger], thread)
}

/// What `who` is told after `/command` with `options` in `thread`: its text and its flags.
async fn slash_answer(
    rig: &DiscordRig,
    thread: u64,
    who: &FakeUser,
    command: &str,
    options: serde_json::Value,
) -> (String, serde_json::Value) {
    let id = rig.fake.slash(thread, who, command, options).await;
    let reply = rig
        .fake
        .wait_until(WAIT, command, |f| f.interaction_responses(id).pop())
        .await;
    let text = reply["data"]["content"].as_str().unwrap_or_default();
    (text.to_owned(), reply["data"]["flags"].clone())
}

both_backends! {
    async fn compact_is_for_the_owner_and_approvers_and_status_shows_the_context(db) {
        let mut s = setup(&db, vec![
            text("first answer"),
            text("second answer"),
            text("- alice asked twice; both answered"),
            text("- still about the two questions"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        // bob takes part: he writes in alice's thread.
        let ([owner, participant, approver, stranger], thread) = four_in_a_thread(&rig).await;
        let ask = |who: FakeUser, command: &'static str| {
            let rig = &rig;
            async move { slash_answer(rig, thread, &who, command, json!([])).await }
        };
        for who in [participant.clone(), stranger] {
            let (text, flags) = ask(who, "compact").await;
            assert_eq!(flags, json!(64), "refused privately: {text}");
            assert_eq!(text, "🚫 Only the person who started this thread, or an approver, can compact it.");
        }
        let (text, _) = ask(approver, "compact").await;
        assert!(text.starts_with("🗜 Compacted this conversation to fit the model's context window: 2 older messages summarised"), "{text}");
        let (text, _) = ask(owner, "compact").await;
        assert!(text.contains("older messages summarised") || text.starts_with("Nothing to compact"), "{text}");
        let (status, _) = ask(participant, "status").await;
        assert!(status.contains("Context: ") && status.contains("tokens (") && status.contains("window from model.context_window"), "{status}");
        assert!(status.contains("older messages compacted"), "{status}");
        let checkpoint = rig.agent.store().latest_checkpoint(&format!("discord:{thread}")).await.unwrap();
        assert!(checkpoint.is_some_and(|c| c.summary.contains("alice asked twice")));
    }
}

both_backends! {
    async fn the_owner_and_approvers_switch_the_model_and_the_next_request_asks_for_it(db) {
        let mut s = setup(&db, vec![
            text("first answer"),
            text("second answer"),
            text("third answer"),
            text("fourth answer"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        s.config.model.choices = vec!["large-model".into()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let ([owner, participant, approver, stranger], thread) = four_in_a_thread(&rig).await;
        let ask = |who: FakeUser, name: Option<&'static str>| {
            let rig = &rig;
            let options = match name {
                Some(name) => json!([{"name": "name", "type": 3, "value": name}]),
                None => json!([]),
            };
            async move { slash_answer(rig, thread, &who, "model", options).await.0 }
        };
        // Anyone may see which model answers and what may be chosen.
        let shown = ask(stranger.clone(), None).await;
        assert_eq!(shown, "This thread answers with `fake-model`. Switch with /model NAME: `large-model`.");
        for who in [participant.clone(), stranger.clone()] {
            let refused = ask(who, Some("large-model")).await;
            assert_eq!(refused, "🚫 Only the person who started this thread, or an approver, can switch its model.");
        }
        let unknown = ask(owner.clone(), Some("huge-model")).await;
        assert_eq!(unknown, "🚫 `huge-model` is not one of the models this sandpiper offers (fake-model, large-model).");
        let switched = ask(approver.clone(), Some("large-model")).await;
        assert_eq!(switched, "This thread answers with `large-model` from its next message on.");
        rig.fake.user_message(thread, &owner, "third question").await;
        rig.wait_text(thread, "third answer").await;
        let (status, _) = slash_answer(&rig, thread, &participant, "status", json!([])).await;
        assert!(status.contains("Model: large-model"), "{status}");
        let back = ask(owner.clone(), Some("fake-model")).await;
        assert_eq!(back, "This thread answers with `fake-model` from its next message on.");
        rig.fake.user_message(thread, &owner, "fourth question").await;
        rig.wait_text(thread, "fourth answer").await;
        let models: Vec<String> = s.llm.requests().iter().map(|r| r["model"].as_str().unwrap_or_default().to_owned()).collect();
        assert_eq!(models, ["fake-model", "fake-model", "large-model", "fake-model"]);
        // The switched turn's tokens are counted under the model that answered.
        let key = format!("discord:{thread}");
        let of = sandpiper_agent::store::usage::UsageOf::Thread(&key);
        let by_model = rig.agent.store().usage_per_model(of, 0).await.unwrap();
        assert!(by_model.iter().any(|(model, totals)| model == "large-model" && totals.calls == 1), "{by_model:?}");
    }
}

const ADMINS: u64 = 700_000_000_000_000_009;

/// A stdio MCP server that prints a secret to stderr and dies.
pub(crate) fn leaky_server() -> sandpiper_agent::mcp::McpServerConfig {
    sandpiper_agent::mcp::McpServerConfig::Stdio {
        command: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "echo 'cannot connect to postgres://app:db-s3cret@db/app' >&2; exit 1".into(),
        ],
        env: Default::default(),
        auto_approve: vec![],
    }
}

both_backends! {
    async fn mcp_list_shows_a_failing_servers_stderr_to_admins_only(db) {
        let mut s = setup(&db, vec![text("first answer"), text("second answer")]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        s.config.discord.admin_roles = vec![ADMINS.to_string()];
        s.config.mcp.servers.insert("leaky".into(), leaky_server());
        s.config.mcp.refresh_interval = std::time::Duration::ZERO;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let owner = alice();
        let participant = bob();
        let approver = carol();
        let stranger = FakeUser::new(900_000_000_000_000_004, "dave");
        let admin = FakeUser::new(900_000_000_000_000_005, "erin").with_roles(&[ADMINS]);
        let thread = rig.mention(&owner, "first question").await;
        rig.wait_text(thread, "first answer").await;
        rig.fake.user_message(thread, &participant, "second question").await;
        rig.wait_text(thread, "second answer").await;
        let list = |who: FakeUser| {
            let rig = &rig;
            async move {
                let id = rig.fake.slash(thread, &who, "mcp", json!([{"name": "action", "type": 3, "value": "list"}])).await;
                let reply = rig.fake.wait_until(WAIT, "the mcp list", |f| f.interaction_responses(id).pop()).await;
                assert_eq!(reply["data"]["flags"], json!(64), "answered privately: {reply}");
                response_text(&[reply])
            }
        };
        // The admin sees the server's last words once it has failed.
        let deadline = std::time::Instant::now() + WAIT;
        let told = loop {
            let told = list(admin.clone()).await;
            if told.contains("db-s3cret") || std::time::Instant::now() > deadline {
                break told;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        assert!(told.contains("leaky (") && told.contains("last stderr lines:") && told.contains("postgres://app:db-s3cret@db/app"), "{told}");
        for who in [owner, participant, approver, stranger] {
            let name = who.name.clone();
            let told = list(who).await;
            assert!(told.starts_with("```\nleaky (") && told.contains("0 tools"), "{name}: {told}");
            assert!(!told.contains("db-s3cret") && !told.contains("stderr"), "{name}: {told}");
        }
    }
}
