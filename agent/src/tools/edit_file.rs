//! The `edit_file` tool (stub).

use serde_json::Value;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `edit_file` tool.
#[derive(Debug, Default)]
pub struct EditFile;

#[async_trait::async_trait]
impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<Prepared, ToolError> {
        Ok(Prepared {
            header: "edit_file".into(),
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
