//! MCP content (tool results, resource contents, prompt messages) into what the model reads.

use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptResult, ReadResourceResult, ResourceContents, Role,
};

use super::McpCallOutput;
use crate::model::ImagePart;
use crate::output::truncate_output;

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

/// Bounds a result like built-in tool output: the text cut to `max_text` bytes with the
/// same note as [`truncate_output`], and each image over `max_image` decoded bytes replaced
/// by a note saying so (a server can return anything; the model and the thread cannot).
pub(crate) fn capped(mut out: McpCallOutput, max_text: usize, max_image: usize) -> McpCallOutput {
    let mut notes = Vec::new();
    out.images.retain(|image| {
        let size = decoded_len(&image.data);
        if size <= max_image {
            return true;
        }
        notes.push(format!(
            "[image {} of {size} bytes left out: larger than the {} bytes an MCP image may be]",
            image.media_type, max_image
        ));
        false
    });
    if !notes.is_empty() {
        if !out.text.is_empty() {
            out.text.push('\n');
        }
        out.text.push_str(&notes.join("\n"));
    }
    if out.text.len() > max_text {
        out.text = truncate_output(&out.text, max_text);
    }
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

/// The decoded size of base64 text, from its length (no decoding: images can be large).
fn decoded_len(b64: &str) -> usize {
    let text = b64.trim();
    let padding = text.bytes().rev().take_while(|&b| b == b'=').count().min(2);
    (text.len() / 4 * 3 + (text.len() % 4) * 3 / 4).saturating_sub(padding)
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
    use base64::Engine;

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
    fn oversized_text_is_cut_with_the_note_and_big_images_become_notes() {
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 3000]);
        let out = McpCallOutput {
            text: "x".repeat(5000),
            images: vec![
                ImagePart {
                    media_type: "image/png".into(),
                    data: "aGk=".into(),
                },
                ImagePart {
                    media_type: "image/jpeg".into(),
                    data: big,
                },
            ],
            is_error: false,
        };
        let capped = capped(out, 2000, 2048);
        assert_eq!(
            capped.images,
            vec![ImagePart {
                media_type: "image/png".into(),
                data: "aGk=".into()
            }]
        );
        assert!(capped.text.len() <= 2000 + 100, "{}", capped.text.len());
        assert!(
            capped.text.contains("bytes of output cut ("),
            "{}",
            capped.text
        );
        assert!(
            capped.text.ends_with(
                "[image image/jpeg of 3000 bytes left out: larger than the 2048 bytes an MCP \
                 image may be]"
            ),
            "{}",
            capped.text
        );
        let small = McpCallOutput {
            text: "fine".into(),
            ..McpCallOutput::default()
        };
        assert_eq!(capped_clone(&small), small);
    }

    fn capped_clone(out: &McpCallOutput) -> McpCallOutput {
        capped(out.clone(), 2000, 2048)
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
