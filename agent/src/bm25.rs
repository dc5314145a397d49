//! Okapi BM25 ranking, shared by memory relevance injection and tool search.
//!
//! # Formula
//!
//! For a query `Q` and a document `D`:
//!
//! ```text
//! score(D, Q) = Σ_{t ∈ Q}  idf(t) · tf(t, D) · (k1 + 1) / (tf(t, D) + k1 · (1 − b + b · |D| / avgdl))
//! idf(t)      = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
//! ```
//!
//! `N` is the number of (live) documents, `df(t)` the number of documents containing `t`,
//! `|D|` the document length in tokens and `avgdl` the mean document length. The IDF is the
//! non-negative variant (as in Lucene), so every matching term adds a positive amount and a very
//! common term can never push a score below zero. Defaults: `k1 = 1.5`, `b = 0.75`
//! ([`Bm25Params`]).
//!
//! The query is treated as a *set* of terms: a word repeated in the conversation counts once
//! (Robertson's `k3 = 0`), so chatter that repeats a word does not drown out rarer words.
//! A document made of several fields (name, description, content) is scored as the
//! concatenation of its fields.
//!
//! # Tokens
//!
//! [`tokenize`] lowercases and splits on every character that is not Unicode-alphanumeric, so
//! `mcp__github__create_issue` becomes `mcp github create issue` and `read_file` becomes
//! `read file`. Final sigma `ς` is folded to `σ` so Greek words match in any case.
//!
//! # Design
//!
//! * Terms are interned (`HashMap<String, u32>`) and the index is inverted: term id →
//!   postings `(doc id, tf)`, sorted by doc id. A query only touches documents that contain a
//!   query term, accumulating scores in one dense `f32` array; no allocation per document.
//! * The top `k` are kept in a bounded heap (no full sort). Ties are broken by insertion order
//!   (earlier first), which is also doc id order, so results are deterministic.
//! * The index is incremental: [`Bm25Index::insert`] appends, [`Bm25Index::remove`] leaves a
//!   tombstone and adjusts `N`, `df` and the total length at once, so scores always equal those
//!   of a freshly built index. Tombstones are swept by [`Bm25Index::compact`], which runs
//!   automatically once a quarter of the slots are dead.
//! * [`Bm25Index::search_filtered`] takes a predicate on the key, evaluated only for documents
//!   that match and could still enter the top `k`, so per-turn visibility (global, workstream,
//!   user) costs nothing for the documents that do not match at all. This is the path memory
//!   injection uses: keep one index, update it as memories change, filter per turn.
//! * [`top_k`] ranks a slice in one shot without building an index (it only counts the query's
//!   terms); it is meant for small sets, because it has to tokenize every document each call.

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::hash::Hash;

mod one_shot;
#[cfg(test)]
mod tests;

pub use one_shot::{top_k, top_k_with};

/// BM25 tuning parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation: how quickly repeated occurrences stop adding score.
    /// Expected `≥ 0`; `0` makes the score depend on presence only.
    pub k1: f32,
    /// Length normalisation in `[0, 1]`: `0` ignores document length, `1` fully normalises.
    pub b: f32,
}

impl Default for Bm25Params {
    /// `k1 = 1.5`, `b = 0.75`.
    fn default() -> Self {
        Self { k1: 1.5, b: 0.75 }
    }
}

impl Bm25Params {
    /// `idf(t) · (k1 + 1)` for a term found in `df` of `n` documents.
    fn term_weight(&self, n: f32, df: f32) -> f32 {
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln() * (self.k1 + 1.0)
    }
}

/// Splits `text` into lowercase tokens: maximal runs of Unicode alphanumeric characters.
///
/// Every other character (whitespace, `_ - . /`, punctuation, symbols) separates tokens and
/// empty tokens are dropped, so `mcp__github__create_issue` yields `mcp`, `github`, `create`,
/// `issue`.
pub fn tokenize(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut rest = text;
    std::iter::from_fn(move || {
        let mut token = String::new();
        next_token(&mut rest, &mut token).then_some(token)
    })
}

