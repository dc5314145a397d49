//! Every `tools/*.json` schema agrees with its tool's typed `Args`: each property (the required
//! ones included) is a field `Args` reads, a minimal call with only the required keys
//! deserializes, and where the schema forbids other properties `Args` refuses them too.

use serde_json::{Map, Value, json};

use super::{ToolRegistry, ToolSpec};

/// A value of the declared JSON type.
fn placeholder(kind: &str) -> Value {
    match kind {
        "integer" => json!(1),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => json!({}),
        _ => json!("x"),
    }
}

/// A value no field of the declared type takes, so an `Args` that reads the field refuses it
/// (and one that silently ignores the key would not).
fn wrong(kind: &str) -> Value {
    match kind {
        "string" => json!(["not", "a", "string"]),
        _ => json!("not of the declared type"),
    }
}

fn properties(spec: &ToolSpec) -> Vec<(String, String)> {
    spec.parameters["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, p)| {
            let kind = p["type"].as_str().unwrap_or("string").to_owned();
            (name.clone(), kind)
        })
        .collect()
}

fn minimal(spec: &ToolSpec) -> Map<String, Value> {
    let props = properties(spec);
    spec.parameters["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|name| {
            let kind = props
                .iter()
                .find(|(n, _)| n == name)
                .map_or("string", |(_, k)| k.as_str());
            (name.to_owned(), placeholder(kind))
        })
        .collect()
}

#[test]
fn every_schema_property_is_a_field_of_the_tools_args() {
    let registry = ToolRegistry::builtin().unwrap();
    for t in registry.iter() {
        let name = &t.spec.name;
        let base = minimal(&t.spec);
        t.tool
            .accepts(Value::Object(base.clone()))
            .unwrap_or_else(|e| panic!("{name}: the required keys alone are refused: {e}"));
        for (prop, kind) in properties(&t.spec) {
            let mut args = base.clone();
            args.insert(prop.clone(), wrong(&kind));
            let err = t
                .tool
                .accepts(Value::Object(args))
                .err()
                .unwrap_or_else(|| {
                    panic!("{name}: `{prop}` is in the schema but its Args ignores it")
                });
            assert!(
                err.to_string().contains(&format!("`{prop}`")),
                "{name}: the error does not name `{prop}`: {err}"
            );
        }
        if t.spec.parameters["additionalProperties"] == json!(false) {
            let mut args = base.clone();
            args.insert("not_in_the_schema".into(), json!("x"));
            assert!(
                t.tool.accepts(Value::Object(args)).is_err(),
                "{name}: additionalProperties is false but Args takes unknown keys"
            );
        }
    }
}

#[test]
fn a_wrong_argument_names_the_tool_and_the_field() {
    let registry = ToolRegistry::builtin().unwrap();
    let read_file = &registry.get("read_file").unwrap().tool;
    let err = read_file
        .accepts(json!({"path": "a", "limit": "many"}))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid arguments for read_file (`limit`: invalid type"),
        "{err}"
    );
    assert!(err.ends_with("send {\"path\": \"<file>\"} with optional integer offset and limit"));
}

#[test]
fn only_auto_approved_tools_say_which_calls_ask_anyway() {
    let registry = ToolRegistry::builtin().unwrap();
    let raising: Vec<&str> = registry
        .iter()
        .filter(|t| t.tool.asks_for().is_some())
        .map(|t| t.spec.name.as_str())
        .collect();
    assert_eq!(raising, ["read_file", "search", "memory", "watch"]);
    for t in registry.iter().filter(|t| t.tool.asks_for().is_some()) {
        assert!(t.spec.auto_approve, "{} always asks already", t.spec.name);
    }
}
