//! Watches end to end (issue 13): the runner on both databases with a recording dispatch
//! (fire on a condition, on a changed output, on the last poll; a condition that raises; the
//! depth guard; a restart that fires an overdue watch once; two runners on one database), and
//! through the fake Discord and the fake Slack: the model creates a watch, a person approves
//! it, it fires, the answer is posted in the thread, and `/watch` lists and cancels.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandpiper_agent::Agent;
use sandpiper_agent::model::Message;
use sandpiper_agent::protocol::{ApproveAll, TurnEvent};
use sandpiper_agent::store::watches::{NewWatch, WatchRecord, WatchState};
use sandpiper_agent::watch::WatchRunner;
use sandpiper_agent::watch::runner::{Delivery, Dispatch, DispatchError, RunnerConfig, guard_poll};
use sandpiper_agent::workstream::KeyPattern;
use sandpiper_channels::thread::{CLOSED, Starters, Work, run_work};
use sandpiper_tests::both_backends;
use sandpiper_tests::db::TestDb;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button, response_text};
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::fake_slack::{CHANNEL_ID, TEAM_ID};
use sandpiper_tests::harness;
use sandpiper_tests::harness::RecordingSink;
use sandpiper_tests::slack_harness;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::slack::socket_run;
use super::{contents_with_role, setup};

/// What a runner handed over, in order.
#[derive(Default)]
struct Recorder {
    got: Mutex<Vec<(String, Delivery)>>,
}

impl Dispatch for Recorder {
    fn keys(&self) -> Vec<KeyPattern> {
        vec![KeyPattern::Platform(
            sandpiper_agent::workstream::KeyPlatform::Discord,
        )]
    }

    fn deliver(&self, workstream: &str, delivery: Delivery) -> Result<(), DispatchError> {
        if let Ok(mut got) = self.got.lock() {
            got.push((workstream.to_owned(), delivery));
        }
        Ok(())
    }
}

impl Recorder {
    fn got(&self) -> Vec<(String, Delivery)> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }

    async fn wait_for(&self, n: usize) -> Vec<(String, Delivery)> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let got = self.got();
            if got.len() >= n {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "waited for {n} deliveries, got {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A running runner; stopping it waits until it released its claims.
struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(agent: &Agent, dispatch: Arc<dyn Dispatch>, node: &str) -> Self {
        let config = RunnerConfig {
            node: node.to_owned(),
            tick: Duration::from_millis(50),
            max_parallel: 4,
            lease: Duration::from_secs(60),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            WatchRunner::with_config(agent.clone(), dispatch, config).run(stop.clone()),
        );
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("the runner stops");
    }
}

fn new_watch(
    ws: &str,
    name: &str,
    command: &str,
    stop_on: Option<&str>,
    max_polls: i64,
) -> NewWatch {
    NewWatch {
        workstream: ws.into(),
        name: name.into(),
        command: command.into(),
        poll_every_ms: 3_600_000,
        stop_on: stop_on.map(str::to_owned),
        max_polls,
        created_by: Some("alice".into()),
    }
}

