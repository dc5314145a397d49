//! The `use_prompt` tool: expands a prompt (listed in the system message's `<mcp-prompts>`
//! block) on its MCP server.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `use_prompt` tool.
#[derive(Debug, Default)]
pub(super) struct UsePrompt;

/// The arguments of `tools/use_prompt.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    name: String,
    arguments: Option<Map<String, Value>>,
}

/// A checked call.
#[derive(Debug)]
pub(super) struct Request {
    /// `server/prompt` as the manager expects it.
    target: String,
    shown: String,
    arguments: BTreeMap<String, String>,
}

fn parse(args: &Args) -> Result<Request, ToolError> {
    let name = Some(args.name.trim())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ToolError::model("`name` is required: one of the prompts in <mcp-prompts>")
        })?;
    // Prompts are listed as mcp__{server}__{prompt}; bare names are looked up on every server.
    let target = match name.strip_prefix("mcp__").and_then(|r| r.split_once("__")) {
        Some((server, prompt)) => format!("{server}/{prompt}"),
        None => name.to_owned(),
    };
    let mut arguments = BTreeMap::new();
    if let Some(map) = &args.arguments {
        for (k, v) in map {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            arguments.insert(k.clone(), text);
        }
    }
    Ok(Request {
        target,
        shown: name.to_owned(),
        arguments,
    })
}

#[async_trait::async_trait]
impl Tool for UsePrompt {
    type Args = Args;
    type Call = Request;

    fn name(&self) -> &'static str {
        "use_prompt"
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, Request), ToolError> {
        let parsed = parse(&args)?;
        let preview = parsed
            .arguments
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect::<Vec<_>>()
            .join("\n");
        let prepared = Prepared {
            header: format!("use_prompt: {}", parsed.shown),
            preview,
            ask: false,
        };
        Ok((prepared, parsed))
    }

    async fn execute(
        &self,
        parsed: &Request,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let text = ctx
            .mcp()?
            .get_prompt(&parsed.target, parsed.arguments.clone())
            .await
            .map_err(|e| ToolError::model(e.to_string()))?;
        Ok(ToolOutput::text(text))
    }
}
