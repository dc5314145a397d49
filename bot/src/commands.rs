//! Output of the informational commands.

use std::fmt::Write as _;

use sandpiper_agent::Config;
use sandpiper_agent::config::ConfigSource;
use sandpiper_agent::tools::ToolRegistry;

/// `sandpiper tools`: one row per built-in tool, with the approval rule the pipeline enforces:
/// `auto-approve` is the JSON's default, and `asks anyway for` the calls of an auto-approved
/// tool that ask all the same. A note says what skips asking for a whole session.
pub fn tools_table(registry: &ToolRegistry) -> String {
    let mut rows = vec![[
        "name".to_owned(),
        "auto-approve".to_owned(),
        "agent".to_owned(),
        "task_agent".to_owned(),
        "primary_key".to_owned(),
        "asks anyway for".to_owned(),
    ]];
    let yn = |b: bool| if b { "yes" } else { "no" }.to_owned();
    for t in registry.iter() {
        let s = &t.spec;
        let raised = match (s.auto_approve, t.tool.asks_for()) {
            (true, Some(calls)) => calls.to_owned(),
            _ => "-".to_owned(),
        };
        rows.push([
            s.name.clone(),
            yn(s.auto_approve),
            yn(s.agent),
            yn(s.task_agent),
            s.primary_key.clone().unwrap_or_else(|| "-".into()),
            raised,
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out.push_str(
        "\nA tool with auto-approve `no` asks for every call. `--yes` (chat) and an \
         always-allow grant in a workstream skip asking for that tool.\n",
    );
    out
}

pub use sandpiper_channels::answers::{mcp_list, mcp_refresh};

/// What `sandpiper mcp refresh` cannot do, said after its report: it is a process of its own,
/// so it refreshed its own connections and left a running `serve` untouched. Reaching the
/// running server needs an authenticated endpoint (the service JWTs of issue 12), which does
/// not exist yet; until then chat's `/mcp refresh` is the way.
pub const MCP_REFRESH_SCOPE: &str = "note: this refreshed the MCP servers of this command's own \
process only; a running `sandpiper serve` keeps its connections. Refresh those from chat with \
`/mcp refresh [server]` (Discord) or `/sandpiper mcp refresh [server]` (Slack); reaching the \
running server from here needs its authenticated service endpoint, which is not built yet.\n";

/// `sandpiper mcp refresh [SERVER]`: the report, then [`MCP_REFRESH_SCOPE`].
pub fn mcp_refresh_cli(reports: &[sandpiper_agent::mcp::RefreshReport]) -> String {
    format!("{}{MCP_REFRESH_SCOPE}", mcp_refresh(reports))
}

/// `sandpiper config check`: where the config came from and its effective values, secrets
/// redacted.
pub fn config_report(
    config: &Config,
    channels: &sandpiper_channels::config::ChannelsConfig,
    source: &ConfigSource,
) -> String {
    let key_env = config.model.effective_api_key_env();
    let key_state = if config.model.api_key.is_some() {
        format!("set (from ${key_env})")
    } else {
        format!("not set (${key_env} is empty; fine for local servers without a key)")
    };
    let model = &config.model;
    let window = match model.context_window {
        Some(tokens) => format!("{tokens} tokens (from model.context_window)"),
        None => {
            let fallback =
                sandpiper_agent::context::window::known_default(model.provider, &model.model);
            let asks = match model.provider {
                sandpiper_agent::config::Provider::Openai => {
                    "asked of the server on first use (/props n_ctx, /v1/models); if it does not say, "
                }
                sandpiper_agent::config::Provider::Anthropic => "",
            };
            format!("{asks}{fallback}")
        }
    };
    let context = format!(
        "# context window: {window}\n# output limit: at most {} tokens an answer (model.max_tokens), less when the window leaves less\n# compaction: when a request would fill {:.0}% of the window (agent.compact_threshold)\n",
        model.max_tokens,
        config.agent.compact_threshold * 100.0
    );
    format!(
        "# configuration is valid\n# source: {source}\n# model: {} via {} at {}\n# api key: {key_state}\n{context}\n{}\n{}",
        config.model.model,
        match config.model.provider {
            sandpiper_agent::config::Provider::Openai => "openai",
            sandpiper_agent::config::Provider::Anthropic => "anthropic",
        },
        config.model.effective_base_url(),
        config.to_redacted_toml(),
        channels.to_redacted_toml()
    )
}

/// What to set when the configured model cannot work: no API key for a provider's public
/// endpoint. `None` when a key is there or the endpoint is another (a local server needs none).
pub fn missing_api_key(config: &Config) -> Option<String> {
    let model = &config.model;
    if model.api_key.is_some() || model.base_url.is_some() {
        return None;
    }
    Some(format!(
        "no API key for {}: set {} (or [model] api_key_env to the variable that holds it), or \
         point sandpiper at a local server with SANDPIPER_MODEL_BASE_URL (e.g. \
         http://127.0.0.1:11434/v1) and SANDPIPER_MODEL",
        model.effective_base_url(),
        model.effective_api_key_env()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_table_lists_every_tool() {
        let table = tools_table(&ToolRegistry::builtin().unwrap());
        let lines: Vec<&str> = table.lines().collect();
        let cut = |l: &str| l.trim_end().to_owned();
        assert_eq!(
            cut(lines[0]),
            "name           auto-approve  agent  task_agent  primary_key  asks anyway for"
        );
        assert_eq!(
            cut(lines[1]),
            "bash           no            no     yes         command      -"
        );
        assert_eq!(
            cut(lines[2]),
            "read_file      yes           yes    yes         path         reads outside the \
             workstream's directory"
        );
        assert_eq!(
            cut(lines[8]),
            "web_fetch      no            yes    yes         url          -"
        );
        assert_eq!(
            cut(lines[10]),
            "task           no            no     no          prompt       -"
        );
        assert_eq!(
            cut(lines[11]),
            "plan           no            no     no          prompt       -"
        );
        assert_eq!(
            cut(lines[12]),
            "memory         yes           no     no          name         saves and deletes at \
             global scope (and deletes with no scope)"
        );
        assert_eq!(
            cut(lines[13]),
            "recall         yes           no     no          query        -"
        );
        assert_eq!(
            cut(lines[14]),
            "notify         yes           yes    yes         message      -"
        );
        assert_eq!(
            cut(lines[15]),
            "read_resource  no            yes    yes         uri          -"
        );
        assert_eq!(
            cut(lines[17]),
            "watch          yes           no     no          name         create (its command runs \
             unattended, like bash); cancel, unless the thread's owner asked"
        );
        assert_eq!(lines[18], "");
        assert!(lines[19].contains("always-allow grant"), "{table}");
        assert_eq!(lines.len(), 20);
    }

    #[tokio::test]
    async fn mcp_output_without_servers() {
        let mcp = sandpiper_agent::mcp::McpManager::empty();
        assert_eq!(
            mcp_list(&mcp),
            "no MCP servers configured ([mcp.servers.NAME] or --mcp-config FILE)\n"
        );
        let report = sandpiper_agent::mcp::RefreshReport {
            server: "gh".into(),
            added: vec!["mcp__gh__a".into()],
            removed: vec![],
            error: None,
        };
        assert_eq!(
            mcp_refresh(&[report]),
            "gh: added [mcp__gh__a], removed []\n"
        );
        assert_eq!(mcp_refresh(&[]), "no MCP servers configured\n");
        assert_eq!(
            mcp_refresh_cli(&[]),
            format!("no MCP servers configured\n{MCP_REFRESH_SCOPE}")
        );
    }

    #[test]
    fn config_report_redacts_the_key() {
        let mut c = Config::for_test();
        c.model.api_key = Some(sandpiper_agent::config::Secret::new("sk-secret-123"));
        let mut channels = sandpiper_channels::config::ChannelsConfig::default();
        channels.discord.token = Some(sandpiper_agent::config::Secret::new("discord-secret"));
        let r = config_report(&c, &channels, &ConfigSource::Defaults);
        assert!(!r.contains("sk-secret-123"), "{r}");
        assert!(!r.contains("discord-secret"), "{r}");
        assert!(r.contains("[discord]") && r.contains("[slack]"), "{r}");
        assert!(r.contains("set (from $OPENAI_API_KEY)"));
    }
}
