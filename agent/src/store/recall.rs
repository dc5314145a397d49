//! Full-text search over conversation history, for the `recall` tool.
//!
//! SQLite searches the external-content FTS5 table `messages_fts` ranked by `bm25()`. The
//! index is brought up to date in batches ([`Store::index_recall`]): before every search, and
//! every few seconds in the background ([`index_in_background`]), not on every insert, where
//! it wrote about half the pages of each commit of a turn; deletes and updates of indexed
//! messages still go through triggers (`migrations/sqlite/0022_recall_in_batches.sql`).
//! PostgreSQL searches the generated `messages.search`
//! tsvector (GIN-indexed) ranked by `ts_rank`. Both split text into runs of letters and digits
//! without stemming, so both find the same messages (see `migrations/*/0004_recall.sql`), except
//! that only SQLite folds diacritics (`cafe` finds `café`; PostgreSQL would need `unaccent`).
//!
//! Text from the model never reaches a query language as written: a query is cut into
//! whitespace-separated terms, each reduced to its runs of letters and digits, which are then
//! quoted (an FTS5 string, a tsquery lexeme). A term with several runs (`purple-elephant`,
//! `read_file`) is matched as a phrase, and a trailing `*` makes its last word a prefix. All
//! terms are required; when no message has all of them, the search falls back to any of them.

mod snippet;

use super::{Backend, Store, StoreError};

/// Most hits one search returns; larger limits are clamped to it.
pub const MAX_LIMIT: usize = 100;
/// Terms of a query beyond this many are ignored (keeps the query small).
const MAX_TERMS: usize = 32;
/// Most messages one transaction adds to the index; a longer backlog takes several.
const INDEX_BATCH: i64 = 2000;
/// How often [`index_in_background`] indexes what is new: a search never waits for more than
/// a few seconds' worth of messages.
pub const INDEX_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// One message that matched a search: enough to cite it and to find it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallHit {
    /// Key of the workstream the message belongs to (e.g. `console:ops`).
    pub workstream: String,
    /// Position of the message in that workstream.
    pub seq: i64,
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// When the message was stored, unix milliseconds.
    pub created_at: i64,
    /// Up to about 300 characters around the first match, on one line, `…` where cut.
    pub snippet: String,
}

const SQLITE_SEARCH: &str = "SELECT m.workstream AS workstream, m.seq AS seq, m.role AS role, \
     m.created_at AS created_at, m.content AS content, m.tool_calls AS tool_calls, \
     m.name AS name FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid \
     WHERE messages_fts MATCH $1 AND (m.workstream = $2 OR m.workstream IN \
     (SELECT workstream FROM messages WHERE author = $3)) \
     ORDER BY bm25(messages_fts), m.created_at DESC, m.id DESC LIMIT $4";

const POSTGRES_SEARCH: &str = "SELECT m.workstream AS workstream, m.seq AS seq, m.role AS role, \
     m.created_at AS created_at, m.content AS content, m.tool_calls AS tool_calls, \
     m.name AS name FROM messages m, to_tsquery('simple', $1) AS q \
     WHERE m.search @@ q AND (m.workstream = $2 OR m.workstream IN \
     (SELECT workstream FROM messages WHERE author = $3)) \
     ORDER BY ts_rank(m.search, q) DESC, m.created_at DESC, m.id DESC LIMIT $4";

/// A message the search found, column for column ([`SQLITE_SEARCH`], [`POSTGRES_SEARCH`]).
#[derive(sqlx::FromRow)]
struct Row {
    workstream: String,
    seq: i64,
    role: String,
    created_at: i64,
    content: String,
    tool_calls: Option<String>,
    name: Option<String>,
}

