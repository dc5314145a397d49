//! The audit trail and grants end to end (issue 30), on both databases: a console thread with
//! an approval, a denial with a note, an Always allow (confirmed in the thread), a later call
//! under that grant (which says so on its tool line), a revoke and a timeout, all printed by
//! `sandpiper audit --format jsonl` (the same function) with who and how; and `--yes`
//! recorded with its banner.

use std::time::Duration;

use sandpiper::audit::{AuditFormat, report};
use sandpiper_agent::approvals::ledger;
use sandpiper_agent::store::audit::AuditFilter;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::{Value, json};

use super::{WAIT, setup};

/// How records name the console's OS user `alice`: by her console handle.
const ALICE: &str = "@alice";

/// The trail's JSON lines, as `sandpiper audit --format jsonl` prints them.
async fn jsonl(agent: &sandpiper_agent::Agent, filter: &AuditFilter) -> Vec<Value> {
    report(agent.store(), filter, AuditFormat::Jsonl)
        .await
        .expect("the audit trail reads")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// (kind, tool, actor, how) of each event: how is the decision's path and decision, the
/// reason a call ran unasked, or the cause of a cancellation.
fn summary(events: &[Value]) -> Vec<(String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    events
        .iter()
        .map(|e| {
            let how = match e["kind"].as_str().unwrap_or_default() {
                "decided" => format!("{} {}", s(&e["path"]), s(&e["decision"])),
                "auto_approved" => format!("{} {}", s(&e["reason"]), s(&e["granted_by"])),
                "grant_created" | "grant_revoked" => s(&e["grant"]),
                "cancelled" => s(&e["cause"]),
                _ => String::new(),
            };
            (
                s(&e["kind"]),
                s(&e["tool"]),
                s(&e["actor"]),
                how.trim().to_owned(),
            )
        })
        .collect()
}

both_backends! {
    async fn a_threads_approvals_grants_and_timeout_are_all_in_the_audit_trail(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo one"})),
            text("ran one"),
            tool_call("c2", "bash", json!({"command": "echo two"})),
            text("two was denied"),
            tool_call("c3", "bash", json!({"command": "echo three"})),
            text("ran three"),
            tool_call("c4", "bash", json!({"command": "echo four"})),
            text("ran four"),
            tool_call("c5", "bash", json!({"command": "echo five"})),
            text("five timed out"),
        ]).await;
        s.config.approval.timeout = Duration::from_millis(1500);
        let agent = harness::agent(s.config.clone()).await;
        let console = ConsoleRun::start(agent.clone(), "audit", "alice", false);
        console.send("one").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("y").await;
        console.wait_for("ran one", WAIT).await;
        console.send("two").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("n, use the staging box").await;
        console.wait_for("two was denied", WAIT).await;
        console.send("three").await;
        console.wait_for("approve bash", WAIT).await;
        console.send("a").await;
        let out = console.wait_for("ran three", WAIT).await;
        assert!(out.contains(&format!("bash is always allowed in this thread, granted by {ALICE}")), "{out}");
        console.send("four").await;
        let out = console.wait_for("ran four", WAIT).await;
        assert!(out.contains(&format!("always allowed by {ALICE}")), "the tool line says so: {out}");
        console.send("/grants").await;
        let out = console.wait_for(&format!("granted by {ALICE},"), WAIT).await;
        assert!(out.contains(&format!("Always allowed in this thread:\n• bash — granted by {ALICE}")), "{out}");
        console.send("/grants revoke bash").await;
        console.wait_for("Revoked: bash", WAIT).await;
        console.send("five").await;
        console.wait_for("five timed out", WAIT).await;
        let out = console.finish().await;
        assert_eq!(out.matches("approve bash").count(), 4, "{out}");
        assert_eq!(agent.store().grants("console:audit").await.unwrap(), Vec::<String>::new());

        let all = jsonl(&agent, &AuditFilter { workstream: Some("console:audit".into()), ..AuditFilter::default() }).await;
        let who = |w: &str| w.to_owned();
        let row = |k: &str, t: &str, a: &str, h: &str| (who(k), who(t), who(a), who(h));
        // alice is the console's OS user here: one name wherever she asked or decided.
        assert_eq!(summary(&all), vec![
            row("requested", "bash", ALICE, ""),
            row("decided", "bash", ALICE, "console approved"),
            row("requested", "bash", ALICE, ""),
            row("decided", "bash", ALICE, "console denied"),
            row("requested", "bash", ALICE, ""),
            row("decided", "bash", ALICE, "console always_allowed"),
            row("grant_created", "bash", ALICE, "bash"),
            row("auto_approved", "bash", ALICE, &format!("grant {ALICE}")),
            row("grant_revoked", "bash", ALICE, "bash"),
            row("requested", "bash", ALICE, ""),
            row("timed_out", "bash", "", ""),
        ]);
        assert_eq!(all[3]["note"], "use the staging box");
        assert_eq!(all[7]["grant"], "bash");
        assert!(all.iter().all(|e| e["time"].as_str().is_some_and(|t| t.ends_with('Z'))));
        assert!(all[0]["preview"].as_str().unwrap_or_default().contains("echo one"), "{:?}", all[0]);

        // Filters: by person, and since a date after everything.
        let alices = jsonl(&agent, &AuditFilter { user: Some("console-alice".into()), ..AuditFilter::default() }).await;
        assert!(alices.len() >= 5 && alices.iter().all(|e| e["actor"] == ALICE), "{alices:?}");
        let later = jsonl(&agent, &AuditFilter { since: Some(sandpiper_agent::store::now_ms() + 60_000), ..AuditFilter::default() }).await;
        assert_eq!(later, Vec::<Value>::new());
        s.llm.verify();
    }

    async fn auto_approve_prints_a_banner_and_is_recorded(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo yes"})),
            text("done"),
        ]).await;
        s.config.approval.auto_approve = true;
        let agent = harness::agent(s.config.clone()).await;
        let banner = ledger::session_started(agent.store(), agent.config(), "console:yes", Some("--yes"))
            .await
            .unwrap()
            .expect("a banner");
        assert!(banner.contains("AUTO-APPROVE IS ON (--yes)"), "{banner}");
        let console = ConsoleRun::start(agent.clone(), "yes", "alice", true);
        console.send("go").await;
        console.wait_for("done", WAIT).await;
        console.finish().await;
        let all = jsonl(&agent, &AuditFilter { workstream: Some("console:yes".into()), ..AuditFilter::default() }).await;
        let kinds: Vec<(&str, &str)> = all.iter().map(|e| (
            e["kind"].as_str().unwrap_or_default(),
            e["source"].as_str().or(e["reason"].as_str()).unwrap_or_default(),
        )).collect();
        assert_eq!(kinds, vec![("auto_approve_session", "--yes"), ("auto_approved", "auto_approve_session")]);
        // Without auto-approve there is neither.
        let mut quiet = s.config.clone();
        quiet.approval.auto_approve = false;
        assert_eq!(ledger::session_started(agent.store(), &quiet, "console:yes", Some("--yes")).await.unwrap(), None);
    }
}
