//! The `read_resource` tool: reads a resource (listed in the system message's
//! `<mcp-resources>` block) from its MCP server.

use serde::Deserialize;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// The `read_resource` tool.
#[derive(Debug, Default)]
pub(super) struct ReadResource;

/// The arguments of `tools/read_resource.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    uri: String,
}

/// The resource to read: the `uri`, trimmed.
fn uri(args: &Args) -> Result<String, ToolError> {
    Some(args.uri.trim())
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ToolError::model("`uri` is required: one of the URIs in <mcp-resources>"))
}

#[async_trait::async_trait]
impl Tool for ReadResource {
    type Args = Args;
    type Call = String;

    fn name(&self) -> &'static str {
        "read_resource"
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, String), ToolError> {
        let uri = uri(&args)?;
        let prepared = Prepared {
            header: format!("read_resource: {uri}"),
            preview: String::new(),
            ask: false,
        };
        Ok((prepared, uri))
    }

    async fn execute(
        &self,
        uri: &String,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let mcp = ctx.mcp()?;
        let out = mcp
            .read_resource(uri)
            .await
            .map_err(|e| ToolError::model(e.to_string()))?;
        Ok(ToolOutput {
            text: out.text,
            images: out.images,
            is_error: out.is_error,
        })
    }
}
