//! Sub-agents end to end (issue #15): `task` runs a delegated job with its own history, its
//! calls asking in the parent's thread; `plan` writes a plan that people accept, reject or
//! annotate. Through the fake Discord, the fake Slack and the console, with the scripted
//! model (whose one script serves the parent and its sub-agents in call order).

use std::time::{Duration, Instant};

use sandpiper_agent::model::Role;
use sandpiper_agent::protocol::ApprovalStatus;
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button, card_text};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{ToolCallSpec, text, tool_call, tool_calls};
use sandpiper_tests::fake_slack::{CHANNEL_ID, TEAM_ID};
use sandpiper_tests::harness::{self, ConsoleRun};
use sandpiper_tests::slack_harness::{self, is_card};
use serde_json::{Value, json};

use super::slack::socket_run;
use super::{contents_with_role, setup};

const ONCALL: u64 = 700_000_000_000_000_001;
const JOB: &str = "Check the build\nRun the checks and report what you find.";

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}

fn bash(id: &str, command: &str) -> ToolCallSpec {
    ToolCallSpec::new(id, "bash", json!({"command": command}))
}

/// The names of the tools a recorded request offered.
fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// Checks what a sub-agent's first model call saw: its own history (the job only), its role
/// in the system message, and its scoped tools (never task or plan, no tool search).
fn assert_subagent_request(request: &Value, job: &str, kind: &str) {
    let roles: Vec<&str> = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        roles,
        ["system", "user"],
        "a sub-agent starts from its job alone"
    );
    assert_eq!(contents_with_role(request, "user"), [job]);
    assert!(contents_with_role(request, "system")[0].contains("sub-agent"));
    let tools = offered(request);
    for absent in ["task", "plan", "memory", "recall", "tool_search"] {
        assert!(
            !tools.iter().any(|t| t == absent),
            "{kind} offers {absent}: {tools:?}"
        );
    }
    let has = |name: &str| tools.iter().any(|t| t == name);
    match kind {
        "task" => assert!(
            has("bash") && has("edit_file") && has("read_file"),
            "{tools:?}"
        ),
        _ => assert!(
            has("read_file") && !has("bash") && !has("write_file"),
            "{tools:?}"
        ),
    }
}

