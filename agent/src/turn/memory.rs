//! Relevance injection: before each model call, the memories visible to the turn are ranked
//! with BM25 against the recent conversation and the top [`INJECTED`] go into the system
//! message.
//!
//! One [`MemoryIndex`] per agent holds every memory in a BM25 index; a turn checks the table's
//! fingerprint once ([`Store::memories_version`]) and rebuilds only when memories changed (here
//! or on another node). Scope filtering happens while scoring, so a turn only ever ranks what
//! it may see.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bm25::Bm25Index;
use crate::model::{Message, Role};
use crate::store::memories::{Memory, Visibility};
use crate::store::{Store, StoreError};

/// How many memories are injected.
pub const INJECTED: usize = 5;
/// Messages of recent conversation (besides the latest user message) used as the query.
const RECENT_MESSAGES: usize = 6;
/// Characters of one message used in the query.
const QUERY_CHARS_PER_MESSAGE: usize = 2_000;
/// Characters of a memory's content shown in the system message.
const SHOWN_CONTENT_CHARS: usize = 1_500;

/// How long a turn trusts the index without asking the store whether memories changed on
/// another node. Changes made through this agent are seen at once (see [`MemoryIndex::sync`]).
pub const REMOTE_STALENESS: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct Snapshot {
    version: Option<(i64, i64)>,
    index: Bm25Index<String>,
    memories: HashMap<String, Arc<Memory>>,
}

/// Every memory, indexed for relevance; shared by all turns of an agent.
#[derive(Debug, Default)]
pub struct MemoryIndex {
    snapshot: Mutex<Arc<Snapshot>>,
    checked: Mutex<Option<Instant>>,
}

impl MemoryIndex {
    /// Brings the index up to date with the store: at most one cheap query every
    /// [`REMOTE_STALENESS`], a rebuild only when the table changed. `force` checks at once
    /// (after this agent's memory tool ran).
    pub async fn sync(&self, store: &Store, force: bool) -> Result<(), StoreError> {
        let recent = self
            .checked
            .lock()
            .ok()
            .and_then(|c| *c)
            .is_some_and(|at| at.elapsed() < REMOTE_STALENESS);
        if recent && !force {
            return Ok(());
        }
        let version = store.memories_version().await?;
        if let Ok(mut checked) = self.checked.lock() {
            *checked = Some(Instant::now());
        }
        if self.current().version == Some(version) {
            return Ok(());
        }
        let all = store.all_memories().await?;
        let index = Bm25Index::build_fields(all.iter().map(|m| {
            (
                m.id.clone(),
                [
                    m.name.as_str(),
                    m.description.as_deref().unwrap_or_default(),
                    m.content.as_str(),
                ],
            )
        }));
        let memories = all
            .into_iter()
            .map(|m| (m.id.clone(), Arc::new(m)))
            .collect();
        let fresh = Arc::new(Snapshot {
            version: Some(version),
            index,
            memories,
        });
        if let Ok(mut slot) = self.snapshot.lock() {
            *slot = fresh;
        }
        Ok(())
    }

    /// The most relevant memories visible from `vis` for the conversation so far, best first.
    pub fn relevant(&self, vis: &Visibility, history: &[Message]) -> Vec<Arc<Memory>> {
        let snap = self.current();
        if snap.memories.is_empty() {
            return Vec::new();
        }
        let query = recent_text(history);
        snap.index
            .search_filtered(&query, INJECTED, |id| {
                snap.memories.get(id).is_some_and(|m| vis.sees(m))
            })
            .into_iter()
            .filter_map(|(id, _)| snap.memories.get(&id).cloned())
            .collect()
    }

    fn current(&self) -> Arc<Snapshot> {
        self.snapshot.lock().map(|s| s.clone()).unwrap_or_default()
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
pub fn render(memories: &[Arc<Memory>]) -> String {
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
    use crate::store::memories::{NewMemory, Scope};

    fn vis(ws: &str, user: Option<&str>) -> Visibility {
        Visibility {
            workstream: ws.into(),
            user_id: user.map(str::to_owned),
        }
    }

    async fn save(
        store: &Store,
        v: &Visibility,
        name: &str,
        scope: Scope,
        desc: &str,
        content: &str,
    ) {
        store
            .save_memory(
                v,
                &NewMemory {
                    name,
                    scope,
                    kind: None,
                    description: Some(desc),
                    content,
                    created_by: None,
                },
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn relevant_visible_memories_are_picked_and_rendered() {
        let store = Store::memory().await.unwrap();
        let alice = vis("w", Some("alice"));
        save(
            &store,
            &alice,
            "deploy_command",
            Scope::Global,
            "how to deploy the api",
            "run make deploy from the repo root",
        )
        .await;
        save(
            &store,
            &alice,
            "coffee",
            Scope::Global,
            "office coffee order",
            "oat milk flat white",
        )
        .await;
        save(
            &store,
            &alice,
            "alice_deploy",
            Scope::User,
            "alice deploys the api on fridays",
            "deploy api",
        )
        .await;
        let index = MemoryIndex::default();
        index.sync(&store, true).await.unwrap();
        let history = vec![Message::user("please deploy the api to staging")];

        let names = |v: &Visibility| -> Vec<String> {
            index
                .relevant(v, &history)
                .iter()
                .map(|m| m.name.clone())
                .collect()
        };
        let for_alice = names(&alice);
        assert!(
            for_alice.contains(&"deploy_command".to_owned())
                && for_alice.contains(&"alice_deploy".to_owned())
        );
        assert!(!for_alice.contains(&"coffee".to_owned()));
        assert_eq!(names(&vis("w", Some("bob"))), ["deploy_command"]);

        let block = render(&index.relevant(&vis("w", None), &history));
        assert!(
            block.contains(
                "- deploy_command [project, global]: how to deploy the api\n  run make deploy"
            ),
            "{block}"
        );
        assert_eq!(render(&[]), "");
    }

    #[tokio::test]
    async fn the_index_follows_the_store() {
        let store = Store::memory().await.unwrap();
        let v = vis("w", None);
        let index = MemoryIndex::default();
        index.sync(&store, true).await.unwrap();
        let history = vec![Message::user("where is the runbook")];
        assert!(index.relevant(&v, &history).is_empty());
        save(
            &store,
            &v,
            "runbook",
            Scope::Global,
            "the runbook",
            "wiki/runbook",
        )
        .await;
        index.sync(&store, true).await.unwrap();
        assert_eq!(index.relevant(&v, &history).len(), 1);
        store.delete_memory(&v, "runbook", None).await.unwrap();
        index.sync(&store, true).await.unwrap();
        assert!(index.relevant(&v, &history).is_empty());
    }
}
