//! MCP tools in the pipeline: an adapter that lets a tool discovered on an MCP server go
//! through the same prepare → approve → execute path as a built-in.

use std::sync::Arc;

use serde_json::Value;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::mcp::{McpCallOutput, McpManager, McpTool};

/// One MCP tool, callable like a built-in. Its arguments are free-form JSON (the server's
/// own schema), so `Args` is [`Value`]; whether a call asks is the server's `auto_approve`
/// list, applied by the pipeline like a built-in's JSON.
pub struct McpCall {
    manager: Arc<McpManager>,
    tool: McpTool,
}

impl McpCall {
    /// Wraps `tool`.
    pub fn new(manager: Arc<McpManager>, tool: McpTool) -> Self {
        Self { manager, tool }
    }

    /// The tool's argument schema.
    pub fn schema(&self) -> &Value {
        &self.tool.input_schema
    }
}

#[async_trait::async_trait]
impl Tool for McpCall {
    type Args = Value;
    type Call = Value;

    fn name(&self) -> &'static str {
        "mcp"
    }

    fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<(Prepared, Value), ToolError> {
        let preview = serde_json::to_string_pretty(&args).unwrap_or_default();
        let prepared = Prepared {
            header: format!("{} (MCP server {})", self.tool.full_name, self.tool.server),
            preview,
            ask: false,
        };
        Ok((prepared, args))
    }

    async fn execute(
        &self,
        args: &Value,
        _prepared: &Prepared,
        _ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = match args {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        let out = self
            .manager
            .call_tool(&self.tool.full_name, arguments)
            .await
            .map_err(|e| ToolError::model(e.to_string()))?;
        Ok(ToolOutput {
            text: out.text,
            images: out.images,
            is_error: out.is_error,
        })
    }
}

impl From<McpCallOutput> for ToolOutput {
    fn from(out: McpCallOutput) -> Self {
        Self {
            text: out.text,
            images: out.images,
            is_error: out.is_error,
        }
    }
}
