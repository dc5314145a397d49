//! Tool-call arguments: JSON parsing with repair of common model mistakes, the primary-key
//! fallback for bare strings, and validation against the tool's parameter schema.

use serde_json::{Map, Value};

/// Why arguments were rejected. The message goes to the model, which can try again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// Not JSON even after repair, and the tool has no primary key to fall back on.
    #[error(
        "arguments are not valid JSON ({detail}); send a JSON object like {{\"param\": \"value\"}}. You sent: {sent}"
    )]
    NotJson {
        /// serde_json's message for the original text.
        detail: String,
        /// The start of what was sent (the history carries `{}` in its place).
        sent: String,
    },
    /// JSON, but not an object.
    #[error("arguments must be a JSON object, got {0}")]
    NotObject(&'static str),
    /// A required parameter is absent or null.
    #[error("missing required parameter `{0}`")]
    Missing(String),
    /// A parameter has the wrong type.
    #[error("parameter `{name}` must be {expected}, got {got}")]
    WrongType {
        /// Parameter.
        name: String,
        /// Expected JSON type.
        expected: String,
        /// What was sent.
        got: &'static str,
    },
}

/// Parses raw argument text into a JSON object.
///
/// Tries, in order: plain JSON; JSON after repair (code fences, text around the object,
/// trailing commas, raw newlines inside strings, missing closing brackets, a JSON object
/// encoded as a string); then, when `primary_key` is given, the bare text as that parameter.
pub fn parse_arguments(raw: &str, primary_key: Option<&str>) -> Result<Value, ArgsError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let first_error = match serde_json::from_str::<Value>(trimmed) {
        Ok(v) => return object_or_fallback(v, primary_key),
        Err(e) => e.to_string(),
    };
    if let Some(v) = repair(trimmed) {
        return object_or_fallback(v, primary_key);
    }
    match primary_key {
        Some(pk) if !looks_like_object(trimmed) => Ok(single(pk, strip_quotes(trimmed))),
        _ => Err(ArgsError::NotJson {
            detail: first_error,
            sent: excerpt(trimmed),
        }),
    }
}

/// The argument text to send back to the model in the history: `raw` itself when it is a
/// JSON object, else the repaired object, else `{}` (the call's result says what was wrong).
/// Servers that render a chat template parse these, and refuse every later request of a
/// conversation holding one they cannot parse.
pub fn wire_arguments(raw: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let trimmed = raw.trim_start();
    if trimmed.starts_with('{') && serde_json::from_str::<serde::de::IgnoredAny>(raw).is_ok() {
        return Cow::Borrowed(raw);
    }
    match parse_arguments(raw, None) {
        Ok(v @ Value::Object(_)) => Cow::Owned(v.to_string()),
        _ => Cow::Borrowed("{}"),
    }
}

/// The first 300 bytes of `s` (on a character boundary), marked when cut.
fn excerpt(s: &str) -> String {
    const MAX: usize = 300;
    if s.len() <= MAX {
        return s.to_owned();
    }
    format!("{}…", &s[..crate::output::floor_char_boundary(s, MAX)])
}

fn looks_like_object(s: &str) -> bool {
    s.starts_with('{') || s.starts_with("```")
}

fn strip_quotes(s: &str) -> &str {
    for q in ['\'', '"', '`'] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return &s[1..s.len() - 1];
        }
    }
    s
}

fn single(key: &str, value: &str) -> Value {
    let mut m = Map::new();
    m.insert(key.to_owned(), Value::String(value.to_owned()));
    Value::Object(m)
}

fn object_or_fallback(v: Value, primary_key: Option<&str>) -> Result<Value, ArgsError> {
    match v {
        Value::Object(_) => Ok(v),
        // A JSON string: either a double-encoded object or a bare primary-key value.
        Value::String(s) => {
            if let Ok(inner @ Value::Object(_)) = serde_json::from_str::<Value>(s.trim()) {
                return Ok(inner);
            }
            match primary_key {
                Some(pk) => Ok(single(pk, &s)),
                None => Err(ArgsError::NotObject("a string")),
            }
        }
        other => Err(ArgsError::NotObject(type_name(&other))),
    }
}

fn repair(s: &str) -> Option<Value> {
    let mut text = strip_fences(s).trim().to_owned();
    // Text around the object ("Here are the arguments: {...}").
    if let (Some(start), Some(end)) = (text.find('{'), text.rfind('}'))
        && start < end
        && (start > 0 || end + 1 < text.len())
    {
        text = text[start..=end].to_owned();
    }
    if !text.starts_with('{') {
        return None;
    }
    let fixed = close_brackets(&escape_raw_controls(&drop_trailing_commas(&text)));
    serde_json::from_str::<Value>(&fixed).ok()
}

fn strip_fences(s: &str) -> &str {
    let Some(rest) = s.strip_prefix("```") else {
        return s;
    };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    rest.strip_suffix("```").unwrap_or(rest)
}

/// Walks JSON text tracking whether we are inside a string; `f` sees each char with that flag.
fn walk(s: &str, mut f: impl FnMut(char, bool, &mut String)) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let mut in_string = false;
    let mut escaped = false;
    for c in s.chars() {
        let was_in_string = in_string;
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
        f(c, was_in_string && in_string, &mut out);
    }
    out
}

fn drop_trailing_commas(s: &str) -> String {
    let mut out = walk(s, |c, inside, out| {
        if !inside && (c == '}' || c == ']') {
            let trimmed_len = out.trim_end().len();
            if out[..trimmed_len].ends_with(',') {
                out.truncate(trimmed_len - 1);
            }
        }
        out.push(c);
    });
    out.shrink_to_fit();
    out
}

