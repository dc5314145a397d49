//! Evaluating a compiled condition, bounded: every node visited and every element produced
//! costs from a step budget, strings and collections a condition builds are capped, and
//! integer arithmetic is checked. A condition therefore ends quickly whatever it says, with a
//! value or an [`EvalError`].

use std::cmp::Ordering;
use std::rc::Rc;
use std::time::Instant;

use super::ast::{Arith, Builtin, Cmp, Method, Node, Poll, TypeName, Var};
use super::value::{Number, Value};

/// Work one evaluation may do: nodes visited plus elements produced or scanned.
pub(super) const STEP_BUDGET: u64 = 200_000;
/// Longest string a condition may build, in bytes.
pub(super) const MAX_STRING: usize = 256 * 1024;
/// Most elements of a list, tuple or dict a condition may build.
pub(super) const MAX_ITEMS: usize = 20_000;

/// Why a condition could not be evaluated (Python would have raised).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A type did not fit (`None["x"]`, `"a" < 1`, ...).
    #[error("TypeError: {0}")]
    Type(String),
    /// A missing dict key.
    #[error("KeyError: {0}")]
    Key(String),
    /// An index out of range.
    #[error("IndexError: {0}")]
    Index(String),
    /// A bad value (`int("x")`, division by zero, a value not in a list).
    #[error("ValueError: {0}")]
    Value(String),
    /// The step budget or a size cap was exceeded.
    #[error("the condition does too much work: {0}")]
    Budget(String),
}

type Result<T> = std::result::Result<T, EvalError>;

fn type_err<T>(msg: impl Into<String>) -> Result<T> {
    Err(EvalError::Type(msg.into()))
}

/// How many steps pass between looks at the clock.
const CLOCK_EVERY: u64 = 1024;

/// Evaluates `root` for `poll`, giving up with [`EvalError::Budget`] once `deadline` has
/// passed (looked at every [`CLOCK_EVERY`] steps) or the step budget is spent.
pub(super) fn evaluate(root: &Node, poll: &Poll<'_>, deadline: Option<Instant>) -> Result<Value> {
    let mut ev = Evaluator {
        poll,
        output: Value::str(poll.output),
        data: None,
        steps: 0,
        next_clock: CLOCK_EVERY,
        deadline,
    };
    ev.eval(root)
}

struct Evaluator<'p> {
    poll: &'p Poll<'p>,
    output: Value,
    /// `data`, parsed on first use.
    data: Option<Value>,
    steps: u64,
    /// The step count at which the clock is looked at next.
    next_clock: u64,
    deadline: Option<Instant>,
}

