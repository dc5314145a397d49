//! MCP tools in the pipeline: an adapter that lets a tool discovered on an MCP server go
//! through the same prepare → approve → execute path as a built-in.

use std::sync::Arc;

use serde_json::Value;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::mcp::{McpManager, McpTool};

/// One MCP tool, callable like a built-in.
pub struct McpCall {
    manager: Arc<McpManager>,
    tool: McpTool,
    auto_approve: bool,
}

impl McpCall {
    /// Wraps `tool`; `auto_approve` comes from the server's `auto_approve` list.
    pub fn new(manager: Arc<McpManager>, tool: McpTool, auto_approve: bool) -> Self {
        Self {
            manager,
            tool,
            auto_approve,
        }
    }

    /// The tool's argument schema.
    pub fn schema(&self) -> &Value {
        &self.tool.input_schema
    }
}

#[async_trait::async_trait]
impl Tool for McpCall {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<Prepared, ToolError> {
        let preview = serde_json::to_string_pretty(&args).unwrap_or_default();
        Ok(Prepared {
            header: format!("{} (MCP server {})", self.tool.full_name, self.tool.server),
            preview,
            needs_approval: !self.auto_approve,
            args,
        })
    }

    async fn execute(
        &self,
        prepared: &Prepared,
        _ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = match &prepared.args {
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
