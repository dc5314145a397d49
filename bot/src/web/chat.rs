//! Talking from the status page (issue 44): a box under a workstream's conversation
//! (`POST /w/{key}/say`) and one that starts a conversation on the page
//! (`POST /conversations`, a `web:<id>` workstream owned by the person). What may be written
//! where, and how it reaches the turn, is the channels' ([`PageDesk`]): the thread's own rule
//! for that person, the workstream's lane, and the thread showing the message; this file is
//! the HTTP edge.
//!
//! Every POST carries the session's form token ([`auth::csrf_ok`]); a session that is nobody
//! in chat (the operator token, a service token) only views. A refused message comes back in
//! the box on the refusal's page, so nothing typed is lost. The answer streams on the
//! workstream's page through its event stream (`events`), as every turn does.

use axum::Extension;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use sandpiper_agent::store::now_ms;
use sandpiper_channels::permissions::Refusal;
use sandpiper_channels::web::{PageMessage, WriteRefusal};

use super::WebState;
use super::auth;
use super::pages::{self, NEW_PATH, say_box, say_href};
use super::read_model::Viewer;

/// What the page's message boxes send. Every field is optional so that a missing token is
/// told apart (403) from an empty message (400).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct SayForm {
    csrf: Option<String>,
    text: Option<String>,
}

/// Where a refused message is offered again.
enum Again<'a> {
    /// The box of workstream `key`.
    Workstream(&'a str),
    /// The box that starts a conversation.
    New,
}

impl Again<'_> {
    fn action(&self) -> String {
        match self {
            Again::Workstream(key) => say_href(key),
            Again::New => NEW_PATH.to_owned(),
        }
    }

    fn back(&self) -> String {
        match self {
            Again::Workstream(key) => pages::detail_href(key),
            Again::New => "/".to_owned(),
        }
    }
}

/// The HTTP status of a refusal.
fn status_of(refusal: &WriteRefusal) -> StatusCode {
    match refusal {
        WriteRefusal::Empty => StatusCode::BAD_REQUEST,
        WriteRefusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        WriteRefusal::Unknown => StatusCode::NOT_FOUND,
        WriteRefusal::Refused(Refusal::ThreadClosed) => StatusCode::CONFLICT,
        WriteRefusal::Refused(_) => StatusCode::FORBIDDEN,
        WriteRefusal::QueueFull(_) => StatusCode::TOO_MANY_REQUESTS,
        WriteRefusal::NoPlatform(_) | WriteRefusal::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The refusal's page: why, and the box again with what was written in it.
fn refused(
    viewer: &Viewer,
    status: StatusCode,
    why: &str,
    again: &Again<'_>,
    text: &str,
) -> Response {
    let body = html! {
        section.card #refused {
            h1 { "Not sent" }
            p.problem #problem { (why) }
            (say_box(viewer, &again.action(), text, "Send again"))
            p { a href=(again.back()) { "Back" } }
        }
    };
    (
        status,
        Html(pages::layout("Not sent", Some(viewer), body).into_string()),
    )
        .into_response()
}

/// The checks every message passes first: the session's form token, then a person behind it.
fn guarded(viewer: &Viewer, form: &SayForm) -> Result<(), (StatusCode, &'static str)> {
    if !auth::csrf_ok(viewer, form.csrf.as_deref()) {
        tracing::warn!(viewer = %viewer.name, "a message from the page refused: missing or wrong form token");
        return Err((
            StatusCode::FORBIDDEN,
            "This form is not from your page (its token is missing or wrong). Reload the page \
             and send it again.",
        ));
    }
    if viewer.user_id.is_none() {
        return Err((
            StatusCode::FORBIDDEN,
            "The operator token and service tokens only view the page. To write, sign in as \
             yourself with the link /console gives you in chat.",
        ));
    }
    Ok(())
}

/// `POST /w/{key}/say`: a message into workstream `key`; the workstream's page follows.
pub(super) async fn say(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Path(key): Path<String>,
    Form(form): Form<SayForm>,
) -> Response {
    let text = form.text.clone().unwrap_or_default();
    let again = Again::Workstream(&key);
    if let Err((status, why)) = guarded(&viewer, &form) {
        return refused(&viewer, status, why, &again, &text);
    }
    let msg = PageMessage {
        workstream: &key,
        user_id: viewer.user_id.as_deref().unwrap_or_default(),
        text: &text,
        received_ms: received_now(),
    };
    match state.desk.write_away(msg).await {
        Ok(_) => Redirect::to(&pages::detail_href(&key)).into_response(),
        Err(e) => refused(&viewer, status_of(&e), &e.to_string(), &again, &text),
    }
}

/// `POST /conversations`: a new conversation on the page, its first message from the form.
pub(super) async fn start(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Form(form): Form<SayForm>,
) -> Response {
    let text = form.text.clone().unwrap_or_default();
    if let Err((status, why)) = guarded(&viewer, &form) {
        return refused(&viewer, status, why, &Again::New, &text);
    }
    let msg = PageMessage {
        workstream: "",
        user_id: viewer.user_id.as_deref().unwrap_or_default(),
        text: &text,
        received_ms: received_now(),
    };
    match state.desk.start_on_page(msg).await {
        Ok(key) => Redirect::to(&pages::detail_href(&key)).into_response(),
        Err(e) => refused(&viewer, status_of(&e), &e.to_string(), &Again::New, &text),
    }
}

/// When a message reached the page (unix ms): its place in the thread.
fn received_now() -> u64 {
    u64::try_from(now_ms()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use sandpiper_channels::turns::QueueFull;

    #[test]
    fn each_refusal_has_its_status() {
        let cases = [
            (WriteRefusal::Empty, 400),
            (WriteRefusal::TooLarge { size: 2, limit: 1 }, 413),
            (WriteRefusal::Unknown, 404),
            (WriteRefusal::Refused(Refusal::ThreadClosed), 409),
            (WriteRefusal::Refused(Refusal::NotInThread), 403),
            (WriteRefusal::QueueFull(QueueFull), 429),
            (WriteRefusal::NoPlatform("slack".into()), 503),
        ];
        let got: Vec<u16> = cases.iter().map(|(r, _)| status_of(r).as_u16()).collect();
        let want: Vec<u16> = cases.iter().map(|(_, s)| *s).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_refused_message_comes_back_in_the_box_as_text() {
        let viewer = Viewer {
            user_id: Some("u1".into()),
            name: "alice".into(),
            admin: false,
            csrf: "t".into(),
        };
        let page = refused(
            &viewer,
            StatusCode::FORBIDDEN,
            "no",
            &Again::Workstream("discord:1"),
            "<b>keep me</b>",
        );
        assert_eq!(page.status(), StatusCode::FORBIDDEN);
        let body = say_box(&viewer, "/x", "<b>keep me</b>", "Send again").into_string();
        assert!(
            body.contains("&lt;b&gt;keep me&lt;/b&gt;</textarea>"),
            "{body}"
        );
        assert_eq!(say_href("slack:T:C:1.2"), "/w/slack%3AT%3AC%3A1.2/say");
    }
}
