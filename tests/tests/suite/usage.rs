//! What the model costs: Anthropic is asked to cache and what it cached is counted; every
//! model call's tokens are stored per thread and person on both databases; `/usage`, `/budget`
//! and `/status` show them, in money with `[usage.prices]`; a turn over a budget (tokens or
//! money; a person's, a thread's or a channel's) is refused before the model is called; a
//! watch's turn is charged to whoever set it up; budget changes are audit events; who may see
//! whose usage and who may change a budget (owner, approver, participant, stranger, admin), on
//! Slack and Discord.

use sandpiper_agent::approvals::{AskingTurn, Click, ClickAction, ClickOutcome, Clicker};
use sandpiper_agent::config::{Provider, Secret};
use sandpiper_agent::price::{Money, Price};
use sandpiper_agent::protocol::ApproveAll;
use sandpiper_agent::store::audit::{AuditFilter, AuditKind};
use sandpiper_agent::store::usage::{BudgetScope, BudgetUnit};
use sandpiper_agent::store::usage::{UsageOf, UsageTotals};
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_channels::commands::Command;
use sandpiper_channels::commands::account::Person;
use sandpiper_channels::commands::answers::{self, Where};
use sandpiper_channels::thread::{Work, run_work};
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun, RecordingSink};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::setup;

/// An approver that never answers: the turn waits until it is stopped (here, by a restart).
struct NeverAnswers;

#[async_trait::async_trait]
impl sandpiper_agent::protocol::Approver for NeverAnswers {
    async fn approve(
        &self,
        _: &[sandpiper_agent::protocol::ApprovalItem],
    ) -> Vec<sandpiper_agent::protocol::Decision> {
        std::future::pending().await
    }
}

fn marked(value: &Value) -> bool {
    value["cache_control"] == json!({"type": "ephemeral"})
}

/// A Slack person of workspace `T1`.
fn person(id: &str) -> Person<'_> {
    Person {
        platform: "slack",
        platform_user_id: id,
        display_name: id,
        handle: Some(id),
    }
}

async fn say(agent: &sandpiper_agent::Agent, who: &str, text: &str) {
    say_in(agent, THREAD, person(who), text)
        .await
        .expect("turn");
}

/// A turn of `who` in `thread`.
async fn say_in(
    agent: &sandpiper_agent::Agent,
    thread: &str,
    who: Person<'_>,
    text: &str,
) -> Result<sandpiper_agent::TurnOutcome, sandpiper_agent::AgentError> {
    let id = user(agent, who).await;
    let sink = RecordingSink::default();
    agent
        .run_turn(TurnRequest {
            workstream: thread,
            author: Some(&id),
            text: text.into(),
            sink: &sink,
            approver: &ApproveAll,
            cancel: CancellationToken::new(),
        })
        .await
}

async fn user(agent: &sandpiper_agent::Agent, who: Person<'_>) -> String {
    sandpiper_channels::commands::account::user_id(&agent.people(), who)
        .await
        .expect("user")
}

/// `[usage.prices]` for the fake model: $3 per million prompt tokens, $0.30 cached, $15 answer.
fn priced(config: &mut sandpiper_agent::Config) {
    let price = Price {
        input: Money::from_dollars(3.0).expect("dollars"),
        cached: Some(Money::from_dollars(0.3).expect("dollars")),
        output: Money::from_dollars(15.0).expect("dollars"),
    };
    config
        .usage
        .prices
        .insert(config.model.model.clone(), price);
}

const THREAD: &str = "slack:T1:C1:100.000";

async fn ask(
    agent: &sandpiper_agent::Agent,
    who: &str,
    line: &str,
    approver: bool,
    admin: bool,
) -> String {
    let at = Where {
        workstream: Some(THREAD),
        prefix: "/sandpiper ",
        admin,
        approver,
    };
    let cmd = Command::from_text(line).expect("parses");
    answers::answer(agent, &cmd, person(who), at)
        .await
        .expect("answered")
}

