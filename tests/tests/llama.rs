//! Tests against a real llama.cpp server (see `tests/llama/`), in their own binary: the
//! server's threads keep a core busy while it generates, so these run after the main suite
//! rather than beside its timing-sensitive tests.

mod llama {
    mod cache;
    mod provider;
    mod workstream;
}
