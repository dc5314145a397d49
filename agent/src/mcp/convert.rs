//! MCP content (tool results, resource contents, prompt messages) into what the model reads.

use base64::Engine;
use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptResult, ReadResourceResult, ResourceContents, Role,
};

use super::McpCallOutput;
use crate::model::ImagePart;

/// A tool result: text parts joined, images kept, embedded resources inlined as text.
pub(crate) fn call_result(result: CallToolResult) -> McpCallOutput {
    let mut out = McpCallOutput {
        is_error: result.is_error.unwrap_or(false),
        ..McpCallOutput::default()
    };
    let mut texts = Vec::new();
    for block in result.content {
        content_block(block, &mut texts, &mut out.images);
    }
    if texts.is_empty()
        && out.images.is_empty()
        && let Some(structured) = result.structured_content
    {
        texts.push(structured.to_string());
    }
    out.text = texts.join("\n");
    out
}

/// A resource read: text as is, images as [`ImagePart`], other blobs summarized with base64.
pub(crate) fn resource_result(result: ReadResourceResult) -> McpCallOutput {
    let mut out = McpCallOutput::default();
    let mut texts = Vec::new();
    for contents in result.contents {
        resource_contents(contents, true, &mut texts, &mut out.images);
    }
    out.text = texts.join("\n");
    out
}

/// A prompt: `[role]: content` blocks joined with blank lines.
pub(crate) fn prompt_result(result: GetPromptResult) -> String {
    result
        .messages
        .into_iter()
        .map(|message| {
            let role = match message.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            let mut texts = Vec::new();
            let mut images = Vec::new();
            content_block(message.content, &mut texts, &mut images);
            for image in images {
                texts.push(format!("[image {}, base64 omitted]", image.media_type));
            }
            format!("[{role}]: {}", texts.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn content_block(block: ContentBlock, texts: &mut Vec<String>, images: &mut Vec<ImagePart>) {
    match block {
        ContentBlock::Text(t) => texts.push(t.text),
        ContentBlock::Image(i) => images.push(ImagePart {
            media_type: i.mime_type,
            data: i.data,
        }),
        ContentBlock::Audio(a) => texts.push(format!(
            "[audio {}, {} bytes, not shown]",
            a.mime_type,
            decoded_len(&a.data)
        )),
        ContentBlock::Resource(r) => resource_contents(r.resource, false, texts, images),
        ContentBlock::ResourceLink(link) => texts.push(format!("[resource: {}]", link.uri)),
        // `ContentBlock` is non-exhaustive: show the raw JSON rather than dropping data.
        #[allow(unreachable_patterns)]
        other => texts.push(serde_json::to_string(&other).unwrap_or_default()),
    }
}

fn resource_contents(
    contents: ResourceContents,
    images_as_parts: bool,
    texts: &mut Vec<String>,
    images: &mut Vec<ImagePart>,
) {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => texts.push(text),
        ResourceContents::BlobResourceContents {
            mime_type, blob, ..
        } => {
            let mime = mime_type.unwrap_or_else(|| "application/octet-stream".into());
            if images_as_parts && mime.starts_with("image/") {
                images.push(ImagePart {
                    media_type: mime,
                    data: blob,
                });
            } else {
                texts.push(format!(
                    "[binary {mime}, {} bytes, base64]\n{blob}",
                    decoded_len(&blob)
                ));
            }
        }
        other => texts.push(serde_json::to_string(&other).unwrap_or_default()),
    }
}

fn decoded_len(b64: &str) -> usize {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map(|bytes| bytes.len())
        .unwrap_or(b64.len() / 4 * 3)
}

/// Whether `uri` is one of the URIs an RFC 6570 template (`db://t/{table}/rows/{id}`)
/// describes. Simple matching: literal parts in order, each `{...}` matching one or more
/// characters (`/` only for reserved `{+x}` / `{/x}` style expressions).
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        pattern.push_str(&regex::escape(&rest[..open]));
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        let expr = &rest[open + 1..open + close];
        pattern.push_str(if expr.starts_with(['+', '#', '/']) {
            ".+"
        } else {
            "[^/]+"
        });
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::Regex::new(&pattern).is_ok_and(|re| re.is_match(uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        assert!(template_matches("test://items/{id}", "test://items/42"));
        assert!(!template_matches("test://items/{id}", "test://items/4/2"));
        assert!(template_matches(
            "db://t/{table}/rows/{id}",
            "db://t/users/rows/7"
        ));
        assert!(template_matches("file://{+path}", "file://a/b/c.txt"));
        assert!(!template_matches("test://items/{id}", "other://items/1"));
    }

    #[test]
    fn tool_result_parts() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "one"},
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "x://a", "text": "inline"}},
                {"type": "resource", "resource": {"uri": "x://b", "blob": "aGk=", "mimeType": "application/zip"}}
            ],
            "isError": true
        }))
        .expect("result");
        let out = call_result(result);
        assert_eq!(
            out,
            McpCallOutput {
                text: "one\ninline\n[binary application/zip, 2 bytes, base64]\naGk=".into(),
                images: vec![ImagePart {
                    media_type: "image/png".into(),
                    data: "aGk=".into()
                }],
                is_error: true,
            }
        );
    }

    #[test]
    fn prompt_format() {
        let result: GetPromptResult = serde_json::from_value(serde_json::json!({
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "Hi"}},
                {"role": "assistant", "content": {"type": "text", "text": "Hello"}}
            ]
        }))
        .expect("prompt");
        assert_eq!(prompt_result(result), "[user]: Hi\n\n[assistant]: Hello");
    }
}