impl Store {
    /// Searches the messages, tool calls and tool results of the workstreams `user_id` took
    /// part in (wrote at least one message in) plus `current_workstream`; with no user, only
    /// `current_workstream`. So nobody recalls a thread they were not in. Best match first,
    /// newest first among equals; `limit` is clamped to `1..=`[`MAX_LIMIT`].
    ///
    /// A query with no letters or digits is refused with [`StoreError::EmptyQuery`], which
    /// the caller should show as it is.
    pub async fn recall(
        &self,
        query: &str,
        user_id: Option<&str>,
        current_workstream: &str,
        limit: usize,
    ) -> Result<Vec<RecallHit>, StoreError> {
        let terms = search_terms(query)?;
        let limit = i64::try_from(limit.clamp(1, MAX_LIMIT)).unwrap_or(1);
        // Every message stored before the search is found. If the index cannot be brought up
        // to date now (the write lock stayed taken), the search still runs, at most
        // INDEX_EVERY behind.
        if let Err(e) = self.index_recall().await {
            tracing::warn!(error = %e, "indexing messages before a recall search failed");
        }
        let mut rows = Vec::new();
        for any in [false, true] {
            if any && terms.len() < 2 {
                break;
            }
            let (sql, text) = match self.backend() {
                Backend::Sqlite => (SQLITE_SEARCH, fts5_query(&terms, any)),
                Backend::Postgres => (POSTGRES_SEARCH, tsquery(&terms, any)),
            };
            rows = sqlx::query_as::<_, Row>(sql)
                .bind(text)
                .bind(current_workstream)
                .bind(user_id)
                .bind(limit)
                .fetch_all(self.pool())
                .await?;
            if !rows.is_empty() {
                break;
            }
        }
        let words: Vec<String> = terms.into_iter().flat_map(|t| t.words).collect();
        Ok(rows.into_iter().map(|row| hit(&words, row)).collect())
    }
}

/// The workstreams with a message matching every term, for the status page's search
/// ([`Store::search_workstreams`]).
const SQLITE_WORKSTREAMS: &str = "SELECT DISTINCT m.workstream FROM messages_fts \
     JOIN messages m ON m.id = messages_fts.rowid WHERE messages_fts MATCH $1 LIMIT $2";

const POSTGRES_WORKSTREAMS: &str = "SELECT DISTINCT m.workstream FROM messages m \
     WHERE m.search @@ to_tsquery('simple', $1) LIMIT $2";

impl Store {
    /// The keys of up to `limit` workstreams one of whose messages (text, tool calls, tool
    /// results) holds every term of `query`, in no order. Everyone's workstreams: the caller
    /// keeps those its reader may see. Terms are read as [`Store::recall`] reads them; a query
    /// with no letters or digits is [`StoreError::EmptyQuery`].
    pub async fn search_workstreams(
        &self,
        query: &str,
        limit: i64,
    ) -> Result<Vec<String>, StoreError> {
        let terms = search_terms(query)?;
        if let Err(e) = self.index_recall().await {
            tracing::warn!(error = %e, "indexing messages before a workstream search failed");
        }
        let (sql, text) = match self.backend() {
            Backend::Sqlite => (SQLITE_WORKSTREAMS, fts5_query(&terms, false)),
            Backend::Postgres => (POSTGRES_WORKSTREAMS, tsquery(&terms, false)),
        };
        Ok(sqlx::query_scalar(sql)
            .bind(text)
            .bind(limit)
            .fetch_all(self.pool())
            .await?)
    }
}

impl Store {
    /// Adds the messages stored since the last time to SQLite's full-text index; returns how
    /// many. A no-op on PostgreSQL, whose search column is indexed with its row.
    ///
    /// Each batch is one transaction that takes the write lock first, so two catch-ups never
    /// index a message twice: the second waits, then starts from where the first ended.
    pub async fn index_recall(&self) -> Result<u64, StoreError> {
        if self.backend() != Backend::Sqlite {
            return Ok(0);
        }
        let mut total = 0;
        loop {
            // Read first, without the write lock: nothing new is the common case.
            let (last, newest): (i64, Option<i64>) = sqlx::query_as(
                "SELECT last_id, (SELECT MAX(id) FROM messages) FROM recall_indexed WHERE id = 1",
            )
            .fetch_one(self.pool())
            .await?;
            if newest.is_none_or(|newest| newest <= last) {
                return Ok(total);
            }
            let indexed = self.index_recall_batch().await?;
            total += indexed;
            // A short batch took every row there was (it held the write lock).
            if indexed < INDEX_BATCH.unsigned_abs() {
                return Ok(total);
            }
        }
    }

