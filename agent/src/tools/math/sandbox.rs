//! The sandbox `math` runs Python in, built from util-linux wrappers so no `unsafe` is needed:
//!
//! ```text
//! sh -c 'exec 2>&1; exec "$@"'            stderr joins stdout, in order
//!   unshare --net --pid --fork --kill-child [--mount-proc] [--map-root-user] --
//!     sh -c '"$@"; exit $?'               init of the new PID namespace (so Python is not
//!                                         PID 1, which ignores signals such as SIGXCPU)
//!       prlimit --cpu=N:N+2 --as=B --fsize=B --core=0 --
//!         python3 -I -u -B main.py        isolated mode, unbuffered, in a fresh temp dir
//! ```
//!
//! The whole command is confined first like every tool process ([`crate::process::confine`], profile
//! math: the bot's files covered, Landlock, and a seccomp filter refusing `socket`, so no Unix
//! socket either). Under Landlock, which forbids mounting, `--mount-proc` is left out.
//!
//! The new network namespace has only a loopback interface that is down, so every connection
//! fails (even to 127.0.0.1). The new PID namespace and its own `/proc` hide the bot's
//! processes (and their environment); killing `unshare` kills its child (`--kill-child`), and
//! when that namespace init dies the kernel kills everything left inside, so no process
//! outlives a timeout. What works on this machine is probed once and cached.

use std::path::Path;

use tokio::sync::OnceCell;

use crate::config::{MathConfig, ProcessEnv};
use crate::process::env::ChildEnv;

/// How `math` can isolate Python on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Isolation {
    /// New network, PID and mount namespaces; `map_root` when unprivileged user namespaces
    /// are needed for that (sandpiper is not root).
    Namespaces {
        /// Add `--map-root-user`.
        map_root: bool,
        /// Add `--mount-proc`: a `/proc` of the new PID namespace. Not under Landlock, which
        /// forbids mounting; there Landlock keeps the bot's `/proc` entries from Python.
        mount_proc: bool,
    },
    /// No namespaces can be created here.
    Unavailable,
}

/// The `unshare` flags of the sandbox, before `--mount-proc` and `--map-root-user`.
const UNSHARE_FLAGS: [&str; 4] = ["--net", "--pid", "--fork", "--kill-child"];

/// The `unshare` flags for `isolation`.
fn unshare_flags(map_root: bool, mount_proc: bool) -> impl Iterator<Item = &'static str> {
    UNSHARE_FLAGS
        .into_iter()
        .chain(mount_proc.then_some("--mount-proc"))
        .chain(map_root.then_some("--map-root-user"))
}

/// Probes (once per process, and once more for confined children: see
/// [`crate::process::confine`]) whether namespaces can be created, first as we are, then with
/// `--map-root-user`; with a `/proc` of their own where mounting is allowed.
pub(super) async fn isolation(env: &ChildEnv) -> Isolation {
    static PROBED: OnceCell<Isolation> = OnceCell::const_new();
    static PROBED_CONFINED: OnceCell<Isolation> = OnceCell::const_new();
    let confinement = env.confinement().clone();
    let cell = match confinement.report() {
        Some(_) => &PROBED_CONFINED,
        None => &PROBED,
    };
    *cell
        .get_or_init(|| async {
            let base = ChildEnv::allow_listed(&ProcessEnv).confined(confinement);
            for (map_root, mount_proc) in
                [(false, true), (true, true), (false, false), (true, false)]
            {
                let mut command =
                    base.command_as("unshare", crate::process::confine::Profile::Math);
                command.args(unshare_flags(map_root, mount_proc));
                let ok = command
                    .args(["--", "true"])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .await
                    .is_ok_and(|s| s.success());
                if ok {
                    tracing::info!(
                        map_root,
                        mount_proc,
                        "math: sandboxing Python in new namespaces"
                    );
                    return Isolation::Namespaces {
                        map_root,
                        mount_proc,
                    };
                }
            }
            tracing::warn!("math: this machine cannot create network namespaces");
            Isolation::Unavailable
        })
        .await
}

/// Why math will not run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "math cannot run here: this machine does not allow creating an isolated network \
     namespace (`unshare --net` failed), and math never runs code with network access unless \
     the operator sets `[math] allow_unsandboxed = true`. Tell the user; do the computation \
     another way meanwhile."
)]
pub(super) struct NoIsolation;

