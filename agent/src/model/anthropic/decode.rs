//! Decoding Messages stream events into [`ModelEvent`]s.
//!
//! Tool-use blocks are keyed by their content block index. A tool-use block that streams no
//! `partial_json` at all (a call without arguments) gets arguments `{}` at its
//! `content_block_stop`. Unknown events and block types (thinking, server tools such as
//! `server_tool_use` and `tool_search_tool_result` of the native tool search, which Anthropic
//! runs itself) are ignored, including the input deltas of those blocks.
//!
//! Native web search (`web_search_20250305`) also runs at Anthropic: its `server_tool_use`
//! and `web_search_tool_result` blocks are ignored like the tool search's, and the citations
//! it attaches to the answer's text blocks (`citations_delta`) are kept in the answer: when a
//! cited text block ends, its sources follow it as Markdown links, ` ([title](url))`.

use serde::Deserialize;
use serde_json::Value;

use crate::model::sse::{self, SsePayload};
use crate::model::{ModelError, ModelEvent, Usage};

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: MessageStart,
    },
    ContentBlockStart {
        index: usize,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaBody>,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        #[serde(default)]
        partial_json: String,
    },
    CitationsDelta {
        citation: Citation,
    },
    #[serde(other)]
    Other,
}

/// One source of a cited text block (`web_search_result_location` and the like).
#[derive(Debug, Deserialize)]
struct Citation {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Debug, Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl WireUsage {
    /// All prompt tokens (uncached, written to and read from the cache), when reported.
    fn input(&self) -> Option<u64> {
        let parts = [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ];
        parts
            .iter()
            .any(Option::is_some)
            .then(|| parts.iter().flatten().sum())
    }
}

/// A tool-use block being streamed.
#[derive(Debug)]
struct OpenToolUse {
    index: usize,
    got_arguments: bool,
}

/// The decoder for one Messages stream.
#[derive(Debug, Default)]
pub(super) struct EventDecoder {
    usage: Usage,
    stop_reason: Option<String>,
    tool_uses: Vec<OpenToolUse>,
    /// Sources of text blocks still streaming: (block index, [(title, url)]).
    citations: Vec<(usize, Vec<(String, String)>)>,
}

impl EventDecoder {
    fn event(&mut self, event: Event, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        match event {
            Event::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.update_usage(&usage);
                    out.push(ModelEvent::Usage(self.usage));
                }
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                BlockStart::Text { text } if !text.is_empty() => {
                    out.push(ModelEvent::TextDelta(text));
                }
                BlockStart::ToolUse { id, name } => {
                    self.tool_uses.push(OpenToolUse {
                        index,
                        got_arguments: false,
                    });
                    out.push(ModelEvent::ToolCallDelta {
                        index,
                        id: Some(id),
                        name: Some(name),
                        arguments: String::new(),
                    });
                }
                BlockStart::Text { .. } | BlockStart::Other => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } if !text.is_empty() => {
                    out.push(ModelEvent::TextDelta(text));
                }
                BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    // Only client tool calls: a server tool's input (`server_tool_use`, run by
                    // Anthropic) streams the same deltas and must not become a call.
                    if let Some(open) = self.tool_uses.iter_mut().find(|t| t.index == index) {
                        open.got_arguments = true;
                        out.push(ModelEvent::ToolCallDelta {
                            index,
                            id: None,
                            name: None,
                            arguments: partial_json,
                        });
                    }
                }
                BlockDelta::CitationsDelta { citation } => self.cite(index, citation),
                BlockDelta::TextDelta { .. }
                | BlockDelta::InputJsonDelta { .. }
                | BlockDelta::Other => {}
            },
            Event::ContentBlockStop { index } => {
                if let Some(pos) = self.citations.iter().position(|(i, _)| *i == index) {
                    let (_, sources) = self.citations.swap_remove(pos);
                    out.push(ModelEvent::TextDelta(sources_text(&sources)));
                }
                if let Some(pos) = self.tool_uses.iter().position(|t| t.index == index) {
                    let open = self.tool_uses.swap_remove(pos);
                    if !open.got_arguments {
                        out.push(ModelEvent::ToolCallDelta {
                            index,
                            id: None,
                            name: None,
                            arguments: "{}".into(),
                        });
                    }
                }
            }
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.update_usage(&usage);
                    out.push(ModelEvent::Usage(self.usage));
                }
            }
            Event::MessageStop => out.push(ModelEvent::Done {
                finish_reason: self.stop_reason.take(),
            }),
            Event::Error { error } => return Err(ModelError::Provider(sse::error_message(&error))),
            Event::Ping | Event::Other => {}
        }
        Ok(())
    }

    /// Records a source of text block `index` (once per URL).
    fn cite(&mut self, index: usize, citation: Citation) {
        let Some(url) = citation.url.filter(|u| !u.is_empty()) else {
            return;
        };
        let title = citation.title.unwrap_or_default();
        let pos = match self.citations.iter().position(|(i, _)| *i == index) {
            Some(pos) => pos,
            None => {
                self.citations.push((index, Vec::new()));
                self.citations.len() - 1
            }
        };
        let sources = &mut self.citations[pos].1;
        if !sources.iter().any(|(_, u)| *u == url) {
            sources.push((title, url));
        }
    }

    fn update_usage(&mut self, usage: &WireUsage) {
        if let Some(input) = usage.input() {
            self.usage.input_tokens = input;
        }
        if let Some(read) = usage.cache_read_input_tokens {
            self.usage.cached_tokens = read;
        }
        if let Some(written) = usage.cache_creation_input_tokens {
            self.usage.cache_write_tokens = written;
        }
        if let Some(output) = usage.output_tokens {
            self.usage.output_tokens = output;
        }
    }
}

