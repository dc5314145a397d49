//! Assembles streamed [`ModelEvent`]s into a complete response.

use super::{ModelEvent, ToolCall, Usage};

/// A complete model response: text and tool calls in the model's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssembledResponse {
    /// The answer text.
    pub text: String,
    /// Tool calls in index order.
    pub tool_calls: Vec<ToolCall>,
    /// Token usage, when reported.
    pub usage: Usage,
    /// Provider's stop reason.
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default)]
struct PartialCall {
    index: usize,
    id: String,
    name: String,
    arguments: String,
}

/// Collects text and tool-call deltas, keyed by index.
#[derive(Debug, Default)]
pub struct ResponseAssembler {
    text: String,
    calls: Vec<PartialCall>,
    usage: Usage,
    finish_reason: Option<String>,
}

impl ResponseAssembler {
    /// Feeds one event.
    pub fn push(&mut self, event: &ModelEvent) {
        match event {
            ModelEvent::TextDelta(t) => self.text.push_str(t),
            ModelEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => {
                let pos = match self.calls.iter().position(|c| c.index == *index) {
                    Some(pos) => pos,
                    None => {
                        self.calls.push(PartialCall {
                            index: *index,
                            ..PartialCall::default()
                        });
                        self.calls.len() - 1
                    }
                };
                let call = &mut self.calls[pos];
                if let Some(id) = id.as_deref().filter(|s| !s.is_empty()) {
                    call.id = id.to_owned();
                }
                if let Some(name) = name.as_deref().filter(|s| !s.is_empty()) {
                    call.name = name.to_owned();
                }
                call.arguments.push_str(arguments);
            }
            ModelEvent::Usage(u) => self.usage = *u,
            ModelEvent::Done { finish_reason } => self.finish_reason = finish_reason.clone(),
        }
    }

    /// The text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Finishes the response. Calls without an id get a generated one so that every call can
    /// be answered.
    pub fn finish(mut self) -> AssembledResponse {
        self.calls.sort_by_key(|c| c.index);
        let tool_calls = self
            .calls
            .into_iter()
            .map(|c| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{}", uuid::Uuid::new_v4().simple())
                } else {
                    c.id
                },
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        AssembledResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn delta(index: usize, id: Option<&str>, name: Option<&str>, args: &str) -> ModelEvent {
        ModelEvent::ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: args.to_owned(),
        }
    }

    #[test]
    fn interleaved_deltas_assemble_per_index_in_index_order() {
        let mut a = ResponseAssembler::default();
        for e in [
            ModelEvent::TextDelta("hel".into()),
            delta(1, Some("b"), Some("read_file"), "{\"pa"),
            delta(0, Some("a"), Some("bash"), "{\"command\":"),
            ModelEvent::TextDelta("lo".into()),
            delta(1, None, None, "th\":\"x\"}"),
            delta(0, None, None, "\"ls\"}"),
            ModelEvent::Done {
                finish_reason: Some("tool_calls".into()),
            },
        ] {
            a.push(&e);
        }
        let r = a.finish();
        assert_eq!(r.text, "hello");
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall {
                    id: "a".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"ls\"}".into()
                },
                ToolCall {
                    id: "b".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"x\"}".into()
                },
            ]
        );
    }

    #[test]
    fn missing_id_gets_a_generated_one() {
        let mut a = ResponseAssembler::default();
        a.push(&delta(0, None, Some("bash"), "ls"));
        let r = a.finish();
        assert!(r.tool_calls[0].id.starts_with("call_"));
    }
}
