//! The Messages request body: the history converted to alternating user/assistant messages
//! of content blocks, borrowing the history's text.
//!
//! Anthropic caches a prompt only up to the blocks marked `cache_control` (at most four per
//! request), reading what it cached before from the longest marked prefix it has. The prefix
//! is tools, then system, then messages, so three marks serve a conversation: the last tool
//! (the tools alone, when only the system message changed), the system block (tools and
//! system), and the last block of the last message. Since every call resends its predecessor
//! unchanged and only appends (the turn's request is built that way), that last mark is where
//! the next call finds its cache.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::model::{ChatRequest, ImagePart, Message, Role, ToolCall, ToolSchema};

/// `POST /v1/messages` body.
#[derive(Debug, Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Marked<SystemBlock<'a>>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Marked<WireTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    stream: bool,
}

/// A block, tool or system block, marked as the end of a prefix Anthropic should cache.
#[derive(Debug, Serialize)]
struct Marked<T> {
    #[serde(flatten)]
    item: T,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

impl<T> Marked<T> {
    fn plain(item: T) -> Self {
        Self {
            item,
            cache_control: None,
        }
    }

    fn cached(item: T) -> Self {
        Self {
            item,
            cache_control: Some(CacheControl::EPHEMERAL),
        }
    }
}

/// `{"type": "ephemeral"}`: Anthropic's default cache lifetime (five minutes, renewed by
/// every read).
#[derive(Debug, Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl CacheControl {
    const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };
}

/// The system message as a text block, the form that can carry a cache mark.
#[derive(Debug, Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Marked<Block<'a>>>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        content: Vec<Block<'a>>,
    },
}

#[derive(Debug, Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum WireTool<'a> {
    Function {
        name: &'a str,
        description: &'a str,
        input_schema: &'a Value,
        /// Kept out of the context until the server-side tool search finds it.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        defer_loading: bool,
    },
    /// A tool Anthropic runs itself (here: the BM25 tool search).
    Server {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'static str,
    },
    /// Anthropic's own web search, in place of the `web_search` function tool.
    WebSearch {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'static str,
        max_uses: u32,
    },
}

/// Anthropic's server-side BM25 search over tools sent with `defer_loading`.
const TOOL_SEARCH_SERVER_TOOL: WireTool<'static> = WireTool::Server {
    kind: "tool_search_tool_bm25_20251119",
    name: "tool_search_tool_bm25",
};

/// Anthropic's server-side web search; replaces the `web_search` function tool when the
/// model searches natively (results come back as citations on the answer's text).
const WEB_SEARCH_SERVER_TOOL: WireTool<'static> = WireTool::WebSearch {
    kind: "web_search_20250305",
    name: "web_search",
    max_uses: 5,
};

/// The name of the function tool that native web search replaces.
const WEB_SEARCH_TOOL: &str = "web_search";

/// Builds the request body for `request`; with `native_web_search` the `web_search` function
/// tool becomes Anthropic's server-side search.
pub(super) fn request_body<'a>(
    model: &'a str,
    max_tokens: u32,
    temperature: Option<f32>,
    native_web_search: bool,
    request: &ChatRequest<'a>,
) -> Body<'a> {
    let mut messages = messages(request.messages);
    if let Some(last) = messages
        .last_mut()
        .and_then(|message| message.content.last_mut())
    {
        last.cache_control = Some(CacheControl::EPHEMERAL);
    }
    let mut tools: Vec<Marked<WireTool<'a>>> = tools(request.tools, native_web_search)
        .into_iter()
        .map(Marked::plain)
        .collect();
    // A server tool or a deferred one carries no mark: the last tool always in the prompt does.
    if let Some(last) = tools.iter_mut().rev().find(|t| {
        matches!(
            t.item,
            WireTool::Function {
                defer_loading: false,
                ..
            }
        )
    }) {
        last.cache_control = Some(CacheControl::EPHEMERAL);
    }
    let system = match request.system {
        "" => Vec::new(),
        text => vec![Marked::cached(SystemBlock { kind: "text", text })],
    };
    Body {
        model,
        max_tokens,
        system,
        messages,
        tools,
        // Through the shortest decimal form, so that 0.2f32 is sent as 0.2.
        temperature: temperature.and_then(|t| t.to_string().parse().ok()),
        stream: true,
    }
}

