//! Decoding `chat.completion.chunk` events into [`ModelEvent`]s.
//!
//! Tolerates what compatible servers do: tool-call deltas without `index`, `usage: null` in
//! every chunk, usage in a final chunk with no choices, a missing `[DONE]` after a
//! `finish_reason`, and `error` objects inside the stream.

use serde::Deserialize;
use serde_json::Value;

use crate::model::sse::{self, SsePayload};
use crate::model::{ModelError, ModelEvent, Usage};

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// llama.cpp's own counts, beside `usage`: `cache_n` prompt tokens reused from the slot.
    #[serde(default)]
    timings: Option<WireTimings>,
}

#[derive(Debug, Deserialize)]
struct WireTimings {
    #[serde(default)]
    cache_n: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolDelta>>,
}

#[derive(Debug, Deserialize)]
struct ToolDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// Assigns indices to tool-call deltas, also when the server omits `index`.
///
/// Without `index`: a delta whose `id` was seen before goes to that call; a new `id` starts a
/// new call; a delta without `id` goes to its position in the array when the array holds
/// several deltas, else to the call seen last.
#[derive(Debug, Default)]
struct ToolIndices {
    ids: Vec<(String, usize)>,
    last: Option<usize>,
    next: usize,
}

impl ToolIndices {
    fn resolve(
        &mut self,
        explicit: Option<usize>,
        id: Option<&str>,
        pos: usize,
        len: usize,
    ) -> usize {
        let id = id.filter(|id| !id.is_empty());
        let known = id.and_then(|id| self.ids.iter().find(|(k, _)| k == id).map(|(_, i)| *i));
        let index = match (explicit, known, id) {
            (Some(index), _, _) => index,
            (None, Some(index), _) => index,
            (None, None, Some(_)) => self.next,
            (None, None, None) if len > 1 => pos,
            (None, None, None) => self.last.unwrap_or(pos),
        };
        if let (Some(id), None) = (id, known) {
            self.ids.push((id.to_owned(), index));
        }
        self.last = Some(index);
        self.next = self.next.max(index + 1);
        index
    }
}

/// The decoder for one chat completions stream.
#[derive(Debug, Default)]
pub(super) struct ChunkDecoder {
    finish_reason: Option<String>,
    indices: ToolIndices,
}

impl ChunkDecoder {
    fn chunk(&mut self, data: Value, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        if let Some(error) = data.get("error").filter(|e| !e.is_null()) {
            return Err(ModelError::Provider(sse::error_message(error)));
        }
        let chunk: Chunk = serde_json::from_value(data)
            .map_err(|e| ModelError::Protocol(format!("unexpected chat completion chunk: {e}")))?;
        if let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::TextDelta(text));
                }
                let calls = delta.tool_calls.unwrap_or_default();
                let len = calls.len();
                for (pos, call) in calls.into_iter().enumerate() {
                    let index = self
                        .indices
                        .resolve(call.index, call.id.as_deref(), pos, len);
                    let (name, arguments) = match call.function {
                        Some(f) => (f.name, f.arguments.unwrap_or_default()),
                        None => (None, String::new()),
                    };
                    out.push(ModelEvent::ToolCallDelta {
                        index,
                        id: call.id,
                        name,
                        arguments,
                    });
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            let details = usage.prompt_tokens_details.and_then(|d| d.cached_tokens);
            let timings = chunk.timings.and_then(|t| t.cache_n);
            out.push(ModelEvent::Usage(Usage {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
                cached_tokens: details.or(timings).unwrap_or(0),
                cache_write_tokens: 0,
            }));
        }
        Ok(())
    }
}

impl sse::Decoder for ChunkDecoder {
    fn payload(
        &mut self,
        payload: SsePayload,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ModelError> {
        match payload {
            SsePayload::Done => {
                out.push(ModelEvent::Done {
                    finish_reason: self.finish_reason.take(),
                });
                Ok(())
            }
            SsePayload::Json { data, .. } => self.chunk(data, out),
        }
    }

    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        match self.finish_reason.take() {
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

    fn feed(d: &mut ChunkDecoder, data: Value) -> Result<Vec<ModelEvent>, ModelError> {
        let mut out = Vec::new();
        d.payload(
            SsePayload::Json {
                event: "message".into(),
                data,
            },
            &mut out,
        )?;
        Ok(out)
    }

    fn call(index: usize, id: Option<&str>, name: Option<&str>, args: &str) -> ModelEvent {
        ModelEvent::ToolCallDelta {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: args.into(),
        }
    }

    #[test]
    fn several_index_less_deltas_in_one_array_use_positions() {
        let mut d = ChunkDecoder::default();
        let out = feed(
            &mut d,
            json!({"choices": [{"delta": {"tool_calls": [
                {"id": "a", "function": {"name": "x", "arguments": "{"}},
                {"id": "b", "function": {"name": "y", "arguments": "["}}
            ]}}]}),
        )
        .expect("ok");
        assert_eq!(
            out,
            vec![
                call(0, Some("a"), Some("x"), "{"),
                call(1, Some("b"), Some("y"), "[")
            ]
        );
        let out = feed(
            &mut d,
            json!({"choices": [{"delta": {"tool_calls": [
                {"function": {"arguments": "}"}}, {"function": {"arguments": "]"}}
            ]}}]}),
        )
        .expect("ok");
        assert_eq!(
            out,
            vec![call(0, None, None, "}"), call(1, None, None, "]")]
        );
    }

    #[test]
    fn repeated_ids_stay_on_their_call() {
        let mut d = ChunkDecoder::default();
        let mut all = Vec::new();
        for (id, args) in [("a", "1"), ("a", "2"), ("b", "3"), ("b", "4")] {
            all.extend(
                feed(
                    &mut d,
                    json!({"choices": [{"delta": {"tool_calls": [{"id": id, "function": {"arguments": args}}]}}]}),
                )
                .expect("ok"),
            );
        }
        let indices: Vec<usize> = all
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCallDelta { index, .. } => Some(*index),
                _ => None,
            })
            .collect();
        assert_eq!(indices, vec![0, 0, 1, 1]);
    }

    #[test]
    fn error_objects_and_bad_shapes_fail_cleanly() {
        let mut d = ChunkDecoder::default();
        let err =
            feed(&mut d, json!({"error": {"message": "context too long"}})).expect_err("error");
        assert!(matches!(err, ModelError::Provider(m) if m == "context too long"));
        let err = feed(&mut d, json!({"choices": "nope"})).expect_err("bad shape");
        assert!(matches!(err, ModelError::Protocol(_)));
        let out = feed(&mut d, json!({"choices": [], "usage": null})).expect("ok");
        assert!(out.is_empty());
    }
}
