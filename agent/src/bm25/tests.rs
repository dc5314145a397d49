use super::*;

fn toks(text: &str) -> Vec<String> {
    tokenize(text).collect()
}

fn keys<K: Clone>(hits: &[(K, f32)]) -> Vec<K> {
    hits.iter().map(|(k, _)| k.clone()).collect()
}

/// The corpus of the hand-computed example: lengths 3, 6 and 2, so avgdl = 11/3.
fn corpus() -> Vec<(&'static str, &'static str)> {
    vec![
        ("d0", "the cat sat"),
        ("d1", "The dog sat on the mat"),
        ("d2", "a cat"),
    ]
}

#[test]
fn tokenizer_splits_identifiers_and_punctuation() {
    assert_eq!(
        toks("mcp__github__create_issue"),
        ["mcp", "github", "create", "issue"]
    );
    assert_eq!(toks("read_file"), ["read", "file"]);
    assert_eq!(toks("a-b.c/d e\tf\ng"), ["a", "b", "c", "d", "e", "f", "g"]);
    assert_eq!(
        toks("  Hello, WORLD!! v2.0 "),
        ["hello", "world", "v2", "0"]
    );
    assert_eq!(toks("__--..//"), Vec::<String>::new());
    assert_eq!(toks(""), Vec::<String>::new());
}

#[test]
fn tokenizer_is_unicode_aware() {
    assert_eq!(toks("Größe_ÜBER-straße"), ["größe", "über", "straße"]);
    assert_eq!(toks("日本語 テキスト"), ["日本語", "テキスト"]);
    assert_eq!(toks("ΟΔΟΣ οδος"), ["οδοσ", "οδοσ"]);
    assert_eq!(toks("café→bar"), ["café", "bar"]);
}

#[test]
fn score_matches_hand_computation() {
    // N = 3, avgdl = 11/3, k1 = 1.5, b = 0.75.
    // idf(the) = idf(cat) = ln(1 + 1.5/2.5) = 0.470004; idf(dog) = ln(1 + 2.5/1.5) = 0.980829.
    // d1 (|D| = 6): K = 1.5·(0.25 + 0.75·6/(11/3)) = 2.215909
    //   the (tf 2): 0.470004·2·2.5/(2 + K) = 0.557414
    //   dog (tf 1): 0.980829·2.5/(1 + K)   = 0.762482   → 1.319899
    // d0 (|D| = 3): K = 1.295455; the, cat: 2 · 0.470004·2.5/(1 + K) = 1.023770
    // d2 (|D| = 2): K = 0.988636; cat: 0.470004·2.5/(1 + K) = 0.590862
    let index = Bm25Index::build(corpus());
    let hits = index.search("the dog cat", 10);
    assert_eq!(keys(&hits), ["d1", "d0", "d2"]);
    for ((_, got), want) in hits.iter().zip([1.319_899, 1.023_770, 0.590_862]) {
        assert!((f64::from(*got) - want).abs() < 1e-4, "{got} vs {want}");
    }
    let one_shot = top_k(&corpus(), "the dog cat", 10);
    assert_eq!(keys(&one_shot), ["d1", "d0", "d2"]);
    for ((_, a), (_, b)) in one_shot.iter().zip(&hits) {
        assert!((a - b).abs() < 1e-6);
    }
}

#[test]
fn repeated_query_terms_count_once() {
    let index = Bm25Index::build(corpus());
    assert_eq!(index.search("dog", 3), index.search("dog DOG dog", 3));
}

#[test]
fn exact_tool_name_ranks_first() {
    let tools = [
        (
            "write_file",
            "Write content to a file, creating it if needed.",
        ),
        ("search", "Search file contents with a regular expression."),
        (
            "read_file",
            "Read a file from the workspace and return its contents.",
        ),
        ("bash", "Run a shell command."),
    ];
    let index = Bm25Index::build_fields(tools.iter().map(|(n, d)| (*n, [*n, *d])));
    let hits = index.search("read a file", 3);
    assert_eq!(hits[0].0, "read_file");
    assert!(hits.len() == 3 && hits[0].1 > hits[1].1);
    let hits = index.search("mcp__x__run_shell", 5);
    assert_eq!(keys(&hits), ["bash"]);
}

#[test]
fn filter_excludes_documents() {
    let index = Bm25Index::build(corpus());
    let hits = index.search_filtered("cat", 10, |k| *k != "d2");
    assert_eq!(keys(&hits), ["d0"]);
    // A filtered-out best hit leaves room for the next one.
    let hits = index.search_filtered("cat", 1, |k| *k != "d2");
    assert_eq!(keys(&hits), ["d0"]);
    assert!(index.search_filtered("cat", 10, |_| false).is_empty());
}

