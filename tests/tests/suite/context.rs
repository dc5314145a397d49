//! Workstreams that outlive the model's context window: the window is found, every request
//! carries an output limit the window can hold, a conversation is compacted before it is
//! full and after a server says it is, an answer cut at the limit says so, and what is sent
//! back is always a history the server accepts. The fake enforces a window with the real
//! error bodies of llama.cpp, OpenAI, vLLM and Anthropic (`fake_llm::window`).

use sandpiper_agent::model::{Message, ToolCall};
use std::time::Duration;

use sandpiper_agent::protocol::{ApproveAll, Compacting, TurnEvent};
use sandpiper_agent::turn::agent::{AgentError, TurnOutcome, TurnRequest};
use sandpiper_agent::turn::context::WindowSource;
use sandpiper_agent::{Agent, Config};
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::window::prompt_tokens;
use sandpiper_tests::fake_llm::{ContextLimit, Flavor, Reply, text, tool_call_raw};
use sandpiper_tests::harness::{self, ConsoleRun, RecordingSink};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::setup;

/// A message of about `bytes` bytes.
fn filler(tag: &str, bytes: usize) -> String {
    let mut s = format!("{tag}: ");
    while s.len() < bytes {
        s.push_str("the build of the payments service fails in the integration stage; ");
    }
    s
}

/// Whether a request is the summariser's (compaction), not the conversation's.
fn is_summary(body: &Value) -> bool {
    let system = body["messages"][0]["content"]
        .as_str()
        .or_else(|| body["system"].as_str());
    system.is_some_and(|s| s.starts_with("You are compacting a long conversation"))
}

/// Answers conversation requests with `answer_bytes` of text and summary requests with a
/// short checkpoint.
fn respond(agent_answer_bytes: usize) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |body| {
        if is_summary(body) {
            text("- the team is fixing the payments build\n- next: rerun the integration stage")
        } else {
            text(filler("answer", agent_answer_bytes))
        }
    }
}

async fn turn(
    agent: &Agent,
    key: &str,
    message: &str,
) -> (Result<TurnOutcome, AgentError>, Vec<TurnEvent>) {
    let sink = RecordingSink::default();
    let result = agent
        .run_turn(TurnRequest {
            workstream: key,
            author: Some("alice"),
            text: message.to_owned(),
            sink: &sink,
            approver: &ApproveAll,
            cancel: CancellationToken::new(),
        })
        .await;
    (result, sink.events())
}

