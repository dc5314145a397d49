//! The chat completions request body, borrowing the history (nothing large is copied).

use std::borrow::Cow;

use serde::{Serialize, Serializer};

use crate::config::OutputLimitField;
use crate::model::{CacheKey, ChatRequest, ImagePart, Message, Role, ToolCall, ToolSchema};

/// `POST /chat/completions` body.
#[derive(Debug, Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    /// The output limit, under the name most compatible servers take.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    /// The output limit, under the name OpenAI's own API takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    /// OpenAI search models search on their own; `{}` asks for the default search.
    #[serde(skip_serializing_if = "Option::is_none")]
    web_search_options: Option<serde_json::Map<String, serde_json::Value>>,
    stream: bool,
    stream_options: StreamOptions,
    /// Routes one workstream's requests to one cache (OpenAI); other servers ignore it.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    /// llama.cpp: keep the prompt in the slot for the next request (its default, said).
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_prompt: Option<bool>,
    /// llama.cpp with several slots: the slot this request's prompt lives in ([`super::slots`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    id_slot: Option<u32>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: Content<'a>,
    },
    Assistant {
        /// `null` when the message only calls tools.
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: DataUrl<'a> },
}

/// `{"url": "data:<media type>;base64,<data>"}`, written without building the string first.
#[derive(Debug)]
struct DataUrl<'a>(&'a ImagePart);

impl Serialize for DataUrl<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Url<'b>(&'b ImagePart);
        impl Serialize for Url<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&format_args!(
                    "data:{};base64,{}",
                    self.0.media_type, self.0.data
                ))
            }
        }
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("url", &Url(self.0))?;
        map.end()
    }
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
    /// Hosted tool search: the tool stays out of the context until the API's search finds it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    defer_loading: bool,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

fn tool(schema: &ToolSchema) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &schema.name,
            description: &schema.description,
            parameters: &schema.parameters,
        },
        defer_loading: schema.defer_loading,
    }
}

/// Builds the request body for `request`. With `native_web_search` (OpenAI search models)
/// the `web_search` function tool is replaced by `web_search_options`. `llama_slots` is the
/// slot count a llama.cpp server's `/props` said, `None` for any other server: only llama.cpp
/// is sent its own fields.
pub(super) fn request_body<'a>(
    model: &'a str,
    temperature: Option<f32>,
    native_web_search: bool,
    limit_field: OutputLimitField,
    request: &ChatRequest<'a>,
    llama_slots: Option<u32>,
) -> Body<'a> {
    let searches = native_web_search && request.tools.iter().any(|t| t.name == "web_search");
    Body {
        model,
        messages: messages(request.system, request.messages),
        tools: request
            .tools
            .iter()
            .filter(|t| !(searches && t.name == "web_search"))
            .map(tool)
            .collect(),
        // Through the shortest decimal form, so that 0.2f32 is sent as 0.2.
        temperature: temperature.and_then(|t| t.to_string().parse().ok()),
        max_tokens: request
            .max_tokens
            .filter(|_| limit_field == OutputLimitField::MaxTokens),
        max_completion_tokens: request
            .max_tokens
            .filter(|_| limit_field == OutputLimitField::MaxCompletionTokens),
        web_search_options: searches.then(serde_json::Map::new),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        prompt_cache_key: match request.cache_key {
            Some(CacheKey::Conversation(key)) => Some(key),
            Some(CacheKey::Aside(_)) | None => None,
        },
        cache_prompt: llama_slots.map(|_| true),
        id_slot: llama_slots
            .zip(request.cache_key)
            .and_then(|(slots, key)| super::slots::slot_for(key, slots)),
    }
}