both_backends! {
    async fn a_task_on_discord_asks_in_the_thread_shows_its_status_and_returns_its_answer(db) {
        let s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": JOB})),
            tool_calls(vec![bash("s1", "echo sub-ran"), bash("s2", "echo never-ran")]),
            text("Checked: sub-ran; the second was denied."),
            text("The sub-agent checked the build."),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "check the build for me").await;
        let key = format!("discord:{thread}");

        // The task itself asks first, like any call that is not auto-approved.
        let card = rig.card(thread).await;
        assert!(card_text(&card).contains("task: Check the build"), "{}", card_text(&card));
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;

        // Its calls ask in the same thread, marked as the sub-agent's.
        rig.wait_text(thread, "task: Check the build · step 1 · 2 tool calls · awaiting approval").await;
        let sub_card = rig.card(thread).await;
        assert_ne!(sub_card.id, card.id);
        let shown = card_text(&sub_card);
        assert!(shown.contains("task: Check the build › bash: echo sub-ran"), "{shown}");
        assert!(shown.contains("task: Check the build › bash: echo never-ran"), "{shown}");
        // The same who-decides rules: a participant may not decide the sub-agent's calls.
        let click = rig.fake.click(thread, sub_card.id, &bob(), &button(&sub_card, "Approve", 0)).await;
        let reply: Value = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(click).pop()).await;
        assert!(reply["data"]["content"].as_str().unwrap_or_default().contains("only the person who started this thread"), "{reply}");
        rig.fake.click(thread, sub_card.id, &alice(), &button(&sub_card, "Approve", 0)).await;
        rig.fake.click(thread, sub_card.id, &alice(), &button(&sub_card, "Deny", 1)).await;
        rig.wait_text(thread, "The sub-agent checked the build.").await;
        // The task's line ends with the sub-agent's answer.
        rig.wait_text(thread, "Checked: sub-ran; the second was denied.").await;

        // Stored: its decisions under the parent thread, its history as its own workstream.
        let store = rig.agent.store();
        let approved = store.approval_for_call(&key, "t1/s1").await.unwrap().unwrap().view();
        assert_eq!((approved.status, approved.decided_by.as_deref()), (ApprovalStatus::Approved, Some("@alice")));
        assert_eq!(approved.item.header, "task: Check the build › bash: echo sub-ran");
        let denied = store.approval_for_call(&key, "t1/s2").await.unwrap().unwrap().view();
        assert_eq!(denied.status, ApprovalStatus::Denied);
        let child = rig.agent.history(&format!("{key}/task:t1")).await.unwrap();
        let roles: Vec<Role> = child.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::Assistant]);
        assert!(child[2].content.contains("sub-ran"), "{}", child[2].content);
        assert!(child[3].content.starts_with("denied by @alice"), "{}", child[3].content);
        let parent = rig.agent.history(&key).await.unwrap();
        assert_eq!(parent.len(), 4, "the sub-agent's messages stay out of the parent's history");
        assert_eq!(parent[2].content, "Checked: sub-ran; the second was denied.");

        let requests = s.llm.requests();
        assert_subagent_request(&requests[1], JOB, "task");
        assert!(offered(&requests[0]).contains(&"task".to_owned()), "the top level is offered task");
        assert_eq!(contents_with_role(&requests[3], "tool"), ["Checked: sub-ran; the second was denied."]);
        s.llm.verify();
    }

    async fn a_long_plan_on_discord_is_attached_and_annotated_through_the_modal(db) {
        let long_plan: String = (1..=60).map(|i| format!("{i}. step number {i} of the migration\n")).collect();
        let mut s = setup(&db, vec![
            tool_call("p1", "plan", json!({"prompt": "Move the database"})),
            text(&long_plan),
            text("I will follow the plan with the note."),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "plan the move").await;
        let key = format!("discord:{thread}");
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;

        // The review: the whole plan as a file, its beginning on the card.
        let review = rig.fake.wait_until(WAIT, "the review card", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| card_text(m).contains("Review needed"))
        }).await;
        let file = format!(".plan-{}.md", sandpiper_agent::workstream::safe_name(&key));
        let attached = rig.bot_messages(thread).into_iter()
            .flat_map(|m| m.attachments)
            .find(|(name, _)| *name == file)
            .expect("the plan is attached");
        assert_eq!(String::from_utf8(attached.1).unwrap(), long_plan);
        let shown = card_text(&review);
        assert!(shown.contains("📎 The whole plan (60 lines) is attached above"), "{shown}");
        assert!(shown.contains("1. step number 1"), "{shown}");
        let labels: Vec<String> = sandpiper_tests::discord_harness::buttons(&review).into_iter().map(|(_, l, _)| l).collect();
        assert_eq!(labels, ["Accept", "Reject", "Annotate"]);

        // A participant may not decide it; an approver annotates through the note dialog.
        let click = rig.fake.click(thread, review.id, &bob(), &button(&review, "Accept", 0)).await;
        let reply: Value = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(click).pop()).await;
        assert!(reply["data"]["content"].as_str().unwrap_or_default().contains("only the person who started this thread"), "{reply}");
        let annotate = button(&review, "Annotate", 0);
        let click = rig.fake.click(thread, review.id, &carol(), &annotate).await;
        let modal: Value = rig.fake.wait_until(WAIT, "the note dialog", |f| f.interaction_responses(click).pop()).await;
        assert_eq!(modal["type"], json!(9), "a modal: {modal}");
        rig.fake
            .modal_submit(thread, Some(review.id), &carol(), &format!("n{annotate}"), &[("note", "keep the old replica running")])
            .await;
        rig.wait_text(thread, "I will follow the plan with the note.").await;
        rig.wait_message(thread, review.id, "Annotated by @carol").await;

        let requests = s.llm.requests();
        assert_subagent_request(&requests[1], "Move the database", "plan");
        let result = &contents_with_role(&requests[2], "tool")[0];
        assert!(result.starts_with("The plan was accepted by @carol with a note"), "{result}");
        assert!(result.contains("Note: keep the old replica running"), "{result}");
        assert!(result.ends_with(long_plan.trim_end()), "the plan returns to the model");
        let saved = std::fs::read_to_string(s.dir(&key).join(&file)).unwrap();
        assert_eq!(saved, long_plan);
        s.llm.verify();
    }

    async fn a_task_in_the_console_prints_its_status_and_asks_marked_as_the_sub_agent(db) {
        let s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": JOB})),
            tool_call("s1", "bash", json!({"command": "echo from-the-sub-agent"})),
            tool_call("s2", "bash", json!({"command": "echo denied-one"})),
            text("Ran one command; the other was denied."),
            text("Done: the sub-agent reported back."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "sub", "alice", false);
        console.send("check the build").await;
        console.wait_for("▸ task: Check the build\n", WAIT).await;
        console.wait_for("approve task? ", WAIT).await;
        console.send("y").await;
        console.wait_for("approve task: Check the build › bash: echo from-the-sub-agent?", WAIT).await;
        console.send("y").await;
        console.wait_for("approve task: Check the build › bash: echo denied-one?", WAIT).await;
        console.send("n, not that one").await;
        console.wait_for("Done: the sub-agent reported back.", WAIT).await;
        let out = console.finish().await;
        for line in [
            "⋯ task: Check the build · step 1 · 0 tool calls · thinking",
            "⋯ task: Check the build · step 1 · 1 tool call · awaiting approval: bash: echo from-the-sub-agent",
            "⋯ task: Check the build · step 2 · 1 tool call · thinking",
            "⋯ task: Check the build · step 3 · 2 tool calls (1 denied) · thinking",
            "⋯ task: Check the build · step 3 · 2 tool calls (1 denied) · done",
        ] {
            assert!(out.contains(line), "missing {line:?} in:\n{out}");
        }
        let child = agent.history("console:sub/task:t1").await.unwrap();
        assert!(child[2].content.contains("from-the-sub-agent"));
        assert_eq!(child[4].content, "denied by @alice: not that one");
        let requests = s.llm.requests();
        assert_subagent_request(&requests[1], JOB, "task");
        assert_eq!(contents_with_role(&requests[4], "tool"), ["Ran one command; the other was denied."]);
        s.llm.verify();
    }

    async fn plans_in_the_console_are_annotated_rejected_and_accepted_and_each_refines_the_last(db) {
        let s = setup(&db, vec![
            tool_call("p1", "plan", json!({"prompt": "Move the database"})),
            text("1. dump\n2. restore"),
            text("Following the annotated plan."),
            tool_call("p2", "plan", json!({"prompt": "Also migrate the users"})),
            text("1. dump\n2. migrate users\n3. restore"),
            text("Not doing it then."),
            tool_call("p3", "plan", json!({"prompt": "Just dump"})),
            text("1. dump only"),
            text("Dumping."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "plans", "alice", false);
        console.send("plan the move").await;
        console.wait_for("▸ plan: Move the database", WAIT).await;
        console.wait_for("approve plan?", WAIT).await;
        console.send("y").await;
        console.wait_for("review plan: Move the database:", WAIT).await;
        console.send("c, dump with --no-owner").await;
        console.wait_for("Following the annotated plan.", WAIT).await;
        console.send("and the users").await;
        console.wait_for("▸ plan: Also migrate the users", WAIT).await;
        console.send("y").await;
        console.wait_for("review plan (refined): Also migrate the users:", WAIT).await;
        console.send("n, too risky").await;
        console.wait_for("Not doing it then.", WAIT).await;
        console.send("just dump").await;
        console.wait_for("▸ plan: Just dump", WAIT).await;
        console.send("y").await;
        console.wait_for("review plan (refined): Just dump:", WAIT).await;
        console.send("y").await;
        let out = console.wait_for("Dumping.", WAIT).await;
        assert!(out.contains("1. dump\n2. restore"), "the plan is shown before its review:\n{out}");
        console.finish().await;

        let requests = s.llm.requests();
        assert_subagent_request(&requests[1], "Move the database", "plan");
        let annotated = &contents_with_role(&requests[2], "tool")[0];
        assert!(annotated.starts_with("The plan was accepted by @alice with a note"), "{annotated}");
        assert!(annotated.contains("Note: dump with --no-owner") && annotated.ends_with("1. dump\n2. restore"), "{annotated}");
        // The second plan starts from the first.
        let job = &contents_with_role(&requests[4], "user")[0];
        assert!(job.starts_with("Also migrate the users\n") && job.ends_with("1. dump\n2. restore\n"), "{job}");
        let rejected = contents_with_role(&requests[5], "tool").pop().unwrap();
        assert!(rejected.starts_with("The plan was rejected by @alice: too risky"), "{rejected}");
        let accepted = contents_with_role(&requests[8], "tool").pop().unwrap();
        assert!(accepted.starts_with("The plan was accepted by @alice. Carry it out."), "{accepted}");

        let store = agent.store();
        let status = |call: &'static str| async move {
            let r = store.approval_for_call("console:plans", call).await.unwrap().unwrap().view();
            (r.status, r.feedback)
        };
        assert_eq!(status("p1").await, (ApprovalStatus::Annotated, Some("dump with --no-owner".into())));
        assert_eq!(status("p2").await, (ApprovalStatus::Denied, Some("too risky".into())));
        assert_eq!(status("p3").await, (ApprovalStatus::Approved, None));
        let file = s.dir("console:plans").join(".plan-console_3aplans.md");
        assert_eq!(std::fs::read_to_string(file).unwrap(), "1. dump only\n");
        s.llm.verify();
    }

    async fn a_plan_file_linked_to_the_config_or_out_of_the_workdir_is_refused_and_left_alone(db) {
        let s = setup(&db, vec![
            tool_call("p1", "plan", json!({"prompt": "Move the database"})),
            text("The plan file is in the way."),
            tool_call("p2", "plan", json!({"prompt": "Move the database"})),
            text("Still in the way."),
        ]).await;
        let config_file = s.work.path().join("sandpiper.toml");
        std::fs::write(&config_file, "[discord]\ntoken = \"bot-secret\"\n").unwrap();
        let outside = tempfile::tempdir().unwrap();
        let notes = outside.path().join("notes.md");
        std::fs::write(&notes, "private notes").unwrap();
        let agent = harness::agent_protecting(s.config.clone(), vec![config_file.clone()]).await;
        let dir = s.dir("console:links");
        std::fs::create_dir_all(&dir).unwrap();
        let plan = dir.join(".plan-console_3alinks.md");
        std::os::unix::fs::symlink(&config_file, &plan).unwrap();

        let console = ConsoleRun::start(agent.clone(), "links", "alice", false);
        console.send("plan the move").await;
        console.wait_for("▸ plan: Move the database", WAIT).await;
        console.wait_for("approve plan?", WAIT).await;
        console.send("y").await;
        console.wait_for("The plan file is in the way.", WAIT).await;
        std::fs::remove_file(&plan).unwrap();
        std::os::unix::fs::symlink(&notes, &plan).unwrap();
        console.send("again").await;
        console.wait_for("▸ plan: Move the database", WAIT).await;
        console.wait_for("approve plan?", WAIT).await;
        console.send("y").await;
        console.wait_for("Still in the way.", WAIT).await;
        console.finish().await;

        // No sub-agent ran: the model was called only by the top level, and neither the
        // config nor the notes reached it or the thread.
        let requests = s.llm.requests();
        assert_eq!(requests.len(), 4);
        let first = contents_with_role(&requests[1], "tool").pop().unwrap();
        assert!(first.contains("refused") && first.contains("sandpiper's own configuration"), "{first}");
        let second = contents_with_role(&requests[3], "tool").pop().unwrap();
        assert!(second.contains("refused") && second.contains("leads outside this workstream's directory"), "{second}");
        let everything = serde_json::to_string(&requests).unwrap();
        assert!(!everything.contains("bot-secret") && !everything.contains("private notes"));
        assert_eq!(std::fs::read_to_string(&config_file).unwrap(), "[discord]\ntoken = \"bot-secret\"\n");
        assert_eq!(std::fs::read_to_string(&notes).unwrap(), "private notes");
        s.llm.verify();
    }

    async fn ctrl_c_in_the_console_stops_the_sub_agent_and_its_running_command(db) {
        let s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": "Wait for the deploy"})),
            tool_call("s1", "bash", json!({"command": "echo started; sleep 30; echo finished"})),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "stop", "alice", false);
        console.send("wait for the deploy").await;
        console.wait_for("▸ task: Wait for the deploy\napprove task? ", WAIT).await;
        console.send("y").await;
        console.wait_for("approve task: Wait for the deploy › bash:", WAIT).await;
        console.send("y").await;
        console.wait_for("running bash: echo started; sleep 30", WAIT).await;
        let stopped_at = Instant::now();
        assert!(console.interrupter.interrupt());
        console.wait_for("(turn cancelled)", WAIT).await;
        assert!(stopped_at.elapsed() < Duration::from_secs(10), "the stop is prompt");
        console.finish().await;
        let child = agent.history("console:stop/task:t1").await.unwrap();
        assert!(child.last().unwrap().content.starts_with("cancelled"), "{:?}", child.last());
        let parent = agent.history("console:stop").await.unwrap();
        assert!(parent.last().unwrap().content.starts_with("cancelled"), "{:?}", parent.last());
        // Stopped, the turn made no further model call (so no request carries these results).
        assert_eq!(s.llm.requests().len(), 2);
        assert_eq!(s.llm.remaining(), 0);
    }

    async fn a_task_on_slack_asks_in_the_thread_and_shows_its_status(db) {
        let s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": JOB})),
            // Called by name anyway, task is refused to a sub-agent (no recursion).
            tool_calls(vec![
                ToolCallSpec::new("s0", "task", json!({"prompt": "recurse"})),
                bash("s1", "echo slack-sub"),
            ]),
            text("Checked on Slack."),
            text("The sub-agent is done."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "check the build").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (approve, value) = slack_harness::button(&card, "Approve");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &approve, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the status line", |m| {
            m.text.contains("task: Check the build · step 1 · 2 tool calls · awaiting approval: bash: echo slack-sub")
        }).await;
        let sub_card = run.card(CHANNEL_ID, &root, 1).await;
        assert!(sub_card.text.contains("task: Check the build › bash: echo slack-sub"), "{}", sub_card.text);
        let (approve, value) = slack_harness::button(&sub_card, "Approve");
        run.slack.click(CHANNEL_ID, &sub_card.ts, &bob, &approve, &value).await;
        run.ephemeral(CHANNEL_ID, "U0BOB", "🚫 only the person").await;
        run.slack.click(CHANNEL_ID, &sub_card.ts, &alice, &approve, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "The sub-agent is done.").await;
        run.wait_message(CHANNEL_ID, &root, "the decided card", |m| {
            let blocks = m.blocks.to_string();
            is_card(m) && blocks.contains("Approved by @alice") && blocks.contains("slack-sub")
        }).await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        let child = run.agent.history(&format!("{key}/task:t1")).await.unwrap();
        assert!(child[2].content.starts_with("error: unknown tool `task`"), "{:?}", child[2]);
        assert!(!child[2].content.contains("plan"), "{:?}", child[2]);
        assert!(child[3].content.contains("slack-sub"), "{:?}", child[3]);
        assert_eq!(contents_with_role(&s.llm.requests()[3], "tool"), ["Checked on Slack."]);
        s.llm.verify();
        run.stop().await;
    }

    async fn a_restart_mid_task_leaves_the_parent_call_interrupted_and_resumable(db) {
        let s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": JOB})),
            tool_call("s1", "bash", json!({"command": "echo before-restart"})),
            text("The task was cut short by a restart."),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "check the build").await;
        let key = format!("discord:{thread}");

        // Waiting for its own approval across a restart, the task resumes on Resume.
        let card = rig.card(thread).await;
        let rig = rig.restart().await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        let kept = rig.wait_message(thread, card.id, "Your decision is kept").await;
        rig.fake.click(thread, card.id, &alice(), &button(&kept, "Resume", 0)).await;
        let sub_card = rig.fake.wait_until(WAIT, "the sub-agent's card", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| card_text(m).contains("task: Check the build › bash"))
        }).await;

        // A restart while the sub-agent runs: its card is gone, the parent's call dangles.
        let rig = rig.restart().await;
        let child_key = format!("{key}/task:t1");
        let child = rig.agent.history(&child_key).await.unwrap();
        assert_eq!(child.len(), 2, "its history is stored: {child:?}");
        assert_eq!(child[1].tool_calls[0].id, "s1");
        rig.fake.click(thread, sub_card.id, &alice(), &button(&sub_card, "Approve", 0)).await;
        rig.wait_message(thread, sub_card.id, "the turn that asked was stopped or is gone").await;
        let stored = rig.agent.store().approval_for_call(&key, "t1/s1").await.unwrap().unwrap().view();
        assert_eq!(stored.status, ApprovalStatus::Cancelled);

        // The next message closes the interrupted call like any other.
        rig.fake.user_message(thread, &alice(), "what happened?").await;
        rig.wait_text(thread, "The task was cut short by a restart.").await;
        let tool = contents_with_role(&s.llm.requests()[2], "tool");
        assert!(tool[0].starts_with("not run: sandpiper restarted"), "{tool:?}");
        assert!(!s.llm.requests()[2].to_string().contains("before-restart\\n"), "it never ran");
        // The sub-agent's call s1 never got a result: it ended with the restart.
        assert_eq!(s.llm.remaining(), 0);
    }
}

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_mcp_test_server");

