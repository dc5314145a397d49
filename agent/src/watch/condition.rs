//! The `stop_on` language: a Python expression over a poll's result, parsed by a real Python
//! parser and compiled into a small tree of the constructs listed below. Anything else is
//! refused when the watch is created, with its position and the reason; evaluation then needs
//! no further checks of what the model wrote (see `eval` for the bounds).
//!
//! Allowed: literals (numbers, strings, `True`, `False`, `None`, lists, tuples, dicts); the
//! names `output`, `data`, `exit_code`, `prev_output`, `changed`; `and`, `or`, `not`;
//! comparisons, chained too (`==`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `not in`, `is`,
//! `is not`); arithmetic (`+ - * / // % **`, unary `-` and `+`); subscripts and slices; the
//! str methods `lower upper strip startswith endswith split count find replace`; the dict
//! methods `get keys values items`; the list methods `index count`; and the builtins `len str
//! int float bool abs min max any all isinstance sorted`.

use ruff_python_ast::{self as ast, Expr, Number};
use ruff_text_size::Ranged;

pub use super::ast::Poll;
use super::ast::{Arith, Builtin, Cmp, Method, Node, TypeName, Var};
use super::eval::{self, EvalError};
use super::value::Value;

/// Longest condition accepted, in bytes.
pub const MAX_SOURCE: usize = 2_000;
/// Deepest nesting accepted.
const MAX_DEPTH: usize = 64;

/// A compiled condition.
#[derive(Debug, Clone)]
pub struct Condition {
    source: String,
    root: Node,
}

/// Why a condition was refused: where, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stop_on, line {line} column {column}: {reason}")]
pub struct ConditionError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong.
    pub reason: String,
}

impl Condition {
    /// Parses and checks `source`; every construct outside the language is refused here.
    pub fn compile(source: &str) -> Result<Self, ConditionError> {
        if source.len() > MAX_SOURCE {
            return Err(ConditionError {
                line: 1,
                column: 1,
                reason: format!(
                    "the condition is {} bytes; at most {MAX_SOURCE} are accepted",
                    source.len()
                ),
            });
        }
        if source.trim().is_empty() {
            return Err(ConditionError {
                line: 1,
                column: 1,
                reason: "the condition is empty".into(),
            });
        }
        let parsed = ruff_python_parser::parse_expression(source).map_err(|e| {
            at(
                source,
                e.location.start().to_usize(),
                format!("not a Python expression: {}", e.error),
            )
        })?;
        let compiler = Compiler { source };
        let root = compiler.expr(parsed.expr(), 0)?;
        Ok(Condition {
            source: source.to_owned(),
            root,
        })
    }

    /// The condition as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the condition holds for `poll` (its result's truthiness). Errors (a missing
    /// key, a type mismatch, the budget spent) are for the caller to report; they never hang.
    pub fn holds(&self, poll: &Poll<'_>) -> Result<bool, EvalError> {
        eval::evaluate(&self.root, poll, None).map(|v| v.truthy())
    }

    /// [`Condition::holds`], giving up with [`EvalError::Budget`] once `deadline` has passed
    /// (besides the step budget): the wall-clock cap of a poll's evaluation.
    pub fn holds_until(
        &self,
        poll: &Poll<'_>,
        deadline: std::time::Instant,
    ) -> Result<bool, EvalError> {
        eval::evaluate(&self.root, poll, Some(deadline)).map(|v| v.truthy())
    }
}

/// The error at byte `offset` of `source`.
fn at(source: &str, offset: usize, reason: String) -> ConditionError {
    let before = source.get(..offset.min(source.len())).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    ConditionError {
        line,
        column,
        reason,
    }
}

struct Compiler<'s> {
    source: &'s str,
}

