//! BM25 benchmarks on deterministic synthetic corpora.
//!
//! * `memory_top5/100000`: top 5 of 100,000 memories (name ~3 words, description ~10, content
//!   ~60, Zipf-distributed vocabulary of 4,000 words) for a ~30-word query drawn from the same
//!   distribution, through `search_filtered` with a scope filter that admits 99% of them.
//! * `tool_search_query/10000`: a short query against 10,000 indexed tools.
//! * `tool_search_rebuild/10000`: building the index of those 10,000 tools.
//!
//! Each query benchmark cycles through 16 different queries, so the figures are per-query
//! averages rather than one lucky query.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sandpiper_agent::bm25::Bm25Index;

const MEMORIES: usize = 100_000;
const TOOLS: usize = 10_000;
const VOCABULARY: usize = 4_000;
const QUERIES: usize = 16;

/// SplitMix64: small, seeded, good enough for synthetic text.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A vocabulary of pronounceable words with Zipf (s = 1) frequencies, as in natural text.
struct Vocabulary {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocabulary {
    fn new(rng: &mut Rng, size: usize) -> Self {
        const ONSETS: [&str; 16] = [
            "b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "st", "tr",
        ];
        const VOWELS: [&str; 6] = ["a", "e", "i", "o", "u", "ou"];
        let mut seen = std::collections::HashSet::new();
        let mut words = Vec::with_capacity(size);
        while words.len() < size {
            // Frequent words are short, like in English.
            let syllables = 1 + (words.len() > 50) as usize + rng.below(2 + words.len() / 1000);
            let word: String = (0..syllables)
                .map(|_| format!("{}{}", ONSETS[rng.below(16)], VOWELS[rng.below(6)]))
                .collect();
            if seen.insert(word.clone()) {
                words.push(word);
            }
        }
        let mut total = 0.0;
        let cumulative = (1..=size)
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Self { words, cumulative }
    }

    fn word(&self, rng: &mut Rng) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let target = rng.unit() * total;
        let rank = self.cumulative.partition_point(|&c| c <= target);
        &self.words[rank.min(self.words.len() - 1)]
    }

    /// Exactly `words` words.
    fn sentence(&self, rng: &mut Rng, words: usize) -> String {
        let mut text = String::new();
        for i in 0..words {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(self.word(rng));
        }
        text
    }

    /// Around `mean` words (±30%).
    fn about(&self, rng: &mut Rng, mean: usize) -> String {
        let words = mean * 7 / 10 + rng.below(mean * 6 / 10 + 1);
        self.sentence(rng, words)
    }
}

struct Memory {
    id: u64,
    name: String,
    description: String,
    content: String,
}

struct Tool {
    name: String,
    description: String,
}

fn memories(rng: &mut Rng, vocabulary: &Vocabulary) -> Vec<Memory> {
    (0..MEMORIES as u64)
        .map(|id| Memory {
            id,
            name: vocabulary.about(rng, 3).replace(' ', "-"),
            description: vocabulary.about(rng, 10),
            content: vocabulary.about(rng, 60),
        })
        .collect()
}

fn tools(rng: &mut Rng, vocabulary: &Vocabulary) -> Vec<Tool> {
    const VERBS: [&str; 16] = [
        "get", "list", "create", "update", "delete", "search", "read", "write", "run", "send",
        "fetch", "close", "merge", "open", "add", "remove",
    ];
    let servers: Vec<String> = (0..300).map(|_| vocabulary.sentence(rng, 1)).collect();
    (0..TOOLS)
        .map(|_| {
            let server = &servers[rng.below(servers.len())];
            let verb = VERBS[rng.below(VERBS.len())];
            let noun = &vocabulary.words[rng.below(VOCABULARY)];
            let name = format!("mcp__{server}__{verb}_{noun}");
            let description = format!(
                "{} {noun} {}",
                verb.to_uppercase(),
                vocabulary.about(rng, 15)
            );
            Tool { name, description }
        })
        .collect()
}

fn memory_top5(c: &mut Criterion) {
    let mut rng = Rng(0x5A4D_9199);
    let vocabulary = Vocabulary::new(&mut rng, VOCABULARY);
    let memories = memories(&mut rng, &vocabulary);
    let mut index = Bm25Index::new();
    for m in &memories {
        index.insert_fields(m.id, [&m.name, &m.description, &m.content]);
    }
    // Scope per memory: 1% belong to another user and are invisible to this turn.
    let visible: Vec<bool> = (0..MEMORIES).map(|_| rng.below(100) != 0).collect();
    let queries: Vec<String> = (0..QUERIES)
        .map(|_| vocabulary.about(&mut rng, 30))
        .collect();
    let mut group = c.benchmark_group("memory_top5");
    group.bench_function(BenchmarkId::from_parameter(MEMORIES), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % QUERIES;
            index.search_filtered(black_box(&queries[i]), 5, |&id| visible[id as usize])
        })
    });
    group.finish();
}

fn tool_search(c: &mut Criterion) {
    let mut rng = Rng(0x7001_5EA2);
    let vocabulary = Vocabulary::new(&mut rng, VOCABULARY);
    let tools = tools(&mut rng, &vocabulary);
    let docs = || {
        tools
            .iter()
            .map(|t| (t.name.clone(), [t.name.as_str(), t.description.as_str()]))
    };
    let index = Bm25Index::build_fields(docs());
    let queries: Vec<String> = (0..QUERIES)
        .map(|_| {
            let tool = &tools[rng.below(TOOLS)];
            let mut words = tool.name.split("__").last().unwrap_or("").replace('_', " ");
            words.push(' ');
            words.push_str(&vocabulary.sentence(&mut rng, 3));
            words
        })
        .collect();

    let mut group = c.benchmark_group("tool_search_query");
    group.bench_function(BenchmarkId::from_parameter(TOOLS), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % QUERIES;
            index.search(black_box(&queries[i]), 10)
        })
    });
    group.finish();

    let mut group = c.benchmark_group("tool_search_rebuild");
    group.bench_function(BenchmarkId::from_parameter(TOOLS), |b| {
        b.iter(|| Bm25Index::build_fields(black_box(docs())))
    });
    group.finish();
}

criterion_group!(benches, memory_top5, tool_search);
criterion_main!(benches);
