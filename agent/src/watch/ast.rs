//! The syntax tree of the `stop_on` language: what [`super::condition`] compiles a Python
//! expression into and [`super::eval`] evaluates. Only what the language allows can be
//! represented.

use super::value::Value;

/// What one poll produced: the names a condition may use.
#[derive(Debug, Clone, Default)]
pub struct Poll<'a> {
    /// stdout (and stderr) of the command, as stored.
    pub output: &'a str,
    /// The exit code.
    pub exit_code: i64,
    /// The previous poll's output; `None` on the first poll.
    pub prev_output: Option<&'a str>,
}

/// A variable a condition reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Var {
    Output,
    Data,
    ExitCode,
    PrevOutput,
    Changed,
}

/// Arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    NotEq,
    Lt,
    LtE,
    Gt,
    GtE,
    In,
    NotIn,
    Is,
    IsNot,
}

/// The methods a condition may call; which receiver each applies to is checked when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Lower,
    Upper,
    Strip,
    StartsWith,
    EndsWith,
    Split,
    Count,
    Find,
    Replace,
    Get,
    Keys,
    Values,
    Items,
    Index,
}

impl Method {
    pub(crate) const ALL: [(&'static str, Method); 14] = [
        ("lower", Method::Lower),
        ("upper", Method::Upper),
        ("strip", Method::Strip),
        ("startswith", Method::StartsWith),
        ("endswith", Method::EndsWith),
        ("split", Method::Split),
        ("count", Method::Count),
        ("find", Method::Find),
        ("replace", Method::Replace),
        ("get", Method::Get),
        ("keys", Method::Keys),
        ("values", Method::Values),
        ("items", Method::Items),
        ("index", Method::Index),
    ];

    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }
}

/// The builtins a condition may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtin {
    Len,
    Str,
    Int,
    Float,
    Bool,
    Abs,
    Min,
    Max,
    Any,
    All,
    IsInstance,
    Sorted,
}

impl Builtin {
    pub(crate) const ALL: [(&'static str, Builtin); 12] = [
        ("len", Builtin::Len),
        ("str", Builtin::Str),
        ("int", Builtin::Int),
        ("float", Builtin::Float),
        ("bool", Builtin::Bool),
        ("abs", Builtin::Abs),
        ("min", Builtin::Min),
        ("max", Builtin::Max),
        ("any", Builtin::Any),
        ("all", Builtin::All),
        ("isinstance", Builtin::IsInstance),
        ("sorted", Builtin::Sorted),
    ];
}

/// A type `isinstance` may test for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TypeName {
    Str,
    Int,
    Float,
    Bool,
    List,
    Dict,
    Tuple,
}

impl TypeName {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "str" => TypeName::Str,
            "int" => TypeName::Int,
            "float" => TypeName::Float,
            "bool" => TypeName::Bool,
            "list" => TypeName::List,
            "dict" => TypeName::Dict,
            "tuple" => TypeName::Tuple,
            _ => return None,
        })
    }
}

/// The compiled tree: only what the language allows can be represented.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Const(Value),
    Var(Var),
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
    Neg(Box<Node>),
    Pos(Box<Node>),
    Arith(Arith, Box<Node>, Box<Node>),
    Compare(Box<Node>, Vec<(Cmp, Node)>),
    Index(Box<Node>, Box<Node>),
    Slice {
        value: Box<Node>,
        lower: Option<Box<Node>>,
        upper: Option<Box<Node>>,
        step: Option<Box<Node>>,
    },
    Method(Box<Node>, Method, Vec<Node>),
    Call(Builtin, Vec<Node>),
    IsInstance(Box<Node>, Vec<TypeName>),
    List(Vec<Node>),
    Tuple(Vec<Node>),
    Dict(Vec<(Node, Node)>),
}
