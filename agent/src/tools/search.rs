//! The `search` tool (stub).

use serde_json::Value;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `search` tool.
#[derive(Debug, Default)]
pub struct Search;

#[async_trait::async_trait]
impl Tool for Search {
    fn name(&self) -> &'static str {
        "search"
    }

    fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<Prepared, ToolError> {
        Ok(Prepared {
            header: "search".into(),
            preview: String::new(),
            needs_approval: true,
            args,
        })
    }

    async fn execute(
        &self,
        _prepared: &Prepared,
        _ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        Err(ToolError::model("not implemented"))
    }
}
