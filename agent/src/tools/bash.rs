//! The `bash` tool (stub).

use serde_json::Value;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `bash` tool.
#[derive(Debug, Default)]
pub struct Bash;

#[async_trait::async_trait]
impl Tool for Bash {
    fn name(&self) -> &'static str {
        "bash"
    }

    fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<Prepared, ToolError> {
        Ok(Prepared {
            header: "bash".into(),
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
