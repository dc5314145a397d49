//! Test doubles for sandpiper and the harness the end-to-end tests use.
//!
//! # Layout
//!
//! - [`browser`]: the status page in a real headless chromium, and a person's steps there.
//! - [`discord_harness`]: the real Discord channel against the fake Discord.
//! - [`fake_discord`]: a fake Discord (REST + gateway) that a real serenity client connects to.
//! - [`fake_llm`]: a scripted OpenAI-compatible and Anthropic streaming server on 127.0.0.1.
//! - [`fake_slack`]: a fake Slack (Web API and Socket Mode) for the real slack-morphism client.
//! - [`db`]: a fresh SQLite file or PostgreSQL schema per test, and `both_backends!`.
//! - [`db_proxy`]: a relay to PostgreSQL that a test can take away and bring back.
//! - [`harness`]: the real wiring and console channel driven by scripted input.
//! - [`llama_server`]: a real llama.cpp server (xllamacpp, Gemma 3 270M) on 127.0.0.1.
//! - [`proc_stat`]: CPU figures of a process and of the tool processes it started.
//! - [`slack_harness`]: the real Slack channel against the fake Slack.

pub mod browser;
pub mod db;
pub mod db_proxy;
pub mod discord_harness;
pub mod fake_discord;
pub mod fake_llm;
pub mod fake_slack;
pub mod harness;
pub mod llama_server;
pub mod proc_stat;
pub mod slack_harness;
