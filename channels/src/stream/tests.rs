use super::*;
use crate::tasks::Tasks;
use pretty_assertions::assert_eq;
use sandpiper_agent::protocol::ToolCallView;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Post(String, Post),
    Edit(String, Post),
    Upload(String, String),
}

#[derive(Default)]
struct Recorder {
    ops: Mutex<Vec<Op>>,
    limit: usize,
}

#[async_trait::async_trait]
impl Surface for Recorder {
    fn limit(&self) -> usize {
        self.limit
    }
    async fn post(&self, post: &Post) -> Result<String, SurfaceError> {
        let mut ops = self.ops.lock().unwrap();
        let id = format!("m{}", ops.len());
        ops.push(Op::Post(id.clone(), post.clone()));
        Ok(id)
    }
    async fn edit(&self, id: &str, post: &Post) -> Result<(), SurfaceError> {
        self.ops
            .lock()
            .unwrap()
            .push(Op::Edit(id.into(), post.clone()));
        Ok(())
    }
    async fn upload(&self, name: &str, body: Vec<u8>, _c: &str) -> Result<(), SurfaceError> {
        self.ops
            .lock()
            .unwrap()
            .push(Op::Upload(name.into(), String::from_utf8(body).unwrap()));
        Ok(())
    }
}

impl Recorder {
    /// What was done on the surface so far, in order.
    fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }
}

/// A renderer of one turn on `surface`, editing no faster than `interval`.
fn render_on(
    surface: &Arc<Recorder>,
    interval: Duration,
) -> (StreamSink, tokio::task::JoinHandle<()>) {
    start(surface.clone(), interval, &Tasks::new(Default::default()))
}

fn recorder(limit: usize) -> Arc<Recorder> {
    Arc::new(Recorder {
        ops: Mutex::default(),
        limit,
    })
}

fn answer(text: &str, live: bool) -> Post {
    Post::Answer {
        text: text.into(),
        live,
    }
}

