//! The `task` tool: delegates a job to a task sub-agent (see [`crate::turn::subagent`]) and returns
//! its final answer as the result.

use serde::Deserialize;

use super::{InTurn, OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::turn::subagent::{SubAgentJob, SubAgentKind, SubAgentOutcome, short_title};

/// The `task` tool. Always asks (its JSON says `auto_approve: false`); its sub-agent's own
/// calls ask again, one by one.
#[derive(Debug, Default)]
pub(super) struct Task;

/// The arguments of `tools/task.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    prompt: String,
}

/// Longest job accepted, in bytes: it is the first message of the sub-agent's history.
const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// Checks a sub-agent's job (shared by `task` and `plan`).
pub(super) fn check_prompt(tool: &str, prompt: &str) -> Result<(), ToolError> {
    if prompt.trim().is_empty() {
        return Err(ToolError::model(format!(
            "{tool} needs a prompt: describe the job completely (the sub-agent sees nothing \
             of this conversation)"
        )));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(ToolError::model(format!(
            "the {tool} prompt is {} bytes; the limit is {MAX_PROMPT_BYTES}. Put long context \
             in a file in the working directory and name it in the prompt",
            prompt.len()
        )));
    }
    Ok(())
}

/// A sub-agent's failure (the store or the model), for the parent model.
pub(super) fn failed(tool: &str, e: &crate::AgentError) -> ToolError {
    ToolError::model(format!("the {tool} sub-agent failed: {e}"))
}

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
impl Tool for Task {
    type Args = Args;
    const USAGE: &'static str = "send {\"prompt\": \"<the complete task>\"}";
    const IN_TURN: bool = true;

    fn name(&self) -> &'static str {
        "task"
    }

    fn prepare(&self, args: &Args, _ctx: &ToolContext) -> Result<Prepared, ToolError> {
        check_prompt("task", &args.prompt)?;
        Ok(Prepared {
            header: format!("task: {}", short_title(&args.prompt)),
            preview: args.prompt.clone(),
            ask: false,
        })
    }

    async fn execute(
        &self,
        _args: &Args,
        _prepared: &Prepared,
        _ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        Err(ToolError::model(
            "task is only available to the top-level conversation, not to sub-agents",
        ))
    }

    async fn execute_in_turn(
        &self,
        args: &Args,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
        turn: &InTurn<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let job = SubAgentJob {
            kind: SubAgentKind::Task,
            title: short_title(&args.prompt),
            prompt: args.prompt.clone(),
            ctx,
            turn,
        };
        let outcome = turn
            .agent
            .run_subagent(job)
            .await
            .map_err(|e| failed("task", &e))?;
        if outcome.cancelled {
            return Err(ToolError::Cancelled);
        }
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
    use crate::turn::subagent::SubAgentStop;
    use std::path::Path;

    #[test]
    fn an_empty_or_huge_prompt_is_refused_for_the_model() {
        let ctx = ToolContext::for_test(Path::new("/tmp"));
        let err = crate::tools::prepare_json(Task, serde_json::json!({"prompt": "  "}), &ctx)
            .unwrap_err();
        assert!(err.to_string().contains("needs a prompt"), "{err}");
        let huge = "x".repeat(MAX_PROMPT_BYTES + 1);
        let err = crate::tools::prepare_json(Task, serde_json::json!({"prompt": huge}), &ctx)
            .unwrap_err();
        assert!(err.to_string().contains("the limit is"), "{err}");
        let ready = crate::tools::prepare_json(
            Task,
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
