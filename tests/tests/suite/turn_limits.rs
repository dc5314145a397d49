//! Turns running at once are capped (issue 10, attack 13): `agent.max_concurrent_turns`
//! across threads and `agent.max_turns_per_user` per person. A turn that has to wait says so
//! in its thread and runs when a place frees up; a stopped waiting turn leaves the line.

use std::time::Duration;

use sandpiper_agent::protocol::{ApproveAll, TurnEvent, TurnWait};
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::DiscordRig;
use sandpiper_tests::fake_discord::{FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{Reply, text};
use sandpiper_tests::harness::{self, RecordingSink};
use tokio_util::sync::CancellationToken;

use super::{WAIT, setup};

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

/// A first answer slow enough (about 1.5 s) for a second thread to arrive while it runs.
fn slow(answer: &str) -> Reply {
    Reply::slow_text(answer, Duration::from_millis(250))
}

both_backends! {
    async fn on_discord_a_second_thread_waits_for_the_only_place_and_then_runs(db) {
        let mut s = setup(&db, vec![
            slow("alice's answer takes a while to write out."),
            text("bob's answer."),
        ]).await;
        s.config.agent.max_concurrent_turns = 1;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let first = rig.mention(&alice(), "a slow question").await;
        s.llm.wait_for_requests(1, WAIT).await;
        let second = rig.mention(&bob(), "a quick question").await;
        let notice = rig.wait_text(second, "waiting").await;
        assert_eq!(
            notice.content,
            "⏳ waiting: 1 turn is running; this one starts when one ends"
        );
        assert_eq!(s.llm.requests().len(), 1, "bob's turn has not called the model yet");
        rig.wait_text(second, "bob's answer.").await;
        // It started only after alice's turn had finished.
        let firsts = rig.bot_messages(first);
        assert!(firsts.iter().any(|m| m.content.contains("write out.")), "{firsts:?}");
        assert!(rig.bot_messages(first).iter().all(|m| !m.content.contains("waiting")));
        s.llm.verify();
    }

    async fn on_discord_one_person_in_two_threads_waits_for_their_own_turn(db) {
        let mut s = setup(&db, vec![
            slow("the first thread's answer takes a while."),
            text("bob was not held up."),
            text("the second thread's answer."),
        ]).await;
        s.config.agent.max_turns_per_user = 1;
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        rig.mention(&alice(), "a slow question").await;
        s.llm.wait_for_requests(1, WAIT).await;
        let second = rig.mention(&alice(), "another question").await;
        let notice = rig.wait_text(second, "waiting").await;
        assert_eq!(
            notice.content,
            "⏳ waiting: you already have 1 turn running; this one starts when it ends"
        );
        // Someone else is not held up by alice's cap.
        let bobs = rig.mention(&bob(), "a quick question").await;
        rig.wait_text(bobs, "bob was not held up.").await;
        rig.wait_text(second, "the second thread's answer.").await;
        assert!(rig.bot_messages(bobs).iter().all(|m| !m.content.contains("waiting")));
        s.llm.verify();
    }

    async fn a_waiting_turn_that_is_stopped_gives_its_place_to_the_next(db) {
        let mut s = setup(&db, vec![
            slow("the running turn takes a while."),
            text("carol's answer."),
        ]).await;
        s.config.agent.max_concurrent_turns = 1;
        let agent = harness::agent(s.config.clone()).await;
        let turn = |key: &'static str, sink: RecordingSink, cancel: CancellationToken| {
            let agent = agent.clone();
            tokio::spawn(async move {
                agent.run_turn(TurnRequest {
                    workstream: key,
                    author: None,
                    text: format!("question in {key}"),
                    sink: &sink,
                    approver: &ApproveAll,
                    cancel,
                }).await
            })
        };
        let running = turn("console:a", RecordingSink::default(), CancellationToken::new());
        s.llm.wait_for_requests(1, WAIT).await;
        let (bob_sink, bob_stop) = (RecordingSink::default(), CancellationToken::new());
        let bob = turn("console:b", bob_sink.clone(), bob_stop.clone());
        let carol_sink = RecordingSink::default();
        let carol = turn("console:c", carol_sink.clone(), CancellationToken::new());
        tokio::time::timeout(WAIT, async {
            while bob_sink.events().is_empty() || carol_sink.events().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }).await.expect("both say they wait");
        let waiting = TurnEvent::Waiting(TurnWait::Busy { running: 1 });
        assert_eq!(bob_sink.events(), vec![waiting.clone()]);
        bob_stop.cancel();
        let stopped = bob.await.unwrap().unwrap();
        assert!(stopped.cancelled && stopped.rounds == 0, "{stopped:?}");
        assert_eq!(bob_sink.events(), vec![
            waiting.clone(),
            TurnEvent::TurnComplete { text: String::new(), cancelled: true },
        ]);
        running.await.unwrap().unwrap();
        let answered = carol.await.unwrap().unwrap();
        assert_eq!(answered.text, "carol's answer.");
        assert_eq!(carol_sink.events()[0], waiting);
        // The model saw alice's and carol's turns, never bob's.
        let requests: Vec<String> = s.llm.requests().iter().map(|r| r.to_string()).collect();
        assert_eq!(requests.len(), 2);
        assert!(requests[1].contains("question in console:c"), "{}", requests[1]);
        assert!(requests.iter().all(|r| !r.contains("question in console:b")));
        s.llm.verify();
    }
}