/// The in-repo MCP test server as `t` and as `u` (`add` runs unasked on both).
fn with_servers(mut config: sandpiper_agent::Config) -> sandpiper_agent::Config {
    for name in ["t", "u"] {
        config.mcp.servers.insert(
            name.to_owned(),
            sandpiper_agent::mcp::McpServerConfig::Stdio {
                command: TEST_SERVER.into(),
                args: vec!["--stdio".into()],
                env: std::collections::BTreeMap::new(),
                auto_approve: vec!["add".into()],
            },
        );
    }
    config.mcp.refresh_interval = Duration::ZERO;
    config.tools.search = sandpiper_agent::config::ToolSearchMode::Off;
    config
}

/// Runs one message in `key` with every approval granted, with the task tier `task`.
async fn run_approved(agent: &sandpiper_agent::Agent, key: &str, task: Option<Vec<String>>) {
    let approver =
        harness::ScriptedApprover::new(vec![sandpiper_agent::protocol::Decision::approve(); 8]);
    let sink = harness::RecordingSink::default();
    let req = sandpiper_agent::TurnRequest {
        workstream: key,
        author: Some("alice"),
        text: "go".into(),
        sink: &sink,
        approver: &approver,
        cancel: tokio_util::sync::CancellationToken::new(),
    };
    agent.run_task_turn(req, task).await.expect("the turn runs");
}