/// The system message, then the history. Tool messages carry text only, so the images of a
/// run of tool results follow the run as one user message (a user message between the tool
/// results of one assistant message would be refused).
fn messages<'a>(system: &'a str, history: &'a [Message]) -> Vec<WireMessage<'a>> {
    let mut out = Vec::with_capacity(history.len() + 2);
    if !system.is_empty() {
        out.push(WireMessage::System { content: system });
    }
    let mut pending_images: Vec<Part<'a>> = Vec::new();
    for message in history {
        if message.role != Role::Tool && !pending_images.is_empty() {
            out.push(images_message(&mut pending_images));
        }
        match message.role {
            Role::User => out.push(WireMessage::User {
                content: user_content(&message.content, &message.images),
            }),
            Role::Assistant => out.push(assistant(message)),
            Role::Tool => {
                let id = message.tool_call_id.as_deref().unwrap_or_default();
                out.push(WireMessage::Tool {
                    tool_call_id: id,
                    content: &message.content,
                });
                if !message.images.is_empty() {
                    let tool = message.name.as_deref().unwrap_or("tool");
                    pending_images.push(Part::Text {
                        text: Cow::Owned(format!("Images returned by {tool} (call {id}):")),
                    });
                    pending_images.extend(message.images.iter().map(image_part));
                }
            }
        }
    }
    if !pending_images.is_empty() {
        out.push(images_message(&mut pending_images));
    }
    out
}

fn images_message<'a>(parts: &mut Vec<Part<'a>>) -> WireMessage<'a> {
    WireMessage::User {
        content: Content::Parts(std::mem::take(parts)),
    }
}

fn user_content<'a>(text: &'a str, images: &'a [ImagePart]) -> Content<'a> {
    if images.is_empty() {
        return Content::Text(text);
    }
    let mut parts = Vec::with_capacity(images.len() + 1);
    if !text.is_empty() {
        parts.push(Part::Text {
            text: Cow::Borrowed(text),
        });
    }
    parts.extend(images.iter().map(image_part));
    Content::Parts(parts)
}

fn image_part(image: &ImagePart) -> Part<'_> {
    Part::ImageUrl {
        image_url: DataUrl(image),
    }
}

fn assistant(message: &Message) -> WireMessage<'_> {
    let tool_calls: Vec<WireToolCall<'_>> = message.tool_calls.iter().map(tool_call).collect();
    let content = if message.content.is_empty() && !tool_calls.is_empty() {
        None
    } else {
        Some(message.content.as_str())
    };
    WireMessage::Assistant {
        content,
        tool_calls,
    }
}