/// "Time passes": the watch is due now.
async fn make_due(db: &TestDb, id: &str) {
    let pool = sqlx::AnyPool::connect(&db.url).await.expect("connects");
    sqlx::query("UPDATE watches SET next_poll_at = 0 WHERE id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .expect("updates");
    pool.close().await;
}

async fn wait_state(agent: &Agent, id: &str, state: WatchState) -> WatchRecord {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let w = agent
            .store()
            .watch(id)
            .await
            .expect("the store answers")
            .expect("the watch exists");
        if w.state == state {
            return w;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "watch {id} is {:?}, not {state:?}",
            w.state
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_polls(agent: &Agent, id: &str, polls: i64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while agent
        .store()
        .watch(id)
        .await
        .expect("the store answers")
        .expect("exists")
        .polls
        < polls
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watch {id} never reached {polls} polls"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn turn_text(d: &Delivery) -> &str {
    match d {
        Delivery::Turn { text, .. } => text,
        Delivery::Notice(n) => panic!("expected a turn, got the notice {n}"),
    }
}

both_backends! {
    async fn a_watch_fires_on_its_condition_its_changed_output_or_its_last_poll(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        let store = agent.store();
        let ws = "discord:1";
        store.ensure_workstream(ws, Some("alice")).await.unwrap();
        let dir = harness::workstream_dir(&s.config, ws);
        std::fs::write(dir.join("state.json"), r#"{"state": "OPEN"}"#).unwrap();

        let merged = store.create_watch(&new_watch(ws, "merged", "cat state.json", Some(r#"data["state"] == "MERGED""#), 100)).await.unwrap();
        let green = store.create_watch(&new_watch(ws, "green", r#"echo '{"ok": true}'"#, Some(r#"data.get("ok") is True"#), 100)).await.unwrap();
        let changes = store.create_watch(&new_watch(ws, "changes", "cat state.json", None, 100)).await.unwrap();
        let once = store.create_watch(&new_watch(ws, "once", "echo same", Some("exit_code != 0"), 1)).await.unwrap();
        let recorder = Arc::new(Recorder::default());
        let runner = Running::start(&agent, recorder.clone(), "node-a");

        // `green` fires on its first poll, `once` reports its only poll; the others wait.
        let got = recorder.wait_for(2).await;
        let texts: Vec<&str> = got.iter().map(|(_, d)| turn_text(d)).collect();
        assert!(texts.iter().any(|t| t.starts_with("[watch green fired after 1 poll(s)] its condition held: data.get(\"ok\") is True.")), "{texts:?}");
        assert!(texts.iter().any(|t| t.starts_with("[watch once ended after its last poll (1 of 1)] its condition never held: exit_code != 0.")), "{texts:?}");
        let Delivery::Turn { shown, text, .. } = &got.iter().find(|(_, d)| turn_text(d).contains("green")).unwrap().1 else { unreachable!() };
        assert_eq!(shown, "⏰ watch `green` fired after 1 poll(s): its condition held: data.get(\"ok\") is True");
        assert!(text.contains("exit code: 0\noutput:\n{\"ok\": true}"), "{text}");
        wait_state(&agent, &green.id, WatchState::Fired).await;
        wait_state(&agent, &once.id, WatchState::Exhausted).await;
        wait_polls(&agent, &merged.id, 1).await;
        wait_polls(&agent, &changes.id, 1).await;

        // The PR merges; an hour later both remaining watches see it.
        std::fs::write(dir.join("state.json"), r#"{"state": "MERGED"}"#).unwrap();
        make_due(&db, &merged.id).await;
        make_due(&db, &changes.id).await;
        let got = recorder.wait_for(4).await;
        let texts: Vec<&str> = got[2..].iter().map(|(_, d)| turn_text(d)).collect();
        assert!(texts.iter().any(|t| t.starts_with("[watch merged fired after 2 poll(s)]")), "{texts:?}");
        assert!(texts.iter().any(|t| t.starts_with("[watch changes fired after 2 poll(s)] its output changed.")), "{texts:?}");
        assert!(got.iter().all(|(w, _)| w == ws));
        wait_state(&agent, &merged.id, WatchState::Fired).await;
        wait_state(&agent, &changes.id, WatchState::Fired).await;
        runner.stop().await;
        assert_eq!(recorder.got().len(), 4, "each watch fired once");
    }

    async fn a_condition_that_raises_stops_its_watch_and_says_so_once(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        let ws = "discord:2";
        agent.store().ensure_workstream(ws, Some("alice")).await.unwrap();
        let w = agent.store().create_watch(&new_watch(ws, "pr", "echo not json", Some(r#"data["state"] == "MERGED""#), 100)).await.unwrap();
        let recorder = Arc::new(Recorder::default());
        let runner = Running::start(&agent, recorder.clone(), "node-a");
        let got = recorder.wait_for(1).await;
        let Delivery::Notice(notice) = &got[0].1 else { panic!("a notice, not a turn: {got:?}") };
        assert!(notice.starts_with("⚠️ watch `pr` stopped: its condition failed on poll 1:"), "{notice}");
        assert!(notice.contains("None"), "{notice}");
        wait_state(&agent, &w.id, WatchState::Failed).await;
        make_due(&db, &w.id).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        runner.stop().await;
        assert_eq!(recorder.got().len(), 1, "said once; a failed watch is not polled again");
    }

    async fn the_depth_guard_pauses_a_watch_after_five_watch_turns_until_resumed(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        let store = agent.store();
        let ws = "discord:3";
        store.ensure_workstream(ws, Some("alice")).await.unwrap();
        // Five watch turns in a row, with no person's message after them.
        store.append_message(ws, 0, &Message::user("deploy and watch it"), Some("alice")).await.unwrap();
        for seq in 1..=5 {
            store.append_message(ws, seq, &Message::user(format!("[watch w{seq} fired after 1 poll(s)] ...")), None).await.unwrap();
        }
        let w = store.create_watch(&new_watch(ws, "sixth", "echo go", Some("'go' in output"), 100)).await.unwrap();
        let recorder = Arc::new(Recorder::default());
        let runner = Running::start(&agent, recorder.clone(), "node-a");
        let got = recorder.wait_for(1).await;
        let Delivery::Notice(notice) = &got[0].1 else { panic!("a notice: {got:?}") };
        assert!(notice.starts_with("⏸ watch `sixth` paused: the last 5 turns here were started by watches"), "{notice}");
        assert!(notice.contains("/watch resume sixth"), "{notice}");
        wait_state(&agent, &w.id, WatchState::Paused).await;

        // A person writes; resumed, the watch fires into a turn.
        store.append_message(ws, 6, &Message::user("ok, go on"), Some("alice")).await.unwrap();
        let resumed = store.resume_watch(ws, "sixth").await.unwrap();
        assert_eq!(resumed.state, WatchState::Active);
        let got = recorder.wait_for(2).await;
        assert!(turn_text(&got[1].1).starts_with("[watch sixth fired after 2 poll(s)]"), "{got:?}");
        runner.stop().await;
    }

    async fn after_a_restart_an_overdue_watch_polls_and_fires_once(db) {
        let s = setup(&db, vec![]).await;
        let ws = "discord:4";
        let first = harness::agent(s.config.clone()).await;
        first.store().ensure_workstream(ws, Some("alice")).await.unwrap();
        let dir = harness::workstream_dir(&s.config, ws);
        std::fs::write(dir.join("ci"), "running").unwrap();
        let w = first.store().create_watch(&new_watch(ws, "ci", "cat ci", Some("output == 'green'"), 100)).await.unwrap();
        let recorder = Arc::new(Recorder::default());
        let runner = Running::start(&first, recorder.clone(), "node-before");
        wait_polls(&first, &w.id, 1).await;
        runner.stop().await;
        drop(first);

        // Down for "many intervals": the watch is long overdue when sandpiper comes back.
        std::fs::write(dir.join("ci"), "green").unwrap();
        make_due(&db, &w.id).await;
        let second = harness::agent(s.config.clone()).await;
        let runner = Running::start(&second, recorder.clone(), "node-after");
        let got = recorder.wait_for(1).await;
        assert!(turn_text(&got[0].1).starts_with("[watch ci fired after 2 poll(s)]"), "{got:?}");
        let fired = wait_state(&second, &w.id, WatchState::Fired).await;
        assert_eq!(fired.polls, 2, "one poll on recovery, not one per missed interval");
        tokio::time::sleep(Duration::from_millis(300)).await;
        runner.stop().await;

        // A third start finds nothing to fire again.
        let third = harness::agent(s.config.clone()).await;
        let runner = Running::start(&third, recorder.clone(), "node-third");
        tokio::time::sleep(Duration::from_millis(300)).await;
        runner.stop().await;
        assert_eq!(recorder.got().len(), 1, "fired once across restarts");
    }

    async fn two_runners_on_one_database_fire_each_watch_once(db) {
        let s = setup(&db, vec![]).await;
        let a = harness::agent(s.config.clone()).await;
        let b = harness::agent(s.config.clone()).await;
        let mut ids = Vec::new();
        for t in 0..4 {
            let ws = format!("discord:{}", 100 + t);
            a.store().ensure_workstream(&ws, Some("alice")).await.unwrap();
            for n in 0..5 {
                // Each poll takes a moment, so both runners are busy at once.
                let w = new_watch(&ws, &format!("w{n}"), "sleep 0.2; echo done", Some("'done' in output"), 100);
                ids.push(a.store().create_watch(&w).await.unwrap().id);
            }
        }
        let (ra, rb) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        let (run_a, run_b) = (Running::start(&a, ra.clone(), "node-a"), Running::start(&b, rb.clone(), "node-b"));
        let deadline = tokio::time::Instant::now() + WAIT;
        while ra.got().len() + rb.got().len() < ids.len() {
            assert!(tokio::time::Instant::now() < deadline, "only {} of {} fired", ra.got().len() + rb.got().len(), ids.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        run_a.stop().await;
        run_b.stop().await;
        let mut fired: Vec<String> = ra.got().into_iter().chain(rb.got())
            .map(|(ws, d)| format!("{ws} {}", turn_text(&d).split(']').next().unwrap_or_default()))
            .collect();
        let total = fired.len();
        fired.sort();
        fired.dedup();
        assert_eq!((total, fired.len()), (20, 20), "each watch fired exactly once: {fired:?}");
        assert!(!ra.got().is_empty() && !rb.got().is_empty(), "both nodes polled: a={} b={}", ra.got().len(), rb.got().len());
        for id in &ids {
            assert_eq!(a.store().watch(id).await.unwrap().unwrap().polls, 1, "polled once");
        }
    }

    async fn closing_a_thread_ends_its_watches_and_nothing_runs_in_it_after(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        let store = agent.store();
        let ws = "discord:40";
        store.ensure_workstream(ws, Some("alice")).await.unwrap();
        let active = store.create_watch(&new_watch(ws, "ci", "echo done", Some("'done' in output"), 100)).await.unwrap();
        let paused = store.create_watch(&new_watch(ws, "pr", "echo done", Some("'done' in output"), 100)).await.unwrap();
        assert!(store.finish_watch(&paused.id, WatchState::Paused).await.unwrap());
        store.ensure_workstream("discord:41", Some("alice")).await.unwrap();
        let other = store.create_watch(&new_watch("discord:41", "ci", "echo x", Some("False"), 100)).await.unwrap();

        store.close_workstream(ws).await.unwrap();
        assert_eq!(wait_state(&agent, &active.id, WatchState::Cancelled).await.polls, 0);
        wait_state(&agent, &paused.id, WatchState::Cancelled).await;
        assert!(store.watches_of(ws).await.unwrap().is_empty(), "/watch list shows none");
        assert_eq!(store.watch(&other.id).await.unwrap().unwrap().state, WatchState::Active, "another thread's watch goes on");
        // The closed thread's watches are never claimed, and a resume cannot revive them.
        make_due(&db, &active.id).await;
        let claimed = store.claim_due_watches("node-x", &[KeyPattern::Exact(ws.parse().unwrap())], sandpiper_agent::store::now_ms(), 60_000, 10).await.unwrap();
        assert!(claimed.is_empty(), "{claimed:?}");
        assert!(store.resume_watch(ws, "pr").await.is_err());

        // A fired watch's turn, a notification reply and a resumed approval queued before the
        // close: none runs a turn; each says once that the thread is closed.
        for work in [
            Work::Message { author: None, text: "[watch ci fired after 1 poll(s)] done".into(), shown: Some("⏰ watch `ci` fired".into()), place: None, charged_to: None },
            Work::Message { author: Some("bob".into()), text: "a reply to a notification".into(), shown: Some("↩️ reply from bob".into()), place: None, charged_to: None },
            Work::Resume { author: Some("alice".into()) },
        ] {
            let sink = RecordingSink::default();
            run_work(&agent, ws, work.clone(), &sink, &ApproveAll, CancellationToken::new()).await.unwrap();
            assert_eq!(sink.events(), vec![TurnEvent::Notice(CLOSED.to_owned())], "{work:?}");
        }
        assert!(s.llm.requests().is_empty(), "no model call in a closed thread");
        assert!(agent.history(ws).await.unwrap().is_empty(), "nothing was added to its history");
    }

    async fn a_poll_that_panics_marks_its_watch_failed_and_it_polls_no_more(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        let store = agent.store();
        let ws = "discord:42";
        store.ensure_workstream(ws, Some("alice")).await.unwrap();
        let w = store.create_watch(&new_watch(ws, "ci", "echo done", Some("'done' in output"), 100)).await.unwrap();
        let recorder = Recorder::default();
        let ran = guard_poll(store, &recorder, &w, async { panic!("a bug in a poll") }).await;
        assert!(!ran);
        assert_eq!(wait_state(&agent, &w.id, WatchState::Failed).await.polls, 0);
        let got = recorder.got();
        assert_eq!(got.len(), 1, "{got:?}");
        let Delivery::Notice(notice) = &got[0].1 else { panic!("a notice: {got:?}") };
        assert_eq!(notice, "⚠️ watch `ci` stopped: an internal error ended its poll; it is marked failed and polls no more");
        make_due(&db, &w.id).await;
        let claimed = store.claim_due_watches("node-x", &[KeyPattern::Exact(ws.parse().unwrap())], sandpiper_agent::store::now_ms(), 60_000, 10).await.unwrap();
        assert!(claimed.is_empty(), "a failed watch is not polled: {claimed:?}");
        // A poll that ends normally is left alone.
        let w2 = store.create_watch(&new_watch(ws, "ok", "echo done", None, 100)).await.unwrap();
        assert!(guard_poll(store, &recorder, &w2, async {}).await);
        assert_eq!(store.watch(&w2.id).await.unwrap().unwrap().state, WatchState::Active);
    }

    async fn a_heavy_condition_fails_its_watch_while_other_watches_go_on(db) {
        let s = setup(&db, vec![]).await;
        let agent = harness::agent(s.config.clone()).await;
        let store = agent.store();
        let ws = "discord:43";
        store.ensure_workstream(ws, Some("alice")).await.unwrap();
        // 4,000 keys (48 KB, under the 64 KiB a poll keeps): comparing the dict to itself is
        // eight million key comparisons, far over the step budget.
        let big = r#"{ printf '{'; seq -f '"k%g": 1,' 0 3998 | tr -d '\n'; printf '"end": 1}'; }"#;
        let heavy = store.create_watch(&new_watch(ws, "heavy", big, Some("data == data"), 100)).await.unwrap();
        let nan = store.create_watch(&new_watch(ws, "nan", "echo '[3, 1, 2]'", Some("sorted(data + [float('nan'), 'x']) == []"), 100)).await.unwrap();
        let light = store.create_watch(&new_watch(ws, "light", "echo done", Some("'done' in output"), 100)).await.unwrap();
        let recorder = Arc::new(Recorder::default());
        let runner = Running::start(&agent, recorder.clone(), "node-a");
        let got = recorder.wait_for(3).await;
        runner.stop().await;
        let find = |name: &str| got.iter().find(|(_, d)| match d {
            Delivery::Notice(t) => t.contains(&format!("`{name}`")),
            Delivery::Turn { text, .. } => text.contains(&format!("[watch {name} ")),
        }).map(|(_, d)| d.clone()).unwrap_or_else(|| panic!("{name}: {got:?}"));
        let Delivery::Notice(n) = find("heavy") else { panic!("heavy: {got:?}") };
        assert!(n.starts_with("⚠️ watch `heavy` stopped: its condition failed on poll 1: the condition does too much work"), "{n}");
        let Delivery::Notice(n) = find("nan") else { panic!("nan: {got:?}") };
        assert!(n.contains("TypeError: '<' not supported between instances of"), "{n}");
        assert!(turn_text(&find("light")).starts_with("[watch light fired after 1 poll(s)]"));
        wait_state(&agent, &heavy.id, WatchState::Failed).await;
        wait_state(&agent, &nan.id, WatchState::Failed).await;
        wait_state(&agent, &light.id, WatchState::Fired).await;
    }
}

const ONCALL: u64 = 700_000_000_000_000_001;
const ADMINS: u64 = 700_000_000_000_000_002;

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}

fn dave() -> FakeUser {
    FakeUser::new(900_000_000_000_000_004, "dave")
}

fn erin() -> FakeUser {
    FakeUser::new(900_000_000_000_000_005, "erin").with_roles(&[ADMINS])
}

/// The ephemeral answer to `/watch …` typed by `user` in `thread`.
async fn slash_watch(
    rig: &DiscordRig,
    thread: u64,
    user: &FakeUser,
    options: serde_json::Value,
) -> String {
    let id = rig.fake.slash(thread, user, "watch", options).await;
    let reply = rig
        .fake
        .wait_until(WAIT, "the /watch answer", |f| {
            f.interaction_responses(id).pop()
        })
        .await;
    assert_eq!(
        reply["data"]["flags"],
        json!(64),
        "only the person who typed it sees it: {reply}"
    );
    response_text(&[reply])
}

both_backends! {
    async fn a_watch_created_in_discord_is_approved_fires_and_is_answered_in_its_thread(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "watch", json!({
                "action": "create", "name": "ci", "command": "cat ci-status",
                "poll_every": "30s", "stop_on": "output.strip() == 'green'"
            })),
            text("Watching CI for you."),
            tool_call("c2", "watch", json!({"action": "create", "name": "nightly", "command": "echo queued", "poll_every": "1h"})),
            text("Also watching the nightly build."),
            text("CI is green: ready to deploy."),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        s.config.discord.admin_roles = vec![ADMINS.to_string()];
        s.config.watch.tick = Duration::from_millis(100);
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let stop = CancellationToken::new();
        let mut starters = Starters::default();
        starters.add(rig.channel().starter());
        let runner = sandpiper::wiring::start_watches(&rig.agent, starters, stop.clone());

        let thread = rig.mention(&alice(), "tell me when CI is green").await;
        let key = format!("discord:{thread}");
        std::fs::write(harness::workstream_dir(&s.config, &key).join("ci-status"), "running\n").unwrap();
        // Creating a watch asks, like bash: a participant cannot approve, the owner can.
        let card = rig.card(thread).await;
        assert!(sandpiper_tests::discord_harness::card_text(&card).contains("watch: ci every 30s until output.strip() == 'green'"));
        let refused = rig.fake.click(thread, card.id, &bob(), &button(&card, "Approve", 0)).await;
        let reply = rig.fake.wait_until(WAIT, "the refusal", |f| f.interaction_responses(refused).pop()).await;
        assert_eq!(reply["data"]["flags"], json!(64), "{reply}");
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve", 0)).await;
        rig.wait_text(thread, "Watching CI for you.").await;
        rig.fake.user_message(thread, &alice(), "and the nightly build").await;
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &carol(), &button(&card, "Approve", 0)).await;
        rig.wait_text(thread, "Also watching the nightly build.").await;
        let ci = rig.agent.store().active_watches(&key).await.unwrap().into_iter().find(|w| w.watch.name == "ci").expect("stored");
        wait_polls(&rig.agent, &ci.id, 1).await;

        // Anyone in the thread may list; only the owner or an admin may cancel.
        let listed = slash_watch(&rig, thread, &bob(), json!([])).await;
        assert!(listed.contains("• ci (w_") && listed.contains("every 30s, 1/100 polls") && listed.contains("until output.strip() == 'green'") && listed.contains("cat ci-status"), "{listed}");
        assert!(listed.contains("• nightly") && listed.contains("until output changes"), "{listed}");
        for who in [bob(), carol(), dave()] {
            let refused = slash_watch(&rig, thread, &who, json!([{"name": "action", "type": 3, "value": "cancel"}, {"name": "name", "type": 3, "value": "nightly"}])).await;
            assert!(refused.contains("Only the person who started this thread, or an admin"), "{}: {refused}", who.name);
        }
        let cancelled = slash_watch(&rig, thread, &erin(), json!([{"name": "action", "type": 3, "value": "cancel"}, {"name": "name", "type": 3, "value": "nightly"}])).await;
        assert!(cancelled.contains("watch `nightly` cancelled"), "{cancelled}");
        let unknown = slash_watch(&rig, thread, &alice(), json!([{"name": "action", "type": 3, "value": "cancel"}, {"name": "name", "type": 3, "value": "nightly"}])).await;
        assert!(unknown.contains("no watch in this thread is named `nightly`"), "{unknown}");

        // CI turns green; at the next poll the watch fires into a turn in the thread.
        std::fs::write(harness::workstream_dir(&s.config, &key).join("ci-status"), "green\n").unwrap();
        make_due(&db, &ci.id).await;
        rig.wait_text(thread, "⏰ watch `ci` fired after 2 poll(s)").await;
        rig.wait_text(thread, "CI is green: ready to deploy.").await;
        let requests = s.llm.requests();
        let synthetic = contents_with_role(&requests[4], "user").last().cloned().unwrap_or_default();
        assert!(synthetic.starts_with("[watch ci fired after 2 poll(s)] its condition held: output.strip() == 'green'."), "{synthetic}");
        assert!(synthetic.ends_with("output:\ngreen\n"), "{synthetic:?}");
        let history = rig.agent.history(&key).await.unwrap();
        assert!(history.iter().any(|m| m.content == synthetic), "the message is part of the workstream");
        assert!(slash_watch(&rig, thread, &alice(), json!([])).await.contains("no watches in this thread"));

        stop.cancel();
        runner.await.unwrap();
        s.llm.verify();
    }

    async fn a_watch_in_slack_fires_and_is_cancelled_by_its_owner_only(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "watch", json!({"action": "create", "name": "deploy", "command": "echo '{\"status\": \"done\"}'", "stop_on": "data[\"status\"] == \"done\""})),
            tool_call("c2", "watch", json!({"action": "create", "name": "slow", "command": "echo waiting", "poll_every": "1h", "stop_on": "'never' in output"})),
            text("Two watches are set."),
            text("Glad to help, bob."),
            text("The deploy is done."),
        ]).await;
        s.config.watch.tick = Duration::from_millis(100);
        s.config.slack.approver_usergroups = vec!["S0ONCALL".into()];
        let run = socket_run(&s).await;
        run.slack.set_usergroup("S0ONCALL", &["U0CAROL"]);
        let alice = run.slack.user("U0ALICE", "alice");
        let bob = run.slack.user("U0BOB", "bob");
        let carol = run.slack.user("U0CAROL", "carol");
        let dave = run.slack.user("U0DAVE", "dave");
        let root = run.slack.app_mention(CHANNEL_ID, &alice, "watch the deploy").await;
        let key = format!("slack:{TEAM_ID}:{CHANNEL_ID}:{root}");
        for n in 0..2 {
            let card = run.card(CHANNEL_ID, &root, n).await;
            let (approve, value) = slack_harness::button(&card, "Approve");
            run.slack.click(CHANNEL_ID, &card.ts, &alice, &approve, &value).await;
        }
        run.wait_message(CHANNEL_ID, &root, "the answer", |m| m.text == "Two watches are set.").await;
        // bob takes part in the thread; dave never wrote in it.
        run.slack.thread_message(CHANNEL_ID, &root, &bob, "nice, thanks").await;
        run.wait_message(CHANNEL_ID, &root, "the answer to bob", |m| m.text == "Glad to help, bob.").await;

        // The runner starts (as serve starts it) and the deploy watch fires on its first poll.
        let stop = CancellationToken::new();
        let mut starters = Starters::default();
        starters.add(run.channel.starter());
        let runner = sandpiper::wiring::start_watches(&run.agent, starters, stop.clone());
        run.wait_message(CHANNEL_ID, &root, "the watch shown", |m| m.text.contains("watch `deploy` fired after 1 poll(s)")).await;
        run.wait_message(CHANNEL_ID, &root, "the watch turn's answer", |m| m.text == "The deploy is done.").await;
        let synthetic = contents_with_role(&s.llm.requests()[4], "user").last().cloned().unwrap_or_default();
        assert!(synthetic.starts_with("[watch deploy fired after 1 poll(s)]"), "{synthetic}");

        run.slack.slash_command(CHANNEL_ID, &bob, "/sandpiper", "watch list").await;
        let listed = run.ephemeral(CHANNEL_ID, "U0BOB", "slow").await;
        assert!(listed.text.contains("until 'never' in output") && !listed.text.contains("deploy"), "{}", listed.text);
        // A participant, an approver and a stranger may not cancel; the owner may.
        for (who, id) in [(&bob, "U0BOB"), (&carol, "U0CAROL"), (&dave, "U0DAVE")] {
            run.slack.slash_command(CHANNEL_ID, who, "/sandpiper", "watch cancel slow").await;
            run.ephemeral(CHANNEL_ID, id, "Only the person who started this thread").await;
        }
        assert_eq!(run.agent.store().active_watches(&key).await.unwrap().len(), 1);
        run.slack.slash_command(CHANNEL_ID, &alice, "/sandpiper", "watch cancel slow").await;
        run.ephemeral(CHANNEL_ID, "U0ALICE", "watch `slow` cancelled").await;
        assert!(run.agent.store().active_watches(&key).await.unwrap().is_empty());
        stop.cancel();
        runner.await.unwrap();
        s.llm.verify();
        run.stop().await;
    }

    async fn the_console_runs_its_workstreams_watches_while_it_is_open(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "watch", json!({"action": "create", "name": "build", "command": "echo built", "stop_on": "'built' in output"})),
            text("I will tell you when the build is done."),
            text("The build is done."),
        ]).await;
        s.config.watch.tick = Duration::from_millis(100);
        let agent = harness::agent(s.config.clone()).await;
        let console = harness::ConsoleRun::start(agent.clone(), "builds", "alice", false);
        // As `sandpiper chat` does: a runner for this console's workstream only.
        let other = "console:other";
        agent.store().ensure_workstream(other, None).await.unwrap();
        let foreign = agent.store().create_watch(&new_watch(other, "x", "echo x", Some("True"), 1)).await.unwrap();
        let mut starters = Starters::default();
        starters.add(console.starter.clone());
        let stop = CancellationToken::new();
        let runner = sandpiper::wiring::start_watches(&agent, starters, stop.clone());
        console.send("tell me when the build is done").await;
        console.wait_for("▸ watch: build every 5m", WAIT).await;
        console.wait_for("approve watch? ", WAIT).await;
        console.send("y").await;
        console.wait_for("The build is done.", WAIT).await;
        stop.cancel();
        runner.await.unwrap();
        let out = console.finish().await;
        assert!(out.contains("⏰ watch `build` fired after 1 poll(s)"), "{out}");
        let foreign = agent.store().watch(&foreign.id).await.unwrap().unwrap();
        assert_eq!((foreign.state, foreign.polls), (WatchState::Active, 0), "another console's watch waits for its own console");
        s.llm.verify();
    }
}