both_backends! {
    async fn a_sub_agent_gets_the_mcp_tools_the_threads_connector_policy_and_task_tier_allow(db) {
        let s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": "Add numbers"})),
            tool_calls(vec![
                ToolCallSpec::new("s1", "mcp__t__add", json!({"a": 1, "b": 2})),
                ToolCallSpec::new("s2", "mcp__u__add", json!({"a": 40, "b": 2})),
            ]),
            text("u says 42; t is not enabled."),
            text("done"),
            // A job whose task tier allows no connector at all.
            tool_call("t2", "task", json!({"prompt": "Add more numbers"})),
            text("no MCP tools here"),
            text("done again"),
        ]).await;
        let agent = harness::agent(with_servers(s.config.core.clone())).await;
        let key = "console:subagent-connectors";
        agent.store().ensure_workstream(key, Some("alice")).await.unwrap();
        agent.store().set_workstream_connectors(key, Some(&["u".to_owned()])).await.unwrap();
        run_approved(&agent, key, None).await;
        let requests = s.llm.requests();
        let tools = offered(&requests[1]);
        assert!(tools.contains(&"mcp__u__add".to_owned()), "{tools:?}");
        assert!(tools.iter().all(|t| !t.starts_with("mcp__t__")), "{tools:?}");
        let results = contents_with_role(&requests[2], "tool");
        assert_eq!(results[0], "Connector t is not enabled for this task");
        assert!(results[1].contains("42"), "{results:?}");

        run_approved(&agent, key, Some(Vec::new())).await;
        let requests = s.llm.requests();
        let tools = offered(&requests[5]);
        assert!(tools.iter().all(|t| !t.starts_with("mcp__")), "the task tier allows none: {tools:?}");
        assert!(tools.contains(&"bash".to_owned()), "{tools:?}");
        s.llm.verify();
        agent.mcp().shutdown().await;
    }

    async fn a_round_cap_and_a_token_budget_stop_a_runaway_sub_agent(db) {
        let mut s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": "Loop forever"})),
            tool_call("s1", "bash", json!({"command": "echo round-one"})),
            tool_call("s2", "bash", json!({"command": "echo round-two"})),
            text("Stopped by the round cap."),
            tool_call("t2", "task", json!({"prompt": "Spend tokens"})),
            tool_call("s3", "bash", json!({"command": "echo spent"})).with_usage(900, 200),
            text("Stopped by the budget."),
        ]).await;
        s.config.approval.auto_approve = true;
        s.config.agent.task_max_rounds = 2;
        s.config.agent.task_max_tokens = 1000;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "caps", "alice", true);
        console.send("loop").await;
        console.wait_for("Stopped by the round cap.", WAIT).await;
        let requests = s.llm.requests();
        let result = contents_with_role(&requests[3], "tool").pop().unwrap();
        assert!(result.starts_with("[the sub-agent was stopped after 2 model calls (agent.task_max_rounds) before it finished"), "{result}");
        // The budget is checked before each model call.
        console.send("spend").await;
        console.wait_for("Stopped by the budget.", WAIT).await;
        let out = console.finish().await;
        assert!(out.contains("⋯ task: Loop forever · step 2 · 2 tool calls · stopped"), "{out}");
        let requests = s.llm.requests();
        assert_eq!(
            contents_with_role(&requests[6], "tool").pop().unwrap(),
            "[the sub-agent was stopped after using 1100 tokens (agent.task_max_tokens) before it \
             finished; its last message follows]\n(it had not written anything yet)"
        );
        let child = agent.history("console:caps/task:t1").await.unwrap();
        assert_eq!(child.len(), 5, "{child:?}");
        // A stopped sub-agent's last calls get no model call after them.
        assert_eq!(s.llm.remaining(), 0);
    }

    async fn stop_on_discord_stops_the_sub_agent_and_closes_its_card(db) {
        let s = setup(&db, vec![
            tool_call("t1", "task", json!({"prompt": JOB})),
            tool_call("s1", "bash", json!({"command": "echo never"})),
        ]).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "check the build").await;
        let key = format!("discord:{thread}");
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        let sub_card = rig.fake.wait_until(WAIT, "the sub-agent's card", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| card_text(m).contains("task: Check the build › bash"))
        }).await;
        rig.fake.slash(thread, &alice(), "stop", json!([])).await;
        rig.wait_message(thread, sub_card.id, "the turn that asked was stopped or is gone").await;
        rig.wait_text(thread, "(stopped)").await;
        let stored = rig.agent.store().approval_for_call(&key, "t1/s1").await.unwrap().unwrap().view();
        assert_eq!(stored.status, ApprovalStatus::Cancelled);
        let parent = rig.agent.history(&key).await.unwrap();
        assert!(parent.last().unwrap().content.starts_with("cancelled"), "{:?}", parent.last());
        assert_eq!(s.llm.remaining(), 0);
    }
}

