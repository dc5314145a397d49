//! One conversation in memory ([`Workstream`]) and the bounded cache of live ones
//! ([`Workstreams`]). A workstream is loaded from the store once, then appended to in memory
//! and in the database together, so a turn never re-reads the history.
//!
//! [`workdir`] says where each workstream's tools work; [`key`] what a workstream key names.

pub mod key;
pub mod workdir;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::model::Message;
use crate::store::{Store, StoreError};
use crate::tools::FilesRead;
pub use key::{KeyPattern, KeyPlatform, WorkstreamKey};
pub use workdir::{WorkdirLayout, safe_name};

/// Fewest messages the history grows by at once (see [`Workstream::append`]).
const GROWTH_MIN: usize = 8;

/// One conversation: its history and per-workstream state.
#[derive(Debug)]
pub struct Workstream {
    /// Key such as `console:default` or `discord:<thread id>`.
    pub key: String,
    /// Who started it.
    pub owner: Option<String>,
    /// Every message, oldest first, exactly as stored.
    pub history: Vec<Message>,
    /// Files read (edit_file needs a prior read).
    pub files_read: FilesRead,
    /// Working directory of its tools (see [`WorkdirLayout`]); created by the first batch of
    /// tool calls that needs it.
    pub workdir: PathBuf,
    /// Whether history existed when it was loaded (a resumed conversation).
    pub resumed: bool,
    /// Turns answered since it was loaded.
    pub turns_since_load: u64,
    /// When the last turn ended (monotonic), for "resumed after a long pause".
    pub last_turn_end: Option<std::time::Instant>,
    /// The tokens the last turn's model calls used (for `/status`'s cache share).
    pub last_turn_usage: crate::model::Usage,
    /// Nudge cooldowns.
    pub nudges: crate::turn::nudge::Nudges,
    /// Deferred tools found by tool search (or called by name): offered from then on, for
    /// good. Rebuilt from the history when the workstream is reloaded.
    pub expanded_tools: crate::turn::tool_search::Expanded,
    /// Notifications of the current turn (the notify rate limit); a new one at each turn.
    pub notify_budget: crate::tools::notify::NotifyBudget,
    /// Who the current turn's model calls are charged to (usage and budgets): its author,
    /// or for a turn no person's message started, the person who set it up (a watch's
    /// creator, whoever asked for the notification answered). Set at each turn.
    pub charged_to: Option<String>,
    /// What of the history is sent to the model (see [`crate::turn::context`]).
    pub context: ContextState,
    /// The context notes its messages were first sent with ([`crate::turn::request`]).
    pub notes: crate::turn::request::Notes,
    /// The model it answers with when it was switched with `/model` (`None`: the configured
    /// one). Read from the store as each turn starts, so a switch on any node holds.
    pub model: Option<String>,
}

/// What of a workstream's history the model sees: a checkpoint of the older part and the
/// rest verbatim, and what the last request cost.
#[derive(Debug, Clone, Default)]
pub struct ContextState {
    /// Index into `history` of the first message sent verbatim; those before it are
    /// summarised in `summary`.
    pub start: usize,
    /// The checkpoint of `history[..start]`, sent as the note that opens the kept history.
    pub summary: Option<String>,
    /// The previous request's size and the prompt tokens the server counted for it.
    pub observed: Option<crate::turn::context::Observed>,
    /// Prompt tokens of the last request (reported, else estimated), for `/status`.
    pub last_prompt_tokens: u64,
    /// Compactions since the workstream was loaded.
    pub compactions: u32,
    /// Whether the thread was told that even a compacted request does not fit.
    pub told_too_large: bool,
    /// Whether the next request carries the compaction nudge.
    pub nudge_pending: bool,
    /// Bytes of the last request's fixed part (system message and tools), for `/compact`.
    pub fixed_bytes: u64,
}

impl ContextState {
    /// The state of a history of `len` messages with `checkpoint` in force: the verbatim part
    /// starts at the checkpoint, moved forward past tool results so that none is sent
    /// without its call.
    pub fn restored(
        history: &[Message],
        checkpoint: Option<crate::store::checkpoints::Checkpoint>,
    ) -> Self {
        let Some(checkpoint) = checkpoint else {
            return Self::default();
        };
        let mut start = usize::try_from(checkpoint.upto_seq)
            .unwrap_or(0)
            .min(history.len());
        while history
            .get(start)
            .is_some_and(|m| m.role == crate::model::Role::Tool)
        {
            start += 1;
        }
        Self {
            start,
            summary: Some(checkpoint.summary),
            last_prompt_tokens: checkpoint.tokens_after,
            ..Self::default()
        }
    }
}