#[test]
fn remove_matches_fresh_build() {
    let mut index = Bm25Index::build(corpus());
    assert!(index.remove("d0"));
    assert!(!index.remove("d0"));
    assert!(!index.contains_key("d0"));
    assert_eq!(index.len(), 2);
    let fresh = Bm25Index::build(corpus().into_iter().filter(|(k, _)| *k != "d0"));
    for query in ["the dog cat", "cat", "sat mat", "a"] {
        let got = index.search(query, 10);
        assert_eq!(got, fresh.search(query, 10), "{query}");
        assert!(!keys(&got).contains(&"d0"));
        index.clone().compact();
    }
    index.compact();
    for query in ["the dog cat", "cat", "sat mat", "a"] {
        assert_eq!(index.search(query, 10), fresh.search(query, 10), "{query}");
    }
    // Re-inserting after compaction works and replaces by key.
    index.insert("d0", "the cat sat");
    index.insert("d2", "a cat");
    assert_eq!(index.len(), 3);
    let rebuilt = Bm25Index::build([
        ("d1", "The dog sat on the mat"),
        ("d0", "the cat sat"),
        ("d2", "a cat"),
    ]);
    assert_eq!(index.search("cat sat", 10), rebuilt.search("cat sat", 10));
}

#[test]
fn many_removals_compact_automatically() {
    let mut index = Bm25Index::new();
    for i in 0..300u32 {
        index.insert(i, &format!("common word{} w{}", i % 7, i));
    }
    for i in (0..300u32).filter(|i| i % 3 != 0) {
        assert!(index.remove(&i));
    }
    // Compacted at 75 dead of 300 slots and at 64 of 225; 61 tombstones remain.
    assert_eq!((index.dead, index.keys.len()), (61, 161));
    assert_eq!(index.len(), 100);
    let fresh = Bm25Index::build(
        (0..300u32)
            .filter(|i| i % 3 == 0)
            .map(|i| (i, format!("common word{} w{}", i % 7, i))),
    );
    for query in ["common", "word3 w42", "w299 w3 word0"] {
        assert_eq!(index.search(query, 20), fresh.search(query, 20), "{query}");
    }
    // Replacing documents leaves tombstones too; they are swept the same way.
    for round in 0..10 {
        for i in (0..300u32).filter(|i| i % 3 == 0) {
            index.insert(i, &format!("common word{} w{}", i % 7, i + round));
        }
    }
    assert!(index.dead < 64 && index.keys.len() < 300);
    assert_eq!(index.len(), 100);
}

#[test]
fn empty_query_or_no_match_is_empty() {
    let index = Bm25Index::build(corpus());
    assert!(index.search("", 5).is_empty());
    assert!(index.search(" __ -- ", 5).is_empty());
    assert!(index.search("zebra", 5).is_empty());
    assert!(index.search("cat", 0).is_empty());
    assert!(Bm25Index::<u32>::new().search("cat", 5).is_empty());
    assert!(top_k(&corpus(), "zebra", 5).is_empty());
    assert!(top_k::<u8>(&[], "cat", 5).is_empty());
}

#[test]
fn limit_is_respected() {
    let docs: Vec<(u32, String)> = (0..50).map(|i| (i, format!("alpha beta{i}"))).collect();
    let index = Bm25Index::build(docs.iter().map(|(k, t)| (*k, t.as_str())));
    assert_eq!(index.search("alpha", 7).len(), 7);
    assert_eq!(index.search("alpha", 500).len(), 50);
    let slice: Vec<(u32, &str)> = docs.iter().map(|(k, t)| (*k, t.as_str())).collect();
    assert_eq!(top_k(&slice, "alpha", 5).len(), 5);
}

#[test]
fn ties_break_by_insertion_order() {
    let docs = [
        (30, "same text"),
        (10, "same text"),
        (20, "same text"),
        (5, "other"),
    ];
    let index = Bm25Index::build(docs);
    assert_eq!(keys(&index.search("text", 10)), [30, 10, 20]);
    assert_eq!(keys(&index.search("text", 2)), [30, 10]);
    assert_eq!(keys(&top_k(&docs, "same", 2)), [30, 10]);
    // Replacing a key moves it to the end of the insertion order.
    let mut index = index;
    index.insert(30, "same text");
    assert_eq!(keys(&index.search("text", 10)), [10, 20, 30]);
}

#[test]
fn higher_term_frequency_and_shorter_docs_score_higher() {
    let index = Bm25Index::build([
        (0, "apple banana cherry"),
        (1, "apple apple banana"),
        (2, "apple"),
        (3, "kiwi"),
    ]);
    let hits = index.search("apple", 10);
    assert_eq!(keys(&hits), [2, 1, 0]);
    assert!(hits[0].1 > hits[1].1 && hits[1].1 > hits[2].1);
}
