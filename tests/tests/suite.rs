//! Shared setup for the end-to-end suites.

mod admin_api;
mod approvals;
mod approver_view;
mod audit;
mod cluster;
mod connector_commands;
mod connectors;
mod console;
mod context;
mod discord;
mod discord_commands;
mod doctor;
mod failures;
mod fake_discord;
mod fake_slack;
mod file_access;
mod grants;
mod http_hostile;
mod http_limits;
mod identity;
mod intake;
mod math;
mod mcp;
mod mcp_pipeline;
mod memory;
mod notify;
mod outage;
mod outside_turns;
mod parallel;
mod permissions;
mod prompt_cache;
mod providers;
mod recall;
mod restart;
mod resume_button;
mod resume_button_slack;
mod shards;
mod slack;
mod slack_approvals;
mod slack_dedup;
mod subagents;
mod template_store;
mod tool_env;
mod tool_search;
mod turn_limits;
mod usage;
mod watch_store;
mod watches;
mod web;
mod who_decides;
mod who_decides_page;
mod who_decides_slack;

use std::time::Duration;

use sandpiper_tests::db::TestDb;
use sandpiper_tests::fake_llm::{FakeLlm, Reply, said};
use sandpiper_tests::harness;
use tempfile::TempDir;

/// Generous bound for things that should take milliseconds (CI machines are slow).
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A fake LLM with `script`, a work dir, and a config pointing at both.
pub(crate) struct Setup {
    pub llm: FakeLlm,
    pub work: TempDir,
    pub config: harness::TestConfig,
}

impl Setup {
    /// The working directory of workstream `key` (created).
    pub(crate) fn dir(&self, key: &str) -> std::path::PathBuf {
        harness::workstream_dir(&self.config, key)
    }
}

pub(crate) async fn setup(db: &TestDb, script: Vec<Reply>) -> Setup {
    let llm = FakeLlm::start(script).await;
    let work = tempfile::tempdir().expect("work dir");
    let config = harness::config(db, &llm.openai_base_url(), work.path());
    Setup { llm, work, config }
}

/// What the messages of a recorded OpenAI request with `role` said (without the context note
/// sandpiper appends to the newest message).
pub(crate) fn contents_with_role(request: &serde_json::Value, role: &str) -> Vec<String> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == role)
        .map(|m| said(m["content"].as_str().unwrap_or_default()).to_owned())
        .collect()
}

/// The newest message of a recorded OpenAI request, with the context note it carries.
pub(crate) fn newest_content(request: &serde_json::Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}