impl Compiler<'_> {
    fn refuse<T>(
        &self,
        node: &impl Ranged,
        reason: impl Into<String>,
    ) -> Result<T, ConditionError> {
        Err(at(self.source, node.start().to_usize(), reason.into()))
    }

    fn boxed(&self, e: &Expr, depth: usize) -> Result<Box<Node>, ConditionError> {
        self.expr(e, depth).map(Box::new)
    }

    fn all(&self, items: &[Expr], depth: usize) -> Result<Vec<Node>, ConditionError> {
        items.iter().map(|e| self.expr(e, depth)).collect()
    }

    fn expr(&self, e: &Expr, depth: usize) -> Result<Node, ConditionError> {
        if depth > MAX_DEPTH {
            return self.refuse(e, format!("nested deeper than {MAX_DEPTH} levels"));
        }
        let d = depth + 1;
        Ok(match e {
            Expr::BooleanLiteral(b) => Node::Const(Value::Bool(b.value)),
            Expr::NoneLiteral(_) => Node::Const(Value::None),
            Expr::StringLiteral(s) => Node::Const(Value::str(s.value.to_str())),
            Expr::NumberLiteral(n) => Node::Const(match &n.value {
                Number::Int(i) => match i.as_i64() {
                    Some(i) => Value::Int(i),
                    None => return self.refuse(e, "integer literal too large"),
                },
                Number::Float(f) => Value::Float(*f),
                Number::Complex { .. } => {
                    return self.refuse(e, "complex numbers are not supported");
                }
            }),
            Expr::Name(name) => Node::Var(match name.id.as_str() {
                "output" => Var::Output,
                "data" => Var::Data,
                "exit_code" => Var::ExitCode,
                "prev_output" => Var::PrevOutput,
                "changed" => Var::Changed,
                other => {
                    return self.refuse(
                        e,
                        format!(
                            "unknown name `{other}`; a condition may use output, data, \
                             exit_code, prev_output and changed"
                        ),
                    );
                }
            }),
            Expr::BoolOp(b) => {
                let values = self.all(&b.values, d)?;
                match b.op {
                    ast::BoolOp::And => Node::And(values),
                    ast::BoolOp::Or => Node::Or(values),
                }
            }
            Expr::UnaryOp(u) => {
                let operand = self.boxed(&u.operand, d)?;
                match u.op {
                    ast::UnaryOp::Not => Node::Not(operand),
                    ast::UnaryOp::USub => Node::Neg(operand),
                    ast::UnaryOp::UAdd => Node::Pos(operand),
                    ast::UnaryOp::Invert => return self.refuse(e, "`~` is not supported"),
                }
            }
            Expr::BinOp(b) => {
                let op = match b.op {
                    ast::Operator::Add => Arith::Add,
                    ast::Operator::Sub => Arith::Sub,
                    ast::Operator::Mult => Arith::Mul,
                    ast::Operator::Div => Arith::Div,
                    ast::Operator::FloorDiv => Arith::FloorDiv,
                    ast::Operator::Mod => Arith::Mod,
                    ast::Operator::Pow => Arith::Pow,
                    other => {
                        return self
                            .refuse(e, format!("operator `{}` is not supported", other.as_str()));
                    }
                };
                Node::Arith(op, self.boxed(&b.left, d)?, self.boxed(&b.right, d)?)
            }
            Expr::Compare(c) => {
                let mut rest = Vec::with_capacity(c.ops.len());
                for (op, right) in c.ops.iter().zip(c.comparators.iter()) {
                    let op = match op {
                        ast::CmpOp::Eq => Cmp::Eq,
                        ast::CmpOp::NotEq => Cmp::NotEq,
                        ast::CmpOp::Lt => Cmp::Lt,
                        ast::CmpOp::LtE => Cmp::LtE,
                        ast::CmpOp::Gt => Cmp::Gt,
                        ast::CmpOp::GtE => Cmp::GtE,
                        ast::CmpOp::In => Cmp::In,
                        ast::CmpOp::NotIn => Cmp::NotIn,
                        ast::CmpOp::Is => Cmp::Is,
                        ast::CmpOp::IsNot => Cmp::IsNot,
                    };
                    rest.push((op, self.expr(right, d)?));
                }
                Node::Compare(self.boxed(&c.left, d)?, rest)
            }
            Expr::Subscript(s) => {
                let value = self.boxed(&s.value, d)?;
                match s.slice.as_ref() {
                    Expr::Slice(sl) => Node::Slice {
                        value,
                        lower: sl.lower.as_deref().map(|x| self.boxed(x, d)).transpose()?,
                        upper: sl.upper.as_deref().map(|x| self.boxed(x, d)).transpose()?,
                        step: sl.step.as_deref().map(|x| self.boxed(x, d)).transpose()?,
                    },
                    index => Node::Index(value, self.boxed(index, d)?),
                }
            }
            Expr::List(l) => Node::List(self.all(&l.elts, d)?),
            Expr::Tuple(t) => Node::Tuple(self.all(&t.elts, d)?),
            Expr::Dict(dict) => {
                let mut items = Vec::with_capacity(dict.items.len());
                for item in &dict.items {
                    let Some(key) = &item.key else {
                        return self.refuse(e, "`**` in a dict is not supported");
                    };
                    items.push((self.expr(key, d)?, self.expr(&item.value, d)?));
                }
                Node::Dict(items)
            }
            Expr::Call(call) => self.call(call, d)?,
            Expr::Attribute(a) => {
                return self.refuse(
                    &a.attr,
                    format!(
                        "attribute `.{}` is not allowed; only calls of the listed methods are",
                        a.attr.as_str()
                    ),
                );
            }
            Expr::Slice(_) => return self.refuse(e, "a slice only goes inside `[...]`"),
            Expr::Lambda(_) => return self.refuse(e, "lambda is not allowed"),
            Expr::Named(_) => return self.refuse(e, "`:=` is not allowed"),
            Expr::If(_) => return self.refuse(e, "`x if c else y` is not supported"),
            Expr::ListComp(_) | Expr::SetComp(_) | Expr::DictComp(_) | Expr::Generator(_) => {
                return self.refuse(e, "comprehensions are not supported");
            }
            Expr::Await(_) | Expr::Yield(_) | Expr::YieldFrom(_) => {
                return self.refuse(e, "await and yield are not allowed");
            }
            Expr::FString(_) | Expr::TString(_) => {
                return self.refuse(e, "f-strings are not supported");
            }
            Expr::BytesLiteral(_) => return self.refuse(e, "bytes literals are not supported"),
            Expr::Set(_) => return self.refuse(e, "sets are not supported"),
            Expr::Starred(_) => return self.refuse(e, "`*` unpacking is not supported"),
            Expr::EllipsisLiteral(_) => return self.refuse(e, "`...` is not supported"),
            Expr::IpyEscapeCommand(_) => return self.refuse(e, "not a Python expression"),
        })
    }

    fn call(&self, call: &ast::ExprCall, d: usize) -> Result<Node, ConditionError> {
        if let Some(k) = call.arguments.keywords.first() {
            return self.refuse(k, "keyword arguments are not supported");
        }
        if let Some(star) = call.arguments.args.iter().find(|a| a.is_starred_expr()) {
            return self.refuse(star, "`*` unpacking is not supported");
        }
        let args = &call.arguments.args;
        match call.func.as_ref() {
            Expr::Name(name) => {
                let id = name.id.as_str();
                let Some((_, builtin)) = Builtin::ALL.iter().find(|(n, _)| *n == id) else {
                    return self.refuse(
                        name,
                        format!(
                            "`{id}()` is not allowed; the builtins are len, str, int, float, \
                             bool, abs, min, max, any, all, isinstance and sorted"
                        ),
                    );
                };
                if *builtin == Builtin::IsInstance {
                    let [value, types] = args.as_ref() else {
                        return self.refuse(name, "isinstance takes a value and a type");
                    };
                    return Ok(Node::IsInstance(self.boxed(value, d)?, self.types(types)?));
                }
                Ok(Node::Call(*builtin, self.all(args, d)?))
            }
            Expr::Attribute(a) => {
                let name = a.attr.as_str();
                let Some((_, method)) = Method::ALL.iter().find(|(n, _)| *n == name) else {
                    return self.refuse(
                        &a.attr,
                        format!(
                            "method `.{name}()` is not allowed; the methods are lower, upper, \
                             strip, startswith, endswith, split, count, find, replace, get, \
                             keys, values, items and index"
                        ),
                    );
                };
                Ok(Node::Method(
                    self.boxed(&a.value, d)?,
                    *method,
                    self.all(args, d)?,
                ))
            }
            other => self.refuse(other, "only the listed builtins and methods may be called"),
        }
    }

    /// The second argument of `isinstance`: a type name or a tuple of them.
    fn types(&self, e: &Expr) -> Result<Vec<TypeName>, ConditionError> {
        let names: Vec<&Expr> = match e {
            Expr::Tuple(t) => t.elts.iter().collect(),
            single => vec![single],
        };
        names
            .into_iter()
            .map(|n| match n {
                Expr::Name(name) => TypeName::parse(name.id.as_str()).ok_or(()),
                _ => Err(()),
            }
            .or_else(|()| {
                self.refuse(
                    n,
                    "isinstance takes str, int, float, bool, list, dict or tuple (or a tuple of them)",
                )
            }))
            .collect()
    }
}

#[cfg(test)]
mod tests;