impl Workstream {
    /// Appends a message: committed to the store first, then added to the history.
    pub async fn append(
        &mut self,
        store: &Store,
        message: Message,
        author: Option<&str>,
    ) -> Result<(), StoreError> {
        let seq = self.next_seq();
        store
            .append_message(&self.key, seq, &message, author)
            .await?;
        self.make_room();
        self.history.push(message);
        Ok(())
    }

    /// Grows the history by a quarter (at least [`GROWTH_MIN`] messages) when it is full or
    /// about to be, instead of doubling: an idle workstream then holds at most about a
    /// quarter of its history in spare capacity, not as much again. One slot stays free
    /// after the push, for the tool result the turn adds next.
    fn make_room(&mut self) {
        let len = self.history.len();
        if len + 2 > self.history.capacity() {
            self.history.reserve_exact((len / 4).max(GROWTH_MIN));
        }
    }

    /// The part of the history sent to the model verbatim.
    pub fn sent(&self) -> &[Message] {
        self.history.get(self.context.start..).unwrap_or_default()
    }

    /// The messages a model call sends: the checkpoint note, then the verbatim part, each
    /// message with its context note ([`crate::turn::request::messages`]).
    pub fn request_messages(&self) -> Vec<Message> {
        crate::turn::request::messages(
            &self.history,
            self.context.start,
            self.context.summary.as_deref(),
            &self.notes,
        )
    }

    /// Stores the context notes attached or grown since the last call with their messages;
    /// called before the request that first sends them.
    pub async fn store_notes(&mut self, store: &Store) -> Result<(), StoreError> {
        let unsaved = self.notes.unsaved();
        if unsaved.is_empty() {
            return Ok(());
        }
        store.store_notes(&self.key, &unsaved).await?;
        self.notes.saved();
        Ok(())
    }

    /// The sequence number the next appended message gets.
    pub fn next_seq(&self) -> i64 {
        i64::try_from(self.history.len()).unwrap_or(i64::MAX)
    }
}

/// A handle to a live workstream. The async mutex serializes turns in one workstream.
pub type WorkstreamHandle = Arc<tokio::sync::Mutex<Workstream>>;

/// A live workstream in the cache and when it was last used (a tick of [`Lru::clock`]).
#[derive(Debug)]
struct Entry {
    handle: WorkstreamHandle,
    used: u64,
}

/// Least-recently-used bookkeeping: lookups, inserts and evictions cost O(log n), so a node
/// with ten thousand live workstreams pays no scan per message. The key is stored once and
/// shared by both maps.
#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<Arc<str>, Entry>,
    /// Tick of last use → key, oldest first; one tick per entry.
    order: BTreeMap<u64, Arc<str>>,
    clock: u64,
}

impl Lru {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Marks `key` used now; its handle, if it is live.
    fn touch(&mut self, key: &str) -> Option<WorkstreamHandle> {
        let now = self.tick();
        let entry = self.entries.get_mut(key)?;
        let before = std::mem::replace(&mut entry.used, now);
        let handle = entry.handle.clone();
        if let Some(k) = self.order.remove(&before) {
            self.order.insert(now, k);
        }
        Some(handle)
    }

    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.entries.remove(key) {
            self.order.remove(&entry.used);
        }
    }

    /// Evicts least recently used workstreams that nobody is using until there is room for
    /// one more under `capacity`. One that a turn holds stays (the cache may run over
    /// capacity for a while): evicting it would let a second copy load and two turns run in
    /// one workstream at once. A busy one found at the old end counts as used now, so each
    /// entry is looked at most once per call.
    fn make_room(&mut self, capacity: usize) {
        let mut budget = self.entries.len();
        while self.entries.len() >= capacity && budget > 0 {
            budget -= 1;
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            let now = self.tick();
            match self.entries.get_mut(&key) {
                Some(entry) if Arc::strong_count(&entry.handle) > 1 => {
                    entry.used = now;
                    self.order.insert(now, key);
                }
                _ => {
                    self.entries.remove(&key);
                }
            }
        }
        // A burst of evictions leaves the maps' tables sized for the peak: give it back.
        if self.entries.capacity() > 4 * self.entries.len().max(64) {
            self.entries.shrink_to_fit();
        }
    }

    fn insert(&mut self, key: &str, handle: WorkstreamHandle) {
        let now = self.tick();
        let key: Arc<str> = Arc::from(key);
        self.order.insert(now, key.clone());
        self.entries.insert(key, Entry { handle, used: now });
    }
}