/// The function tools, plus the server-side search tool when any of them is deferred;
/// `web_search` becomes the server-side web search with `native_web_search`.
fn tools(schemas: &[ToolSchema], native_web_search: bool) -> Vec<WireTool<'_>> {
    let mut out: Vec<WireTool<'_>> = schemas
        .iter()
        .map(
            |schema| match native_web_search && schema.name == WEB_SEARCH_TOOL {
                true => WEB_SEARCH_SERVER_TOOL,
                false => WireTool::Function {
                    name: &schema.name,
                    description: &schema.description,
                    input_schema: &schema.parameters,
                    defer_loading: schema.defer_loading,
                },
            },
        )
        .collect();
    if schemas.iter().any(|s| s.defer_loading) {
        out.push(TOOL_SEARCH_SERVER_TOOL);
    }
    out
}

/// Converts the history. Tool results travel in user messages; adjacent messages of one role
/// are merged (the API requires alternation) with tool results ahead of other blocks; blank
/// text blocks and messages left without blocks are dropped.
fn messages(history: &[Message]) -> Vec<WireMessage<'_>> {
    let mut out: Vec<WireMessage<'_>> = Vec::with_capacity(history.len());
    for message in history {
        let (role, blocks) = match message.role {
            Role::User => {
                let mut blocks = text_block(&message.content);
                blocks.extend(message.images.iter().map(image_block));
                ("user", blocks)
            }
            Role::Assistant => {
                let mut blocks = text_block(&message.content);
                blocks.extend(message.tool_calls.iter().map(tool_use_block));
                ("assistant", blocks)
            }
            Role::Tool => {
                let mut content = text_block(&message.content);
                content.extend(message.images.iter().map(image_block));
                let block = Block::ToolResult {
                    tool_use_id: message.tool_call_id.as_deref().unwrap_or_default(),
                    content,
                };
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        let blocks: Vec<Marked<Block<'_>>> = blocks.into_iter().map(Marked::plain).collect();
        match out.last_mut() {
            Some(last) if last.role == role => merge(&mut last.content, blocks),
            None if role == "assistant" => {
                // History cut inside a turn starts with the assistant; the API wants a user
                // message first.
                out.push(WireMessage {
                    role: "user",
                    content: vec![Marked::plain(Block::Text { text: CONTINUED })],
                });
                out.push(WireMessage {
                    role,
                    content: blocks,
                });
            }
            _ => out.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    out
}

/// What opens a conversation that a compaction cut inside a turn.
const CONTINUED: &str = "(continuing an earlier conversation)";

/// Appends `blocks`, keeping tool results ahead of the other blocks.
fn merge<'a>(content: &mut Vec<Marked<Block<'a>>>, blocks: Vec<Marked<Block<'a>>>) {
    for block in blocks {
        if matches!(block.item, Block::ToolResult { .. }) {
            let pos = content
                .iter()
                .position(|b| !matches!(b.item, Block::ToolResult { .. }))
                .unwrap_or(content.len());
            content.insert(pos, block);
        } else {
            content.push(block);
        }
    }
}

fn text_block(text: &str) -> Vec<Block<'_>> {
    if text.trim().is_empty() {
        Vec::new()
    } else {
        vec![Block::Text { text }]
    }
}

fn image_block(image: &ImagePart) -> Block<'_> {
    Block::Image {
        source: ImageSource {
            kind: "base64",
            media_type: &image.media_type,
            data: &image.data,
        },
    }
}