fn dave() -> FakeUser {
    FakeUser::new(900_000_000_000_000_004, "dave")
}

const NOT_YOURS: &str = "only the person who started this thread, or an approver, can decide this";
const OWNERS_ONLY: &str = "only the person who started this thread can choose Always allow";

/// `who` clicks `label` on the one-row `card` and is told privately `why`.
async fn refused(
    rig: &DiscordRig,
    thread: u64,
    card: &sandpiper_tests::fake_discord::FakeMessage,
    who: &FakeUser,
    label: &str,
    why: &str,
) {
    let click = rig
        .fake
        .click(thread, card.id, who, &button(card, label, 0))
        .await;
    let reply: Value = rig
        .fake
        .wait_until(WAIT, "the refusal", |f| {
            f.interaction_responses(click).pop()
        })
        .await;
    let said = reply["data"]["content"].as_str().unwrap_or_default();
    assert!(said.contains(why), "{} clicking {label}: {said}", who.name);
}

/// A new card with open buttons, other than `seen`.
async fn next_card(
    rig: &DiscordRig,
    thread: u64,
    seen: &[u64],
) -> sandpiper_tests::fake_discord::FakeMessage {
    rig.fake
        .wait_until(WAIT, "a new card", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| {
                !seen.contains(&m.id)
                    && !sandpiper_tests::discord_harness::open_buttons(m).is_empty()
            })
        })
        .await
}

