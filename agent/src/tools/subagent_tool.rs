//! What the sub-agent tools (`task`, `plan`) share: one `prompt` argument and its checks, the
//! call's header, the refusal inside a sub-agent, and running the sub-agent in the turn: one
//! [`SubAgentTool`]. Each tool is a [`SubAgentRole`] of it and says only what differs: which
//! sub-agent runs ([`SubAgentKind`]), and what becomes of its answer (`task`: the result as it
//! is; `plan`: a saved plan put to review).

use serde::Deserialize;

use super::{InTurn, OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::turn::subagent::{SubAgentJob, SubAgentKind, SubAgentOutcome, short_title};

/// The arguments of `tools/task.json` and `tools/plan.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    prompt: String,
}

/// Longest job accepted, in bytes: it is the first message of the sub-agent's history.
pub(super) const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// The tool of a [`SubAgentRole`]: a [`Tool`] that acts in the turn ([`Tool::IN_TURN`]).
#[derive(Debug, Default)]
pub(super) struct SubAgentTool<R>(pub(super) R);

/// A sub-agent tool's own part: which sub-agent it runs and what it makes of the answer.
#[async_trait::async_trait]
pub(super) trait SubAgentRole: Send + Sync + 'static {
    /// The sub-agent it runs; its [`SubAgentKind::tool`] is the tool's name.
    const KIND: SubAgentKind;
    /// The usage hint for arguments that do not deserialize ([`Tool::USAGE`]).
    const USAGE: &'static str;

    /// Runs the checked job through [`SubAgentCall::run`] and makes the result of its answer.
    async fn run_job(&self, call: &SubAgentCall<'_>) -> Result<ToolOutput, ToolError>;
}

/// One call of a sub-agent tool in the turn.
pub(super) struct SubAgentCall<'a> {
    kind: SubAgentKind,
    /// The job as the model wrote it (checked).
    pub(super) prompt: &'a str,
    /// Its short title, for the status line, approvals and headers.
    pub(super) title: String,
    /// The parent call's tool context.
    pub(super) ctx: &'a ToolContext,
    /// The parent's turn.
    pub(super) turn: &'a InTurn<'a>,
}

impl SubAgentCall<'_> {
    /// Runs the sub-agent with `first_message` (the job, with any context the role adds).
    /// A failure of the store or the model is the model's to see; a stopped turn cancels.
    pub(super) async fn run(&self, first_message: String) -> Result<SubAgentOutcome, ToolError> {
        let job = SubAgentJob {
            kind: self.kind,
            title: self.title.clone(),
            prompt: first_message,
            ctx: self.ctx,
            turn: self.turn,
        };
        let outcome = self.turn.agent.run_subagent(job).await.map_err(|e| {
            ToolError::model(format!("the {} sub-agent failed: {e}", self.kind.tool()))
        })?;
        match outcome.cancelled {
            true => Err(ToolError::Cancelled),
            false => Ok(outcome),
        }
    }
}

/// Checks a sub-agent's job.
fn check_prompt(tool: &str, prompt: &str) -> Result<(), ToolError> {
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

#[async_trait::async_trait]
impl<R: SubAgentRole> Tool for SubAgentTool<R> {
    type Args = Args;
    type Call = Args;
    const USAGE: &'static str = R::USAGE;
    const IN_TURN: bool = true;

    fn name(&self) -> &'static str {
        R::KIND.tool()
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, Args), ToolError> {
        let tool = R::KIND.tool();
        check_prompt(tool, &args.prompt)?;
        let prepared = Prepared {
            header: format!("{tool}: {}", short_title(&args.prompt)),
            preview: args.prompt.clone(),
            ask: false,
        };
        Ok((prepared, args))
    }

    async fn execute(
        &self,
        _args: &Args,
        _prepared: &Prepared,
        _ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        Err(ToolError::model(format!(
            "{} is only available to the top-level conversation, not to sub-agents",
            R::KIND.tool()
        )))
    }

    async fn execute_in_turn(
        &self,
        args: &Args,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
        turn: &InTurn<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let call = SubAgentCall {
            kind: R::KIND,
            prompt: &args.prompt,
            title: short_title(&args.prompt),
            ctx,
            turn,
        };
        self.0.run_job(&call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{NoOutput, plan::Plan, task::Task};
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::path::Path;

    /// Each sub-agent tool's refusal of a bad prompt, its header and its refusal outside the
    /// turn, named after the tool: once two copies, now one that must serve both.
    async fn checks_a_job_as<R: SubAgentRole>(role: R) {
        let tool = R::KIND.tool();
        let ctx = ToolContext::for_test(Path::new("/tmp"));
        let role = std::sync::Arc::new(SubAgentTool(role));
        let prepare = |args| crate::tools::DynTool::prepare_value(role.clone(), args, &ctx);
        let err = prepare(json!({"prompt": "  "})).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{tool} needs a prompt: describe the job completely (the sub-agent sees \
                 nothing of this conversation)"
            )
        );
        let huge = "x".repeat(MAX_PROMPT_BYTES + 1);
        let err = prepare(json!({ "prompt": huge })).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "the {tool} prompt is 65537 bytes; the limit is 65536."
            )),
            "{err}"
        );
        let ready = prepare(json!({"prompt": "Fix the tests\nin crate a"})).unwrap();
        assert_eq!(
            ready.prepared,
            Prepared {
                header: format!("{tool}: Fix the tests"),
                preview: "Fix the tests\nin crate a".into(),
                ask: false,
            }
        );
        assert!(crate::tools::asks(tool, &ready.prepared));
        assert!(ready.in_turn());
        let err = ready.execute(&ctx, &NoOutput).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{tool} is only available to the top-level conversation, not to sub-agents")
        );
    }

    #[tokio::test]
    async fn task_and_plan_check_a_job_alike_under_their_own_names() {
        checks_a_job_as(Task).await;
        checks_a_job_as(Plan).await;
    }
}
