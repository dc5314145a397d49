use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::config::MathConfig;
use crate::tools::{NoOutput, ToolServices, prepare_json};

fn context(math: MathConfig) -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut ctx = ToolContext::for_test(dir.path());
    ctx.services = Arc::new(ToolServices {
        math,
        ..ToolServices::default()
    });
    // Confined as in the product (crate::process::confine): the sandbox must work inside it.
    let confined = (*ctx.child_env)
        .clone()
        .confined(crate::process::confine::Confinement::probe(&[]));
    ctx.child_env = Arc::new(confined);
    (dir, ctx)
}

async fn run_code(ctx: &ToolContext, code: &str) -> ToolOutput {
    let prepared = prepare_json(Math, json!({ "code": code }), ctx).expect("prepares");
    prepared.execute(ctx, &NoOutput).await.expect("runs")
}

fn sympy_installed() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import sympy"])
        .status()
        .is_ok_and(|s| s.success())
}

/// These tests need the sandbox; on a machine without namespaces they check the refusal.
async fn sandboxed() -> bool {
    let (_dir, probe) = context(MathConfig::default());
    let isolated = matches!(
        sandbox::isolation(&probe.child_env).await,
        sandbox::Isolation::Namespaces { .. }
    );
    if !isolated {
        eprintln!("NOTICE: no namespaces here; math sandbox tests only check the refusal");
        let (_dir, ctx) = context(MathConfig::default());
        let prepared = prepare_json(Math, json!({"code": "print(1)"}), &ctx).unwrap();
        let err = prepared.execute(&ctx, &NoOutput).await.unwrap_err();
        assert!(err.to_string().starts_with("math cannot run here"), "{err}");
    }
    isolated
}

#[test]
fn prepare_needs_approval_and_shows_the_code() {
    let (_dir, ctx) = context(MathConfig::default());
    let p = prepare_json(Math, json!({"code": "x = 2\nprint(x ** 10)"}), &ctx).unwrap();
    assert_eq!(
        p.prepared,
        Prepared {
            header: "math: x = 2…".into(),
            preview: "x = 2\nprint(x ** 10)".into(),
            ask: false,
        }
    );
    assert!(prepare_json(Math, json!({"code": "  "}), &ctx).is_err());
    assert!(prepare_json(Math, json!({"cod": "1"}), &ctx).is_err());
}

#[tokio::test]
async fn a_computation_prints_its_result() {
    if !sandboxed().await {
        return;
    }
    let (_dir, ctx) = context(MathConfig::default());
    let out = run_code(
        &ctx,
        "print(Fraction(1, 3) + Fraction(1, 6), math.factorial(20))",
    )
    .await;
    assert_eq!(out.text, "1/2 2432902008176640000\n");
    assert!(!out.is_error);
    if sympy_installed() {
        let x = "x = symbols('x')\nprint(solve(x**2 - 5*x + 6, x), simplify(sqrt(8)))";
        let out = run_code(&ctx, x).await;
        assert_eq!(out.text, "[2, 3] 2*sqrt(2)\n");
    }
    let out = run_code(&ctx, "y = 1").await;
    assert_eq!(out.text, "(no output; use print() to show results)");
    let out = run_code(&ctx, "print('before')\n1/0").await;
    assert!(out.is_error);
    assert!(out.text.starts_with("before\nTraceback"), "{}", out.text);
    assert!(
        out.text.contains("File \"<math>\", line 2") && out.text.contains("ZeroDivisionError"),
        "{}",
        out.text
    );
    assert!(out.text.ends_with("[exit code 1]"), "{}", out.text);
}

#[tokio::test]
async fn the_environment_is_clean_and_the_directory_fresh() {
    if !sandboxed().await {
        return;
    }
    let (_dir, ctx) = context(MathConfig::default());
    let out = run_code(
        &ctx,
        // (pyenv's shim adds PYENV_* itself; nothing of the test process's own variables,
        // such as cargo's CARGO_*, may arrive.)
        "import os\nprint(sorted(k for k in os.environ if k.startswith(('CARGO', 'RUST'))))\nprint(sorted(os.listdir('.')))\nprint(os.getppid() < 5)",
    )
    .await;
    assert_eq!(out.text, "[]\n['code.py', 'main.py']\nTrue\n");
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_by_the_cpu_limit() {
    if !sandboxed().await {
        return;
    }
    let (_dir, ctx) = context(MathConfig {
        cpu_seconds: 1,
        ..MathConfig::default()
    });
    let started = std::time::Instant::now();
    let out = run_code(&ctx, "print('spinning')\nwhile True:\n    pass").await;
    assert!(out.is_error);
    assert!(out.text.starts_with("spinning\n"), "{}", out.text);
    assert!(
        out.text
            .contains("[stopped: the CPU time limit of 1s was reached]"),
        "{}",
        out.text
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test]
async fn a_sleeper_is_stopped_by_the_wall_clock() {
    if !sandboxed().await {
        return;
    }
    let (_dir, ctx) = context(MathConfig {
        timeout: Duration::from_secs(1),
        ..MathConfig::default()
    });
    let started = std::time::Instant::now();
    let out = run_code(
        &ctx,
        "import time, subprocess\nprint('zzz')\ntime.sleep(60)",
    )
    .await;
    assert!(out.is_error);
    assert!(
        out.text.contains(
            "[stopped: the run took longer than 1s (wall clock) and the sandbox was killed]"
        ),
        "{}",
        out.text
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_by_the_memory_limit() {
    if !sandboxed().await {
        return;
    }
    let (_dir, ctx) = context(MathConfig {
        memory_mb: 256,
        ..MathConfig::default()
    });
    let out = run_code(&ctx, "a = []\nwhile True:\n    a.append(' ' * 10**7)").await;
    assert!(out.is_error);
    assert!(out.text.contains("MemoryError"), "{}", out.text);
}

#[tokio::test]
async fn the_network_is_unreachable_even_on_loopback() {
    if !sandboxed().await {
        return;
    }
    // A server the code could reach without the sandbox.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_dir, ctx) = context(MathConfig::default());
    let code = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('connected')\nexcept OSError as e:\n    print('refused:', e)"
    );
    let out = run_code(&ctx, &code).await;
    assert!(out.text.starts_with("refused: "), "{}", out.text);
    assert!(!out.text.contains("connected"), "{}", out.text);
}

#[tokio::test]
async fn output_is_capped_and_the_run_stopped() {
    if !sandboxed().await {
        return;
    }
    let (_dir, mut ctx) = context(MathConfig::default());
    let mut tools = (*ctx.config).clone();
    tools.max_output_bytes = 4096;
    ctx.config = Arc::new(tools);
    let out = run_code(&ctx, "while True:\n    print('y' * 100)").await;
    assert!(out.is_error);
    assert!(
        out.text
            .ends_with("[stopped: the output passed 4096 bytes and the sandbox was killed]"),
        "{}",
        out.text
    );
    assert!(out.text.len() < 4096 + 400, "{}", out.text.len());
}
