//! Relevance injection: before each model call, the memories visible to the turn are ranked
//! with BM25 against the recent conversation and the top [`INJECTED`] go into the system
//! message.

use std::fmt::Write as _;

use crate::bm25::Bm25Index;
use crate::model::{Message, Role};
use crate::store::memories::Memory;

/// How many memories are injected.
pub const INJECTED: usize = 5;
/// How many visible memories a turn considers (the most recently updated).
pub const SCAN_LIMIT: usize = 10_000;
/// Messages of recent conversation (besides the latest user message) used as the query.
const RECENT_MESSAGES: usize = 6;
/// Characters of one message used in the query.
const QUERY_CHARS_PER_MESSAGE: usize = 2_000;
/// Characters of a memory's content shown in the system message.
const SHOWN_CONTENT_CHARS: usize = 1_500;

/// The memories a turn can see, indexed once per turn (and again after the memory tool ran).
#[derive(Debug, Default)]
pub struct MemoryContext {
    memories: Vec<Memory>,
    index: Bm25Index<usize>,
}

impl MemoryContext {
    /// Indexes `memories` over name, description and content.
    pub fn new(memories: Vec<Memory>) -> Self {
        let index = Bm25Index::build(memories.iter().enumerate().map(|(i, m)| {
            (
                i,
                format!(
                    "{} {} {}",
                    m.name,
                    m.description.as_deref().unwrap_or_default(),
                    m.content
                ),
            )
        }));
        Self { memories, index }
    }

    /// The most relevant memories for the conversation so far, best first.
    pub fn relevant(&self, history: &[Message]) -> Vec<&Memory> {
        if self.memories.is_empty() {
            return Vec::new();
        }
        let query = recent_text(history);
        self.index
            .search(&query, INJECTED)
            .into_iter()
            .filter_map(|(i, _)| self.memories.get(i))
            .collect()
    }
}

/// The latest user message plus the last few messages, each cut to a bounded length.
fn recent_text(history: &[Message]) -> String {
    let mut text = String::new();
    if let Some(user) = history.iter().rev().find(|m| m.role == Role::User) {
        push_cut(&mut text, &user.content);
    }
    for m in history.iter().rev().take(RECENT_MESSAGES) {
        push_cut(&mut text, &m.content);
        for call in &m.tool_calls {
            push_cut(&mut text, &call.name);
            push_cut(&mut text, &call.arguments);
        }
    }
    text
}

fn push_cut(out: &mut String, s: &str) {
    out.push(' ');
    out.extend(s.chars().take(QUERY_CHARS_PER_MESSAGE));
}

/// The `<memories>` block for the system message, or an empty string.
pub fn render(memories: &[&Memory]) -> String {
    if memories.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n<memories>\nMemories relevant to this conversation (saved earlier; keep them up to \
         date with the memory tool):\n",
    );
    for m in memories {
        let _ = write!(s, "- {} [{}, {}]", m.name, m.kind, m.scope.as_str());
        if let Some(d) = &m.description {
            let _ = write!(s, ": {d}");
        }
        s.push('\n');
        let content: String = m.content.chars().take(SHOWN_CONTENT_CHARS).collect();
        for line in content.lines() {
            let _ = writeln!(s, "  {line}");
        }
        if m.content.chars().count() > SHOWN_CONTENT_CHARS {
            s.push_str("  [… cut; memory search shows all of it]\n");
        }
    }
    s.push_str("</memories>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memories::Scope;

    fn mem(name: &str, description: &str, content: &str) -> Memory {
        Memory {
            id: name.into(),
            name: name.into(),
            scope: Scope::Global,
            kind: "project".into(),
            description: Some(description.into()),
            content: content.into(),
            updated_at: 0,
            access_count: 0,
        }
    }

    #[test]
    fn the_most_relevant_memories_are_picked_and_rendered() {
        let ctx = MemoryContext::new(vec![
            mem(
                "deploy_command",
                "how to deploy the api",
                "run make deploy from the repo root",
            ),
            mem("coffee", "office coffee order", "oat milk flat white"),
            mem(
                "db_staging",
                "staging database",
                "postgres on db-staging port 5433",
            ),
        ]);
        let history = vec![Message::user("please deploy the api to staging")];
        let picked: Vec<&str> = ctx
            .relevant(&history)
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(picked.first(), Some(&"deploy_command"));
        assert!(!picked.contains(&"coffee"));
        let block = render(&ctx.relevant(&history));
        assert!(block.contains(
            "- deploy_command [project, global]: how to deploy the api\n  run make deploy"
        ));
        assert_eq!(render(&[]), "");
        assert!(MemoryContext::default().relevant(&history).is_empty());
    }
}