/// Live workstreams, least recently used evicted beyond `capacity`. An evicted workstream
/// that is still in use stays alive through its handle and is reloaded from the store later.
#[derive(Debug)]
pub struct Workstreams {
    store: Store,
    layout: WorkdirLayout,
    capacity: usize,
    lru: Mutex<Lru>,
}

impl Workstreams {
    /// A cache over `store`; workstreams work in directories laid out by `layout`.
    pub fn new(store: Store, layout: WorkdirLayout, capacity: usize) -> Self {
        Self {
            store,
            layout,
            capacity: capacity.max(1),
            lru: Mutex::new(Lru::default()),
        }
    }

    /// The live workstream for `key`, loading (or creating, owned by `owner`) it if needed.
    pub async fn get(
        &self,
        key: &str,
        owner: Option<&str>,
    ) -> Result<WorkstreamHandle, StoreError> {
        if let Some(handle) = self.lookup(key) {
            return Ok(handle);
        }
        let row = self.store.ensure_workstream(key, owner).await?;
        let stored = self.store.load_history(key).await?;
        let mut history = stored.messages;
        history.shrink_to_fit();
        let checkpoint = match history.len() {
            0 => None,
            _ => self.store.latest_checkpoint(key).await?,
        };
        let context = ContextState::restored(&history, checkpoint);
        tracing::debug!(
            workstream = key,
            messages = history.len(),
            "workstream loaded"
        );
        let ws = Workstream {
            key: key.to_owned(),
            owner: row.owner,
            resumed: !history.is_empty(),
            history,
            files_read: FilesRead::default(),
            workdir: self.layout.dir_for(key),
            turns_since_load: 0,
            last_turn_end: None,
            last_turn_usage: Default::default(),
            nudges: crate::turn::nudge::Nudges::default(),
            expanded_tools: Default::default(),
            notes: crate::turn::request::Notes::restored(stored.notes),
            notify_budget: Default::default(),
            charged_to: None,
            context,
            model: None,
        };
        Ok(self.insert(key, Arc::new(tokio::sync::Mutex::new(ws))))
    }

    /// The working directory of workstream `key`, whether or not it is in memory.
    pub fn workdir(&self, key: &str) -> std::path::PathBuf {
        self.layout.dir_for(key)
    }

    /// Drops a workstream from memory (it stays in the store).
    pub fn evict(&self, key: &str) {
        if let Ok(mut lru) = self.lru.lock() {
            lru.remove(key);
        }
    }

    /// How many workstreams are in memory.
    pub fn len(&self) -> usize {
        self.lru.lock().map(|l| l.entries.len()).unwrap_or(0)
    }