impl Evaluator<'_> {
    /// Charges `n` steps.
    fn spend(&mut self, n: usize) -> Result<()> {
        self.steps = self.steps.saturating_add(n as u64);
        if self.steps > STEP_BUDGET {
            return Err(EvalError::Budget(format!("more than {STEP_BUDGET} steps")));
        }
        if self.steps >= self.next_clock {
            self.next_clock = self.steps.saturating_add(CLOCK_EVERY);
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(EvalError::Budget("it ran out of time".into()));
            }
        }
        Ok(())
    }

    /// Python's `==`, charged one step per element compared (a dict against a dict of `n`
    /// keys costs up to `n²`).
    fn eq(&mut self, a: &Value, b: &Value) -> Result<bool> {
        self.spend(1)?;
        match (a, b) {
            (Value::List(x), Value::List(y)) | (Value::Tuple(x), Value::Tuple(y)) => {
                if x.len() != y.len() {
                    return Ok(false);
                }
                for (i, j) in x.iter().zip(y.iter()) {
                    if !self.eq(i, j)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            (Value::Dict(x), Value::Dict(y)) => {
                if x.len() != y.len() {
                    return Ok(false);
                }
                for (k, v) in x.iter() {
                    match self.lookup(y, k)? {
                        Some(v2) if self.eq(v, &v2)? => {}
                        _ => return Ok(false),
                    }
                }
                Ok(true)
            }
            (Value::Str(x), Value::Str(y)) => {
                self.spend(x.len().min(y.len()) / 64)?;
                Ok(x == y)
            }
            _ => Ok(a.py_eq(b)),
        }
    }

    /// The value of `key` in `fields`, charged per key compared.
    fn lookup(&mut self, fields: &[(Value, Value)], key: &Value) -> Result<Option<Value>> {
        for (k, v) in fields {
            if self.eq(k, key)? {
                return Ok(Some(v.clone()));
            }
        }
        Ok(None)
    }

    /// The position of the first of `items` equal to `needle`, charged per comparison.
    fn find(&mut self, items: &[Value], needle: &Value) -> Result<Option<usize>> {
        for (i, item) in items.iter().enumerate() {
            if self.eq(item, needle)? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Python's ordering of `a` and `b`, charged per element compared: `Ok(None)` when they
    /// are unordered numbers (a NaN: every `<` is false, as in Python), a `TypeError` when
    /// Python would raise one.
    fn order(&mut self, a: &Value, b: &Value) -> Result<Option<Ordering>> {
        self.spend(1)?;
        if let (Some(x), Some(y)) = (a.number(), b.number()) {
            return Ok(match (x, y) {
                (Number::Int(x), Number::Int(y)) => Some(x.cmp(&y)),
                _ => x.as_f64().partial_cmp(&y.as_f64()),
            });
        }
        match (a, b) {
            (Value::Str(x), Value::Str(y)) => {
                self.spend(x.len().min(y.len()) / 64)?;
                Ok(Some(x.cmp(y)))
            }
            (Value::List(x), Value::List(y)) | (Value::Tuple(x), Value::Tuple(y)) => {
                for (i, j) in x.iter().zip(y.iter()) {
                    if !self.eq(i, j)? {
                        return self.order(i, j);
                    }
                }
                Ok(Some(x.len().cmp(&y.len())))
            }
            _ => type_err(format!(
                "'<' not supported between instances of '{}' and '{}'",
                a.type_name(),
                b.type_name()
            )),
        }
    }

    /// `a < b`.
    fn less(&mut self, a: &Value, b: &Value) -> Result<bool> {
        Ok(self.order(a, b)? == Some(Ordering::Less))
    }

    /// `sorted()`: a stable merge sort whose every comparison is charged and may fail. It
    /// cannot panic whatever the comparisons say (NaN, mixed types), unlike `sort_by` with
    /// an order that is not total.
    fn sort(&mut self, items: Vec<Value>) -> Result<Vec<Value>> {
        if items.len() <= 1 {
            return Ok(items);
        }
        let mut right = items;
        let left: Vec<Value> = right.drain(..right.len() / 2).collect();
        let (left, right) = (self.sort(left)?, self.sort(right)?);
        let mut out = Vec::with_capacity(left.len() + right.len());
        let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
        while let (Some(a), Some(b)) = (l.peek(), r.peek()) {
            // Stable: the right one goes first only when it is strictly smaller.
            let next = if self.less(b, a)? { r.next() } else { l.next() };
            out.extend(next);
        }
        out.extend(l);
        out.extend(r);
        Ok(out)
    }

    fn string(&mut self, s: String) -> Result<Value> {
        if s.len() > MAX_STRING {
            return Err(EvalError::Budget(format!(
                "a string longer than {MAX_STRING} bytes"
            )));
        }
        self.spend(s.len() / 64)?;
        Ok(Value::str(s))
    }

    fn items(&mut self, items: Vec<Value>) -> Result<Vec<Value>> {
        if items.len() > MAX_ITEMS {
            return Err(EvalError::Budget(format!(
                "a collection of more than {MAX_ITEMS} items"
            )));
        }
        self.spend(items.len())?;
        Ok(items)
    }

    fn list(&mut self, items: Vec<Value>) -> Result<Value> {
        Ok(Value::List(Rc::new(self.items(items)?)))
    }

    fn var(&mut self, var: Var) -> Result<Value> {
        Ok(match var {
            Var::Output => self.output.clone(),
            Var::ExitCode => Value::Int(self.poll.exit_code),
            Var::PrevOutput => self.poll.prev_output.map_or(Value::None, Value::str),
            Var::Changed => Value::Bool(self.poll.prev_output != Some(self.poll.output)),
            Var::Data => {
                if self.data.is_none() {
                    self.spend(self.poll.output.len() / 64)?;
                    let parsed = serde_json::from_str::<serde_json::Value>(self.poll.output)
                        .map_or(Value::None, |j| Value::from_json(&j));
                    self.data = Some(parsed);
                }
                self.data.clone().unwrap_or(Value::None)
            }
        })
    }

    fn eval(&mut self, node: &Node) -> Result<Value> {
        self.spend(1)?;
        match node {
            Node::Const(v) => Ok(v.clone()),
            Node::Var(v) => self.var(*v),
            Node::And(values) => {
                let mut last = Value::Bool(true);
                for v in values {
                    last = self.eval(v)?;
                    if !last.truthy() {
                        break;
                    }
                }
                Ok(last)
            }
            Node::Or(values) => {
                let mut last = Value::Bool(false);
                for v in values {
                    last = self.eval(v)?;
                    if last.truthy() {
                        break;
                    }
                }
                Ok(last)
            }
            Node::Not(v) => Ok(Value::Bool(!self.eval(v)?.truthy())),
            Node::Neg(v) => match self.eval(v)?.number() {
                Some(Number::Int(i)) => i
                    .checked_neg()
                    .map(Value::Int)
                    .ok_or_else(|| EvalError::Value("integer overflow".into())),
                Some(Number::Float(f)) => Ok(Value::Float(-f)),
                None => type_err("bad operand type for unary -"),
            },
            Node::Pos(v) => match self.eval(v)?.number() {
                Some(Number::Int(i)) => Ok(Value::Int(i)),
                Some(Number::Float(f)) => Ok(Value::Float(f)),
                None => type_err("bad operand type for unary +"),
            },
            Node::Arith(op, l, r) => {
                let (l, r) = (self.eval(l)?, self.eval(r)?);
                self.arith(*op, &l, &r)
            }
            Node::Compare(left, rest) => {
                let mut left = self.eval(left)?;
                for (op, right) in rest {
                    let right = self.eval(right)?;
                    if !self.compare(*op, &left, &right)? {
                        return Ok(Value::Bool(false));
                    }
                    left = right;
                }
                Ok(Value::Bool(true))
            }
            Node::Index(value, index) => {
                let (value, index) = (self.eval(value)?, self.eval(index)?);
                self.index(&value, &index)
            }
            Node::Slice {
                value,
                lower,
                upper,
                step,
            } => {
                let value = self.eval(value)?;
                let mut bound = |b: &Option<Box<Node>>| -> Result<Option<i64>> {
                    match b {
                        None => Ok(None),
                        Some(n) => match self.eval(n)? {
                            Value::None => Ok(None),
                            Value::Int(i) => Ok(Some(i)),
                            Value::Bool(b) => Ok(Some(i64::from(b))),
                            other => type_err(format!(
                                "slice indices must be integers, not {}",
                                other.type_name()
                            )),
                        },
                    }
                };
                let (lower, upper, step) = (bound(lower)?, bound(upper)?, bound(step)?);
                self.slice(&value, lower, upper, step)
            }
            Node::Method(recv, method, args) => {
                let recv = self.eval(recv)?;
                let args = args
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>>>()?;
                self.method(&recv, *method, &args)
            }
            Node::Call(builtin, args) => {
                let args = args
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>>>()?;
                self.builtin(*builtin, args)
            }
            Node::IsInstance(value, types) => {
                let value = self.eval(value)?;
                Ok(Value::Bool(types.iter().any(|t| is_instance(&value, *t))))
            }
            Node::List(items) => {
                let items = items
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>>>()?;
                self.list(items)
            }
            Node::Tuple(items) => {
                let items = items
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Value::Tuple(Rc::new(self.items(items)?)))
            }
            Node::Dict(items) => {
                let mut out: Vec<(Value, Value)> = Vec::with_capacity(items.len());
                for (k, v) in items {
                    let (k, v) = (self.eval(k)?, self.eval(v)?);
                    if matches!(k, Value::List(_) | Value::Dict(_)) {
                        return type_err(format!("unhashable type: '{}'", k.type_name()));
                    }
                    let mut slot = None;
                    for (i, (k2, _)) in out.iter().enumerate() {
                        if self.eq(k2, &k)? {
                            slot = Some(i);
                            break;
                        }
                    }
                    match slot {
                        Some(i) => out[i].1 = v,
                        None => out.push((k, v)),
                    }
                }
                self.spend(out.len())?;
                Ok(Value::Dict(Rc::new(out)))
            }
        }
    }

    fn arith(&mut self, op: Arith, l: &Value, r: &Value) -> Result<Value> {
        match (op, l, r) {
            (Arith::Add, Value::Str(a), Value::Str(b)) => {
                let mut s = String::with_capacity(a.len() + b.len());
                s.push_str(a);
                s.push_str(b);
                return self.string(s);
            }
            (Arith::Add, Value::List(a), Value::List(b)) => {
                let items: Vec<Value> = a.iter().chain(b.iter()).cloned().collect();
                return self.list(items);
            }
            (Arith::Mul, Value::Str(s), n) | (Arith::Mul, n, Value::Str(s))
                if matches!(n, Value::Int(_) | Value::Bool(_)) =>
            {
                let times = usize::try_from(int_of(n)?.max(0)).unwrap_or(usize::MAX);
                if s.len().saturating_mul(times) > MAX_STRING {
                    return Err(EvalError::Budget(format!(
                        "a string longer than {MAX_STRING} bytes"
                    )));
                }
                return self.string(s.repeat(times));
            }
            _ => {}
        }
        let (Some(a), Some(b)) = (l.number(), r.number()) else {
            return type_err(format!(
                "unsupported operand types: '{}' and '{}'",
                l.type_name(),
                r.type_name()
            ));
        };
        if let (Number::Int(x), Number::Int(y)) = (a, b) {
            let overflow = || EvalError::Value("integer overflow".into());
            let zero = || EvalError::Value("division by zero".into());
            return Ok(match op {
                Arith::Add => Value::Int(x.checked_add(y).ok_or_else(overflow)?),
                Arith::Sub => Value::Int(x.checked_sub(y).ok_or_else(overflow)?),
                Arith::Mul => Value::Int(x.checked_mul(y).ok_or_else(overflow)?),
                Arith::Div => {
                    if y == 0 {
                        return Err(zero());
                    }
                    Value::Float(a.as_f64() / b.as_f64())
                }
                Arith::FloorDiv => {
                    if y == 0 {
                        return Err(zero());
                    }
                    // Python floors toward negative infinity; Rust truncates toward zero.
                    let q = x.checked_div(y).ok_or_else(overflow)?;
                    Value::Int(if x % y != 0 && ((x < 0) != (y < 0)) {
                        q - 1
                    } else {
                        q
                    })
                }
                Arith::Mod => {
                    if y == 0 {
                        return Err(zero());
                    }
                    let m = x.checked_rem(y).ok_or_else(overflow)?;
                    Value::Int(if m != 0 && ((m < 0) != (y < 0)) {
                        m + y
                    } else {
                        m
                    })
                }
                Arith::Pow => {
                    if y < 0 {
                        Value::Float(a.as_f64().powf(b.as_f64()))
                    } else {
                        let e = u32::try_from(y).map_err(|_| overflow())?;
                        Value::Int(x.checked_pow(e).ok_or_else(overflow)?)
                    }
                }
            });
        }
        let (x, y) = (a.as_f64(), b.as_f64());
        Ok(Value::Float(match op {
            Arith::Add => x + y,
            Arith::Sub => x - y,
            Arith::Mul => x * y,
            Arith::Div | Arith::FloorDiv | Arith::Mod if y == 0.0 => {
                return Err(EvalError::Value("float division by zero".into()));
            }
            Arith::Div => x / y,
            Arith::FloorDiv => (x / y).floor(),
            Arith::Mod => x - y * (x / y).floor(),
            Arith::Pow => x.powf(y),
        }))
    }

    fn compare(&mut self, op: Cmp, l: &Value, r: &Value) -> Result<bool> {
        match op {
            Cmp::Eq => self.eq(l, r),
            Cmp::NotEq => self.eq(l, r).map(|b| !b),
            Cmp::Lt => Ok(self.order(l, r)?.is_some_and(Ordering::is_lt)),
            Cmp::LtE => Ok(self.order(l, r)?.is_some_and(Ordering::is_le)),
            Cmp::Gt => Ok(self.order(l, r)?.is_some_and(Ordering::is_gt)),
            Cmp::GtE => Ok(self.order(l, r)?.is_some_and(Ordering::is_ge)),
            Cmp::In => self.contains(r, l),
            Cmp::NotIn => self.contains(r, l).map(|b| !b),
            Cmp::Is => Ok(identical(l, r)),
            Cmp::IsNot => Ok(!identical(l, r)),
        }
    }

    /// `needle in haystack`.
    fn contains(&mut self, haystack: &Value, needle: &Value) -> Result<bool> {
        match (haystack, needle) {
            (Value::Str(h), Value::Str(n)) => {
                self.spend(h.len() / 64)?;
                Ok(h.contains(&**n))
            }
            (Value::Str(_), other) => type_err(format!(
                "'in <string>' requires string as left operand, not {}",
                other.type_name()
            )),
            (Value::List(items) | Value::Tuple(items), n) => Ok(self.find(items, n)?.is_some()),
            (Value::Dict(fields), n) => Ok(self.lookup(fields, n)?.is_some()),
            (other, _) => type_err(format!(
                "argument of type '{}' is not iterable",
                other.type_name()
            )),
        }
    }

    fn index(&mut self, value: &Value, index: &Value) -> Result<Value> {
        match value {
            Value::Dict(fields) => self
                .lookup(fields, index)?
                .ok_or_else(|| EvalError::Key(index.short_repr())),
            Value::List(items) | Value::Tuple(items) => {
                let i = position(int_index(index)?, items.len())
                    .ok_or_else(|| EvalError::Index("list index out of range".into()))?;
                Ok(items[i].clone())
            }
            Value::Str(s) => {
                let chars: Vec<char> = s.chars().collect();
                self.spend(chars.len() / 64)?;
                let i = position(int_index(index)?, chars.len())
                    .ok_or_else(|| EvalError::Index("string index out of range".into()))?;
                Ok(Value::str(chars[i].to_string()))
            }
            other => type_err(format!(
                "'{}' object is not subscriptable",
                other.type_name()
            )),
        }
    }

    fn slice(
        &mut self,
        value: &Value,
        lower: Option<i64>,
        upper: Option<i64>,
        step: Option<i64>,
    ) -> Result<Value> {
        let step = step.unwrap_or(1);
        if step == 0 {
            return Err(EvalError::Value("slice step cannot be zero".into()));
        }
        let pick = |len: usize| -> Vec<usize> { slice_indices(len, lower, upper, step) };
        match value {
            Value::List(items) => {
                let out = pick(items.len())
                    .into_iter()
                    .map(|i| items[i].clone())
                    .collect();
                self.list(out)
            }
            Value::Tuple(items) => {
                let out = pick(items.len())
                    .into_iter()
                    .map(|i| items[i].clone())
                    .collect();
                Ok(Value::Tuple(Rc::new(self.items(out)?)))
            }
            Value::Str(s) => {
                let chars: Vec<char> = s.chars().collect();
                let out: String = pick(chars.len()).into_iter().map(|i| chars[i]).collect();
                self.string(out)
            }
            other => type_err(format!(
                "'{}' object is not subscriptable",
                other.type_name()
            )),
        }
    }

    fn method(&mut self, recv: &Value, method: Method, args: &[Value]) -> Result<Value> {
        let arity = |min: usize, max: usize| -> Result<()> {
            if args.len() < min || args.len() > max {
                return type_err(format!(
                    "{}() takes {} arguments ({} given)",
                    method.name(),
                    if min == max {
                        min.to_string()
                    } else {
                        format!("{min} to {max}")
                    },
                    args.len()
                ));
            }
            Ok(())
        };
        match (recv, method) {
            (Value::Str(s), Method::Lower) => {
                arity(0, 0)?;
                self.string(s.to_lowercase())
            }
            (Value::Str(s), Method::Upper) => {
                arity(0, 0)?;
                self.string(s.to_uppercase())
            }
            (Value::Str(s), Method::Strip) => {
                arity(0, 1)?;
                match args.first() {
                    None | Some(Value::None) => self.string(s.trim().to_owned()),
                    Some(Value::Str(chars)) => {
                        let set: Vec<char> = chars.chars().collect();
                        self.string(s.trim_matches(|c| set.contains(&c)).to_owned())
                    }
                    Some(other) => type_err(format!(
                        "strip arg must be None or str, not {}",
                        other.type_name()
                    )),
                }
            }
            (Value::Str(s), Method::StartsWith | Method::EndsWith) => {
                arity(1, 1)?;
                let prefixes: Vec<Rc<str>> = match &args[0] {
                    Value::Str(p) => vec![p.clone()],
                    Value::Tuple(items) => items
                        .iter()
                        .map(|i| match i {
                            Value::Str(p) => Ok(p.clone()),
                            other => type_err(format!(
                                "tuple for {}() must only contain str, not {}",
                                method.name(),
                                other.type_name()
                            )),
                        })
                        .collect::<Result<_>>()?,
                    other => {
                        return type_err(format!(
                            "{}() arg must be str or a tuple of str, not {}",
                            method.name(),
                            other.type_name()
                        ));
                    }
                };
                let starts = method == Method::StartsWith;
                Ok(Value::Bool(prefixes.iter().any(|p| {
                    if starts {
                        s.starts_with(&**p)
                    } else {
                        s.ends_with(&**p)
                    }
                })))
            }
            (Value::Str(s), Method::Split) => {
                arity(0, 1)?;
                self.spend(s.len() / 64)?;
                let parts: Vec<Value> = match args.first() {
                    None | Some(Value::None) => s.split_whitespace().map(Value::str).collect(),
                    Some(Value::Str(sep)) if sep.is_empty() => {
                        return Err(EvalError::Value("empty separator".into()));
                    }
                    Some(Value::Str(sep)) => s.split(&**sep).map(Value::str).collect(),
                    Some(other) => {
                        return type_err(format!("must be str or None, not {}", other.type_name()));
                    }
                };
                self.list(parts)
            }
            (Value::Str(s), Method::Count) => {
                arity(1, 1)?;
                let Value::Str(sub) = &args[0] else {
                    return type_err("must be str");
                };
                self.spend(s.len() / 64)?;
                let n = if sub.is_empty() {
                    s.chars().count() + 1
                } else {
                    s.matches(&**sub).count()
                };
                Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
            }
            (Value::Str(s), Method::Find) => {
                arity(1, 1)?;
                let Value::Str(sub) = &args[0] else {
                    return type_err("must be str");
                };
                self.spend(s.len() / 64)?;
                Ok(Value::Int(match s.find(&**sub) {
                    Some(byte) => i64::try_from(s[..byte].chars().count()).unwrap_or(i64::MAX),
                    None => -1,
                }))
            }
            (Value::Str(s), Method::Replace) => {
                arity(2, 2)?;
                let (Value::Str(old), Value::Str(new)) = (&args[0], &args[1]) else {
                    return type_err("replace() arguments must be str");
                };
                let hits = if old.is_empty() {
                    s.chars().count() + 1
                } else {
                    s.matches(&**old).count()
                };
                let size = s.len().saturating_add(hits.saturating_mul(new.len()));
                if size > MAX_STRING {
                    return Err(EvalError::Budget(format!(
                        "a string longer than {MAX_STRING} bytes"
                    )));
                }
                self.string(s.replace(&**old, new))
            }
            (Value::Dict(fields), Method::Get) => {
                arity(1, 2)?;
                Ok(self
                    .lookup(fields, &args[0])?
                    .unwrap_or_else(|| args.get(1).cloned().unwrap_or(Value::None)))
            }
            (Value::Dict(fields), Method::Keys) => {
                arity(0, 0)?;
                self.list(fields.iter().map(|(k, _)| k.clone()).collect())
            }
            (Value::Dict(fields), Method::Values) => {
                arity(0, 0)?;
                self.list(fields.iter().map(|(_, v)| v.clone()).collect())
            }
            (Value::Dict(fields), Method::Items) => {
                arity(0, 0)?;
                let pairs = fields
                    .iter()
                    .map(|(k, v)| Value::Tuple(Rc::new(vec![k.clone(), v.clone()])))
                    .collect();
                self.list(pairs)
            }
            (Value::List(items) | Value::Tuple(items), Method::Index) => {
                arity(1, 1)?;
                self.find(items, &args[0])?
                    .map(|p| Value::Int(i64::try_from(p).unwrap_or(i64::MAX)))
                    .ok_or_else(|| {
                        EvalError::Value(format!("{} is not in list", args[0].short_repr()))
                    })
            }
            (Value::List(items) | Value::Tuple(items), Method::Count) => {
                arity(1, 1)?;
                let mut n = 0usize;
                for item in items.iter() {
                    if self.eq(item, &args[0])? {
                        n += 1;
                    }
                }
                Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
            }
            (other, m) => type_err(format!(
                "'{}' object has no method '{}'",
                other.type_name(),
                m.name()
            )),
        }
    }

    fn builtin(&mut self, f: Builtin, args: Vec<Value>) -> Result<Value> {
        let one = |args: &[Value], name: &str| -> Result<Value> {
            match args {
                [v] => Ok(v.clone()),
                _ => type_err(format!(
                    "{name}() takes exactly one argument ({} given)",
                    args.len()
                )),
            }
        };
        match f {
            Builtin::Len => {
                let v = one(&args, "len")?;
                let n = match &v {
                    Value::Str(s) => s.chars().count(),
                    Value::List(i) | Value::Tuple(i) => i.len(),
                    Value::Dict(d) => d.len(),
                    other => {
                        return type_err(format!(
                            "object of type '{}' has no len()",
                            other.type_name()
                        ));
                    }
                };
                Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
            }
            Builtin::Str => match args.as_slice() {
                [] => Ok(Value::str("")),
                [Value::Str(s)] => Ok(Value::Str(s.clone())),
                [v] => {
                    // Built only up to the cap: a large value is refused, not rendered first.
                    let mut text = String::new();
                    if !v.write_repr(&mut text, MAX_STRING) {
                        return Err(EvalError::Budget(format!(
                            "a string longer than {MAX_STRING} bytes"
                        )));
                    }
                    self.string(text)
                }
                _ => type_err("str() takes at most one argument"),
            },
            Builtin::Bool => match args.as_slice() {
                [] => Ok(Value::Bool(false)),
                [v] => Ok(Value::Bool(v.truthy())),
                _ => type_err("bool() takes at most one argument"),
            },
            Builtin::Int => match one(&args, "int")? {
                Value::Bool(b) => Ok(Value::Int(i64::from(b))),
                Value::Int(i) => Ok(Value::Int(i)),
                Value::Float(f) if f.is_finite() && f.abs() < 9.2e18 =>
                {
                    #[allow(clippy::cast_possible_truncation)]
                    Ok(Value::Int(f.trunc() as i64))
                }
                Value::Float(_) => Err(EvalError::Value("cannot convert float to integer".into())),
                Value::Str(s) => s
                    .trim()
                    .replace('_', "")
                    .parse::<i64>()
                    .map(Value::Int)
                    .map_err(|_| {
                        EvalError::Value(format!(
                            "invalid literal for int(): {}",
                            Value::Str(s.clone()).short_repr()
                        ))
                    }),
                other => type_err(format!(
                    "int() argument must be a string or a number, not '{}'",
                    other.type_name()
                )),
            },
            Builtin::Float => match one(&args, "float")? {
                Value::Str(s) => {
                    let t = s.trim().to_ascii_lowercase();
                    match t.as_str() {
                        "inf" | "+inf" | "infinity" => Ok(Value::Float(f64::INFINITY)),
                        "-inf" | "-infinity" => Ok(Value::Float(f64::NEG_INFINITY)),
                        "nan" => Ok(Value::Float(f64::NAN)),
                        _ => t.parse::<f64>().map(Value::Float).map_err(|_| {
                            EvalError::Value(format!(
                                "could not convert string to float: {}",
                                Value::Str(s.clone()).short_repr()
                            ))
                        }),
                    }
                }
                v => match v.number() {
                    Some(n) => Ok(Value::Float(n.as_f64())),
                    None => type_err(format!(
                        "float() argument must be a string or a number, not '{}'",
                        v.type_name()
                    )),
                },
            },
            Builtin::Abs => match one(&args, "abs")?.number() {
                Some(Number::Int(i)) => i
                    .checked_abs()
                    .map(Value::Int)
                    .ok_or_else(|| EvalError::Value("integer overflow".into())),
                Some(Number::Float(f)) => Ok(Value::Float(f.abs())),
                None => type_err("bad operand type for abs()"),
            },
            Builtin::Min | Builtin::Max => {
                let items = match args.as_slice() {
                    [] => return type_err("expected at least 1 argument, got 0"),
                    [single] => self.iterate(single)?,
                    many => many.to_vec(),
                };
                self.spend(items.len())?;
                let want = if f == Builtin::Min {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
                let mut best: Option<Value> = None;
                for item in items {
                    best = Some(match best {
                        None => item,
                        Some(b) => match self.order(&item, &b)? {
                            Some(o) if o == want => item,
                            _ => b,
                        },
                    });
                }
                best.ok_or_else(|| EvalError::Value("arg is an empty sequence".into()))
            }
            Builtin::Any | Builtin::All => {
                let items =
                    self.iterate(&one(&args, if f == Builtin::Any { "any" } else { "all" })?)?;
                self.spend(items.len())?;
                Ok(Value::Bool(if f == Builtin::Any {
                    items.iter().any(Value::truthy)
                } else {
                    items.iter().all(Value::truthy)
                }))
            }
            Builtin::Sorted => {
                let items = self.iterate(&one(&args, "sorted")?)?;
                // n log n comparisons, charged up front; each comparison costs again.
                let n = items.len();
                self.spend(n.saturating_mul(usize::BITS as usize - n.leading_zeros() as usize))?;
                let sorted = self.sort(items)?;
                Ok(Value::List(Rc::new(sorted)))
            }
            // Compiled into its own node.
            Builtin::IsInstance => type_err("isinstance takes a value and a type"),
        }
    }

    /// The elements of an iterable (a str iterates its characters, a dict its keys).
    fn iterate(&mut self, v: &Value) -> Result<Vec<Value>> {
        let items = match v {
            Value::List(i) | Value::Tuple(i) => i.as_ref().clone(),
            Value::Dict(d) => d.iter().map(|(k, _)| k.clone()).collect(),
            Value::Str(s) => s.chars().map(|c| Value::str(c.to_string())).collect(),
            other => {
                return type_err(format!("'{}' object is not iterable", other.type_name()));
            }
        };
        self.items(items)
    }
}

fn is_instance(v: &Value, t: TypeName) -> bool {
    matches!(
        (v, t),
        (Value::Str(_), TypeName::Str)
            | (Value::Int(_) | Value::Bool(_), TypeName::Int)
            | (Value::Float(_), TypeName::Float)
            | (Value::Bool(_), TypeName::Bool)
            | (Value::List(_), TypeName::List)
            | (Value::Dict(_), TypeName::Dict)
            | (Value::Tuple(_), TypeName::Tuple)
    )
}

/// `is`: the singletons are themselves; other values are never the same object here.
fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::None, Value::None) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        _ => false,
    }
}