both_backends! {
    async fn anthropic_is_asked_to_cache_and_its_reads_and_writes_are_counted(db) {
        let mut s = setup(&db, vec![
            text("First.").with_usage(2000, 10).with_cache(0, 1800),
            text("Second.").with_usage(2100, 12).with_cache(1800, 100),
        ]).await;
        s.config.model.provider = Provider::Anthropic;
        s.config.model.base_url = Some(s.llm.anthropic_base_url());
        s.config.model.api_key = Some(Secret::new("test-key"));
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "cost", "alice", true);
        console.send("first question").await;
        console.send("second question").await;
        console.finish().await;
        s.llm.verify();
        let requests = s.llm.requests();
        assert_eq!(requests.len(), 2);
        for request in &requests {
            let system = request["system"].as_array().expect("system blocks");
            assert!(marked(&system[0]), "{system:?}");
            let tools = request["tools"].as_array().expect("tools");
            assert!(marked(tools.last().expect("a tool")));
            assert_eq!(tools.iter().filter(|t| marked(t)).count(), 1);
            let messages = request["messages"].as_array().expect("messages");
            let last = messages.last().expect("a message")["content"].as_array().expect("blocks");
            assert!(marked(last.last().expect("a block")));
            assert_eq!(request.to_string().matches("cache_control").count(), 3);
        }
        // The second request resends the first one's last message unchanged but for its mark.
        let first_last = requests[0]["messages"].as_array().unwrap().last().unwrap().clone();
        let mut again = requests[1]["messages"][0].clone();
        again["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        assert_eq!(again, first_last);
        let counted = agent.usage(UsageOf::Thread("console:cost"), 0).await.expect("usage");
        assert_eq!(counted, UsageTotals {
            calls: 2,
            input_tokens: 4100,
            cached_tokens: 1800,
            cache_write_tokens: 1900,
            output_tokens: 22,
        });
        let status = answers::status(&agent, "console:cost").await;
        assert!(
            status.contains("Prompt cache: 85% of the last turn's 2100 prompt tokens; 43% of the thread's 4100 over 2 model calls"),
            "{status}"
        );
    }

    async fn a_turn_over_a_budget_is_refused_before_the_model_is_called(db) {
        let mut s = setup(&db, vec![
            text("One.").with_usage(80, 5),
            text("Two.").with_usage(50, 5),
            text("Three.").with_usage(10, 1),
        ]).await;
        s.config.budgets.person_daily_tokens = Some(100);
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "budget", "alice", true);
        console.send("one").await;
        console.send("two").await;
        console.send("three").await;
        console.send("/usage").await;
        console.send("/budget").await;
        let out = console.finish().await;
        // 85 of 100 after the first turn: told once; the second still runs; the third not.
        assert_eq!(out.matches("daily budget is 85% used (85 of 100 tokens)").count(), 1, "{out}");
        assert!(out.contains("Two."), "{out}");
        assert!(!out.contains("Three."), "{out}");
        assert!(
            out.contains("Your daily budget of 100 tokens is used up (140 tokens used today), so this message was not answered. It resets at 00:00 UTC, in "),
            "{out}"
        );
        assert!(out.contains("an admin can raise or lift it with /budget"), "{out}");
        assert!(out.contains("You used 140 tokens today (since 00:00 UTC): 130 prompt (0 from the cache, 0%), 10 answer, in 2 model calls."), "{out}");
        assert!(out.contains("Your daily budget: 100 tokens (from [budgets]); 140 used today (140%)."), "{out}");
        assert_eq!(s.llm.requests().len(), 2);
        // Nothing of the refused message was stored.
        let history = agent.history("console:budget").await.expect("history");
        assert!(history.iter().all(|m| m.content != "three"), "{history:?}");
        // The person at the terminal administers it: lifting the budget lets the turn run.
        let console_person = Person { platform: "console", platform_user_id: "alice", display_name: "alice", handle: None };
        let id = sandpiper_channels::commands::account::user_id(&agent.people(), console_person).await.expect("user");
        let username = agent.user(&id).await.expect("user").expect("exists").username;
        let console = ConsoleRun::start(agent.clone(), "budget", "alice", true);
        console.send(&format!("/budget {username} off")).await;
        console.send("three").await;
        let out = console.finish().await;
        assert!(out.contains(&format!("The daily budget of {username} is lifted: no cap.")), "{out}");
        assert!(out.contains("Three."), "{out}");
        s.llm.verify();
    }

    async fn a_budget_counts_what_every_node_spent(db) {
        // Two agents on one database, as two nodes are: what alice used on the first counts
        // against her budget on the second.
        let mut s = setup(&db, vec![text("One.").with_usage(80, 5)]).await;
        s.config.budgets.person_daily_tokens = Some(50);
        let first = harness::agent(s.config.clone()).await;
        let second = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(first.clone(), "node-a", "alice", true);
        console.send("one").await;
        let out = console.finish().await;
        assert!(out.contains("One."), "{out}");
        let console = ConsoleRun::start(second.clone(), "node-b", "alice", true);
        console.send("two").await;
        let out = console.finish().await;
        assert!(
            out.contains("Your daily budget of 50 tokens is used up (85 tokens used today)"),
            "{out}"
        );
        assert_eq!(s.llm.requests().len(), 1, "the second node did not call the model");
        s.llm.verify();
    }

    async fn who_sees_whose_usage_and_who_changes_a_budget(db) {
        let s = setup(&db, vec![
            text("For the owner.").with_usage(100, 10),
            text("For the participant.").with_usage(200, 20),
            text("Again.").with_usage(1, 1),
        ]).await;
        let mut config = s.config.clone();
        config.budgets.thread_daily_tokens = Some(1000);
        let agent = harness::agent(config).await;
        say(&agent, "owner", "hello").await;
        say(&agent, "participant", "me too").await;
        let thread_usage = "This thread (`slack:T1:C1:100.000`) used 330 tokens today";
        // (who, approver, admin, sees the thread's, sees the channel's)
        let people = [
            ("owner", false, false, true, false),
            ("approver", true, false, true, true),
            ("participant", false, false, true, false),
            ("stranger", false, false, false, false),
            ("admin", false, true, true, true),
        ];
        for (who, approver, admin, thread, channel) in people {
            let mine = ask(&agent, who, "usage", approver, admin).await;
            assert!(mine.starts_with("You used "), "{who}: {mine}");
            let seen = ask(&agent, who, "usage thread", approver, admin).await;
            match thread {
                true => assert!(seen.starts_with(thread_usage), "{who}: {seen}"),
                false => assert_eq!(seen, "🚫 only this thread's owner, an approver, an admin or someone who wrote in it can see its usage", "{who}"),
            }
            let seen = ask(&agent, who, "usage channel 7d", approver, admin).await;
            match channel {
                true => assert!(seen.starts_with("This channel (`slack:T1:C1`) used 330 tokens in the last 7 days"), "{who}: {seen}"),
                false => assert_eq!(seen, "🚫 only an approver or an admin can see a channel's usage", "{who}"),
            }
            let set = ask(&agent, who, "budget thread 300", approver, admin).await;
            match admin {
                true => assert_eq!(set, "💰 The daily budget of this thread is now 300 tokens.", "{who}"),
                false => assert_eq!(set, "🚫 only an admin can change a budget", "{who}"),
            }
        }
        let owner_usage = ask(&agent, "owner", "usage", false, false).await;
        assert!(owner_usage.starts_with("You used 110 tokens today"), "{owner_usage}");
        // The admin's 300 is in force for the thread (330 used): the next turn is refused.
        let shown = ask(&agent, "stranger", "budget", false, false).await;
        assert!(shown.contains("This thread's daily budget: 300 tokens (set with /budget by "), "{shown}");
        let sink = RecordingSink::default();
        let owner = sandpiper_channels::commands::account::user_id(&agent.people(), person("owner")).await.expect("user");
        let refused = agent
            .run_turn(TurnRequest {
                workstream: THREAD,
                author: Some(&owner),
                text: "more".into(),
                sink: &sink,
                approver: &ApproveAll,
                cancel: CancellationToken::new(),
            })
            .await;
        assert!(
            matches!(&refused, Err(e) if e.to_string().starts_with("This thread's daily budget of 300 tokens is used up (330 tokens used today)")),
            "{refused:?}"
        );
        assert_eq!(s.llm.requests().len(), 2);
        // Lifted, it runs.
        assert_eq!(ask(&agent, "admin", "budget thread off", false, true).await, "💰 The daily budget of this thread is lifted: no cap.");
        say(&agent, "owner", "more").await;
        assert_eq!(s.llm.requests().len(), 3);
    }

    async fn usage_is_shown_in_money_with_prices_and_a_money_budget_refuses(db) {
        let mut s = setup(&db, vec![
            // 100k prompt (80k cached), 10k answer: 0.02×3 + 0.08×0.3 + 0.01×15 = $0.234.
            text("Priced.").with_usage(100_000, 10_000).with_cache(80_000, 0),
            text("Never.").with_usage(1, 1),
        ]).await;
        priced(&mut s.config);
        s.config.budgets.person_daily_cost = Money::parse("$0.20");
        let agent = harness::agent(s.config.clone()).await;
        say(&agent, "alice", "hello").await;
        let mine = ask(&agent, "alice", "usage", false, false).await;
        assert!(mine.ends_with(" Cost: $0.23."), "{mine}");
        let refused = say_in(&agent, THREAD, person("alice"), "again").await;
        let Err(refused) = refused else { panic!("not refused: {refused:?}") };
        assert!(
            refused.to_string().starts_with("Your daily budget of $0.20 is used up ($0.23 used today), so this message was not answered. It resets at 00:00 UTC, in "),
            "{refused}"
        );
        assert!(refused.to_string().ends_with("an admin can raise or lift it with /budget."), "{refused}");
        assert_eq!(s.llm.requests().len(), 1);
        let shown = ask(&agent, "alice", "budget", false, false).await;
        assert!(shown.contains("Your daily money budget: $0.20 (from [budgets]); $0.23 used today (117%)."), "{shown}");
        // A model without a price says so rather than $0.
        let mut unpriced = s.config.clone();
        unpriced.usage.prices.clear();
        unpriced.usage.prices.insert("another-model".into(), Price::default());
        let other = harness::agent(unpriced).await;
        let mine = ask(&other, "alice", "usage", false, false).await;
        assert!(mine.ends_with(" Cost: no price."), "{mine}");
    }

    async fn a_channel_budget_counts_every_thread_of_the_channel(db) {
        let mut s = setup(&db, vec![
            text("First thread.").with_usage(140, 10),
            text("Other channel.").with_usage(10, 1),
        ]).await;
        s.config.budgets.channel_daily_tokens = Some(100);
        let agent = harness::agent(s.config.clone()).await;
        say(&agent, "alice", "hello").await;
        // Another thread of the same channel, by someone else: the channel's budget is used up.
        let refused = say_in(&agent, "slack:T1:C1:200.000", person("bob"), "me too").await;
        let Err(refused) = refused else { panic!("not refused: {refused:?}") };
        assert!(
            refused.to_string().starts_with("This channel's daily budget of 100 tokens is used up (150 tokens used today)"),
            "{refused}"
        );
        // Another channel's thread runs.
        say_in(&agent, "slack:T1:C2:300.000", person("bob"), "elsewhere").await.expect("runs");
        assert_eq!(s.llm.requests().len(), 2);
        s.llm.verify();
    }

    async fn a_watchs_turn_is_charged_to_whoever_set_it_up(db) {
        let mut s = setup(&db, vec![
            text("Set up.").with_usage(60, 5),
            text("The watch fired.").with_usage(30, 5),
            text("Never.").with_usage(1, 1),
        ]).await;
        s.config.budgets.person_daily_tokens = Some(90);
        let agent = harness::agent(s.config.clone()).await;
        say(&agent, "alice", "watch ci for me").await;
        let alice = user(&agent, person("alice")).await;
        // What the watch runner's dispatch hands the thread: no author, charged to the setter.
        let fired = |text: &str| Work::Message {
            author: None,
            text: text.into(),
            shown: Some("⏰ watch `ci` fired".into()),
            place: None,
            charged_to: Some(alice.clone()),
        };
        let sink = RecordingSink::default();
        run_work(&agent, THREAD, fired("[watch ci fired after 1 poll(s)] done"), &sink, &ApproveAll, CancellationToken::new())
            .await
            .expect("ran");
        let hers = agent.usage(UsageOf::Person(&alice), 0).await.expect("usage");
        assert_eq!((hers.calls, hers.tokens()), (2, 100));
        // Her budget is used up now: the next firing is refused, and says whose budget.
        let sink = RecordingSink::default();
        let refused = run_work(&agent, THREAD, fired("[watch ci fired after 2 poll(s)] done"), &sink, &ApproveAll, CancellationToken::new()).await;
        assert!(
            matches!(&refused, Err(e) if e.to_string().starts_with("Your daily budget of 90 tokens is used up (100 tokens used today)")),
            "{refused:?}"
        );
        assert_eq!(s.llm.requests().len(), 2);
    }

    async fn a_watchs_turn_resumed_after_a_restart_is_still_charged_to_its_setter(db) {
        let s = setup(&db, vec![
            text("Set up.").with_usage(60, 5),
            tool_call("c1", "bash", json!({"command": "echo fired"})).with_usage(50, 5),
            text("Done.").with_usage(30, 5),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        say(&agent, "alice", "watch ci for me").await;
        let alice = user(&agent, person("alice")).await;
        // The watch fires; its turn waits for approval when sandpiper stops.
        let fired = Work::Message {
            author: None,
            text: "[watch ci fired after 1 poll(s)] done".into(),
            shown: Some("⏰ watch `ci` fired".into()),
            place: None,
            charged_to: Some(alice.clone()),
        };
        let running = tokio::spawn({
            let agent = agent.clone();
            async move {
                let sink = RecordingSink::default();
                run_work(&agent, THREAD, fired, &sink, &NeverAnswers, CancellationToken::new()).await
            }
        });
        let pending = loop {
            let pending = agent.store().pending_approvals().await.expect("pending");
            if let Some(p) = pending.into_iter().next() {
                break p;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        running.abort();
        let _ = running.await;
        agent.store().close().await;
        drop(agent);

        // A new process: the setter approves on the card, the turn is resumed (Resume, or a
        // node taking the thread over: neither knows whose watch it was).
        let agent = harness::agent(s.config.clone()).await;
        let decided = agent.decide(Click {
            request_id: &pending.id,
            action: ClickAction::Approve,
            clicker: Clicker { user_id: &alice, roles: &[], approver_roles: &[] },
            note: None,
            path: sandpiper_agent::protocol::DecisionPath::Button,
            grant: None,
        }).await.expect("decided");
        assert!(matches!(decided, ClickOutcome::Decided { turn: AskingTurn::Interrupted { resumable: true }, .. }), "{decided:?}");
        let sink = RecordingSink::default();
        run_work(&agent, THREAD, Work::Resume { author: None }, &sink, &ApproveAll, CancellationToken::new())
            .await
            .expect("resumed");
        s.llm.verify();
        assert_eq!(s.llm.requests().len(), 3);
        let hers = agent.usage(UsageOf::Person(&alice), 0).await.expect("usage");
        assert_eq!((hers.calls, hers.tokens()), (3, 155), "her message, the watch's call and the resumed one");
    }

    async fn a_budget_change_is_an_audit_event(db) {
        let s = setup(&db, vec![text("Hi.").with_usage(10, 1)]).await;
        let agent = harness::agent(s.config.clone()).await;
        say(&agent, "alice", "hello").await;
        assert_eq!(ask(&agent, "admin", "budget channel $20", false, true).await, "💰 The daily money budget of this channel (`slack:T1:C1`) is now $20.00.");
        let admin = user(&agent, person("admin")).await;
        let alice = user(&agent, person("alice")).await;
        let username = agent.user(&alice).await.expect("user").expect("exists").username;
        let named = agent.store().public_name_or_id(&alice).await;
        assert_eq!(ask(&agent, "admin", &format!("budget {username} 5000"), false, true).await, format!("💰 The daily budget of {username} is now 5000 tokens."));
        assert_eq!(ask(&agent, "admin", &format!("budget {username} off"), false, true).await, format!("💰 The daily budget of {username} is lifted: no cap."));
        assert_eq!(ask(&agent, "admin", "budget thread off", false, true).await, "💰 The daily budget of this thread had no cap; nothing changed.");
        let rows = agent.store().audit(&AuditFilter::default()).await.expect("audit");
        let changes: Vec<(String, Option<String>, AuditKind)> = rows
            .into_iter()
            .filter(|r| r.event.kind.name() == "budget_changed")
            .map(|r| (r.event.workstream, r.event.actor_id, r.event.kind))
            .collect();
        let changed = |scope, subject: &str, name: Option<&str>, unit, old, new| AuditKind::BudgetChanged {
            scope,
            subject: subject.into(),
            subject_name: name.map(str::to_owned),
            unit,
            old,
            new,
        };
        assert_eq!(changes, vec![
            ("slack:T1:C1".into(), Some(admin.clone()), changed(BudgetScope::Channel, "slack:T1:C1", None, BudgetUnit::Cost, None, Some(20_000_000))),
            ("*".into(), Some(admin.clone()), changed(BudgetScope::Person, &alice, Some(&named), BudgetUnit::Tokens, None, Some(5000))),
            ("*".into(), Some(admin.clone()), changed(BudgetScope::Person, &alice, Some(&named), BudgetUnit::Tokens, Some(5000), None)),
        ]);
        let printed = sandpiper::audit::report(agent.store(), &AuditFilter::default(), sandpiper::audit::AuditFormat::Table)
            .await
            .expect("report");
        assert!(printed.contains("budget_changed"), "{printed}");
        assert!(printed.contains(&format!("{named}: 5000 tokens → no cap")), "{printed}");
        assert!(printed.contains("slack:T1:C1: no cap → $20.00"), "{printed}");
    }

    async fn a_budget_names_a_person_by_their_platform_handle_as_notify_does(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        for (platform, thread, id, handle) in [
            ("slack", "slack:T1:C7:100.000", "U0ALICE", "alice-handle"),
            ("discord", "discord:7001", "2001", "alice.discord"),
        ] {
            let who = |id: &'static str, handle: &'static str| Person { platform, platform_user_id: id, display_name: "Alice", handle: Some(handle) };
            let alice = user(&agent, who(id, handle)).await;
            let username = agent.user(&alice).await.expect("user").expect("exists").username;
            assert_ne!(username, handle, "the handle is not her sandpiper username");
            let at = Where { workstream: Some(thread), prefix: "/", admin: true, approver: false };
            let cmd = Command::from_text(&format!("budget @{handle} $5")).expect("parses");
            let answer = answers::answer(&agent, &cmd, who("9001", "admin"), at).await.expect("answered");
            assert_eq!(answer, format!("💰 The daily money budget of {username} is now $5.00."), "{platform}");
            let budgets = agent.budgets(thread, Some(&alice), sandpiper_agent::store::now_ms()).await.expect("budgets");
            let hers: Vec<_> = budgets.iter().filter(|b| b.scope == BudgetScope::Person && b.cap.is_some()).map(|b| (b.unit, b.cap)).collect();
            assert_eq!(hers, vec![(BudgetUnit::Cost, Some(5_000_000))], "{platform}");
        }
        // A name that is two people's handles (on Discord and on Slack) is neither's for sure.
        for (platform, id) in [("discord", "2002"), ("slack", "U0DANA")] {
            user(&agent, Person { platform, platform_user_id: id, display_name: "Dana", handle: Some("dana") }).await;
        }
        let at = Where { workstream: Some(THREAD), prefix: "/", admin: true, approver: false };
        let cmd = Command::from_text("budget @dana 100").expect("parses");
        let answer = answers::answer(&agent, &cmd, person("admin"), at).await.expect("answered");
        assert_eq!(
            answer,
            "budget: `dana` names different people: it is the Discord username of `discord-2002` and the Slack handle of `slack-u0dana`; name one by their sandpiper username",
        );
    }

    async fn only_an_admin_raises_a_channels_budget_on_slack_and_discord(db) {
        for platform in ["slack", "discord"] {
            let s = setup(&db, vec![
                text("For the owner.").with_usage(100, 10),
                text("For the participant.").with_usage(200, 20),
                text("Raised.").with_usage(1, 1),
            ]).await;
            let mut config = s.config.clone();
            config.budgets.channel_daily_tokens = Some(300);
            let agent = harness::agent(config).await;
            let (thread, channel) = match platform {
                "slack" => ("slack:T1:C7:100.000", "slack:T1:C7"),
                _ => ("discord:7001", "discord:700"),
            };
            let who = |id: &'static str| Person { platform, platform_user_id: id, display_name: id, handle: Some(id) };
            let owner = user(&agent, who("owner")).await;
            agent.open_workstream(thread, Some(&owner), Some(channel)).await.expect("opened");
            say_in(&agent, thread, who("owner"), "hello").await.expect("turn");
            say_in(&agent, thread, who("participant"), "me too").await.expect("turn");
            let refused = say_in(&agent, thread, who("owner"), "more").await;
            assert!(matches!(&refused, Err(e) if e.to_string().starts_with("This channel's daily budget of 300 tokens is used up (330 tokens used today)")), "{platform}: {refused:?}");
            // (who, approver, admin)
            let people = [
                ("owner", false, false),
                ("approver", true, false),
                ("participant", false, false),
                ("stranger", false, false),
                ("admin", false, true),
            ];
            for (name, approver, admin) in people {
                let at = Where { workstream: Some(thread), prefix: "/", admin, approver };
                let cmd = Command::from_text("budget channel 1000").expect("parses");
                let answer = answers::answer(&agent, &cmd, who(name), at).await.expect("answered");
                match admin {
                    true => assert_eq!(answer, format!("💰 The daily budget of this channel (`{channel}`) is now 1000 tokens."), "{platform} {name}"),
                    false => assert_eq!(answer, "🚫 only an admin can change a budget", "{platform} {name}"),
                }
            }
            say_in(&agent, thread, who("owner"), "more").await.expect("raised: runs");
            assert_eq!(s.llm.requests().len(), 3, "{platform}");
        }
    }
}
