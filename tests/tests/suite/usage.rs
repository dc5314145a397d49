//! What the model costs: Anthropic is asked to cache and what it cached is counted; every
//! model call's tokens are stored per thread and person on both databases; `/usage`, `/budget`
//! and `/status` show them; a turn over a budget is refused before the model is called; who
//! may see whose usage and who may change a budget (owner, approver, participant, stranger,
//! admin).

use sandpiper_agent::config::{Provider, Secret};
use sandpiper_agent::protocol::ApproveAll;
use sandpiper_agent::store::usage::{UsageOf, UsageTotals};
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_channels::commands::Command;
use sandpiper_channels::commands::account::Person;
use sandpiper_channels::commands::answers::{self, Where};
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::text;
use sandpiper_tests::harness::{self, ConsoleRun, RecordingSink};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::setup;

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
    let id = sandpiper_channels::commands::account::user_id(&agent.people(), person(who))
        .await
        .expect("user");
    let sink = RecordingSink::default();
    agent
        .run_turn(TurnRequest {
            workstream: THREAD,
            author: Some(&id),
            text: text.into(),
            sink: &sink,
            approver: &ApproveAll,
            cancel: CancellationToken::new(),
        })
        .await
        .expect("turn");
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
}
