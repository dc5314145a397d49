//! The `plan` tool: a planning sub-agent (see [`crate::turn::subagent`]) writes a plan, saved as
//! `.plan-<workstream>.md` in the working directory, and the people of the thread review it
//! (Accept / Reject / Annotate, [`crate::approvals::review`]). A second plan in the same
//! workstream starts from the previous one and refines it. What it shares with `task` is in
//! [`super::subagent_tool`].
//!
//! A long plan (over [`LONG_PLAN_CHARS`]) goes into the thread as a file before the review
//! card, and the card shows its beginning with a note naming the file: cards carry no files.
//!
//! The plan file obeys the file tools' rules ([`file`]): a link, a hard link or anything but
//! a plain file in its place is refused (never followed into sandpiper's config, its database,
//! `/proc` or another directory), as are paths `[tools] deny_read` covers. It is written
//! before the review (so a rejected plan is still there for the next one to refine), and the
//! review card says so; the write replaces what is in its place, never the file behind it.

use std::path::PathBuf;

use super::subagent_tool::{SubAgentCall, SubAgentRole};
use super::{ToolError, ToolOutput};
use crate::approvals::{ReviewAnswer, ReviewRequest, review};
use crate::protocol::TurnEvent;
use crate::turn::subagent::SubAgentKind;
use crate::workstream::safe_name;

mod file;

/// The `plan` tool. Asks before it starts (its JSON says `auto_approve: false`), and its plan
/// is reviewed after.
#[derive(Debug, Default)]
pub(super) struct Plan;

/// A plan longer than this many characters is attached as a file, with its beginning on the
/// review card.
pub const LONG_PLAN_CHARS: usize = 1500;

/// The plan file of `workstream` in `workdir`: `.plan-<workstream>.md`, file-name-safe.
pub fn plan_file(workdir: &std::path::Path, workstream: &str) -> PathBuf {
    workdir.join(format!(".plan-{}.md", safe_name(workstream)))
}

/// The sub-agent's first message: the goal, and the previous plan to refine, if any.
fn job_text(goal: &str, previous: Option<&str>) -> String {
    match previous {
        None => goal.to_owned(),
        Some(previous) => format!(
            "{goal}\n\n---\nThis thread already has a plan, below. Refine it: keep what still \
             holds, change what the goal above asks for, and answer with the whole revised \
             plan.\n\n{previous}"
        ),
    }
}

/// What the review card shows: that the plan is already saved (written before this review),
/// then the whole plan, or for a long one a note naming the attached file and its beginning
/// (the card cuts it).
fn card_preview(plan: &str, file_name: &str) -> String {
    let saved = format!("💾 Saved as {file_name} in the working directory before this review.");
    if plan.chars().count() <= LONG_PLAN_CHARS {
        return format!("{saved}\n\n{plan}");
    }
    format!(
        "{saved} 📎 The whole plan ({} lines) is attached above as {file_name}. It \
         begins:\n\n{plan}",
        plan.lines().count()
    )
}

/// The result for the model: the decision, any note, where the plan is (`saved`: the line
/// that says whether it was saved), and the plan.
fn result_text(answer: &ReviewAnswer, plan: &str, saved: &str) -> (String, bool) {
    let who = |by: &Option<String>| by.clone().unwrap_or_else(|| "the user".into());
    let (head, is_error) = match answer {
        ReviewAnswer::Accepted { by } => (
            format!("The plan was accepted by {}. Carry it out.", who(by)),
            false,
        ),
        ReviewAnswer::Annotated { by, note } => (
            format!(
                "The plan was accepted by {} with a note; follow the plan as the note \
                 amends it.\nNote: {note}",
                who(by)
            ),
            false,
        ),
        ReviewAnswer::Rejected { by, note } => (
            match note {
                Some(note) => format!(
                    "The plan was rejected by {}: {note}\nDo not carry it out; ask what to \
                     change or plan again.",
                    who(by)
                ),
                None => format!(
                    "The plan was rejected by {}. Do not carry it out; ask what to change or \
                     plan again.",
                    who(by)
                ),
            },
            true,
        ),
        ReviewAnswer::TimedOut => (
            "Nobody reviewed the plan in time (approval timeout). Do not carry it out yet; \
             ask for a review."
                .to_owned(),
            true,
        ),
        ReviewAnswer::Cancelled => ("The review was stopped.".to_owned(), true),
    };
    (format!("{head}\n{saved}\n\n{plan}"), is_error)
}

#[async_trait::async_trait]
impl SubAgentRole for Plan {
    const KIND: SubAgentKind = SubAgentKind::Plan;
    const USAGE: &'static str = "send {\"prompt\": \"<what to plan>\"}";