fn int_of(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Bool(b) => Ok(i64::from(*b)),
        other => type_err(format!("expected an int, not {}", other.type_name())),
    }
}

fn int_index(v: &Value) -> Result<i64> {
    int_of(v)
        .map_err(|_| EvalError::Type(format!("indices must be integers, not {}", v.type_name())))
}

/// A Python index (negative counts from the end) as a position in `len`.
fn position(i: i64, len: usize) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let i = if i < 0 { i + len } else { i };
    (0..len)
        .contains(&i)
        .then(|| usize::try_from(i).ok())
        .flatten()
}

/// The positions `[lower:upper:step]` selects from a sequence of `len`, as Python does.
fn slice_indices(len: usize, lower: Option<i64>, upper: Option<i64>, step: i64) -> Vec<usize> {
    let n = i64::try_from(len).unwrap_or(i64::MAX);
    let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let mut out = Vec::new();
    if step > 0 {
        let start = clamp(lower.map_or(0, norm), 0, n);
        let stop = clamp(upper.map_or(n, norm), 0, n);
        let mut i = start;
        while i < stop {
            out.extend(usize::try_from(i).ok());
            i = i.saturating_add(step);
        }
    } else {
        let start = clamp(lower.map_or(n - 1, norm), -1, n - 1);
        let stop = clamp(upper.map_or(-1, norm), -1, n - 1);
        let stop = if upper.is_none() { -1 } else { stop };
        let mut i = start;
        while i > stop {
            out.extend(usize::try_from(i).ok());
            i = i.saturating_add(step);
        }
    }
    out
}