fn tool_call(call: &ToolCall) -> WireToolCall<'_> {
    WireToolCall {
        id: &call.id,
        kind: "function",
        function: WireFunctionCall {
            name: &call.name,
            // Servers that render a chat template parse the arguments (llama.cpp refuses the
            // whole request otherwise): what is sent back is always a JSON object.
            arguments: crate::tools::wire_arguments(&call.arguments),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn body_json(
        system: &str,
        messages: &[Message],
        tools: &[ToolSchema],
        t: Option<f32>,
    ) -> serde_json::Value {
        let request = ChatRequest {
            system,
            messages,
            tools,
            max_tokens: None,
            cache_key: None,
        };
        serde_json::to_value(request_body(
            "m",
            t,
            false,
            OutputLimitField::MaxTokens,
            &request,
            None,
        ))
        .expect("serializes")
    }

    #[test]
    fn search_models_get_web_search_options_instead_of_the_tool() {
        let tool = |name: &str| ToolSchema {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}).into(),
            defer_loading: false,
        };
        let tools = [tool("bash"), tool("web_search")];
        let messages = [Message::user("news?")];
        let request = ChatRequest {
            system: "",
            messages: &messages,
            tools: &tools,
            max_tokens: None,
            cache_key: None,
        };
        let native = serde_json::to_value(request_body(
            "m",
            None,
            true,
            OutputLimitField::MaxTokens,
            &request,
            None,
        ))
        .expect("json");
        assert_eq!(native["web_search_options"], json!({}));
        assert_eq!(native["tools"].as_array().map(Vec::len), Some(1));
        assert_eq!(native["tools"][0]["function"]["name"], "bash");
        let tavily = serde_json::to_value(request_body(
            "m",
            None,
            false,
            OutputLimitField::MaxTokens,
            &request,
            None,
        ))
        .expect("json");
        assert_eq!(tavily.get("web_search_options"), None);
        assert_eq!(tavily["tools"].as_array().map(Vec::len), Some(2));
    }

    fn png(data: &str) -> ImagePart {
        ImagePart {
            media_type: "image/png".into(),
            data: data.into(),
        }
    }

    #[test]
    fn plain_text_without_tools_or_temperature() {
        let body = body_json("", &[Message::user("hi")], &[], None);
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn deferred_tools_carry_defer_loading() {
        let tool = |name: &str, defer_loading| ToolSchema {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}).into(),
            defer_loading,
        };
        let tools = [tool("bash", false), tool("mcp__github__create_issue", true)];
        let body = body_json("", &[Message::user("hi")], &tools, None);
        assert_eq!(
            body["tools"],
            json!([
                {"type": "function", "function": {
                    "name": "bash", "description": "bash things", "parameters": {"type": "object"}
                }},
                {"type": "function", "function": {
                    "name": "mcp__github__create_issue",
                    "description": "mcp__github__create_issue things",
                    "parameters": {"type": "object"}
                }, "defer_loading": true}
            ])
        );
    }

    #[test]
    fn images_on_user_messages_are_content_parts() {
        let mut m = Message::user("what is this?");
        m.images = vec![png("AAAA")];
        let mut only_image = Message::user("");
        only_image.images = vec![png("BBBB")];
        let body = body_json("sys", &[m, only_image], &[], Some(0.2));
        assert_eq!(body["temperature"], json!(0.2));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                ]},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBBB"}}
                ]}
            ])
        );
    }

    #[test]
    fn tool_result_images_follow_the_run_of_tool_messages() {
        let mut call = Message::assistant("");
        call.tool_calls = vec![
            ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a.png\"}".into(),
            },
            ToolCall {
                id: "c2".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            },
        ];
        let mut r1 = Message::tool_result("c1", "read_file", "a.png (PNG, 4 bytes)");
        r1.images = vec![png("AAAA")];
        let r2 = Message::tool_result("c2", "bash", "ok");
        let body = body_json("", &[call, r1, r2, Message::assistant("done")], &[], None);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.png\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.png (PNG, 4 bytes)"},
                {"role": "tool", "tool_call_id": "c2", "content": "ok"},
                {"role": "user", "content": [
                    {"type": "text", "text": "Images returned by read_file (call c1):"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                ]},
                {"role": "assistant", "content": "done"}
            ])
        );
    }

    #[test]
    fn the_output_limit_goes_under_the_configured_name() {
        let messages = [Message::user("hi")];
        let request = ChatRequest {
            system: "",
            messages: &messages,
            tools: &[],
            max_tokens: Some(300),
            cache_key: None,
        };
        let plain = serde_json::to_value(request_body(
            "m",
            None,
            false,
            OutputLimitField::MaxTokens,
            &request,
            None,
        ))
        .expect("json");
        assert_eq!(
            (plain.get("max_tokens"), plain.get("max_completion_tokens")),
            (Some(&json!(300)), None)
        );
        let openai = serde_json::to_value(request_body(
            "m",
            None,
            false,
            OutputLimitField::MaxCompletionTokens,
            &request,
            None,
        ))
        .expect("json");
        assert_eq!(
            (
                openai.get("max_tokens"),
                openai.get("max_completion_tokens")
            ),
            (None, Some(&json!(300)))
        );
    }

    #[test]
    fn arguments_sent_back_are_always_a_json_object() {
        let mut cut = Message::assistant("");
        cut.tool_calls = vec![
            ToolCall {
                id: "a".into(),
                name: "bash".into(),
                arguments: r#"{"command": "ls -la"#.into(),
            },
            ToolCall {
                id: "b".into(),
                name: "bash".into(),
                arguments: "not json at all".into(),
            },
            ToolCall {
                id: "c".into(),
                name: "bash".into(),
                arguments: r#"{"command":"pwd"}"#.into(),
            },
        ];
        let body = body_json("", &[Message::user("go"), cut], &[], None);
        let args: Vec<&str> = body["messages"][1]["tool_calls"]
            .as_array()
            .expect("calls")
            .iter()
            .map(|c| c["function"]["arguments"].as_str().expect("a string"))
            .collect();
        assert_eq!(
            args,
            vec![r#"{"command":"ls -la"}"#, "{}", r#"{"command":"pwd"}"#]
        );
    }
}