    /// Indexes up to [`INDEX_BATCH`] messages past `recall_indexed.last_id`.
    async fn index_recall_batch(&self) -> Result<u64, StoreError> {
        let mut tx = self.pool().begin().await?;
        let (last,): (i64,) = sqlx::query_as(
            "UPDATE recall_indexed SET last_id = last_id WHERE id = 1 RETURNING last_id",
        )
        .fetch_one(&mut *tx)
        .await?;
        let (upto,): (Option<i64>,) = sqlx::query_as(
            "SELECT MAX(id) FROM (SELECT id FROM messages WHERE id > $1 ORDER BY id LIMIT $2)",
        )
        .bind(last)
        .bind(INDEX_BATCH)
        .fetch_one(&mut *tx)
        .await?;
        let Some(upto) = upto else {
            tx.rollback().await?;
            return Ok(0);
        };
        let indexed = sqlx::query(
            "INSERT INTO messages_fts (rowid, content, tool_calls, name) \
             SELECT id, content, tool_calls, name FROM messages WHERE id > $1 AND id <= $2 \
             ORDER BY id",
        )
        .bind(last)
        .bind(upto)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query("UPDATE recall_indexed SET last_id = $1 WHERE id = 1")
            .bind(upto)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(indexed)
    }
}

/// Keeps SQLite's full-text index at most [`INDEX_EVERY`] behind while the process runs (a
/// task on the current runtime; nothing on PostgreSQL).
pub fn index_in_background(store: Store) {
    if store.backend() != Backend::Sqlite {
        return;
    }
    tokio::spawn(async move {
        let mut every = tokio::time::interval(INDEX_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match store.index_recall().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(messages = n, "recall index brought up to date"),
                // The store was closed: nothing is left to index.
                Err(StoreError::Database(sqlx::Error::PoolClosed)) => break,
                Err(e) => tracing::warn!(error = %e, "indexing messages for recall failed"),
            }
        }
    });
}

/// One whitespace-separated term of a query, reduced to what is safe to search for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Term {
    /// Its runs of letters and digits, matched as a phrase (`read_file` → `read`, `file`).
    words: Vec<String>,
    /// It ended in `*`: its last word matches as a prefix (`deploy*` finds `deployment`).
    prefix: bool,
}

/// The query's terms; refuses a query with no letters or digits.
pub(crate) fn search_terms(query: &str) -> Result<Vec<Term>, StoreError> {
    let terms: Vec<Term> = query
        .split_whitespace()
        .map(|term| {
            let words = term
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect();
            let end = term.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '*');
            let prefix =
                end.ends_with('*') && end.trim_end_matches('*').ends_with(char::is_alphanumeric);
            Term { words, prefix }
        })
        .filter(|term| !term.words.is_empty())
        .take(MAX_TERMS)
        .collect();
    if terms.is_empty() {
        return Err(StoreError::EmptyQuery(query.to_owned()));
    }
    Ok(terms)
}

/// An FTS5 query: each term a quoted string (a phrase of its words; `"…" *` for a prefix),
/// all of them (implicit AND) or `any` of them.
fn fts5_query(terms: &[Term], any: bool) -> String {
    let strings: Vec<String> = terms
        .iter()
        .map(|t| {
            let string = format!("\"{}\"", t.words.join(" ").replace('"', "\"\""));
            if t.prefix { string + " *" } else { string }
        })
        .collect();
    strings.join(if any { " OR " } else { " " })
}

