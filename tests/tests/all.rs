//! End-to-end tests: the real wiring, the real console channel and the real provider clients,
//! against a scripted LLM on 127.0.0.1 and both databases. One test binary to save link time.

mod suite;