    async fn run_job(&self, call: &SubAgentCall<'_>) -> Result<ToolOutput, ToolError> {
        let (ctx, turn, title) = (call.ctx, call.turn, &call.title);
        let path = plan_file(&ctx.workdir, &ctx.workstream);
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let previous = file::read_previous(ctx, &path).await?;
        let outcome = call.run(job_text(call.prompt, previous.as_deref())).await?;
        let plan = outcome.text.trim();
        if let Some(stop) = outcome.stopped {
            return Err(ToolError::model(format!(
                "no plan: {stop}. Narrow the goal and plan again"
            )));
        }
        if plan.is_empty() {
            return Err(ToolError::model(
                "the planning sub-agent answered with an empty plan; plan again with a clearer goal",
            ));
        }
        if let Err(e) = tokio::fs::create_dir_all(&ctx.workdir).await {
            tracing::warn!(workdir = %ctx.workdir.display(), error = %e, "cannot create the working directory");
        }
        file::save(ctx, &path, &format!("{plan}\n")).await?;
        if plan.chars().count() > LONG_PLAN_CHARS {
            turn.sink.event(TurnEvent::Attachment {
                call_id: turn.call_id.to_owned(),
                filename: file_name.clone(),
                body: format!("{plan}\n"),
                comment: format!("The plan to review: {title}"),
            });
        }
        let header = match previous {
            Some(_) => format!("plan (refined): {title}"),
            None => format!("plan: {title}"),
        };
        let preview = card_preview(plan, &file_name);
        let answer = review(
            turn.agent,
            turn.approver,
            ReviewRequest {
                workstream: &ctx.workstream,
                call_id: turn.call_id,
                tool: "plan",
                header: &header,
                preview: &preview,
                requested_by: turn.requested_by,
                cancel: &ctx.cancel,
            },
        )
        .await
        .map_err(|e| ToolError::Fatal(format!("the plan's review could not be stored: {e}")))?;
        tracing::info!(workstream = %ctx.workstream, answer = ?answer, "plan reviewed");
        if answer == ReviewAnswer::Cancelled {
            return Err(ToolError::Cancelled);
        }
        let saved = format!("The plan is saved as {file_name} in the working directory.");
        let (text, is_error) = result_text(&answer, plan, &saved);
        Ok(ToolOutput {
            text,
            images: Vec::new(),
            is_error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::path::Path;

    #[test]
    fn the_plan_file_is_named_after_the_workstream_safely() {
        assert_eq!(
            plan_file(Path::new("/w"), "discord:12"),
            PathBuf::from("/w/.plan-discord_3a12.md")
        );
        assert_eq!(
            plan_file(Path::new("/w"), "../x"),
            PathBuf::from("/w/.plan-_2e._2fx.md")
        );
    }

    #[test]
    fn a_second_plan_gets_the_first_to_refine() {
        assert_eq!(job_text("move the db", None), "move the db");
        let refined = job_text("also migrate users", Some("1. dump\n2. restore"));
        assert!(refined.starts_with("also migrate users\n"), "{refined}");
        assert!(refined.ends_with("Refine it: keep what still holds, change what the goal above asks for, and answer with the whole revised plan.\n\n1. dump\n2. restore"), "{refined}");
    }

    #[test]
    fn a_long_plan_is_named_on_the_card_and_a_short_one_shown_whole() {
        assert_eq!(
            card_preview("1. a\n2. b", "p.md"),
            "💾 Saved as p.md in the working directory before this review.\n\n1. a\n2. b"
        );
        let long = "step\n".repeat(400);
        let preview = card_preview(&long, ".plan-x.md");
        assert!(
            preview.starts_with(
                "💾 Saved as .plan-x.md in the working directory before this review. 📎 The \
                 whole plan (400 lines) is attached above as .plan-x.md. It begins:"
            ),
            "{preview}"
        );
    }

    #[test]
    fn each_answer_reaches_the_model_with_the_plan() {
        let plan = "1. dump";
        let (text, err) = result_text(
            &ReviewAnswer::Annotated {
                by: Some("carol".into()),
                note: "use --no-owner".into(),
            },
            plan,
            "The plan is saved as p.md in the working directory.",
        );
        assert!(!err);
        assert_eq!(
            text,
            "The plan was accepted by carol with a note; follow the plan as the note amends \
             it.\nNote: use --no-owner\nThe plan is saved as p.md in the working directory.\n\n1. dump"
        );
        let (text, err) = result_text(
            &ReviewAnswer::Rejected {
                by: Some("alice".into()),
                note: None,
            },
            plan,
            "The plan is saved as p.md in the working directory.",
        );
        assert!(
            err && text.starts_with("The plan was rejected by alice."),
            "{text}"
        );
        let (text, _) = result_text(&ReviewAnswer::Accepted { by: None }, plan, "saved");
        assert!(
            text.starts_with("The plan was accepted by the user."),
            "{text}"
        );
    }
}
