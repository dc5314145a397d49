//! Reading a command line with bash's grammar (`tree-sitter-bash`): the simple commands it
//! runs, each as its words after quote removal, or `None` when it holds anything but plain
//! words joined by `;`, `&`, `&&`, `||`, `|`, `|&` and newlines.
//!
//! Everything is judged against an allow-list of node kinds; a kind not named here, an error
//! or a missing node refuses the whole line. Where tree-sitter and bash could read the same
//! bytes differently (where a word ends, what is a comment, `\r`, a backslash before a space),
//! the text between nodes is checked too, so a disagreement refuses instead of matching.

use tree_sitter::{Node, Parser};

/// One word of a simple command after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Word {
    /// Its text as the program receives it, when `literal`.
    pub text: String,
    /// No expansion can change it: it holds no unquoted `*`, `?`, `[`, `]` or `~`. A word
    /// with them is a fine argument but never the program or a word a pattern names.
    pub literal: bool,
}

/// The simple commands of `command` in order; `None` when it is refused (see the module docs).
pub(super) fn simple_commands(command: &str) -> Option<Vec<Vec<Word>>> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .ok()?;
    let tree = parser.parse(command, None)?;
    let root = tree.root_node();
    if root.kind() != "program" || root.has_error() {
        return None;
    }
    let reader = Reader { src: command };
    let mut commands = Vec::new();
    reader.program(root, &mut commands)?;
    Some(commands)
}

struct Reader<'a> {
    src: &'a str,
}

impl Reader<'_> {
    fn text(&self, node: Node) -> &str {
        &self.src[node.byte_range()]
    }

    /// The top level: statements separated by `;`, `&` or newlines.
    fn program(&self, node: Node, out: &mut Vec<Vec<Word>>) -> Option<()> {
        let mut end = node.start_byte();
        // Whether the next statement may start: at the beginning, after `;`, `&` or a newline.
        let mut separated = true;
        for child in children(node) {
            let gap = &self.src[end..child.start_byte()];
            if !blank(gap, true) {
                return None;
            }
            separated |= gap.replace("\\\n", "").contains('\n');
            match child.kind() {
                ";" | "&" if !child.is_named() => separated = true,
                _ if separated => {
                    self.statement(child, out)?;
                    separated = false;
                }
                _ => return None,
            }
            end = child.end_byte();
        }
        blank(&self.src[end..node.end_byte()], true).then_some(())
    }

    /// A list (`a && b`, `a || b`), a pipeline or one command.
    fn statement(&self, node: Node, out: &mut Vec<Vec<Word>>) -> Option<()> {
        match node.kind() {
            "list" => self.joined(node, &["&&", "||"], out),
            "pipeline" => self.joined(node, &["|", "|&"], out),
            "redirected_statement" => self.redirected(node, out),
            "command" => {
                out.push(self.command(node)?);
                Some(())
            }
            _ => None,
        }
    }

    /// Statements joined by `operators`, alternating with them; a newline may follow one.
    fn joined(&self, node: Node, operators: &[&str], out: &mut Vec<Vec<Word>>) -> Option<()> {
        let mut end = node.start_byte();
        let mut want_statement = true;
        for child in children(node) {
            let gap = &self.src[end..child.start_byte()];
            // bash reads a newline after an operator, never before one.
            if !blank(gap, want_statement && end != node.start_byte()) {
                return None;
            }
            if want_statement {
                self.statement(child, out)?;
            } else if child.is_named() || !operators.contains(&child.kind()) {
                return None;
            }
            want_statement = !want_statement;
            end = child.end_byte();
        }
        (!want_statement && end == node.end_byte()).then_some(())
    }

    /// A command with descriptor duplications after it (`2>&1`, `>&2`), nothing else.
    fn redirected(&self, node: Node, out: &mut Vec<Vec<Word>>) -> Option<()> {
        let mut kids = children(node).into_iter();
        let body = kids.next()?;
        if body.kind() != "command" {
            return None;
        }
        out.push(self.command(body)?);
        let mut end = body.end_byte();
        for redirect in kids {
            if !separator(&self.src[end..redirect.start_byte()]) || !self.duplication(redirect) {
                return None;
            }
            end = redirect.end_byte();
        }
        (end == node.end_byte()).then_some(())
    }

    /// `N>&M` or `>&M` with single digits: a descriptor made a copy of another, no file named.
    fn duplication(&self, node: Node) -> bool {
        let kids = children(node);
        let shape: Vec<&str> = kids.iter().map(|k| k.kind()).collect();
        let digit = |n: &Node| {
            let t = self.text(*n);
            t.len() == 1 && t.bytes().all(|b| b.is_ascii_digit())
        };
        let text = self.text(node);
        node.kind() == "file_redirect"
            && match shape.as_slice() {
                ["file_descriptor", ">&", "number"] => digit(&kids[0]) && digit(&kids[2]),
                [">&", "number"] => digit(&kids[1]),
                _ => false,
            }
            && text.len() <= 4
            && !text.contains(char::is_whitespace)
    }

    /// A simple command: its name and arguments, each a plain word, apart by blanks.
    fn command(&self, node: Node) -> Option<Vec<Word>> {
        let mut words = Vec::new();
        let mut end = None;
        for child in children(node) {
            if end.is_some_and(|end| !separator(&self.src[end..child.start_byte()])) {
                return None;
            }
            let word = match child.kind() {
                "command_name" if words.is_empty() => {
                    let [name] = children(child)[..] else {
                        return None;
                    };
                    (name.byte_range() == child.byte_range()).then_some(())?;
                    self.word(name)?
                }
                _ if !words.is_empty() => self.word(child)?,
                _ => return None,
            };
            words.push(word);
            end = Some(child.end_byte());
        }
        (!words.is_empty() && end == Some(node.end_byte())).then_some(words)
    }

    /// A word made only of literal text: bare, single-quoted, double-quoted without `$` or
    /// backticks, or such pieces side by side.
    fn word(&self, node: Node) -> Option<Word> {
        match node.kind() {
            "word" | "number" => bare(self.text(node)),
            "raw_string" => {
                let inner = self.text(node).strip_prefix('\'')?.strip_suffix('\'')?;
                Some(Word {
                    text: inner.to_owned(),
                    literal: true,
                })
            }
            "string" => self.double_quoted(node),
            "concatenation" => {
                let mut word = Word {
                    text: String::new(),
                    literal: true,
                };
                let mut end = node.start_byte();
                for piece in children(node) {
                    if piece.start_byte() != end || piece.kind() == "concatenation" {
                        return None;
                    }
                    let part = self.word(piece)?;
                    word.text.push_str(&part.text);
                    word.literal &= part.literal;
                    end = piece.end_byte();
                }
                (end == node.end_byte()).then_some(word)
            }
            _ => None,
        }
    }

    /// `"…"` holding only text: no `$`, no backtick, even escaped (kept simple on purpose).
    fn double_quoted(&self, node: Node) -> Option<Word> {
        let kids = children(node);
        let (first, last) = (kids.first()?, kids.last()?);
        if kids.len() < 2 || first.kind() != "\"" || last.kind() != "\"" {
            return None;
        }
        if kids[1..kids.len() - 1]
            .iter()
            .any(|k| k.kind() != "string_content")
        {
            return None;
        }
        let inner = self.text(node).strip_prefix('"')?.strip_suffix('"')?;
        let mut text = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '$' | '`' | '"' => return None,
                '\\' => match chars.next()? {
                    '\n' => {}
                    e @ ('"' | '\\') => text.push(e),
                    '$' | '`' => return None,
                    e => {
                        text.push('\\');
                        text.push(e);
                    }
                },
                c => text.push(c),
            }
        }
        Some(Word {
            text,
            literal: true,
        })
    }
}