/// Writes the next token of `rest` into `buf` and advances `rest` past it; false at the end.
fn next_token(rest: &mut &str, buf: &mut String) -> bool {
    let Some(start) = rest.find(char::is_alphanumeric) else {
        *rest = "";
        return false;
    };
    let tail = &rest[start..];
    let end = tail
        .find(|c: char| !c.is_alphanumeric())
        .unwrap_or(tail.len());
    let (word, after) = tail.split_at(end);
    *rest = after;
    buf.clear();
    if word.is_ascii() {
        buf.push_str(word);
        buf.make_ascii_lowercase();
    } else {
        for c in word.chars().flat_map(char::to_lowercase) {
            buf.push(if c == 'ς' { 'σ' } else { c });
        }
    }
    true
}

/// Calls `f` with each token of `text`, reusing `buf` (no allocation per token).
fn for_each_token(text: &str, buf: &mut String, mut f: impl FnMut(&str)) {
    let mut rest = text;
    while next_token(&mut rest, buf) {
        f(buf);
    }
}

/// The distinct query terms, sorted and deduplicated.
fn query_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = tokenize(query).collect();
    terms.sort_unstable();
    terms.dedup();
    terms
}

/// Selects the best `limit` documents with a positive score, best first, ties by doc id.
/// `admit` is asked only about documents that would enter the current top `limit`.
fn select_top(scores: &[f32], limit: usize, mut admit: impl FnMut(u32) -> bool) -> Vec<(u32, f32)> {
    // Positive finite f32 order like their bit patterns, so a hit is `(Reverse(bits), doc)` and
    // the max-heap's top is the worst kept hit: lowest score, then latest doc.
    let mut heap = BinaryHeap::with_capacity(limit.min(scores.len()) + 1);
    for (doc, &score) in (0u32..).zip(scores) {
        // NaN can only come from degenerate parameters; never rank it.
        if score.is_nan() || score <= 0.0 {
            continue;
        }
        let hit = (Reverse(score.to_bits()), doc);
        if heap.len() == limit {
            if let Some(mut worst) = heap.peek_mut()
                && hit < *worst
                && admit(doc)
            {
                *worst = hit;
            }
        } else if admit(doc) {
            heap.push(hit);
        }
    }
    let hits = heap.into_sorted_vec().into_iter();
    hits.map(|(Reverse(bits), doc)| (doc, f32::from_bits(bits)))
        .collect()
}

/// Adds one term's BM25 contribution to the score of every document in its postings.
/// `c0 + c1 · |D|` is `k1 · (1 − b + b · |D| / avgdl)`.
fn accumulate(
    scores: &mut [f32],
    postings: &[Posting],
    weight: f32,
    doc_len: &[u32],
    c: (f32, f32),
) {
    for p in postings {
        let (doc, tf) = (p.doc as usize, p.tf as f32);
        scores[doc] += weight * tf / (tf + c.0 + c.1 * doc_len[doc] as f32);
    }
}

/// One posting: a document containing the term and how many times.
#[derive(Clone, Copy, Debug)]
struct Posting {
    doc: u32,
    tf: u32,
}

/// An incremental BM25 index over documents identified by keys of type `K`.
///
/// Documents are searched with [`search`](Self::search) or
/// [`search_filtered`](Self::search_filtered); both return at most `limit` `(key, score)`
/// pairs with a positive score, best first, ties in insertion order.
#[derive(Clone)]
pub struct Bm25Index<K> {
    params: Bm25Params,
    /// Term → term id.
    terms: HashMap<String, u32>,
    /// Term id → postings sorted by doc id (may include tombstoned docs).
    postings: Vec<Vec<Posting>>,
    /// Term id → number of live documents containing it.
    df: Vec<u32>,
    /// Doc id → key; `None` for a tombstone.
    keys: Vec<Option<K>>,
    /// Doc id → length in tokens.
    doc_len: Vec<u32>,
    /// Doc id `d` → its distinct term ids are `doc_terms[term_start[d]..term_start[d + 1]]`.
    term_start: Vec<usize>,
    doc_terms: Vec<u32>,
    /// Key → live doc id.
    slots: HashMap<K, u32>,
    /// Sum of the lengths of live documents.
    total_len: u64,
    /// Number of tombstones.
    dead: usize,
    /// Reused by `insert` for term ids and the token buffer.
    scratch: Vec<u32>,
    buf: String,
}

impl<K> fmt::Debug for Bm25Index<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bm25Index")
            .field("params", &self.params)
            .field("docs", &self.slots.len())
            .field("tombstones", &self.dead)
            .field("terms", &self.terms.len())
            .finish_non_exhaustive()
    }
}