#[tokio::test(start_paused = true)]
async fn text_streams_into_one_message_edited_no_faster_than_the_interval() {
    let surface = recorder(2000);
    let (sink, task) = render_on(&surface, Duration::from_millis(1500));
    sink.event(TurnEvent::TextDelta("Hel".into()));
    sink.settle().await;
    for piece in ["lo", ", ", "wor", "ld"] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        sink.event(TurnEvent::TextDelta(piece.into()));
    }
    tokio::time::sleep(Duration::from_millis(2000)).await;
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    task.await.unwrap();
    let ops = surface.ops();
    assert_eq!(
        ops,
        vec![
            // Held back HOLD_FIRST_POST (250 ms): the first post has what came by then.
            Op::Post("m0".into(), answer("Hello, ", true)),
            Op::Edit("m0".into(), answer("Hello, world", true)),
            Op::Edit("m0".into(), answer("Hello, world", false)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn tools_get_their_own_line_and_long_output_is_attached() {
    let surface = recorder(2000);
    let (sink, task) = render_on(&surface, Duration::from_millis(1500));
    sink.event(TurnEvent::TextDelta("Let me look.".into()));
    sink.event(TurnEvent::ToolPending(ToolCallView {
        call_id: "c1".into(),
        name: "bash".into(),
        header: "bash: seq 10".into(),
        preview: "seq 10".into(),
        needs_approval: false,
        error: None,
    }));
    let output: String = (1..=10).map(|i| format!("{i}\n")).collect();
    sink.event(TurnEvent::ToolOutputChunk {
        call_id: "c1".into(),
        chunk: output.clone(),
    });
    sink.event(TurnEvent::ToolResult {
        call_id: "c1".into(),
        name: "bash".into(),
        output: output.clone(),
        is_error: false,
        approval: None,
    });
    sink.event(TurnEvent::TextDelta("Done.".into()));
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    task.await.unwrap();
    let ops = surface.ops();
    let line = |state, out: &str, attached| {
        Post::Tool(ToolLine {
            name: "bash".into(),
            header: "bash: seq 10".into(),
            state,
            output: out.into(),
            attached,
        })
    };
    // The call ended within HOLD_FIRST_POST: its line is posted once, finished, above the
    // attachment.
    assert_eq!(
        ops,
        vec![
            Op::Post("m0".into(), answer("Let me look.", false)),
            Op::Post("m1".into(), line(ToolState::Done, "6\n7\n8\n9\n10", true)),
            Op::Upload("bash-output.txt".into(), output),
            Op::Post("m3".into(), answer("Done.", false)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_answer_is_split_across_messages_with_code_fences_kept() {
    let surface = recorder(60);
    let (sink, task) = render_on(&surface, Duration::from_millis(10));
    let text =
        "intro line\n```rust\nfn a() {}\nfn b() {}\nfn c() {}\nfn d() {}\nfn e() {}\n```\nbye";
    sink.event(TurnEvent::TextDelta(text.into()));
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    task.await.unwrap();
    let ops = surface.ops();
    let texts: Vec<String> = ops
        .iter()
        .filter_map(|o| match o {
            Op::Post(_, Post::Answer { text, .. }) => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert!(texts.len() >= 2, "{texts:?}");
    for t in &texts {
        assert!(t.chars().count() <= 60);
        assert_eq!(t.matches("```").count() % 2, 0, "fences balanced in {t:?}");
    }
}

/// A tool printing 100 MB while the platform is slow: the queue between the agent and the
/// renderer holds one bounded tail, not the output, and the line says how much scrolled off.
#[tokio::test(start_paused = true)]
async fn output_queued_behind_a_slow_platform_stays_bounded_and_counted() {
    let surface = recorder(2000);
    let (sink, task) = render_on(&surface, Duration::from_millis(1500));
    sink.event(TurnEvent::ToolPending(ToolCallView {
        call_id: "c1".into(),
        name: "bash".into(),
        header: "bash: yes".into(),
        preview: "yes".into(),
        needs_approval: false,
        error: None,
    }));
    sink.settle().await;
    // The renderer is not polled while this loop runs (paused time, one thread): the
    // platform is as slow as it gets.
    let piece = "y\n".repeat(8 * 1024);
    for _ in 0..6400 {
        sink.event(TurnEvent::ToolOutputChunk {
            call_id: "c1".into(),
            chunk: piece.clone(),
        });
    }
    {
        let q = sink.queue.lock().unwrap();
        assert_eq!(q.events.len(), 1);
        let Some(Queued::Output { tail, .. }) = q.events.back() else {
            panic!("output is gathered into one tail");
        };
        assert!(tail.held() <= 2 * TAIL_BYTES, "{}", tail.held());
        assert_eq!(tail.bytes(), 104_857_600);
    }
    sink.settle().await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let ops = surface.ops();
    // Posted once the call outlasted HOLD_FIRST_POST, with what it printed by then.
    let Some(Op::Post(_, Post::Tool(line)) | Op::Edit(_, Post::Tool(line))) = ops.last() else {
        panic!("{ops:?}");
    };
    assert_eq!(
        line.output,
        "… 52,428,792 earlier lines (104,857,584 bytes) not shown\ny\ny\ny\ny\ny\ny\ny\ny"
    );
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_sub_agent_is_one_line_redrawn_with_its_latest_status_and_a_plan_is_attached() {
    use sandpiper_agent::protocol::{SubAgentPhase, SubAgentStatus};
    let surface = recorder(2000);
    let (sink, task) = render_on(&surface, Duration::from_millis(1500));
    sink.event(TurnEvent::ToolPending(ToolCallView {
        call_id: "t1".into(),
        name: "task".into(),
        header: "task: fix the tests".into(),
        preview: String::new(),
        needs_approval: false,
        error: None,
    }));
    sink.settle().await;
    let status = |step, tool_calls, phase, current: Option<&str>| SubAgentStatus {
        call_id: "t1".into(),
        tool: "task".into(),
        title: "fix the tests".into(),
        step,
        tool_calls,
        denied: 0,
        current: current.map(str::to_owned),
        phase,
    };
    // A burst: only the latest is drawn.
    sink.event(TurnEvent::SubAgent(status(
        1,
        0,
        SubAgentPhase::Thinking,
        None,
    )));
    sink.event(TurnEvent::SubAgent(status(
        1,
        1,
        SubAgentPhase::Running,
        Some("bash: cargo test"),
    )));
    tokio::time::sleep(Duration::from_millis(2000)).await;
    sink.event(TurnEvent::Attachment {
        call_id: "t1".into(),
        filename: ".plan-x.md".into(),
        body: "1. a\n".into(),
        comment: "The plan".into(),
    });
    sink.event(TurnEvent::ToolResult {
        call_id: "t1".into(),
        name: "task".into(),
        output: "All green.".into(),
        is_error: false,
        approval: None,
    });
    sink.event(TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    });
    task.await.unwrap();
    let ops = surface.ops();
    let line = |state, output: &str| {
        Post::Tool(ToolLine {
            name: "task".into(),
            header: "task: fix the tests".into(),
            state,
            output: output.into(),
            attached: false,
        })
    };
    assert_eq!(
        ops,
        vec![
            // Shown once it had run HOLD_FIRST_POST, with the latest status by then.
            Op::Post(
                "m0".into(),
                line(
                    ToolState::Running,
                    "task: fix the tests · step 1 · 1 tool call · running bash: cargo test"
                )
            ),
            Op::Upload(".plan-x.md".into(), "1. a\n".into()),
            Op::Edit("m0".into(), line(ToolState::Done, "All green.")),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_a_place_is_shown_only_when_it_outlasts_the_grace() {
    let busy = sandpiper_agent::protocol::TurnWait::Busy { running: 16 };
    let grace = crate::turns::SHOW_PROGRESS_AFTER;
    // A turn that waits `waited`, then answers `text`: what the thread saw before the answer,
    // and in all.
    let run = |waited: Duration, text: &'static str| async move {
        let surface = recorder(2000);
        let (sink, task) = render_on(&surface, Duration::from_millis(500));
        sink.event(TurnEvent::Waiting(busy));
        tokio::time::sleep(waited).await;
        let before = surface.ops();
        sink.event(TurnEvent::TextDelta(text.into()));
        sink.event(TurnEvent::TurnComplete {
            text: String::new(),
            cancelled: false,
        });
        task.await.unwrap();
        let all = surface.ops();
        (before, all)
    };

    // Given a place within the grace: the answer is all the thread sees.
    let (before, all) = run(grace / 2, "Quick.").await;
    assert_eq!(before, vec![]);
    assert_eq!(all, vec![Op::Post("m0".into(), answer("Quick.", false))]);

    // Waiting longer: the line is posted once the grace is over, then the answer below it.
    let line = Post::Waiting(busy.to_string());
    let (before, all) = run(grace * 2, "Slow.").await;
    assert_eq!(before, vec![Op::Post("m0".into(), line.clone())]);
    assert_eq!(
        all,
        vec![
            Op::Post("m0".into(), line),
            Op::Post("m1".into(), answer("Slow.", false))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_compaction_shows_a_live_line_that_says_how_it_ended() {
    use sandpiper_agent::protocol::Compacting;
    let grace = crate::turns::SHOW_PROGRESS_AFTER;
    let progress = |step: Compacting, live| Post::Progress {
        text: step.to_string(),
        live,
    };
    // A turn whose summary takes `took` and ends `stopped`: what the thread saw meanwhile,
    // and in all.
    let run = |took: Duration, stopped: bool| async move {
        let surface = recorder(2000);
        let (sink, task) = render_on(&surface, Duration::from_millis(500));
        sink.event(TurnEvent::Compacting(Compacting::Started));
        tokio::time::sleep(took).await;
        let meanwhile = surface.ops();
        sink.event(TurnEvent::Compacting(Compacting::Ended { stopped }));
        if !stopped {
            sink.event(TurnEvent::Notice("🗜 Compacted".into()));
        }
        sink.event(TurnEvent::TurnComplete {
            text: String::new(),
            cancelled: stopped,
        });
        task.await.unwrap();
        (meanwhile, surface.ops())
    };

    // Within the grace: only the notice.
    let (meanwhile, all) = run(grace / 2, false).await;
    assert_eq!(meanwhile, vec![]);
    assert_eq!(
        all,
        vec![Op::Post("m0".into(), Post::Notice("🗜 Compacted".into()))]
    );

    // Longer: the live line (with Stop) while it lasts, edited to say it is done.
    let started = progress(Compacting::Started, true);
    let (meanwhile, all) = run(grace * 3, false).await;
    assert_eq!(meanwhile, vec![Op::Post("m0".into(), started.clone())]);
    let done = progress(Compacting::Ended { stopped: false }, false);
    assert_eq!(
        all,
        vec![
            Op::Post("m0".into(), started.clone()),
            Op::Edit("m0".into(), done),
            Op::Post("m2".into(), Post::Notice("🗜 Compacted".into())),
        ]
    );

    // Stopped: the line says nothing changed, and the turn shows as stopped.
    let (_, all) = run(grace * 3, true).await;
    let stopped = progress(Compacting::Ended { stopped: true }, false);
    assert_eq!(
        all,
        vec![
            Op::Post("m0".into(), started),
            Op::Edit("m0".into(), stopped),
            Op::Post("m2".into(), answer("*(stopped)*", false)),
        ]
    );
}

fn bash_pending(call_id: &str, needs_approval: bool) -> TurnEvent {
    TurnEvent::ToolPending(ToolCallView {
        call_id: call_id.into(),
        name: "bash".into(),
        header: format!("bash: {call_id}"),
        preview: String::new(),
        needs_approval,
        error: None,
    })
}

fn bash_line(call_id: &str, state: ToolState, output: &str) -> Post {
    Post::Tool(ToolLine {
        name: "bash".into(),
        header: format!("bash: {call_id}"),
        state,
        output: output.into(),
        attached: false,
    })
}

fn end() -> TurnEvent {
    TurnEvent::TurnComplete {
        text: String::new(),
        cancelled: false,
    }
}

/// An answer whole within HOLD_FIRST_POST is posted once as it ends: no live post to edit.
#[tokio::test(start_paused = true)]
async fn a_quick_answer_is_posted_once_as_it_stands_at_the_end() {
    let surface = recorder(2000);
    let (sink, task) = render_on(&surface, Duration::from_millis(1500));
    sink.event(TurnEvent::TextDelta("Hel".into()));
    tokio::time::sleep(Duration::from_millis(10)).await;
    sink.event(TurnEvent::TextDelta("lo".into()));
    tokio::time::sleep(Duration::from_millis(10)).await;
    sink.event(end());
    task.await.unwrap();
    let ops = surface.ops();
    assert_eq!(ops, vec![Op::Post("m0".into(), answer("Hello", false))]);
}

/// A call that outlasts HOLD_FIRST_POST shows as running, then is edited when it ends.
#[tokio::test(start_paused = true)]
async fn a_slow_call_shows_running_once_it_outlasts_the_grace() {
    let surface = recorder(2000);
    let (sink, task) = render_on(&surface, Duration::from_millis(1500));
    sink.event(bash_pending("c1", false));
    tokio::time::sleep(HOLD_FIRST_POST / 2).await;
    assert_eq!(surface.ops(), vec![]);
    tokio::time::sleep(HOLD_FIRST_POST).await;
    assert_eq!(
        surface.ops(),
        vec![Op::Post(
            "m0".into(),
            bash_line("c1", ToolState::Running, "")
        )]
    );
    sink.event(TurnEvent::ToolResult {
        call_id: "c1".into(),
        name: "bash".into(),
        output: "hi".into(),
        is_error: false,
        approval: None,
    });
    sink.event(end());
    task.await.unwrap();
    assert_eq!(
        surface.ops(),
        vec![
            Op::Post("m0".into(), bash_line("c1", ToolState::Running, "")),
            Op::Edit("m0".into(), bash_line("c1", ToolState::Done, "hi")),
        ]
    );
}

/// A line held back goes out before anything posted after it: a notice, a call that waits
/// for approval (its card follows at once), the answer.
#[tokio::test(start_paused = true)]
async fn a_held_back_line_goes_out_before_what_follows_it() {
    let surface = recorder(2000);
    let (sink, task) = render_on(&surface, Duration::from_millis(1500));
    sink.event(bash_pending("c1", false));
    sink.event(TurnEvent::Notice("note".into()));
    sink.event(bash_pending("c2", false));
    sink.event(bash_pending("c3", true));
    sink.settle().await;
    assert_eq!(
        surface.ops(),
        vec![
            Op::Post("m0".into(), bash_line("c1", ToolState::Running, "")),
            Op::Post("m1".into(), Post::Notice("note".into())),
            Op::Post("m2".into(), bash_line("c2", ToolState::Running, "")),
            Op::Post(
                "m3".into(),
                bash_line("c3", ToolState::AwaitingApproval, "")
            ),
        ]
    );
    sink.event(bash_pending("c4", false));
    sink.event(TurnEvent::TextDelta("Done.".into()));
    sink.event(end());
    task.await.unwrap();
    let ops = surface.ops();
    assert_eq!(
        ops[4..],
        [
            Op::Post("m4".into(), bash_line("c4", ToolState::Running, "")),
            Op::Post("m5".into(), answer("Done.", false)),
        ]
    );
}
