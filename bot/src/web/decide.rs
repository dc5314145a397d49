//! Deciding from the status page (issue 30): the page's pending approvals carry the card's
//! buttons, each with an optional note. A press asks for confirmation first
//! (`POST /approvals/{id}` answers a confirmation page, no script needed); the confirmation
//! (`POST /approvals/{id}/decide`) goes through the one engine function a click in the thread
//! goes through ([`Agent::decide_from_web`], by way of [`decide_away`]), so the same rules
//! apply (the owner or an approver; Always allow only the owner's; the stored request, its
//! fingerprint and the approvers stored with it). The decision is stored as made on the page,
//! and the thread's card, redrawn by the turn that waited, says who decided and that it was
//! from the web.
//!
//! Cross-site requests: the session cookie is SameSite=Strict, and every POST carries the
//! session's form token ([`auth::csrf_token`]); a missing or wrong one is a 403 and changes
//! nothing.
//!
//! Who the page's viewer is to the rules: their sandpiper user (the owner test), with the
//! roles the thread's platform says they hold at the moment they decide ([`decide_away`]).
//! Being an admin of the page grants nothing here: an admin without an approver role is
//! refused on the page as on the card, and a role taken away in chat ends its power on the
//! page at once. A session that is nobody in chat (the operator token, a service token)
//! decides nothing.
//!
//! [`Agent::decide_from_web`]: sandpiper_agent::Agent::decide_from_web
//! [`decide_away`]: sandpiper_channels::membership::decide_away

use axum::Extension;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use sandpiper_agent::approvals::ClickAction;
use sandpiper_agent::approvals::{AskingTurn, ClickOutcome};
use sandpiper_agent::protocol::ApprovalKind;
use sandpiper_channels::card::{TurnNote, human_duration, outcome_line};
use sandpiper_channels::membership::{AwayClick, decide_away};

use super::WebState;
use super::auth;
use super::pages;
use super::read_model::Viewer;

/// A press of one of the page's decide buttons, or its confirmation. Every field is optional
/// so that a missing token is told apart (403) from a malformed press (400).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct DecideForm {
    csrf: Option<String>,
    action: Option<String>,
    note: Option<String>,
}

/// What was pressed, checked: the action (with its note: Approve and Deny with a note are the
/// card's with-note buttons) and the note.
struct Press {
    action: ClickAction,
    note: Option<String>,
}

/// Why a press is refused before the engine sees it (kept small; rendered as a page).
struct Refused {
    status: StatusCode,
    title: &'static str,
    text: String,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        problem(self.status, self.title, &self.text)
    }
}

fn press(form: &DecideForm) -> Result<Press, Refused> {
    let code = form.action.as_deref().unwrap_or_default();
    let base = pages::buttons(ApprovalKind::ToolCall)
        .chain(pages::buttons(ApprovalKind::Review))
        .find(|action| action.code() == code)
        .ok_or_else(|| Refused {
            status: StatusCode::BAD_REQUEST,
            title: "Not a decision",
            text: "That button is not one of the page's decisions.".into(),
        })?;
    let note = form
        .note
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned);
    if note
        .as_ref()
        .is_some_and(|n| n.chars().count() > pages::MAX_NOTE)
    {
        return Err(Refused {
            status: StatusCode::BAD_REQUEST,
            title: "Note too long",
            text: format!("A note is at most {} characters.", pages::MAX_NOTE),
        });
    }
    let action = match (base, note.is_some()) {
        (ClickAction::Approve, true) => ClickAction::ApproveWithNote,
        (ClickAction::Deny, true) => ClickAction::DenyWithNote,
        (a, _) => a,
    };
    Ok(Press { action, note })
}

fn problem(status: StatusCode, title: &str, text: &str) -> Response {
    (status, Html(pages::problem(title, text))).into_response()
}

/// The checks every POST passes first: the session's form token, and a person behind it.
fn guarded(viewer: &Viewer, form: &DecideForm, request: &str) -> Result<(), Refused> {
    if auth::csrf_ok(viewer, form.csrf.as_deref()) {
        return person(viewer);
    }
    tracing::warn!(
        request = %crate::log_format::escape_controls(request),
        viewer = %viewer.name,
        "status page decision refused: missing or wrong form token"
    );
    Err(Refused {
        status: StatusCode::FORBIDDEN,
        title: "Refused",
        text: "This form is not from your page (its token is missing or wrong). Reload the \
               page and try again."
            .into(),
    })
}

/// A session that is nobody in chat (the operator token, a service token) views, and decides
/// nothing: no thread's rules name it.
fn person(viewer: &Viewer) -> Result<(), Refused> {
    if viewer.user_id.is_some() {
        return Ok(());
    }
    Err(Refused {
        status: StatusCode::FORBIDDEN,
        title: "Not decided",
        text: "The operator token and service tokens only view the page. To decide, sign in \
               as yourself with the link /console gives you in chat."
            .into(),
    })
}

/// `POST /approvals/{id}`: the confirmation page for a press.
pub(super) async fn confirm(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Response {
    if let Err(refused) = guarded(&viewer, &form, &id) {
        return refused.into_response();
    }
    let press = match press(&form) {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let agent = state.sources.local.agent();
    let record = match agent.approval(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => return unknown(),
        Err(e) => return unavailable(e),
    };
    Html(pages::confirm_decision(
        &viewer,
        &record,
        form.action.as_deref().unwrap_or_default(),
        press.action.label(),
        press.note.as_deref(),
    ))
    .into_response()
}

fn unknown() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "No such request",
        "There is no approval request with this id.",
    )
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    tracing::warn!(error = %e, "status page: deciding failed");
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "Not available",
        "The decision could not be recorded now; nothing changed. Try again in a moment.",
    )
}

/// `POST /approvals/{id}/decide`: the confirmed decision, through the engine.
pub(super) async fn decide(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Response {
    if let Err(refused) = guarded(&viewer, &form, &id) {
        return refused.into_response();
    }
    let press = match press(&form) {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let agent = state.sources.local.agent();
    let click = AwayClick {
        request_id: &id,
        action: press.action,
        user_id: viewer.user_id.as_deref().unwrap_or_default(),
        note: press.note,
    };
    let outcome = match decide_away(agent, &state.sources.memberships, click).await {
        Ok(o) => o,
        Err(e) => return unavailable(e),
    };
    let timeout = human_duration(agent.config().approval.timeout);
    match outcome {
        ClickOutcome::Unknown => {
            tracing::warn!(request = %crate::log_format::escape_controls(&id), viewer = %viewer.name, "status page decision for an unknown request");
            unknown()
        }
        ClickOutcome::Refused(reason) => problem(StatusCode::FORBIDDEN, "Not decided", &reason),
        ClickOutcome::NeedsNote => problem(
            StatusCode::BAD_REQUEST,
            "A note is needed",
            &format!(
                "{} needs a note: type it beside the button.",
                press.action.label()
            ),
        ),
        ClickOutcome::Gone(_) => problem(
            StatusCode::CONFLICT,
            "Nothing to decide",
            "The turn that asked was stopped or is gone; nothing was decided.",
        ),
        ClickOutcome::Decided { record, turn } => {
            let line = outcome_line(&record, &timeout).unwrap_or_default();
            let next = match turn {
                AskingTurn::Live => "The turn continues; the card in the thread says so.".into(),
                t => TurnNote::after(t).map(|n| n.text()).unwrap_or_default(),
            };
            Html(pages::decided(&viewer, &record, &line, &next)).into_response()
        }
    }
}