impl<K: Clone + Eq + Hash> Default for Bm25Index<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash> Bm25Index<K> {
    /// An empty index with the default parameters.
    pub fn new() -> Self {
        Self::with_params(Bm25Params::default())
    }

    /// An empty index with the given parameters.
    pub fn with_params(params: Bm25Params) -> Self {
        Self {
            params,
            terms: HashMap::new(),
            postings: Vec::new(),
            df: Vec::new(),
            keys: Vec::new(),
            doc_len: Vec::new(),
            term_start: vec![0],
            doc_terms: Vec::new(),
            slots: HashMap::new(),
            total_len: 0,
            dead: 0,
            scratch: Vec::new(),
            buf: String::new(),
        }
    }

    /// Builds an index from `(key, text)` documents with the default parameters. A repeated key
    /// replaces the earlier document.
    pub fn build<T: AsRef<str>>(docs: impl IntoIterator<Item = (K, T)>) -> Self {
        Self::build_fields(docs.into_iter().map(|(key, text)| (key, [text])))
    }

    /// Builds an index from `(key, fields)` documents, each scored as the concatenation of its
    /// fields (e.g. `[name, description]`), with the default parameters.
    pub fn build_fields<F, T>(docs: impl IntoIterator<Item = (K, F)>) -> Self
    where
        F: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let docs = docs.into_iter();
        let mut index = Self::new();
        let n = docs.size_hint().0;
        (index.keys, index.doc_len) = (Vec::with_capacity(n), Vec::with_capacity(n));
        index.slots.reserve(n);
        for (key, fields) in docs {
            index.insert_fields(key, fields);
        }
        index
    }

    /// The parameters the index scores with.
    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// Number of documents (tombstones excluded).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether a document with this key is indexed.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.slots.contains_key(key)
    }

    /// Adds a document, replacing any document with the same key (which then ranks as the
    /// latest inserted for tie-breaking).
    pub fn insert(&mut self, key: K, text: &str) {
        self.insert_fields(key, [text]);
    }

    /// Adds a document made of several fields, scored as their concatenation, replacing any
    /// document with the same key.
    pub fn insert_fields<T: AsRef<str>>(&mut self, key: K, fields: impl IntoIterator<Item = T>) {
        if let Some(old) = self.slots.remove(&key) {
            self.kill(old);
            self.maybe_compact();
        }
        if self.keys.len() >= u32::MAX as usize {
            self.compact();
        }
        // Doc ids are u32; over four billion slots even after compaction cannot be indexed.
        let Ok(doc) = u32::try_from(self.keys.len()) else {
            tracing::warn!("bm25 index full; document not indexed");
            return;
        };
        let mut ids = std::mem::take(&mut self.scratch);
        let mut buf = std::mem::take(&mut self.buf);
        ids.clear();
        for field in fields {
            for_each_token(field.as_ref(), &mut buf, |token| {
                ids.push(self.intern(token));
            });
        }
        let len = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        ids.sort_unstable();
        for run in ids.chunk_by(|a, b| a == b) {
            let term = run[0] as usize;
            let tf = u32::try_from(run.len()).unwrap_or(u32::MAX);
            self.postings[term].push(Posting { doc, tf });
            self.df[term] += 1;
            self.doc_terms.push(run[0]);
        }
        self.term_start.push(self.doc_terms.len());
        self.doc_len.push(len);
        self.total_len += u64::from(len);
        self.keys.push(Some(key.clone()));
        self.slots.insert(key, doc);
        self.scratch = ids;
        self.buf = buf;
    }

    /// Removes the document with this key; false if there was none. Statistics (`N`, `df`,
    /// average length) are updated at once; the postings are swept lazily by
    /// [`compact`](Self::compact).
    pub fn remove<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(doc) = self.slots.remove(key) else {
            return false;
        };
        self.kill(doc);
        self.maybe_compact();
        true
    }

    /// The top `limit` documents for `query`, best first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(K, f32)> {
        self.search_filtered(query, limit, |_| true)
    }

    /// The top `limit` documents for `query` among those whose key `visible` accepts, best
    /// first. `visible` is only called for documents that match the query and would enter the
    /// current top `limit`.
    pub fn search_filtered(
        &self,
        query: &str,
        limit: usize,
        mut visible: impl FnMut(&K) -> bool,
    ) -> Vec<(K, f32)> {
        let live = self.slots.len();
        if limit == 0 || live == 0 || self.total_len == 0 {
            return Vec::new();
        }
        let mut terms: Vec<u32> = query_terms(query)
            .iter()
            .filter_map(|t| self.terms.get(t.as_str()).copied())
            .filter(|&t| self.df[t as usize] > 0)
            .collect();
        if terms.is_empty() {
            return Vec::new();
        }
        terms.sort_unstable();
        let Bm25Params { k1, b } = self.params;
        let n = live as f32;
        let avgdl = self.total_len as f32 / n;
        let c = (k1 * (1.0 - b), k1 * b / avgdl);
        let mut scores = vec![0.0f32; self.keys.len()];
        for &term in &terms {
            let weight = self.params.term_weight(n, self.df[term as usize] as f32);
            accumulate(
                &mut scores,
                &self.postings[term as usize],
                weight,
                &self.doc_len,
                c,
            );
        }
        let keys = &self.keys;
        let admit = |doc: u32| matches!(&keys[doc as usize], Some(key) if visible(key));
        select_top(&scores, limit, admit)
            .into_iter()
            .filter_map(|(doc, score)| Some((keys[doc as usize].clone()?, score)))
            .collect()
    }

    /// Drops tombstones from the postings, renumbers documents and forgets terms no live
    /// document uses. Runs automatically from [`remove`](Self::remove); results never change.
    pub fn compact(&mut self) {
        if self.dead == 0 {
            return;
        }
        let mut doc_map = vec![u32::MAX; self.keys.len()];
        let mut next = 0u32;
        for (slot, key) in doc_map.iter_mut().zip(&self.keys) {
            if key.is_some() {
                *slot = next;
                next += 1;
            }
        }
        let mut term_map = vec![u32::MAX; self.postings.len()];
        let mut next = 0u32;
        for (slot, &df) in term_map.iter_mut().zip(&self.df) {
            if df > 0 {
                *slot = next;
                next += 1;
            }
        }
        let old_postings = std::mem::take(&mut self.postings);
        for (mut list, &new_term) in old_postings.into_iter().zip(&term_map) {
            if new_term != u32::MAX {
                list.retain_mut(|p| {
                    p.doc = doc_map[p.doc as usize];
                    p.doc != u32::MAX
                });
                self.postings.push(list);
            }
        }
        self.df.retain(|&df| df > 0);
        self.terms.retain(|_, id| {
            *id = term_map[*id as usize];
            *id != u32::MAX
        });
        let (mut term_start, mut doc_terms) = (vec![0], Vec::with_capacity(self.doc_terms.len()));
        let (mut keys, mut doc_len) = (Vec::with_capacity(next as usize), Vec::new());
        for (doc, key) in self.keys.iter_mut().enumerate() {
            if let Some(key) = key.take() {
                let range = self.term_start[doc]..self.term_start[doc + 1];
                doc_terms.extend(self.doc_terms[range].iter().map(|&t| term_map[t as usize]));
                term_start.push(doc_terms.len());
                keys.push(Some(key));
                doc_len.push(self.doc_len[doc]);
            }
        }
        (self.keys, self.doc_len) = (keys, doc_len);
        (self.term_start, self.doc_terms) = (term_start, doc_terms);
        for doc in self.slots.values_mut() {
            *doc = doc_map[*doc as usize];
        }
        self.dead = 0;
    }

    /// Compacts once at least a quarter of the slots (and at least 64) are tombstones, which
    /// keeps the amortised cost of removal constant.
    fn maybe_compact(&mut self) {
        if self.dead >= 64 && self.dead * 4 >= self.keys.len() {
            self.compact();
        }
    }

    /// The id of `token`, interning it if new.
    fn intern(&mut self, token: &str) -> u32 {
        if let Some(&id) = self.terms.get(token) {
            return id;
        }
        let id = self.postings.len() as u32;
        self.terms.insert(token.to_owned(), id);
        self.postings.push(Vec::new());
        self.df.push(0);
        id
    }

    /// Tombstones a live doc and takes it out of the statistics.
    fn kill(&mut self, doc: u32) {
        let doc = doc as usize;
        self.keys[doc] = None;
        for &term in &self.doc_terms[self.term_start[doc]..self.term_start[doc + 1]] {
            self.df[term as usize] -= 1;
        }
        self.total_len -= u64::from(self.doc_len[doc]);
        self.dead += 1;
    }
}
