//! The `task` tool: delegates a job to a task sub-agent (see [`crate::turn::subagent`]) and returns
//! its final answer as the result. What it shares with `plan` is in [`super::subagent_tool`].

use super::subagent_tool::{SubAgentCall, SubAgentRole};
use super::{ToolError, ToolOutput};
use crate::turn::subagent::{SubAgentKind, SubAgentOutcome};

/// The `task` tool. Always asks (its JSON says `auto_approve: false`); its sub-agent's own
/// calls ask again, one by one.
#[derive(Debug, Default)]
pub(super) struct Task;

/// The result text of a run: its answer, and why it stopped early when a limit stopped it.
fn result_text(outcome: &SubAgentOutcome) -> String {
    match outcome.stopped {
        None => outcome.text.clone(),
        Some(stop) => {
            let so_far = if outcome.text.trim().is_empty() {
                "(it had not written anything yet)".to_owned()
            } else {
                outcome.text.clone()
            };
            format!("[{stop}; its last message follows]\n{so_far}")
        }
    }
}

#[async_trait::async_trait]
impl SubAgentRole for Task {
    const KIND: SubAgentKind = SubAgentKind::Task;
    const USAGE: &'static str = "send {\"prompt\": \"<the complete task>\"}";

    async fn run_job(&self, call: &SubAgentCall<'_>) -> Result<ToolOutput, ToolError> {
        let outcome = call.run(call.prompt.to_owned()).await?;
        Ok(ToolOutput {
            text: result_text(&outcome),
            images: Vec::new(),
            is_error: outcome.stopped.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolContext;
    use crate::tools::subagent_tool::MAX_PROMPT_BYTES;
    use crate::turn::subagent::SubAgentStop;
    use std::path::Path;

    fn task() -> crate::tools::subagent_tool::SubAgentTool<Task> {
        crate::tools::subagent_tool::SubAgentTool(Task)
    }

    #[test]
    fn an_empty_or_huge_prompt_is_refused_for_the_model() {
        let ctx = ToolContext::for_test(Path::new("/tmp"));
        let err = crate::tools::prepare_json(task(), serde_json::json!({"prompt": "  "}), &ctx)
            .unwrap_err();
        assert!(err.to_string().contains("needs a prompt"), "{err}");
        let huge = "x".repeat(MAX_PROMPT_BYTES + 1);
        let err = crate::tools::prepare_json(task(), serde_json::json!({"prompt": huge}), &ctx)
            .unwrap_err();
        assert!(err.to_string().contains("the limit is"), "{err}");
        let ready = crate::tools::prepare_json(
            task(),
            serde_json::json!({"prompt": "Fix the tests\nin crate a"}),
            &ctx,
        )
        .unwrap();
        assert_eq!(ready.header, "task: Fix the tests");
        assert!(crate::tools::asks("task", &ready.prepared));
    }

    #[test]
    fn a_stopped_run_says_why_before_its_last_message() {
        let outcome = SubAgentOutcome {
            text: "halfway".into(),
            stopped: Some(SubAgentStop::Rounds(3)),
            ..SubAgentOutcome::default()
        };
        assert_eq!(
            result_text(&outcome),
            "[the sub-agent was stopped after 3 model calls (agent.task_max_rounds) before it \
             finished; its last message follows]\nhalfway"
        );
    }
}