both_backends! {
    async fn a_sub_agents_calls_are_decided_by_the_threads_people_and_always_allow_is_the_threads(db) {
        let mut s = setup(&db, vec![
            text("hello alice"),
            tool_call("t1", "task", json!({"prompt": JOB})),
            tool_call("s1", "bash", json!({"command": "echo one"})),
            tool_call("s2", "bash", json!({"command": "echo two"})),
            text("sub done"),
            tool_call("c9", "bash", json!({"command": "echo parent-after-grant"})),
            text("all done"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        rig.wait_text(thread, "hello alice").await;
        let key = format!("discord:{thread}");

        // bob's message causes the task; he may not decide it, nor may dave, a stranger.
        rig.fake.user_message(thread, &bob(), "check the build").await;
        let task_card = next_card(&rig, thread, &[]).await;
        refused(&rig, thread, &task_card, &bob(), "Approve", NOT_YOURS).await;
        refused(&rig, thread, &task_card, &dave(), "Approve", NOT_YOURS).await;
        rig.fake.click(thread, task_card.id, &carol(), &button(&task_card, "Approve", 0)).await;

        // The sub-agent's calls: the same four people, the same rules.
        let first = next_card(&rig, thread, &[task_card.id]).await;
        assert!(card_text(&first).contains("task: Check the build › bash: echo one"), "{}", card_text(&first));
        refused(&rig, thread, &first, &bob(), "Approve", NOT_YOURS).await;
        refused(&rig, thread, &first, &dave(), "Deny", NOT_YOURS).await;
        refused(&rig, thread, &first, &carol(), "Always allow", OWNERS_ONLY).await;
        rig.fake.click(thread, first.id, &carol(), &button(&first, "Approve", 0)).await;
        let second = next_card(&rig, thread, &[task_card.id, first.id]).await;
        rig.fake.click(thread, second.id, &alice(), &button(&second, "Always allow", 0)).await;

        // Always allow on a sub-agent's card is the thread's: the parent's next bash runs unasked.
        rig.wait_text(thread, "all done").await;
        let store = rig.agent.store();
        assert_eq!(store.grants(&key).await.unwrap(), vec!["bash".to_owned()]);
        let one = store.approval_for_call(&key, "t1/s1").await.unwrap().unwrap().view();
        assert_eq!((one.status, one.decided_by.as_deref()), (ApprovalStatus::Approved, Some("@carol")));
        let two = store.approval_for_call(&key, "t1/s2").await.unwrap().unwrap().view();
        assert_eq!((two.status, two.decided_by.as_deref()), (ApprovalStatus::AlwaysAllowed, Some("@alice")));
        assert!(store.approval_for_call(&key, "c9").await.unwrap().is_none(), "no card for c9");
        let results = contents_with_role(&s.llm.requests()[6], "tool");
        assert!(results.last().unwrap().contains("parent-after-grant"), "{results:?}");
        s.llm.verify();
    }
}

both_backends! {
    async fn plans_on_slack_are_rejected_then_refined_and_accepted(db) {
        let s = setup(&db, vec![
            tool_call("p1", "plan", json!({"prompt": "Move the database"})),
            text("1. dump\n2. restore"),
            text("Rejected; I will ask."),
            tool_call("p2", "plan", json!({"prompt": "Move the database with a replica"})),
            text("1. start a replica\n2. switch over"),
            text("Accepted; starting."),
        ]).await;
        let run = socket_run(&s).await;
        let alice = run.slack.user("U0ALICE", "alice");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "plan the move").await;
        let card = run.card(CHANNEL_ID, &root, 0).await;
        let (approve, value) = slack_harness::button(&card, "Approve");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &approve, &value).await;
        let review = run.card(CHANNEL_ID, &root, 1).await;
        assert!(review.text.contains("Review needed"), "{}", review.text);
        assert!(review.blocks.to_string().contains("2. restore"), "the plan is on the card");
        let (reject, value) = slack_harness::button(&review, "Reject");
        run.slack.click(CHANNEL_ID, &review.ts, &alice, &reject, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the first answer", |m| m.text == "Rejected; I will ask.").await;

        run.slack.thread_message(CHANNEL_ID, &root, &alice, "use a replica").await;
        let card = run.card(CHANNEL_ID, &root, 2).await;
        let (approve, value) = slack_harness::button(&card, "Approve");
        run.slack.click(CHANNEL_ID, &card.ts, &alice, &approve, &value).await;
        let review = run.card(CHANNEL_ID, &root, 3).await;
        let (accept, value) = slack_harness::button(&review, "Accept");
        run.slack.click(CHANNEL_ID, &review.ts, &alice, &accept, &value).await;
        run.wait_message(CHANNEL_ID, &root, "the second answer", |m| m.text == "Accepted; starting.").await;

        let requests = s.llm.requests();
        let rejected = contents_with_role(&requests[2], "tool").pop().unwrap();
        assert!(rejected.starts_with("The plan was rejected by @alice."), "{rejected}");
        let job = contents_with_role(&requests[4], "user").pop().unwrap();
        assert!(job.ends_with("1. dump\n2. restore\n"), "the second plan refines the first: {job}");
        let accepted = contents_with_role(&requests[5], "tool").pop().unwrap();
        assert!(accepted.starts_with("The plan was accepted by @alice."), "{accepted}");
        s.llm.verify();
        run.stop().await;
    }
}
