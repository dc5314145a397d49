//! `math` through the whole turn: it asks for approval, runs in the sandbox, and what the code
//! printed reaches the model; a denial runs nothing; the sandbox's limits are reported.

use sandpiper_agent::protocol::Decision;
use sandpiper_agent::turn::agent::TurnRequest;
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, RecordingSink, ScriptedApprover};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{contents_with_role, setup};

/// Whether this machine can create the sandbox's namespaces (else math refuses to run).
fn namespaces_available() -> bool {
    std::process::Command::new("unshare")
        .args(["--net", "--pid", "--fork", "--mount-proc", "--", "true"])
        .status()
        .is_ok_and(|s| s.success())
        || std::process::Command::new("unshare")
            .args([
                "--net",
                "--pid",
                "--fork",
                "--mount-proc",
                "--map-root-user",
                "--",
                "true",
            ])
            .status()
            .is_ok_and(|s| s.success())
}

both_backends! {
    async fn math_is_approved_runs_sandboxed_and_a_denial_runs_nothing(db) {
        let marker = "math-denied-ran";
        let s = setup(&db, vec![
            tool_call("m1", "math", json!({"code": "print(sum(Fraction(1, n) for n in range(1, 5)))\nimport socket\ntry:\n    socket.create_connection(('127.0.0.1', 5432), timeout=2)\n    print('net: open')\nexcept OSError:\n    print('net: none')"})),
            text("The sum is 25/12."),
            tool_call("m2", "math", json!({"code": format!("open('/tmp/{marker}', 'w').write('x')")})),
            text("Not run."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let sink = RecordingSink::default();
        let approver = ScriptedApprover::new(vec![
            Decision::approve().by("alice"),
            Decision::deny(Some("no".into())).by("alice"),
        ]);
        for _ in 0..2 {
            agent
                .run_turn(TurnRequest {
                    workstream: "t:math",
                    author: Some("alice"),
                    text: "compute".into(),
                    sink: &sink,
                    approver: &approver,
                    cancel: CancellationToken::new(),
                })
                .await
                .expect("turn runs");
        }
        let asked = approver.asked();
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[0][0].name, "math");
        assert!(asked[0][0].header.starts_with("math: print(sum(Fraction"), "{:?}", asked[0][0]);
        let requests = s.llm.requests();
        let result = contents_with_role(&requests[1], "tool");
        if namespaces_available() {
            assert_eq!(result, ["25/12\nnet: none\n"]);
        } else {
            assert!(result[0].contains("math cannot run here"), "{result:?}");
        }
        assert!(!std::path::Path::new(&format!("/tmp/{marker}")).exists());
        s.llm.verify();
    }
}