/// A `to_tsquery` text: each word a quoted lexeme (`:*` on a prefix), the words of a term a
/// phrase (`<->`), the terms joined by `&`, or by `|` for `any`.
fn tsquery(terms: &[Term], any: bool) -> String {
    let phrases: Vec<String> = terms
        .iter()
        .map(|t| {
            let mut lexemes: Vec<String> = t
                .words
                .iter()
                .map(|w| format!("'{}'", w.replace('\\', "\\\\").replace('\'', "''")))
                .collect();
            if let Some(last) = lexemes.last_mut().filter(|_| t.prefix) {
                last.push_str(":*");
            }
            match lexemes.len() {
                1 => lexemes.join(""),
                _ => format!("({})", lexemes.join(" <-> ")),
            }
        })
        .collect();
    phrases.join(if any { " | " } else { " & " })
}

fn hit(words: &[String], row: Row) -> RecallHit {
    let Row {
        workstream,
        seq,
        role,
        created_at,
        content,
        tool_calls,
        name,
    } = row;
    let calls = tool_calls
        .as_deref()
        .map(snippet::render_calls)
        .unwrap_or_default();
    let name = name.unwrap_or_default();
    let mut text = snippet::snippet(words, &[&content, &calls, &name]);
    if role == "tool" && !name.is_empty() {
        text = format!("{name}: {text}");
    }
    RecallHit {
        workstream,
        seq,
        role,
        created_at,
        snippet: text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, ToolCall};
    use pretty_assertions::assert_eq;

    type Say<'a> = (&'a str, i64, Message, Option<&'a str>);

    /// A store holding `messages` (workstream, seq, message, author).
    async fn store_with(messages: Vec<Say<'_>>) -> Store {
        let store = Store::memory().await.unwrap();
        for (ws, seq, msg, author) in messages {
            store.ensure_workstream(ws, author).await.unwrap();
            store.append_message(ws, seq, &msg, author).await.unwrap();
            // Distinct creation times, so "newest first" is observable.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        store
    }

    /// `(workstream, seq)` of each hit, in order.
    async fn find(store: &Store, q: &str, user: Option<&str>, here: &str) -> Vec<(String, i64)> {
        let hits = store.recall(q, user, here, 20).await.unwrap();
        hits.into_iter().map(|h| (h.workstream, h.seq)).collect()
    }

    fn at(places: &[(&str, i64)]) -> Vec<(String, i64)> {
        places.iter().map(|(w, s)| ((*w).to_owned(), *s)).collect()
    }

    async fn integrity_check(store: &Store) {
        sqlx::query("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
            .execute(store.pool())
            .await
            .expect("the FTS index matches the messages table");
    }

    #[tokio::test]
    async fn the_index_follows_inserts_updates_deletes_and_forks() {
        let store = store_with(vec![(
            "a",
            0,
            Message::user("ship the marmalade build"),
            Some("al"),
        )])
        .await;
        let hits = store
            .recall("marmalade", Some("al"), "a", 20)
            .await
            .unwrap();
        let (h, created) = (&hits[0], hits[0].created_at);
        assert!(created > 0);
        let expected = RecallHit {
            workstream: "a".into(),
            seq: 0,
            role: "user".into(),
            created_at: created,
            snippet: "ship the marmalade build".into(),
        };
        assert_eq!((hits.len(), h), (1, &expected));
        sqlx::query("UPDATE messages SET content = 'ship the quince build'")
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(find(&store, "marmalade", Some("al"), "a").await, []);
        assert_eq!(find(&store, "quince", None, "a").await, at(&[("a", 0)]));
        // A bulk copy (INSERT … SELECT, a fork) is indexed like single inserts.
        store.ensure_workstream("b", Some("al")).await.unwrap();
        sqlx::query(
            "INSERT INTO messages (workstream, seq, role, content, tool_calls, tool_call_id, \
             name, images, author, created_at) SELECT 'b', seq, role, content, tool_calls, \
             tool_call_id, name, images, author, created_at FROM messages WHERE workstream = 'a'",
        )
        .execute(store.pool())
        .await
        .unwrap();
        assert_eq!(find(&store, "quince", None, "b").await, at(&[("b", 0)]));
        integrity_check(&store).await;
        sqlx::query("DELETE FROM messages WHERE workstream IN ('a', 'b')")
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(find(&store, "quince", Some("al"), "b").await, []);
        integrity_check(&store).await;
    }

    #[tokio::test]
    async fn messages_changed_or_deleted_before_they_were_indexed_leave_the_index_sound() {
        let store = store_with(vec![
            ("a", 0, Message::user("indexed apricot"), Some("al")),
            ("a", 1, Message::user("pending apricot"), Some("al")),
        ])
        .await;
        assert_eq!(store.index_recall().await.unwrap(), 2);
        assert_eq!(store.index_recall().await.unwrap(), 0);
        for (seq, text) in [(2, "fig to change"), (3, "fig to delete")] {
            store
                .append_message("a", seq, &Message::user(text), Some("al"))
                .await
                .unwrap();
        }
        // Neither is in the index yet: the triggers leave it alone.
        sqlx::query("UPDATE messages SET content = 'changed damson' WHERE seq = 2")
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query("DELETE FROM messages WHERE seq = 3")
            .execute(store.pool())
            .await
            .unwrap();
        // Once caught up, the index holds exactly the messages table (the check compares
        // every row, so it fails while messages wait to be indexed).
        assert_eq!(store.index_recall().await.unwrap(), 1);
        integrity_check(&store).await;
        assert_eq!(find(&store, "fig", None, "a").await, []);
        assert_eq!(find(&store, "damson", None, "a").await, at(&[("a", 2)]));
        assert_eq!(
            find(&store, "apricot", None, "a").await,
            at(&[("a", 1), ("a", 0)])
        );
        integrity_check(&store).await;
    }

    #[tokio::test]
    async fn a_backlog_longer_than_a_batch_is_indexed_in_several() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", None).await.unwrap();
        let n = INDEX_BATCH + 5;
        sqlx::query(
            "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x + 1 < $1) \
             INSERT INTO messages (workstream, seq, role, content, created_at) \
             SELECT 'w', x, 'user', 'quokka ' || x, 0 FROM c",
        )
        .bind(n)
        .execute(store.pool())
        .await
        .unwrap();
        assert_eq!(store.index_recall().await.unwrap(), n as u64);
        assert_eq!(find(&store, "quokka", None, "w").await.len(), 20);
        integrity_check(&store).await;
    }

    #[tokio::test]
    async fn tool_calls_and_results_are_searchable() {
        let mut call = Message::assistant("");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"/etc/nginx/nginx.conf"}"#.into(),
        });
        let result = Message::tool_result("c1", "read_file", "worker_processes auto;");
        let store = store_with(vec![("w", 0, call, None), ("w", 1, result, None)]).await;
        let hits = store
            .recall("read_file nginx", None, "w", 20)
            .await
            .unwrap();
        let snippets: Vec<&str> = hits.iter().map(|h| h.snippet.as_str()).collect();
        assert_eq!(snippets, [r#"read_file({"path":"/etc/nginx/nginx.conf"})"#]);
        let hits = store
            .recall("worker_processes", None, "w", 20)
            .await
            .unwrap();
        assert_eq!(hits[0].snippet, "read_file: worker_processes auto;");
        // The tool name of a result is indexed too: both messages mention read_file.
        assert_eq!(find(&store, "READ_FILE", None, "w").await.len(), 2);
    }

    #[tokio::test]
    async fn query_syntax_from_the_model_is_only_text() {
        let text = "near the purple elephant and not here";
        let store = store_with(vec![("w", 0, Message::user(text), None)]).await;
        let queries = [
            "\"purple",
            "purple\"",
            "pur*",
            "(purple",
            "-purple",
            "purple NEAR elephant",
            "purple AND",
            "NOT",
            "OR purple",
            "purple:elephant",
            "^purple",
            "{purple}",
            "purple'",
            "purple'; DROP TABLE messages; --",
            "purple + elephant",
            "purple\\",
        ];
        for query in queries {
            assert_eq!(
                find(&store, query, None, "w").await,
                at(&[("w", 0)]),
                "{query}"
            );
        }
        assert_eq!(find(&store, "NEAR AND NOT", None, "w").await.len(), 1);
        assert_eq!(
            find(&store, "purp", None, "w").await,
            [],
            "a prefix only with *"
        );
        for query in ["", "   ", "\"", "*", "()", "-", "\"*\" (-) ^:"] {
            let err = store.recall(query, None, "w", 20).await.unwrap_err();
            let clear = matches!(&err, StoreError::EmptyQuery(q) if q == query);
            assert!(clear, "{err}");
        }
    }

    #[tokio::test]
    async fn a_user_recalls_only_their_own_workstreams_and_the_current_one() {
        let store = store_with(vec![
            (
                "alice-dm",
                0,
                Message::user("the otter token is xyz"),
                Some("alice"),
            ),
            (
                "bob-dm",
                0,
                Message::user("what was the otter token"),
                Some("bob"),
            ),
            (
                "bob-dm",
                1,
                Message::assistant("I do not know the otter token"),
                None,
            ),
            (
                "shared",
                0,
                Message::assistant("otter token rotation is due"),
                None,
            ),
        ])
        .await;
        let mut found = find(&store, "otter token", Some("bob"), "shared").await;
        found.sort();
        assert_eq!(found, at(&[("bob-dm", 0), ("bob-dm", 1), ("shared", 0)]));
        // No user: only the current workstream, even if it is someone else's.
        let found = find(&store, "otter", None, "bob-dm").await;
        assert_eq!(found, at(&[("bob-dm", 0), ("bob-dm", 1)]));
        let found = find(&store, "otter xyz", Some("alice"), "elsewhere").await;
        assert_eq!(found, at(&[("alice-dm", 0)]));
    }

    #[tokio::test]
    async fn ranking_limit_and_any_word_fallback() {
        let texts = ["kiwi", "kiwi kiwi kiwi mango", "kiwi", "mango"];
        let msgs = texts.iter().enumerate();
        let store = store_with(
            msgs.map(|(i, t)| ("w", i as i64, Message::user(*t), None))
                .collect(),
        )
        .await;
        let seqs =
            |found: Vec<(String, i64)>| found.into_iter().map(|(_, s)| s).collect::<Vec<_>>();
        // The densest match first, then equal ranks newest first.
        assert_eq!(seqs(find(&store, "kiwi", None, "w").await), [1, 2, 0]);
        assert_eq!(store.recall("kiwi", None, "w", 0).await.unwrap().len(), 1);
        assert_eq!(store.recall("kiwi", None, "w", 500).await.unwrap().len(), 3);
        assert_eq!(seqs(find(&store, "kiwi mango", None, "w").await), [1]);
        // Nothing has both words: the messages with either.
        assert_eq!(seqs(find(&store, "mango papaya", None, "w").await), [3, 1]);
        assert_eq!(find(&store, "papaya", None, "w").await, []);
    }

    #[test]
    fn queries_are_quoted_for_each_language() {
        let terms = search_terms("purple-elephant \"key\" it's dep* (x*) *").unwrap();
        let words: Vec<&[String]> = terms.iter().map(|t| t.words.as_slice()).collect();
        let expected: [&[&str]; 5] = [
            &["purple", "elephant"],
            &["key"],
            &["it", "s"],
            &["dep"],
            &["x"],
        ];
        assert_eq!(words, expected);
        let prefixes: Vec<bool> = terms.iter().map(|t| t.prefix).collect();
        assert_eq!(prefixes, [false, false, false, true, true]);
        let all = r#""purple elephant" "key" "it s" "dep" * "x" *"#;
        assert_eq!(fts5_query(&terms, false), all);
        assert_eq!(fts5_query(&terms[1..2], true), r#""key""#);
        let any = "('purple' <-> 'elephant') | 'key' | ('it' <-> 's') | 'dep':* | 'x':*";
        assert_eq!(tsquery(&terms, true), any);
        assert_eq!(search_terms(&"w ".repeat(100)).unwrap().len(), MAX_TERMS);
    }
}