/// An unquoted word: letters, digits, `-_./:,+=@%^`, glob characters and `~` (which make it
/// not literal), and backslash escapes of anything.
fn bare(raw: &str) -> Option<Word> {
    let mut word = Word {
        text: String::new(),
        literal: true,
    };
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                '\n' => {}
                e => word.text.push(e),
            },
            c if c.is_ascii_alphanumeric() || "-_./:,+=@%^".contains(c) => word.text.push(c),
            '*' | '?' | '[' | ']' | '~' => {
                word.text.push(c);
                word.literal = false;
            }
            _ => return None,
        }
    }
    Some(word)
}

/// What may stand between two words of one command: at least one space or tab. A line
/// continuation alone joins the words around it (`status\<newline>x` is `statusx`), though
/// tree-sitter reads it as a blank.
fn separator(gap: &str) -> bool {
    blank(gap, false) && gap.replace("\\\n", "").contains([' ', '\t'])
}

/// Spaces, tabs and line continuations (`\` newline); newlines too when `newlines`.
fn blank(gap: &str, newlines: bool) -> bool {
    let mut rest = gap;
    while let Some(c) = rest.chars().next() {
        rest = match c {
            ' ' | '\t' => &rest[1..],
            '\n' if newlines => &rest[1..],
            '\\' => match rest.strip_prefix("\\\n") {
                Some(after) => after,
                None => return false,
            },
            _ => return false,
        };
    }
    true
}

fn children(node: Node) -> Vec<Node> {
    let mut cursor = node.walk();
    node.children(&mut cursor).collect()
}