/// The program and arguments that run `main_py` under `config`'s limits, or a refusal when
/// no isolation is possible and the operator did not opt out.
pub(super) fn command_line(
    isolation: Isolation,
    config: &MathConfig,
    main_py: &Path,
) -> Result<Vec<String>, NoIsolation> {
    let mut argv: Vec<String> = ["sh", "-c", "exec 2>&1; exec \"$@\"", "sh"]
        .map(String::from)
        .to_vec();
    match isolation {
        Isolation::Namespaces {
            map_root,
            mount_proc,
        } => {
            argv.push("unshare".into());
            argv.extend(unshare_flags(map_root, mount_proc).map(String::from));
            argv.extend(["--", "sh", "-c", "\"$@\"; exit $?", "sh"].map(String::from));
        }
        Isolation::Unavailable if config.allow_unsandboxed => {}
        Isolation::Unavailable => return Err(NoIsolation),
    }
    let cpu = config.cpu_seconds;
    let bytes = config.memory_mb.saturating_mul(1024 * 1024);
    argv.extend([
        "prlimit".into(),
        format!("--cpu={cpu}:{}", cpu.saturating_add(2)),
        format!("--as={bytes}"),
        format!("--fsize={}", 64 * 1024 * 1024),
        "--core=0".into(),
        "--".into(),
        config.python.clone(),
        "-I".into(),
        "-u".into(),
        "-B".into(),
        main_py.display().to_string(),
    ]);
    Ok(argv)
}

/// The script that pre-imports the libraries, then runs `code.py` (the model's code) in the
/// same namespace, so tracebacks name `<math>` and its line numbers.
pub(super) const MAIN_PY: &str = r#"import math, fractions, itertools, functools, collections, decimal, operator, random, re, string
from fractions import Fraction
from decimal import Decimal
try:
    import sympy
    from sympy import (symbols, Symbol, solve, simplify, sqrt, Matrix, Rational, pi, E, I, oo,
        exp, log, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, diff, integrate, limit,
        series, expand, factor, Eq, nsolve, N, factorial, binomial, summation, product, Sum,
        gcd, lcm, isprime, factorint, primerange, Poly, roots, linsolve, dsolve, Function,
        Abs, floor, ceiling, latex, nsimplify, trigsimp, apart, together, cancel, collect)
except ImportError:
    pass
try:
    import numpy
    import numpy as np
except ImportError:
    pass
try:
    import scipy
except ImportError:
    pass
with open("code.py", encoding="utf-8") as _math_source:
    _math_code = _math_source.read()
del _math_source
exec(compile(_math_code, "<math>", "exec"))
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_command_line_wraps_python_in_namespaces_and_limits() {
        let config = MathConfig {
            cpu_seconds: 5,
            memory_mb: 256,
            ..MathConfig::default()
        };
        let argv = command_line(
            Isolation::Namespaces {
                map_root: true,
                mount_proc: true,
            },
            &config,
            Path::new("/tmp/x/main.py"),
        )
        .unwrap();
        assert_eq!(
            argv.join(" "),
            "sh -c exec 2>&1; exec \"$@\" sh unshare --net --pid --fork --kill-child \
             --mount-proc --map-root-user -- sh -c \"$@\"; exit $? sh prlimit --cpu=5:7 \
             --as=268435456 --fsize=67108864 --core=0 -- python3 -I -u -B /tmp/x/main.py"
        );
    }

    #[test]
    fn without_isolation_it_refuses_unless_the_operator_opted_out() {
        let strict = MathConfig::default();
        let err = command_line(Isolation::Unavailable, &strict, Path::new("m.py")).unwrap_err();
        assert!(
            err.to_string().contains("allow_unsandboxed = true"),
            "{err}"
        );
        let relaxed = MathConfig {
            allow_unsandboxed: true,
            ..MathConfig::default()
        };
        let argv = command_line(Isolation::Unavailable, &relaxed, Path::new("m.py")).unwrap();
        assert!(!argv.contains(&"unshare".to_owned()), "{argv:?}");
        assert!(argv.contains(&"prlimit".to_owned()), "{argv:?}");
    }
}