    /// Whether none are in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lookup(&self, key: &str) -> Option<WorkstreamHandle> {
        self.lru.lock().ok()?.touch(key)
    }

    fn insert(&self, key: &str, handle: WorkstreamHandle) -> WorkstreamHandle {
        let Ok(mut lru) = self.lru.lock() else {
            return handle;
        };
        // Another task may have loaded it meanwhile: keep the first so turns stay serialized.
        if let Some(existing) = lru.touch(key) {
            return existing;
        }
        lru.make_room(self.capacity);
        lru.insert(key, handle.clone());
        handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn layout() -> WorkdirLayout {
        WorkdirLayout::new(
            None,
            crate::config::WorkdirMode::PerWorkstream,
            Path::new("/tmp"),
        )
    }

    #[tokio::test]
    async fn each_workstream_gets_its_own_directory() {
        let store = Store::memory().await.unwrap();
        let cache = Workstreams::new(store, layout(), 4);
        let a = cache.get("discord:1", None).await.unwrap();
        let b = cache.get("discord_1", None).await.unwrap();
        let (a, b) = (
            a.lock().await.workdir.clone(),
            b.lock().await.workdir.clone(),
        );
        assert_eq!(a, PathBuf::from("/tmp/workstreams/discord_3a1"));
        assert_eq!(b, PathBuf::from("/tmp/workstreams/discord_5f1"));
    }

    #[tokio::test]
    async fn evicted_workstreams_reload_with_history() {
        let store = Store::memory().await.unwrap();
        let cache = Workstreams::new(store.clone(), layout(), 2);
        let a = cache.get("a", Some("alice")).await.unwrap();
        a.lock()
            .await
            .append(&store, Message::user("hello"), Some("alice"))
            .await
            .unwrap();
        drop(a);
        cache.get("b", None).await.unwrap();
        cache.get("c", None).await.unwrap();
        assert_eq!(cache.len(), 2);
        let again = cache.get("a", None).await.unwrap();
        let ws = again.lock().await;
        assert!(ws.resumed);
        assert_eq!(ws.owner.as_deref(), Some("alice"));
        assert_eq!(ws.history, vec![Message::user("hello")]);
    }

    #[tokio::test]
    async fn a_workstream_in_use_is_never_evicted() {
        let store = Store::memory().await.unwrap();
        let cache = Workstreams::new(store, layout(), 1);
        let busy = cache.get("a", None).await.unwrap();
        cache.get("b", None).await.unwrap();
        assert_eq!(cache.len(), 2, "the busy workstream stays beyond capacity");
        let again = cache.get("a", None).await.unwrap();
        assert!(
            Arc::ptr_eq(&busy, &again),
            "one workstream, one handle, one turn at a time"
        );
        drop((busy, again));
        cache.get("c", None).await.unwrap();
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn the_least_recently_used_goes_first_not_the_oldest() {
        let store = Store::memory().await.unwrap();
        let cache = Workstreams::new(store, layout(), 2);
        cache.get("a", None).await.unwrap();
        cache.get("b", None).await.unwrap();
        cache.get("a", None).await.unwrap();
        cache.get("c", None).await.unwrap();
        let live: Vec<bool> = ["a", "b", "c"]
            .iter()
            .map(|k| cache.lookup(k).is_some())
            .collect();
        assert_eq!(live, vec![true, false, true]);
        cache.evict("a");
        cache.get("d", None).await.unwrap();
        assert_eq!(cache.len(), 2, "an explicit eviction frees its place");
    }

    #[tokio::test]
    async fn a_busy_workstream_at_the_old_end_is_skipped_once() {
        let store = Store::memory().await.unwrap();
        let cache = Workstreams::new(store, layout(), 3);
        let busy = cache.get("busy", None).await.unwrap();
        cache.get("b", None).await.unwrap();
        cache.get("c", None).await.unwrap();
        cache.get("d", None).await.unwrap();
        cache.get("e", None).await.unwrap();
        let live: Vec<bool> = ["busy", "b", "c", "d", "e"]
            .iter()
            .map(|k| cache.lookup(k).is_some())
            .collect();
        assert_eq!(live, vec![true, false, false, true, true]);
        drop(busy);
    }

    #[tokio::test]
    async fn the_history_keeps_little_spare_capacity() {
        let store = Store::memory().await.unwrap();
        let cache = Workstreams::new(store.clone(), layout(), 4);
        let handle = cache.get("a", None).await.unwrap();
        let mut ws = handle.lock().await;
        for i in 0..200 {
            ws.append(&store, Message::user(format!("m{i}")), None)
                .await
                .unwrap();
            let (len, cap) = (ws.history.len(), ws.history.capacity());
            assert!(cap > len, "a slot stays free for the next tool result");
            assert!(
                cap <= len + len / 4 + GROWTH_MIN + 1,
                "{len} messages, {cap} slots"
            );
        }
    }

    #[tokio::test]
    async fn the_same_key_gives_the_same_handle() {
        let store = Store::memory().await.unwrap();
        let cache = Workstreams::new(store, layout(), 4);
        let a = cache.get("a", None).await.unwrap();
        let b = cache.get("a", None).await.unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
