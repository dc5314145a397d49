//! One-shot ranking of a slice, without keeping an index.

use std::collections::HashMap;

use super::{Bm25Params, Posting, accumulate, for_each_token, query_terms, select_top};

/// Ranks `docs` against `query` in one shot, without keeping an index: the top `k` as
/// `(key, score)`, best first, ties in slice order. Tokenizes every document on each call, so
/// use a [`Bm25Index`](super::Bm25Index) for large or long-lived sets.
pub fn top_k<K: Clone>(docs: &[(K, &str)], query: &str, k: usize) -> Vec<(K, f32)> {
    top_k_with(docs, query, k, Bm25Params::default())
}

/// [`top_k`] with explicit parameters.
pub fn top_k_with<K: Clone>(
    docs: &[(K, &str)],
    query: &str,
    k: usize,
    params: Bm25Params,
) -> Vec<(K, f32)> {
    let terms = query_terms(query);
    if k == 0 || docs.is_empty() || terms.is_empty() {
        return Vec::new();
    }
    let lookup: HashMap<&str, usize> = terms
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    // Only the query's terms are counted: per term its df and (doc, tf) postings.
    let mut counts = vec![0u32; terms.len()];
    let mut seen = Vec::new();
    let mut postings: Vec<Vec<Posting>> = vec![Vec::new(); terms.len()];
    let mut doc_len = Vec::with_capacity(docs.len());
    let mut buf = String::new();
    for (doc, (_, text)) in (0u32..).zip(docs) {
        let mut len = 0u32;
        for_each_token(text, &mut buf, |token| {
            len = len.saturating_add(1);
            if let Some(&t) = lookup.get(token) {
                if counts[t] == 0 {
                    seen.push(t);
                }
                counts[t] += 1;
            }
        });
        doc_len.push(len);
        for t in seen.drain(..) {
            postings[t].push(Posting { doc, tf: counts[t] });
            counts[t] = 0;
        }
    }
    let total: u64 = doc_len.iter().map(|&l| u64::from(l)).sum();
    if total == 0 {
        return Vec::new();
    }
    let n = docs.len() as f32;
    let (k1, b) = (params.k1, params.b);
    let c = (k1 * (1.0 - b), k1 * b * n / total as f32);
    let mut scores = vec![0.0f32; docs.len()];
    for list in &postings {
        let weight = params.term_weight(n, list.len() as f32);
        accumulate(&mut scores, list, weight, &doc_len, c);
    }
    select_top(&scores, k, |_| true)
        .into_iter()
        .map(|(doc, score)| (docs[doc as usize].0.clone(), score))
        .collect()
}
