//! The `write_file` tool (stub).

use serde_json::Value;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `write_file` tool.
#[derive(Debug, Default)]
pub struct WriteFile;

#[async_trait::async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<Prepared, ToolError> {
        Ok(Prepared {
            header: "write_file".into(),
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
