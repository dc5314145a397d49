//! An in-process model that replays scripted responses: for unit tests and benchmarks, where a
//! real HTTP round-trip would measure the network instead of the agent. End-to-end tests use
//! the wire-level fake in `sandpiper-tests` instead.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::{ChatModel, ChatRequest, ModelError, ModelEvent, ModelStream};

/// Replays responses in order; `cycle` makes it start over when the script runs out.
#[derive(Debug)]
pub struct ScriptedModel {
    script: Mutex<VecDeque<Vec<ModelEvent>>>,
    original: Vec<Vec<ModelEvent>>,
    cycle: bool,
}

impl ScriptedModel {
    /// Each inner vector is one response; a `Done` is appended when missing.
    pub fn new(responses: Vec<Vec<ModelEvent>>) -> Self {
        let original: Vec<Vec<ModelEvent>> = responses
            .into_iter()
            .map(|mut r| {
                if !r.iter().any(|e| matches!(e, ModelEvent::Done { .. })) {
                    r.push(ModelEvent::Done {
                        finish_reason: None,
                    });
                }
                r
            })
            .collect();
        Self {
            script: Mutex::new(original.iter().cloned().collect()),
            original,
            cycle: false,
        }
    }

    /// Starts over when the script runs out (benchmarks).
    pub fn cycling(mut self) -> Self {
        self.cycle = true;
        self
    }

    /// A response with text only.
    pub fn text(text: &str) -> Vec<ModelEvent> {
        vec![ModelEvent::TextDelta(text.to_owned())]
    }

    /// A response with one tool call.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Vec<ModelEvent> {
        vec![ModelEvent::ToolCallDelta {
            index: 0,
            id: Some(id.to_owned()),
            name: Some(name.to_owned()),
            arguments: arguments.to_owned(),
        }]
    }
}

#[async_trait::async_trait]
impl ChatModel for ScriptedModel {
    async fn stream(&self, _request: ChatRequest<'_>) -> Result<ModelStream, ModelError> {
        let next = {
            let mut script = self
                .script
                .lock()
                .map_err(|_| ModelError::Provider("script lock poisoned".into()))?;
            if script.is_empty() && self.cycle {
                script.extend(self.original.iter().cloned());
            }
            script.pop_front()
        };
        let events = next.ok_or_else(|| ModelError::Provider("the script is exhausted".into()))?;
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }

    fn model_name(&self) -> &str {
        "scripted"
    }
}