fn notices(events: &[TurnEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Notice(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

/// The conversation's requests (not the summariser's) with their prompt size and limit.
fn chat_requests(bodies: &[Value]) -> Vec<(u64, Option<u64>)> {
    bodies
        .iter()
        .filter(|b| !is_summary(b))
        .map(|b| {
            let limit = b
                .get("max_tokens")
                .or_else(|| b.get("max_completion_tokens"))
                .and_then(Value::as_u64);
            (prompt_tokens(b), limit)
        })
        .collect()
}

/// A history refused by the server, so the next turn compacts it with a summary the model
/// writes after `summary_after`; then `after` answers.
fn refused_then_summary_held(summary_after: Duration, after: &[&str]) -> Vec<Reply> {
    let mut script = vec![
        text("first answer"),
        Reply::http_error(500, "Failed to parse tool call arguments as JSON"),
        text("- summary: the team said one").held(summary_after),
    ];
    script.extend(after.iter().map(|a| text(*a)));
    script
}

/// Waits until the model was asked for a summary.
async fn summary_asked(llm: &sandpiper_tests::fake_llm::FakeLlm) {
    let asked = async {
        while !llm.requests().iter().any(is_summary) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("the model was asked for a summary");
}

/// Runs a turn in `key` whose events go to `sink`, stopped when `cancel` is.
async fn turn_into(
    agent: &Agent,
    key: &str,
    message: &str,
    sink: &RecordingSink,
    cancel: CancellationToken,
) -> Result<TurnOutcome, AgentError> {
    agent
        .run_turn(TurnRequest {
            workstream: key,
            author: Some("alice"),
            text: message.to_owned(),
            sink,
            approver: &ApproveAll,
            cancel,
        })
        .await
}

fn compacting(events: &[TurnEvent]) -> Vec<Compacting> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Compacting(c) => Some(*c),
            _ => None,
        })
        .collect()
}

fn unlimited_window(config: &mut Config) {
    config.model.context_window = None;
}

both_backends! {
    async fn thirty_messages_in_a_small_window_each_get_an_answer_and_compaction_is_announced(db) {
        let mut s = setup(&db, vec![]).await;
        s.llm.set_window(ContextLimit::new(8192, Flavor::LlamaCpp));
        s.llm.respond_with(respond(700));
        unlimited_window(&mut s.config);
        let agent = harness::agent(s.config.clone()).await;
        let key = "console:long";
        let mut compactions = Vec::new();
        for i in 0..30 {
            let (result, events) = turn(&agent, key, &filler(&format!("message {i}"), 1200)).await;
            let outcome = result.unwrap_or_else(|e| panic!("message {i} failed: {e}"));
            assert!(outcome.text.starts_with("answer: "), "message {i}: {outcome:?}");
            compactions.extend(notices(&events).into_iter().filter(|n| n.contains("Compacted this conversation")));
        }
        assert_eq!(s.llm.refusals(), vec![], "no request was refused for its size");
        assert!(!compactions.is_empty(), "compaction was announced");
        assert!(compactions[0].contains("older messages summarised"), "{compactions:?}");
        assert!(compactions[0].contains("tokens of 8192"), "{compactions:?}");
        let window = agent.context_window().await;
        assert_eq!((window.tokens, window.source), (8192, WindowSource::Server("/props n_ctx")));
        // Every request fits the window with its output limit.
        for (prompt, limit) in chat_requests(&s.llm.requests()) {
            let limit = limit.expect("every request carries an output limit");
            assert!(prompt + limit <= 8192, "prompt {prompt} + limit {limit}");
        }
        // The memory nudge came with the compaction.
        assert!(
            s.llm.requests().iter().any(|b| b.to_string().contains("is being compacted to fit your context window")),
            "the compaction nudge reached the model"
        );
        // The whole history stays in the database.
        let history = agent.history(key).await.expect("history");
        let asked = history.iter().filter(|m| m.role == sandpiper_agent::model::Role::User).count();
        assert_eq!(asked, 30);
        let checkpoint = agent.store().latest_checkpoint(key).await.expect("store").expect("a checkpoint");
        assert!(checkpoint.summary.contains("payments build"), "{checkpoint:?}");
        // A new process (the workstream reloaded) goes on from the checkpoint.
        agent.forget(key);
        let (result, _) = turn(&agent, key, "and now?").await;
        result.expect("the reloaded workstream answers");
        let last = s.llm.requests().last().cloned().expect("a request");
        assert!(last.to_string().contains("payments build"), "the checkpoint is sent after a reload");
        assert!(!last.to_string().contains("message 0:"), "what the checkpoint replaces is not");
        assert_eq!(s.llm.refusals(), vec![]);
    }

    async fn a_server_that_says_the_context_is_full_is_compacted_and_asked_again(db) {
        for flavor in [Flavor::OpenAi, Flavor::Vllm, Flavor::LlamaCpp, Flavor::Anthropic] {
            let mut s = setup(&db, vec![]).await;
            s.llm.respond_with(respond(300));
            // Sandpiper believes the window is far larger than the server's.
            s.config.model.context_window = Some(200_000);
            if flavor == Flavor::Anthropic {
                s.config.model.provider = sandpiper_agent::config::Provider::Anthropic;
                s.config.model.base_url = Some(s.llm.anthropic_base_url());
            }
            let agent = harness::agent(s.config.clone()).await;
            let key = format!("console:full-{flavor:?}");
            for i in 0..8 {
                turn(&agent, &key, &filler(&format!("early {i}"), 3000)).await.0.expect("fits before the window");
            }
            s.llm.set_window(ContextLimit::new(9000, flavor));
            let (result, events) = turn(&agent, &key, "what next?").await;
            let outcome = result.unwrap_or_else(|e| panic!("{flavor:?}: {e}"));
            assert!(outcome.text.starts_with("answer"), "{flavor:?}: {outcome:?}");
            let refusals = s.llm.refusals();
            assert_eq!(refusals.len(), 1, "{flavor:?}: refused once, then compacted: {refusals:?}");
            assert!(notices(&events).iter().any(|n| n.contains("Compacted")), "{flavor:?}: {events:?}");
            // The window the server named is what sandpiper now works with.
            let window = agent.context_window().await;
            assert_eq!((window.tokens, window.source), (9000, WindowSource::Learned), "{flavor:?}");
            // Later messages are not refused.
            turn(&agent, &key, &filler("later", 2000)).await.0.expect("later messages fit");
            assert_eq!(s.llm.refusals().len(), 1, "{flavor:?}");
        }
    }

    async fn an_answer_cut_at_the_output_limit_says_so_and_the_turn_ends_cleanly(db) {
        let mut s = setup(&db, vec![text(filler("answer", 2000)), text("short")]).await;
        s.llm.set_window(ContextLimit::new(100_000, Flavor::OpenAi));
        s.config.model.max_tokens = Some(50);
        let agent = harness::agent(s.config.clone()).await;
        let (result, events) = turn(&agent, "console:cut", "write a lot").await;
        let outcome = result.expect("a cut answer is not an error");
        assert!(outcome.text.len() <= 50 * 4, "{}", outcome.text.len());
        let said = notices(&events);
        assert!(
            said.iter().any(|n| n.contains("cut off at the output limit of 50 tokens ([model] max_tokens is 50)")),
            "{said:?}"
        );
        assert!(matches!(events.last(), Some(TurnEvent::TurnComplete { cancelled: false, .. })), "{events:?}");
        turn(&agent, "console:cut", "thanks").await.0.expect("the thread goes on");
        assert_eq!(s.llm.requests()[0]["max_completion_tokens"], Value::Null);
        assert_eq!(s.llm.requests()[0]["max_tokens"], 50);
    }

    async fn a_malformed_tool_call_never_breaks_a_later_request(db) {
        let mut s = setup(&db, vec![
            tool_call_raw("c1", "bash", r#"{"command": "echo repaired"#),
            tool_call_raw("c2", "read_file", "{not json at all"),
            text("done"),
            text("second answer"),
        ]).await;
        s.llm.set_window(ContextLimit::new(100_000, Flavor::LlamaCpp));
        s.config.approval.auto_approve = true;
        let agent = harness::agent(s.config.clone()).await;
        let (result, _) = turn(&agent, "console:malformed", "run it").await;
        assert_eq!(result.expect("the turn goes on").text, "done");
        let (result, _) = turn(&agent, "console:malformed", "and again").await;
        assert_eq!(result.expect("a later request is accepted").text, "second answer");
        assert_eq!(s.llm.refusals(), vec![], "llama.cpp parsed every argument sent back");
        let last = s.llm.requests().last().cloned().expect("requests");
        let sent: Vec<&str> = last["messages"].as_array().expect("messages").iter()
            .filter_map(|m| m["tool_calls"].as_array()).flatten()
            .map(|c| c["function"]["arguments"].as_str().expect("text")).collect();
        assert_eq!(sent, vec![r#"{"command":"echo repaired"}"#, "{}"]);
        let results: Vec<&str> = last["messages"].as_array().expect("messages").iter()
            .filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().expect("text")).collect();
        assert!(results[0].contains("repaired"), "the repaired call ran: {results:?}");
        assert!(results[1].contains("not valid JSON") && results[1].contains("{not json at all"), "the raw text is kept in the error: {results:?}");
        s.llm.verify();
    }

    async fn a_workstream_stored_over_its_window_with_a_broken_call_recovers_on_its_next_message(db) {
        let mut s = setup(&db, vec![]).await;
        s.llm.respond_with(respond(200));
        s.llm.set_window(ContextLimit::new(8192, Flavor::LlamaCpp));
        unlimited_window(&mut s.config);
        let agent = harness::agent(s.config.clone()).await;
        let key = "console:stored";
        // As an older sandpiper left it: a call with cut-off arguments sent back verbatim, and
        // far more history than the window holds.
        let store = agent.store();
        store.ensure_workstream(key, Some("alice")).await.expect("workstream");
        let mut seq = 0;
        let mut put = |m: Message| { seq += 1; (seq - 1, m) };
        let mut rows = vec![put(Message::user("start"))];
        let mut call = Message::assistant("");
        call.tool_calls.push(ToolCall { id: "old".into(), name: "bash".into(), arguments: r#"{"command": "ls"#.into() });
        rows.push(put(call));
        rows.push(put(Message::tool_result("old", "bash", "file.txt")));
        for i in 0..60 {
            rows.push(put(Message::user(filler(&format!("old question {i}"), 1500))));
            rows.push(put(Message::assistant(filler(&format!("old answer {i}"), 1500))));
        }
        for (seq, m) in &rows {
            store.append_message(key, *seq, m, None).await.expect("append");
        }
        let (result, events) = turn(&agent, key, "are you still there?").await;
        let outcome = result.unwrap_or_else(|e| panic!("the stored workstream recovers: {e}"));
        assert!(outcome.text.starts_with("answer"), "{outcome:?}");
        assert!(notices(&events).iter().any(|n| n.contains("Compacted")), "{events:?}");
        assert_eq!(s.llm.refusals(), vec![]);
    }

    async fn a_refused_history_is_compacted_once_and_reported_plainly_if_refused_again(db) {
        let refused = || Reply::http_error(500, "Failed to parse tool call arguments as JSON");
        let s = setup(&db, vec![
            text("first answer"),
            refused(),
            text("- summary: the team said one"),
            text("answered after compaction"),
            refused(),
            text("- summary: the team said one and two"),
            refused(),
            text("the thread still works"),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let key = "console:refused";
        turn(&agent, key, "one").await.0.expect("first");
        let (result, events) = turn(&agent, key, "two").await;
        assert_eq!(result.expect("recovered by compacting").text, "answered after compaction");
        assert!(notices(&events).iter().any(|n| n.contains("1 older message") || n.contains("older messages summarised")), "{events:?}");
        // The retry sent less: the earlier turn is in the checkpoint now.
        let bodies = s.llm.requests();
        let retry = bodies.iter().rev().find(|b| !is_summary(b)).expect("retry");
        assert!(!retry.to_string().contains("first answer\""), "{retry}");
        let (result, events) = turn(&agent, key, "three").await;
        let e = result.expect_err("refused twice");
        assert!(e.to_string().starts_with("the model server refused this conversation's history even after compacting it: Failed to parse tool call arguments as JSON"), "{e}");
        assert_eq!(events.iter().filter(|e| matches!(e, TurnEvent::Error(_))).count(), 1, "reported once: {events:?}");
        assert_eq!(turn(&agent, key, "four").await.0.expect("the next message works").text, "the thread still works");
    }

    async fn a_summarising_compaction_shows_that_it_compacts_until_the_summary_comes(db) {
        let s = setup(&db, refused_then_summary_held(Duration::from_millis(800), &["answered after compaction"])).await;
        let agent = harness::agent(s.config.clone()).await;
        let key = "console:shown";
        turn(&agent, key, "one").await.0.expect("first");
        let sink = RecordingSink::default();
        let watch = async {
            summary_asked(&s.llm).await;
            // While the summary is held: it is compacting, and has not ended.
            sink.events()
        };
        let (result, meanwhile) = tokio::join!(turn_into(&agent, key, "two", &sink, CancellationToken::new()), watch);
        assert_eq!(result.expect("compacted").text, "answered after compaction");
        assert_eq!(compacting(&meanwhile), vec![Compacting::Started]);
        let events = sink.events();
        assert_eq!(compacting(&events), vec![Compacting::Started, Compacting::Ended { stopped: false }]);
        // Ended before the notice saying what changed.
        let ended = events.iter().position(|e| matches!(e, TurnEvent::Compacting(Compacting::Ended { .. })));
        let told = events.iter().position(|e| matches!(e, TurnEvent::Notice(n) if n.contains("Compacted this conversation")));
        assert!(ended.is_some() && ended < told, "{events:?}");
    }

    async fn a_compaction_stopped_while_the_model_summarises_changes_and_announces_nothing(db) {
        let s = setup(&db, refused_then_summary_held(Duration::from_secs(30), &["the whole history was sent"])).await;
        let agent = harness::agent(s.config.clone()).await;
        let key = "console:stopped";
        turn(&agent, key, "one").await.0.expect("first");
        let before = agent.history(key).await.expect("history");
        let sink = RecordingSink::default();
        let cancel = CancellationToken::new();
        let stop = async {
            summary_asked(&s.llm).await;
            cancel.cancel();
        };
        let started = std::time::Instant::now();
        let (result, ()) = tokio::join!(turn_into(&agent, key, "two", &sink, cancel.clone()), stop);
        assert!(started.elapsed() < Duration::from_secs(10), "stopped at once, not when the summary came");
        let outcome = result.expect("a stop is not an error");
        assert!(outcome.cancelled, "{outcome:?}");
        let events = sink.events();
        assert_eq!(notices(&events), Vec::<String>::new(), "nothing announced");
        assert_eq!(compacting(&events), vec![Compacting::Started, Compacting::Ended { stopped: true }]);
        assert!(matches!(events.last(), Some(TurnEvent::TurnComplete { cancelled: true, .. })), "{events:?}");
        // Nothing half-written: no checkpoint (not even a plain one), the history as it was
        // with the new message.
        assert_eq!(agent.store().latest_checkpoint(key).await.expect("store"), None);
        let after = agent.history(key).await.expect("history");
        assert_eq!(after[..before.len()], before[..]);
        assert_eq!(after.len(), before.len() + 1, "{after:?}");
        // The next request sends what was sent before, not a compacted history.
        let (result, _) = turn(&agent, key, "three").await;
        assert_eq!(result.expect("the thread goes on").text, "the whole history was sent");
        let last = s.llm.requests().last().cloned().expect("a request");
        assert!(!is_summary(&last) && last.to_string().contains("first answer"), "{last}");
    }

    async fn the_console_shows_a_compaction_and_ctrl_c_stops_it_without_a_log_line(db) {
        let s = setup(&db, refused_then_summary_held(Duration::from_secs(30), &[])).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "compacting", "alice", false);
        console.send("one").await;
        console.wait_for("first answer", WAIT).await;
        console.send("two").await;
        summary_asked(&s.llm).await;
        console.wait_for("(🗜 Compacting this conversation to fit the model's context window…)\n", WAIT).await;
        assert!(console.interrupter.interrupt());
        console.wait_for("(turn cancelled)", Duration::from_secs(5)).await;
        let out = console.finish().await;
        assert_eq!(out.matches("Compacting this conversation").count(), 1, "one line: {out}");
        assert!(!out.contains("Compacted"), "nothing announced: {out}");
        for raw in ["WARN", "checkpoint", "stopped;"] {
            assert!(!out.contains(raw), "{raw:?} printed: {out}");
        }
        assert_eq!(agent.store().latest_checkpoint("console:compacting").await.expect("store"), None);
    }

    async fn compact_at_the_console_shows_the_same_line_while_the_model_summarises(db) {
        let s = setup(&db, vec![
            text("first answer"),
            text("second answer"),
            text("- summary: the team said one").held(Duration::from_millis(500)),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "asked", "alice", false);
        console.send("one").await;
        console.wait_for("first answer", WAIT).await;
        console.send("two").await;
        console.wait_for("second answer", WAIT).await;
        console.send("/compact").await;
        let out = console.wait_for("Compacted this conversation", WAIT).await;
        let line = out.find("(🗜 Compacting this conversation to fit the model's context window…)\n");
        let told = out.find("Compacted this conversation");
        assert!(line.is_some() && line < told, "the line, then what changed: {out}");
        console.finish().await;
        let checkpoint = agent.store().latest_checkpoint("console:asked").await.expect("store");
        assert!(checkpoint.is_some_and(|c| c.summary.contains("the team said one")));
    }

    async fn discord_shows_a_live_compaction_line_and_typing_while_the_model_summarises(db) {
        let s = setup(&db, refused_then_summary_held(Duration::from_secs(3), &["answered after compaction"])).await;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let alice = FakeUser::new(900_000_000_000_000_001, "alice");
        let thread = rig.mention(&alice, "one").await;
        rig.wait_text(thread, "first answer").await;
        let typed = rig.fake.typing_count(thread);
        rig.fake.user_message(thread, &alice, "two").await;
        let line = rig.wait_text(thread, "Compacting this conversation").await;
        assert!(s.llm.requests().iter().any(is_summary), "shown while the summary is asked");
        assert!(!s.llm.requests().iter().any(|b| b.to_string().contains("answered after")));
        assert_eq!(line.content, Compacting::Started.to_string());
        assert!(line.components.as_array().is_some_and(|c| !c.is_empty()), "Stop is on the line: {line:?}");
        assert!(rig.fake.typing_count(thread) > typed, "typing while compacting");
        let done = rig.wait_message(thread, line.id, "done.").await;
        assert_eq!(done.content, Compacting::Ended { stopped: false }.to_string());
        assert!(done.components.as_array().is_none_or(|c| c.is_empty()), "{done:?}");
        rig.wait_text(thread, "Compacted this conversation").await;
        rig.wait_text(thread, "answered after compaction").await;
    }

    async fn a_window_too_small_for_the_tools_is_explained_once(db) {
        let mut s = setup(&db, vec![]).await;
        s.config.model.context_window = Some(1024);
        let agent = harness::agent(s.config.clone()).await;
        let (result, _) = turn(&agent, "console:tiny", "hello").await;
        let first = result.expect_err("nothing fits").to_string();
        assert!(first.starts_with("the model's context window is too small for this conversation: 1024 tokens (from model.context_window)"), "{first}");
        assert!(first.contains("Raise [model] context_window") && first.contains("tool search"), "{first}");
        let (result, _) = turn(&agent, "console:tiny", "hello?").await;
        let again = result.expect_err("still nothing fits").to_string();
        assert_eq!(again, "this request still does not fit the model's context window of 1024 tokens (see above)");
        assert_eq!(s.llm.requests().len(), 0, "nothing was sent that the server would refuse");
    }
}

/// Ollama says the window it runs a model with in `/api/show`, LM Studio the length a model is
/// loaded with in `/api/v0/models`: neither is guessed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_and_lm_studio_say_their_window() {
    let cases = [
        (Flavor::Ollama, 8192, "Ollama's num_ctx"),
        (Flavor::LmStudio, 4096, "LM Studio's loaded_context_length"),
    ];
    for (flavor, tokens, what) in cases {
        let db = sandpiper_tests::db::TestDb::sqlite();
        let mut s = setup(&db, vec![]).await;
        s.llm.set_window(ContextLimit::new(tokens, flavor));
        unlimited_window(&mut s.config);
        let agent = harness::agent(s.config.clone()).await;
        let window = agent.context_window().await;
        assert_eq!(
            (window.tokens, window.source),
            (tokens, WindowSource::Server(what))
        );
        s.llm.verify();
    }
}

/// A server that names no window gets the guess, which never refuses a request: one larger
/// than the guess is sent, and when the server then refuses, the window it names (larger
/// than the guess) is the one in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guessed_window_learns_a_larger_one_from_the_servers_refusal() {
    let db = sandpiper_tests::db::TestDb::sqlite();
    let mut s = setup(&db, vec![]).await;
    s.llm.respond_with(respond(200));
    unlimited_window(&mut s.config);
    s.config.agent.system_prompt_extra = Some(filler("conventions", 20_000));
    s.llm.set_window(ContextLimit::new(16_000, Flavor::OpenAi));
    let agent = harness::agent(s.config.clone()).await;
    let key = "console:guess";
    let guess = agent.context_window().await;
    assert!(guess.is_guess(), "{guess}");
    let (first, _) = turn(&agent, key, "hello").await;
    first.expect("a request larger than the guess is sent and answered");
    assert!(prompt_tokens(&s.llm.requests()[0]) > guess.tokens);
    for i in 0..10 {
        let (result, _) = turn(&agent, key, &filler(&format!("more {i}"), 3000)).await;
        result.unwrap_or_else(|e| panic!("message {i}: {e}"));
        if !s.llm.refusals().is_empty() {
            break;
        }
    }
    assert_eq!(
        s.llm.refusals().len(),
        1,
        "the server refused once, naming its window"
    );
    let window = agent.context_window().await;
    assert_eq!(
        (window.tokens, window.source),
        (16_000, WindowSource::Learned)
    );
}
