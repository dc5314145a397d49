//! The fingerprint of a tool call: what an approval was about, independent of the request id.
//! A decision stored for one call is only used for a call with the same fingerprint, so a
//! decision can never be carried over to different arguments (a history edited while
//! sandpiper was down, a model that re-issued a call id).
//!
//! `sha256(tool name, "\n", canonical JSON of the arguments)`, in lower-case hex. Canonical
//! JSON: object keys sorted, no whitespace, strings and numbers as `serde_json` writes them;
//! so the same arguments give the same fingerprint whatever order the model wrote them in.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The fingerprint of a call of `tool` with `arguments`.
pub fn fingerprint(tool: &str, arguments: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(arguments, &mut canonical);
    let mut hasher = Sha256::new();
    hasher.update(tool.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical.as_bytes());
    hex(&hasher.finalize())
}

/// The fingerprint of a call whose arguments are the raw JSON text the model sent; text that
/// is not JSON is fingerprinted as a JSON string (so it still only matches itself).
pub fn fingerprint_raw(tool: &str, arguments: &str) -> String {
    let value = if arguments.trim().is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
    };
    fingerprint(tool, &value)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing into a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Writes `value` with sorted object keys and no whitespace.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_matter_and_everything_else_does() {
        let a = fingerprint_raw(
            "bash",
            r#"{"command": "ls", "timeout": 5, "env": {"B": 1, "A": 2}}"#,
        );
        let b = fingerprint_raw(
            "bash",
            r#"{"env":{"A":2,"B":1},"timeout":5,"command":"ls"}"#,
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(
            a,
            fingerprint(
                "bash",
                &json!({"command": "ls", "timeout": 5, "env": {"A": 2, "B": 1}})
            )
        );
        for other in [
            fingerprint(
                "bash",
                &json!({"command": "ls -a", "timeout": 5, "env": {"A": 2, "B": 1}}),
            ),
            fingerprint(
                "sh",
                &json!({"command": "ls", "timeout": 5, "env": {"A": 2, "B": 1}}),
            ),
            fingerprint(
                "bash",
                &json!({"command": "ls", "timeout": "5", "env": {"A": 2, "B": 1}}),
            ),
            fingerprint_raw("bash", "not json"),
        ] {
            assert_ne!(a, other);
        }
        assert_eq!(fingerprint_raw("plan", ""), fingerprint("plan", &json!({})));
    }

    #[test]
    fn a_known_value_keeps_its_fingerprint() {
        // sha256("bash\n{\"command\":\"ls\"}"): stored rows must keep matching across releases.
        assert_eq!(
            fingerprint("bash", &json!({"command": "ls"})),
            "a3b28e181957b9ec980d0ba40b6e79380862806025000ccca4dead9afb7a49c9"
        );
    }
}