fn escape_raw_controls(s: &str) -> String {
    walk(s, |c, inside, out| match c {
        '\n' if inside => out.push_str("\\n"),
        '\r' if inside => out.push_str("\\r"),
        '\t' if inside => out.push_str("\\t"),
        _ => out.push(c),
    })
}

fn close_brackets(s: &str) -> String {
    let mut stack = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in s.chars() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            '}' | ']' => {
                stack.pop();
            }
            _ => {}
        }
    }
    let mut out = s.to_owned();
    if in_string {
        out.push('"');
    }
    out.extend(stack.iter().rev());
    out
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks `args` against a parameter schema (`required` and each property's `type`), coercing
/// what models commonly get wrong: numbers and booleans sent as strings, and numbers sent where
/// a string is expected. Unknown properties are dropped.
pub fn validate_arguments(schema: &Value, args: Value) -> Result<Value, ArgsError> {
    let Value::Object(mut args) = args else {
        return Err(ArgsError::NotObject(type_name(&args)));
    };
    let props = schema.get("properties").and_then(Value::as_object);
    args.retain(|k, v| !v.is_null() && props.is_none_or(|p| p.contains_key(k)));
    for req in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(req) {
            return Err(ArgsError::Missing(req.to_owned()));
        }
    }
    if let Some(props) = props {
        for (name, value) in args.iter_mut() {
            let Some(expected) = props
                .get(name)
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            coerce(name, expected, value)?;
        }
    }
    Ok(Value::Object(args))
}

fn coerce(name: &str, expected: &str, value: &mut Value) -> Result<(), ArgsError> {
    let wrong = |v: &Value| ArgsError::WrongType {
        name: name.to_owned(),
        expected: expected.to_owned(),
        got: type_name(v),
    };
    let replacement = match (expected, &*value) {
        ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("array", Value::Array(_))
        | ("object", Value::Object(_)) => None,
        ("number", Value::Number(_)) => None,
        ("integer", Value::Number(n)) if n.is_i64() || n.is_u64() => None,
        ("integer", Value::Number(n)) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => Some(Value::from(f as i64)),
            _ => return Err(wrong(value)),
        },
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("integer", Value::String(s)) => match s.trim().parse::<i64>() {
            Ok(i) => Some(Value::from(i)),
            Err(_) => return Err(wrong(value)),
        },
        ("number", Value::String(s)) => match s.trim().parse::<f64>() {
            Ok(f) => Some(Value::from(f)),
            Err(_) => return Err(wrong(value)),
        },
        ("boolean", Value::String(s)) => match s.trim() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => return Err(wrong(value)),
        },
        _ => return Err(wrong(value)),
    };
    if let Some(r) = replacement {
        *value = r;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn plain_json_object() {
        assert_eq!(
            parse_arguments(r#"{"command":"ls"}"#, Some("command")).unwrap(),
            json!({"command": "ls"})
        );
        assert_eq!(parse_arguments("  ", None).unwrap(), json!({}));
    }

    #[test]
    fn bare_string_maps_to_primary_key() {
        assert_eq!(
            parse_arguments("ls -la", Some("command")).unwrap(),
            json!({"command": "ls -la"})
        );
        assert_eq!(
            parse_arguments(r#""ls -la""#, Some("command")).unwrap(),
            json!({"command": "ls -la"})
        );
    }

    #[test]
    fn repairs_common_mistakes() {
        let cases = [
            ("```json\n{\"path\": \"a\"}\n```", json!({"path": "a"})),
            ("Arguments: {\"path\": \"a\"} done", json!({"path": "a"})),
            ("{\"path\": \"a\",}", json!({"path": "a"})),
            (
                "{\"content\": \"line1\nline2\"}",
                json!({"content": "line1\nline2"}),
            ),
            ("{\"path\": \"a\"", json!({"path": "a"})),
            (r#""{\"path\": \"a\"}""#, json!({"path": "a"})),
            ("{\"a\": [1, 2,], }", json!({"a": [1, 2]})),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_arguments(raw, None).unwrap(), want, "{raw}");
        }
    }

    #[test]
    fn commas_inside_strings_are_kept() {
        assert_eq!(
            parse_arguments("{\"c\": \"a,}\",}", None).unwrap(),
            json!({"c": "a,}"})
        );
    }

    #[test]
    fn hopeless_input_is_a_clear_error() {
        let err = parse_arguments("{\"path\": nope nope", Some("path")).unwrap_err();
        assert!(matches!(err, ArgsError::NotJson { .. }), "{err:?}");
        assert!(parse_arguments("ls", None).is_err());
        assert_eq!(
            parse_arguments("[1,2]", Some("path")).unwrap_err(),
            ArgsError::NotObject("an array")
        );
    }

    #[test]
    fn validation_checks_required_and_types_and_coerces() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer"},
                "flag": {"type": "boolean"}
            },
            "required": ["path"]
        });
        assert_eq!(
            validate_arguments(&schema, json!({"offset": 3})).unwrap_err(),
            ArgsError::Missing("path".into())
        );
        assert_eq!(
            validate_arguments(
                &schema,
                json!({"path": "a", "offset": "12", "flag": "true", "extra": 1, "x": null})
            )
            .unwrap(),
            json!({"path": "a", "offset": 12, "flag": true})
        );
        assert_eq!(
            validate_arguments(&schema, json!({"path": ["a"]})).unwrap_err(),
            ArgsError::WrongType {
                name: "path".into(),
                expected: "string".into(),
                got: "an array"
            }
        );
        assert!(validate_arguments(&schema, json!({"path": "a", "offset": "ten"})).is_err());
    }
}