/// A `tool_use` block; arguments that are not a JSON object are sent as `{}`.
fn tool_use_block(call: &ToolCall) -> Block<'_> {
    let input = match serde_json::from_str::<Value>(&call.arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    };
    Block::ToolUse {
        id: &call.id,
        name: &call.name,
        input,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn convert(messages: &[Message]) -> Value {
        serde_json::to_value(super::messages(messages)).expect("serializes")
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn the_last_tool_the_system_and_the_last_block_are_marked_for_the_cache() {
        let tool = |name: &str, defer_loading| ToolSchema {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object"}).into(),
            defer_loading,
        };
        let tools = [tool("bash", false), tool("mcp__jira__create_ticket", true)];
        let mut answer = Message::assistant("Looking.");
        answer.tool_calls = vec![call("t1", "bash", "{}")];
        let history = [
            Message::user("first"),
            answer,
            Message::tool_result("t1", "bash", "ok"),
            Message::user("second"),
        ];
        let request = ChatRequest {
            system: "",
            messages: &history,
            tools: &tools,
            max_tokens: None,
            cache_key: None,
        };
        let body =
            serde_json::to_value(request_body("m", 10, None, false, &request)).expect("serializes");
        let marked = json!({"type": "ephemeral"});
        // No system message, no system block to mark.
        assert_eq!(body.get("system"), None);
        // The last tool always in the prompt carries the mark; a deferred tool and the server
        // search tool after it do not.
        assert_eq!(body["tools"][0]["cache_control"], marked);
        assert_eq!(body["tools"][1].get("cache_control"), None);
        assert_eq!(body["tools"][2].get("cache_control"), None);
        let last = &body["messages"][2]["content"];
        assert_eq!(last[0].get("cache_control"), None);
        assert_eq!(
            last[1],
            json!({"type": "text", "text": "second", "cache_control": marked})
        );
        let marks = body.to_string().matches("cache_control").count();
        assert_eq!(marks, 2);
    }

    #[test]
    fn deferred_tools_bring_the_server_search_tool() {
        let tool = |name: &str, defer_loading| ToolSchema {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}).into(),
            defer_loading,
        };
        let plain = [tool("bash", false)];
        assert_eq!(
            serde_json::to_value(super::tools(&plain, false)).expect("serializes"),
            json!([{"name": "bash", "description": "bash things", "input_schema": {"type": "object"}}])
        );
        let deferred = [tool("bash", false), tool("mcp__jira__create_ticket", true)];
        assert_eq!(
            serde_json::to_value(super::tools(&deferred, false)).expect("serializes"),
            json!([
                {"name": "bash", "description": "bash things", "input_schema": {"type": "object"}},
                {
                    "name": "mcp__jira__create_ticket",
                    "description": "mcp__jira__create_ticket things",
                    "input_schema": {"type": "object"},
                    "defer_loading": true
                },
                {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
            ])
        );
    }

    #[test]
    fn native_web_search_replaces_the_function_tool() {
        let tool = |name: &str| ToolSchema {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}).into(),
            defer_loading: false,
        };
        let schemas = [tool("bash"), tool("web_search")];
        assert_eq!(
            serde_json::to_value(super::tools(&schemas, true)).expect("serializes"),
            json!([
                {"name": "bash", "description": "bash things", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
            ])
        );
        let tavily = serde_json::to_value(super::tools(&schemas, false)).expect("serializes");
        assert_eq!(tavily[1]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn invalid_arguments_become_an_empty_object_and_blank_text_is_skipped() {
        let mut a = Message::assistant("  ");
        a.tool_calls = vec![call("t1", "bash", "{not json"), call("t2", "bash", "[1]")];
        assert_eq!(
            convert(&[Message::user("go"), a]),
            json!([
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {}},
                    {"type": "tool_use", "id": "t2", "name": "bash", "input": {}}
                ]}
            ])
        );
    }

    #[test]
    fn same_role_messages_merge_with_tool_results_first() {
        let mut a = Message::assistant("Looking.");
        a.tool_calls = vec![call("t1", "read_file", r#"{"path":"a.png"}"#)];
        let mut r = Message::tool_result("t1", "read_file", "");
        r.images = vec![ImagePart {
            media_type: "image/png".into(),
            data: "AAAA".into(),
        }];
        let history = [
            Message::user("first"),
            Message::user(""),
            Message::user("second"),
            a,
            Message::assistant("More."),
            Message::user("interjection"),
            r,
        ];
        assert_eq!(
            convert(&history),
            json!([
                {"role": "user", "content": [
                    {"type": "text", "text": "first"},
                    {"type": "text", "text": "second"}
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.png"}},
                    {"type": "text", "text": "More."}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
                    ]},
                    {"type": "text", "text": "interjection"}
                ]}
            ])
        );
    }
}
