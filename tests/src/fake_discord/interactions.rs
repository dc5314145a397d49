//! Interaction responses: the callback (`POST /interactions/{id}/{token}/callback`) and the
//! interaction webhook (`/webhooks/{app}/{token}`: follow-ups and `@original`).

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::messages::NewMessage;
use super::multipart::Payload;
use super::state::{InteractionKind, Rejection};
use super::{APP_ID, BOT_ID, Shared};

type Answer = Result<Response, Rejection>;

/// How long Discord waits for an interaction's first response.
const RESPONSE_WINDOW: std::time::Duration = std::time::Duration::from_secs(3);

fn unknown_interaction() -> Rejection {
    Rejection::new(404, 10062, "Unknown interaction")
}

/// Applies a callback: 4 and 5 create the original response, 6 and 7 adopt (7 also edits) the
/// clicked message, 9 opens a modal. Answers 204 like Discord, and only within 3 s of the
/// interaction.
pub(super) async fn callback(
    State(shared): State<Arc<Shared>>,
    Path((id, token)): Path<(u64, String)>,
    Extension(p): Extension<Payload>,
) -> Answer {
    let mut state = shared.lock();
    let interaction = state
        .interactions
        .get(&id)
        .filter(|i| i.token == token)
        .ok_or_else(unknown_interaction)?;
    if interaction.acknowledged {
        return Err(Rejection::new(
            400,
            40060,
            "Interaction has already been acknowledged.",
        ));
    }
    // Discord forgets an interaction not answered in time (the person sees "This interaction
    // failed"); a deferred response is how a slow handler keeps it.
    if interaction.created.elapsed() > RESPONSE_WINDOW {
        return Err(unknown_interaction());
    }
    let (kind, channel_id, clicked) = (
        interaction.kind,
        interaction.channel_id,
        interaction.message_id,
    );
    let empty = json!({});
    let data = p
        .json
        .get("data")
        .filter(|d| d.is_object())
        .unwrap_or(&empty);
    let original = match p.json["type"].as_u64() {
        Some(response @ (4 | 5)) => {
            let new = NewMessage {
                channel_id,
                author_id: BOT_ID,
                body: data,
                files: &p.files,
                kind: if kind == InteractionKind::Command {
                    20
                } else {
                    0
                },
                interaction_id: Some(id),
                deferred: response == 5,
            };
            let message = state.create_message(new)?;
            message["id"].as_str().and_then(|s| s.parse().ok())
        }
        Some(response @ (6 | 7)) => {
            let Some(message_id) = clicked else {
                return Err(Rejection::new(
                    400,
                    40004,
                    "Interaction has no message to update",
                ));
            };
            if response == 7 {
                state.edit_message(channel_id, message_id, data, &p.files)?;
            }
            Some(message_id)
        }
        Some(9) if kind != InteractionKind::ModalSubmit => None,
        Some(8) => None,
        other => {
            return Err(Rejection::new(
                400,
                50035,
                &format!("Invalid interaction response type {other:?}"),
            ));
        }
    };
    if let Some(interaction) = state.interactions.get_mut(&id) {
        interaction.acknowledged = true;
        interaction.original_message_id = interaction.original_message_id.or(original);
        interaction.responses.push(p.json.clone());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn check_app(app: u64) -> Result<(), Rejection> {
    if app == APP_ID {
        Ok(())
    } else {
        Err(Rejection::new(404, 10015, "Unknown Webhook"))
    }
}

/// `POST /webhooks/{app}/{token}`: a follow-up message in the interaction's channel.
pub(super) async fn followup(
    State(shared): State<Arc<Shared>>,
    Path((app, token)): Path<(u64, String)>,
    Extension(p): Extension<Payload>,
) -> Answer {
    check_app(app)?;
    let mut state = shared.lock();
    let interaction = state.interaction_by_token(&token)?;
    if !interaction.acknowledged {
        return Err(Rejection::new(404, 10015, "Unknown Webhook"));
    }
    let (id, channel_id) = (interaction.id, interaction.channel_id);
    let new = NewMessage {
        channel_id,
        author_id: BOT_ID,
        body: &p.json,
        files: &p.files,
        kind: 0,
        interaction_id: Some(id),
        deferred: false,
    };
    let message = state.create_message(new)?;
    if let Some(interaction) = state.interactions.get_mut(&id) {
        interaction.responses.push(p.json.clone());
    }
    Ok(axum::Json(message).into_response())
}

/// The channel and message a webhook message path names (`@original` or an id).
fn resolve(shared: &Shared, app: u64, token: &str, message: &str) -> Result<(u64, u64), Rejection> {
    check_app(app)?;
    let mut state = shared.lock();
    let interaction = state.interaction_by_token(token)?;
    let id = if message == "@original" {
        interaction.original_message_id
    } else {
        message.parse().ok()
    };
    let id = id.ok_or_else(|| Rejection::new(404, 10008, "Unknown Message"))?;
    Ok((interaction.channel_id, id))
}

/// `GET /webhooks/{app}/{token}/messages/{m}`.
pub(super) async fn get_message(
    State(shared): State<Arc<Shared>>,
    Path((app, token, m)): Path<(u64, String, String)>,
) -> Answer {
    let (channel_id, id) = resolve(&shared, app, &token, &m)?;
    let mut state = shared.lock();
    let message = state.find_message(channel_id, id)?.clone();
    Ok(axum::Json(state.message_json(&message)).into_response())
}

/// `PATCH /webhooks/{app}/{token}/messages/{m}`.
pub(super) async fn edit_message(
    State(shared): State<Arc<Shared>>,
    Path((app, token, m)): Path<(u64, String, String)>,
    Extension(p): Extension<Payload>,
) -> Answer {
    let (channel_id, id) = resolve(&shared, app, &token, &m)?;
    let message: Value = shared
        .lock()
        .edit_message(channel_id, id, &p.json, &p.files)?;
    Ok(axum::Json(message).into_response())
}

/// `DELETE /webhooks/{app}/{token}/messages/{m}`.
pub(super) async fn delete_message(
    State(shared): State<Arc<Shared>>,
    Path((app, token, m)): Path<(u64, String, String)>,
) -> Answer {
    let (channel_id, id) = resolve(&shared, app, &token, &m)?;
    shared.lock().delete_message(channel_id, id)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
