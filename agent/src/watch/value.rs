//! The values a `stop_on` condition computes with, and the Python semantics it needs:
//! truthiness, equality across numbers, ordering, `str()` and `repr()`.

use std::cmp::Ordering;
use std::rc::Rc;

/// A Python value: what `output`, `data` and friends hold, and what a condition computes.
/// Strings and collections are shared, so passing them around costs nothing.
#[derive(Debug, Clone)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An `int` (bounded to 64 bits; overflow is an error, never a wrap).
    Int(i64),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(Rc<str>),
    /// A `list`.
    List(Rc<Vec<Value>>),
    /// A `tuple`.
    Tuple(Rc<Vec<Value>>),
    /// A `dict`, in insertion order.
    Dict(Rc<Vec<(Value, Value)>>),
}

impl Value {
    /// A `str`.
    pub fn str(s: impl Into<Rc<str>>) -> Self {
        Value::Str(s.into())
    }

    /// The value of parsed JSON (`data`).
    pub fn from_json(json: &serde_json::Value) -> Self {
        match json {
            serde_json::Value::Null => Value::None,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::str(s.as_str()),
            serde_json::Value::Array(items) => {
                Value::List(Rc::new(items.iter().map(Value::from_json).collect()))
            }
            serde_json::Value::Object(fields) => Value::Dict(Rc::new(
                fields
                    .iter()
                    .map(|(k, v)| (Value::str(k.as_str()), Value::from_json(v)))
                    .collect(),
            )),
        }
    }

    /// Python's type name, for error messages and `isinstance`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }

    /// Python's truthiness.
    pub fn truthy(&self) -> bool {
        match self {
            Value::None => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(v) | Value::Tuple(v) => !v.is_empty(),
            Value::Dict(d) => !d.is_empty(),
        }
    }

    /// The value as a number (bools count as ints, as in Python).
    pub(super) fn number(&self) -> Option<Number> {
        match self {
            Value::Bool(b) => Some(Number::Int(i64::from(*b))),
            Value::Int(i) => Some(Number::Int(*i)),
            Value::Float(f) => Some(Number::Float(*f)),
            _ => None,
        }
    }