/// ` ([title](url); [title](url))`, the sources appended to a cited text block.
fn sources_text(sources: &[(String, String)]) -> String {
    let links: Vec<String> = sources
        .iter()
        .map(|(title, url)| {
            let title = match title.trim() {
                "" => url.as_str(),
                t => t,
            };
            format!("[{}]({url})", title.replace(['[', ']'], ""))
        })
        .collect();
    format!(" ({})", links.join("; "))
}

impl sse::Decoder for EventDecoder {
    fn payload(
        &mut self,
        payload: SsePayload,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError> {
        let SsePayload::Json { event, mut data } = payload else {
            // `[DONE]` is not part of this protocol; some proxies add it.
            return Ok(());
        };
        // The type is in the data; fall back to the SSE event name when a proxy drops it.
        if let Value::Object(map) = &mut data
            && !map.contains_key("type")
        {
            map.insert("type".into(), Value::String(event));
        }
        let event: Event = serde_json::from_value(data)
            .map_err(|e| ModelError::Protocol(format!("unexpected Messages event: {e}")))?;
        self.event(event, out)
    }

    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        match self.stop_reason.take() {
            Some(reason) => {
                out.push(ModelEvent::Done {
                    finish_reason: Some(reason),
                });
                Ok(())
            }
            None => Err(ModelError::Protocol("stream ended early".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sse::Decoder;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn feed(d: &mut EventDecoder, event: &str, data: Value) -> Result<Vec<ModelEvent>, ModelError> {
        let mut out = Vec::new();
        d.payload(
            SsePayload::Json {
                event: event.into(),
                data,
            },
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn tool_use_without_arguments_gets_an_empty_object() {
        let mut d = EventDecoder::default();
        let mut out = feed(
            &mut d,
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "now", "input": {}}}),
        )
        .expect("ok");
        out.extend(
            feed(
                &mut d,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            )
            .expect("ok"),
        );
        out.extend(feed(&mut d, "content_block_stop", json!({"index": 1})).expect("ok"));
        assert_eq!(
            out,
            vec![
                ModelEvent::ToolCallDelta {
                    index: 1,
                    id: Some("t".into()),
                    name: Some("now".into()),
                    arguments: String::new()
                },
                ModelEvent::ToolCallDelta {
                    index: 1,
                    id: None,
                    name: None,
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn server_tool_search_blocks_are_not_client_calls() {
        let mut d = EventDecoder::default();
        let events = [
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_bm25", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"github issue\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {"type": "tool_search_tool_search_result", "tool_references": [{"type": "tool_reference", "tool_name": "mcp__github__create_issue"}]}}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "mcp__github__create_issue"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
            json!({"type": "content_block_stop", "index": 2}),
        ];
        let mut out = Vec::new();
        for e in events {
            out.extend(feed(&mut d, "x", e).expect("ok"));
        }
        assert_eq!(
            out,
            vec![
                ModelEvent::ToolCallDelta {
                    index: 2,
                    id: Some("toolu_1".into()),
                    name: Some("mcp__github__create_issue".into()),
                    arguments: String::new()
                },
                ModelEvent::ToolCallDelta {
                    index: 2,
                    id: None,
                    name: None,
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn native_web_search_keeps_its_citations_in_the_answer() {
        let mut d = EventDecoder::default();
        let cite = |url: &str, title: &str| json!({"type": "content_block_delta", "index": 2, "delta": {"type": "citations_delta", "citation": {"type": "web_search_result_location", "url": url, "title": title, "cited_text": "...", "encrypted_index": "x"}}});
        let events = [
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"rust release\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result", "url": "https://blog.rust-lang.org/", "title": "Rust Blog", "encrypted_content": "e"}]}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": "", "citations": []}}),
            cite("https://blog.rust-lang.org/", "Rust [Blog]"),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Rust 1.95 is out."}}),
            cite("https://blog.rust-lang.org/", "Rust Blog"),
            cite("https://lwn.net/x", ""),
            json!({"type": "content_block_stop", "index": 2}),
        ];
        let mut out = Vec::new();
        for e in events {
            out.extend(feed(&mut d, "x", e).expect("ok"));
        }
        assert_eq!(
            out,
            vec![
                ModelEvent::TextDelta("Rust 1.95 is out.".into()),
                ModelEvent::TextDelta(
                    " ([Rust Blog](https://blog.rust-lang.org/); [https://lwn.net/x](https://lwn.net/x))".into()
                ),
            ]
        );
    }

    #[test]
    fn unknown_events_are_ignored_and_bad_ones_fail() {
        let mut d = EventDecoder::default();
        assert_eq!(
            feed(&mut d, "x", json!({"type": "thinking_started"})).expect("ok"),
            vec![]
        );
        let thinking = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}});
        assert_eq!(feed(&mut d, "x", thinking).expect("ok"), vec![]);
        let err = feed(&mut d, "x", json!({"type": "content_block_delta"})).expect_err("bad");
        assert!(matches!(err, ModelError::Protocol(_)));
        let mut out = Vec::new();
        assert!(
            matches!(d.end(&mut out), Err(ModelError::Protocol(m)) if m == "stream ended early")
        );
    }
}
