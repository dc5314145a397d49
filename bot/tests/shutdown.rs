//! `sandpiper serve` stopped the way an operator stops it (SIGTERM from `docker stop` or
//! systemd) while a turn waits for approval: it exits 0 within its shutdown deadline, and the
//! next process resumes the turn when the card is clicked.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandpiper_tests::discord_harness::{button, open_buttons};
use sandpiper_tests::fake_discord::{BOT_ID, CHANNEL_ID, FakeDiscord, FakeUser};
use sandpiper_tests::fake_llm::{FakeLlm, text, tool_call};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// `serve` with its SQLite database in `dir`, talking to the fake Discord and LLM.
fn serve(dir: &std::path::Path, llm: &FakeLlm, discord: &FakeDiscord) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sandpiper"))
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "carol")
        .arg("serve")
        .env("SANDPIPER_MODEL_BASE_URL", llm.openai_base_url())
        .env("SANDPIPER_MODEL", "fake")
        .env("SANDPIPER_LISTEN", "127.0.0.1:0")
        .env("DISCORD_TOKEN", "discord-secret-token")
        .env("SANDPIPER_DISCORD_API_BASE", discord.base_url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandpiper serve starts")
}

/// Sends SIGTERM and waits for the exit; returns how long it took and the exit status.
async fn terminate(child: Child) -> (Duration, std::process::Output) {
    let started = Instant::now();
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(term.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("no panic")
        .expect("serve exits");
    (started.elapsed(), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_card_waits_exits_on_time_and_the_card_offers_resume_after_restart() {
    let llm = FakeLlm::start(vec![
        tool_call("c1", "bash", json!({"command": "echo survived-sigterm"})),
        text("Done after the restart."),
    ])
    .await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let first = serve(dir.path(), &llm, &discord);
    discord.wait_ready(WAIT).await;
    let alice = FakeUser::new(42, "alice");
    let msg = discord
        .user_message(
            CHANNEL_ID,
            &alice,
            &format!("{} echo it", discord.mention()),
        )
        .await;
    let thread = discord
        .wait_until(WAIT, "a thread", |d| {
            d.threads()
                .into_iter()
                .find(|t| t.starter_message_id == Some(msg))
                .map(|t| t.id)
        })
        .await;
    let card = discord
        .wait_until(WAIT, "an approval card", |d| {
            d.messages(thread)
                .into_iter()
                .find(|m| m.author_id == BOT_ID && !open_buttons(m).is_empty())
        })
        .await;

    let (took, out) = terminate(first).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    // Within the 10 s drain deadline (plus the runtime's second), and in practice at once:
    // the waiting turn is dropped, not waited for.
    assert!(took < Duration::from_secs(11), "took {took:?}: {stderr}");
    assert!(!stderr.contains("still running"), "{stderr}");
    assert_eq!(
        llm.requests().len(),
        1,
        "the call did not run before the restart"
    );

    let identified = discord.identify_count();
    let second = serve(dir.path(), &llm, &discord);
    discord
        .wait_until(WAIT, "the restarted bot on the gateway", |d| {
            (d.identify_count() > identified).then_some(())
        })
        .await;
    // The restarted node says in the thread that the turn was cut off.
    discord
        .wait_until(WAIT, "the interrupted notice", |d| {
            d.messages(thread).into_iter().find(|m| {
                m.content
                    .contains("interrupted by a restart — reply to continue")
            })
        })
        .await;
    let click = discord
        .click(thread, card.id, &alice, &button(&card, "Approve", 0))
        .await;
    discord
        .wait_until(WAIT, "the click answered", |d| {
            d.interaction_responses(click).pop()
        })
        .await;
    // The decision is kept and the card offers to resume the turn; alice does.
    let kept = discord
        .wait_until(WAIT, "the card offering Resume", |d| {
            d.messages(thread)
                .into_iter()
                .find(|m| m.id == card.id && m.components.to_string().contains("\"Resume\""))
        })
        .await;
    discord
        .click(thread, card.id, &alice, &button(&kept, "Resume", 0))
        .await;
    discord
        .wait_until(WAIT, "the resumed answer", |d| {
            d.messages(thread)
                .into_iter()
                .find(|m| m.content.contains("Done after the restart."))
        })
        .await;
    let sent = llm.requests()[1].to_string();
    assert!(sent.contains("survived-sigterm"), "{sent}");
    let (_, out) = terminate(second).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