    /// Python's `==`.
    pub fn py_eq(&self, other: &Value) -> bool {
        if let (Some(a), Some(b)) = (self.number(), other.number()) {
            return a.as_f64() == b.as_f64()
                && match (a, b) {
                    (Number::Int(x), Number::Int(y)) => x == y,
                    _ => true,
                };
        }
        match (self, other) {
            (Value::None, Value::None) => true,
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::List(a), Value::List(b)) | (Value::Tuple(a), Value::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.py_eq(y))
            }
            (Value::Dict(a), Value::Dict(b)) => {
                a.len() == b.len()
                    && a.iter().all(|(k, v)| {
                        b.iter()
                            .find(|(k2, _)| k.py_eq(k2))
                            .is_some_and(|(_, v2)| v.py_eq(v2))
                    })
            }
            _ => false,
        }
    }

    /// Python's ordering (`<` and friends); `None` where Python raises `TypeError`.
    pub fn py_cmp(&self, other: &Value) -> Option<Ordering> {
        if let (Some(a), Some(b)) = (self.number(), other.number()) {
            return match (a, b) {
                (Number::Int(x), Number::Int(y)) => Some(x.cmp(&y)),
                _ => a.as_f64().partial_cmp(&b.as_f64()),
            };
        }
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
            (Value::List(a), Value::List(b)) | (Value::Tuple(a), Value::Tuple(b)) => {
                for (x, y) in a.iter().zip(b.iter()) {
                    if !x.py_eq(y) {
                        return x.py_cmp(y);
                    }
                }
                Some(a.len().cmp(&b.len()))
            }
            _ => None,
        }
    }

    /// Python's `str()`.
    pub fn py_str(&self) -> String {
        match self {
            Value::Str(s) => s.to_string(),
            other => other.py_repr(),
        }
    }

    /// Python's `repr()`.
    pub fn py_repr(&self) -> String {
        let mut out = String::new();
        self.write_repr(&mut out, usize::MAX);
        out
    }

    /// `repr()` for an error message: at most about 200 bytes, cut with `…`.
    pub(super) fn short_repr(&self) -> String {
        const SHORT: usize = 200;
        let mut out = String::new();
        if !self.write_repr(&mut out, SHORT) {
            out.push('…');
        }
        out
    }

    /// Appends `repr(self)` to `out` as long as `out` stays within `limit` bytes. Returns
    /// `false` as soon as it would not (`out` then holds a cut prefix): the size of a result
    /// is known before the whole of it is built, whatever the value.
    pub(super) fn write_repr(&self, out: &mut String, limit: usize) -> bool {
        let push = |out: &mut String, s: &str| -> bool {
            if out.len().saturating_add(s.len()) > limit {
                return false;
            }
            out.push_str(s);
            true
        };
        match self {
            Value::None => push(out, "None"),
            Value::Bool(true) => push(out, "True"),
            Value::Bool(false) => push(out, "False"),
            Value::Int(i) => push(out, &i.to_string()),
            Value::Float(f) => push(out, &float_repr(*f)),
            Value::Str(s) => {
                let quote = if s.contains('\'') && !s.contains('"') {
                    '"'
                } else {
                    '\''
                };
                let mut buf = [0u8; 4];
                if !push(out, quote.encode_utf8(&mut buf)) {
                    return false;
                }
                for c in s.chars() {
                    let ok = match c {
                        '\\' => push(out, "\\\\"),
                        '\n' => push(out, "\\n"),
                        '\r' => push(out, "\\r"),
                        '\t' => push(out, "\\t"),
                        c if c == quote => push(out, "\\") && push(out, c.encode_utf8(&mut buf)),
                        c => push(out, c.encode_utf8(&mut buf)),
                    };
                    if !ok {
                        return false;
                    }
                }
                push(out, quote.encode_utf8(&mut buf))
            }
            Value::List(items) => {
                push(out, "[") && write_items(items, out, limit) && push(out, "]")
            }
            Value::Tuple(items) if items.len() == 1 => {
                push(out, "(") && items[0].write_repr(out, limit) && push(out, ",)")
            }
            Value::Tuple(items) => {
                push(out, "(") && write_items(items, out, limit) && push(out, ")")
            }
            Value::Dict(fields) => {
                if !push(out, "{") {
                    return false;
                }
                for (i, (k, v)) in fields.iter().enumerate() {
                    if (i > 0 && !push(out, ", "))
                        || !k.write_repr(out, limit)
                        || !push(out, ": ")
                        || !v.write_repr(out, limit)
                    {
                        return false;
                    }
                }
                push(out, "}")
            }
        }
    }
}

/// The reprs of `items`, separated by `, `, within `limit` (see [`Value::write_repr`]).
fn write_items(items: &[Value], out: &mut String, limit: usize) -> bool {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            if out.len().saturating_add(2) > limit {
                return false;
            }
            out.push_str(", ");
        }
        if !item.write_repr(out, limit) {
            return false;
        }
    }
    true
}

/// `repr(float)`: the shortest text that reads back, with `.0` on whole numbers.
fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let text = f.to_string();
    if text.contains(['.', 'e', 'E']) {
        text
    } else {
        format!("{text}.0")
    }
}

/// A number operand.
#[derive(Debug, Clone, Copy)]
pub(super) enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    pub(super) fn as_f64(self) -> f64 {
        match self {
            // Precision loss above 2^53 matches Python's int→float conversion.
            #[allow(clippy::cast_precision_loss)]
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn python_semantics_for_equality_order_truth_and_text() {
        assert!(Value::Int(1).py_eq(&Value::Float(1.0)));
        assert!(Value::Bool(true).py_eq(&Value::Int(1)));
        assert!(!Value::str("1").py_eq(&Value::Int(1)));
        assert_eq!(
            Value::str("a").py_cmp(&Value::str("b")),
            Some(Ordering::Less)
        );
        assert_eq!(Value::str("a").py_cmp(&Value::Int(1)), None);
        assert!(!Value::str("").truthy() && Value::str("x").truthy());
        assert!(!Value::Dict(Rc::default()).truthy());
        let json: serde_json::Value =
            serde_json::from_str(r#"{"state": "MERGED", "n": [1, 2.5, null, true]}"#).unwrap();
        assert_eq!(
            Value::from_json(&json).py_repr(),
            "{'n': [1, 2.5, None, True], 'state': 'MERGED'}"
        );
        assert_eq!(Value::Float(3.0).py_str(), "3.0");
        assert_eq!(Value::str("it's").py_repr(), "\"it's\"");
        assert_eq!(Value::Tuple(Rc::new(vec![Value::Int(1)])).py_repr(), "(1,)");
    }
}
