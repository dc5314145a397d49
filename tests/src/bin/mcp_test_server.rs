//! An MCP server for end-to-end tests of sandpiper's MCP client.
//!
//! Tools: `echo(text)`, `add(a, b)`, `slow(ms)`, `fail()` (isError), `crash()` (exits),
//! `add_tool(name)` / `remove_tool(name)` (change the list and send `list_changed`),
//! and, when started with `MCP_TEST_SECURITY_TOOLS=1` in its environment (kept off otherwise
//! so the default tool count stays below the tool-search threshold): `env()` (its
//! environment, `NAME=value` lines, sorted), `big(bytes)` (that much text), `image(bytes)` (a
//! PNG-typed image of that many bytes); one
//! resource `test://greeting`, a template `test://items/{id}`, one prompt `greet(name)`.
//!
//! `mcp_test_server [--stdio]` or `mcp_test_server --http 127.0.0.1:0` (prints
//! `listening http://ADDR/mcp` as the first stdout line).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// Shared by every session (HTTP creates one handler per session).
#[derive(Clone, Default)]
struct TestServer {
    extra_tools: Arc<Mutex<BTreeSet<String>>>,
}

fn parse<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

fn tool(name: &str, description: &str, properties: Value) -> Value {
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": properties}})
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

impl TestServer {
    fn extra(&self) -> BTreeSet<String> {
        self.extra_tools
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    fn arg<'a>(args: &'a Option<serde_json::Map<String, Value>>, key: &str) -> Option<&'a Value> {
        args.as_ref().and_then(|a| a.get(key))
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_prompts()
                .enable_resources()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = vec![
            tool(
                "echo",
                "Echo the text back",
                json!({"text": {"type": "string"}}),
            ),
            tool(
                "add",
                "Add two numbers",
                json!({"a": {"type": "number"}, "b": {"type": "number"}}),
            ),
            tool(
                "slow",
                "Sleep for ms milliseconds",
                json!({"ms": {"type": "integer"}}),
            ),
            tool("fail", "Always reports an error", json!({})),
            tool("crash", "Exits the server process", json!({})),
            tool(
                "add_tool",
                "Add a tool",
                json!({"name": {"type": "string"}}),
            ),
            tool(
                "remove_tool",
                "Remove a tool",
                json!({"name": {"type": "string"}}),
            ),
        ];
        if std::env::var_os("MCP_TEST_SECURITY_TOOLS").is_some() {
            tools.extend([
                tool("env", "The server's environment", json!({})),
                tool(
                    "read_path",
                    "A file's contents as text, or the error reading it",
                    json!({"path": {"type": "string"}}),
                ),
                tool(
                    "big",
                    "Return this many bytes of text",
                    json!({"bytes": {"type": "integer"}}),
                ),
                tool(
                    "image",
                    "Return an image of this many bytes",
                    json!({"bytes": {"type": "integer"}}),
                ),
            ]);
        }
        for name in self.extra() {
            tools.push(tool(&name, "A tool added at run time", json!({})));
        }
        parse(json!({ "tools": tools }))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = &request.arguments;
        let name_arg = || {
            Self::arg(args, "name")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| ErrorData::invalid_params("`name` is required", None))
        };
        let result = match request.name.as_ref() {
            "echo" => text(
                Self::arg(args, "text")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            "add" => {
                let number = |k| Self::arg(args, k).and_then(Value::as_f64).unwrap_or(0.0);
                text((number("a") + number("b")).to_string())
            }
            "slow" => {
                let ms = Self::arg(args, "ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(1000);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text(format!("slept {ms} ms"))
            }
            "env" => {
                let mut vars: Vec<String> = std::env::vars_os()
                    .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                    .collect();
                vars.sort();
                text(vars.join("\n"))
            }
            "read_path" => {
                let path = Self::arg(args, "path")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match std::fs::read(path) {
                    Ok(bytes) => text(format!("read: {}", String::from_utf8_lossy(&bytes))),
                    Err(e) => text(format!("error: {e}")),
                }
            }
            "big" => {
                let bytes = Self::arg(args, "bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                text("x".repeat(usize::try_from(bytes).unwrap_or(0)))
            }
            "image" => {
                // Base64 of that many zero bytes, without a base64 dependency.
                let bytes = Self::arg(args, "bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let bytes = usize::try_from(bytes).unwrap_or(0);
                let mut data = "AAAA".repeat(bytes / 3);
                data.push_str(["", "AA==", "AAA="][bytes % 3]);
                CallToolResult::success(vec![ContentBlock::image(data, "image/png")])
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("this tool always fails")]),
            "crash" => std::process::exit(3),
            "add_tool" | "remove_tool" => {
                let name = name_arg()?;
                if let Ok(mut extra) = self.extra_tools.lock() {
                    if request.name == "add_tool" {
                        extra.insert(name.clone());
                    } else {
                        extra.remove(&name);
                    }
                }
                let _ = context.peer.notify_tool_list_changed().await;
                text(format!("{} {name}", request.name))
            }
            other if self.extra().contains(other) => text(format!("dynamic tool {other}")),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::Complete(result))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        parse(
            json!({"resources": [{"uri": "test://greeting", "name": "greeting",
            "description": "A friendly greeting", "mimeType": "text/plain"}]}),
        )
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        parse(
            json!({"resourceTemplates": [{"uriTemplate": "test://items/{id}", "name": "item",
            "description": "One item by id"}]}),
        )
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let text = match request.uri.as_str() {
            "test://greeting" => "Hello from the test server".to_owned(),
            uri => match uri.strip_prefix("test://items/") {
                Some(id) => format!("item {id}"),
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("no resource {uri}"),
                        None,
                    ));
                }
            },
        };
        let result: ReadResourceResult = parse(json!({"contents": [
            {"uri": request.uri, "mimeType": "text/plain", "text": text}]}))?;
        Ok(ReadResourceResponse::Complete(result))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        parse(
            json!({"prompts": [{"name": "greet", "description": "Greet someone",
            "arguments": [{"name": "name", "description": "Who", "required": true}]}]}),
        )
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "greet" {
            return Err(ErrorData::invalid_params(
                format!("no prompt `{}`", request.name),
                None,
            ));
        }
        let who = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("stranger")
            .to_owned();
        let result: GetPromptResult = parse(json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": format!("Please greet {who}.")}},
            {"role": "assistant", "content": {"type": "text", "text": format!("Hello, {who}!")}}
        ]}))?;
        Ok(GetPromptResponse::Complete(result))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let server = TestServer::default();
    match args.iter().position(|a| a == "--http") {
        Some(i) => {
            let bind = args.get(i + 1).map(String::as_str).unwrap_or("127.0.0.1:0");
            let service: StreamableHttpService<TestServer, LocalSessionManager> =
                StreamableHttpService::new(
                    move || Ok(server.clone()),
                    Default::default(),
                    StreamableHttpServerConfig::default(),
                );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind(bind).await?;
            println!("listening http://{}/mcp", listener.local_addr()?);
            axum::serve(listener, router).await?;
        }
        None => {
            let running = server.serve(rmcp::transport::stdio()).await?;
            running.waiting().await?;
        }
    }
    Ok(())
}
