//! The REST API under `/api/v10`: one middleware records every request and applies queued
//! failures; the handlers answer with complete Discord objects.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};

use super::messages::NewMessage;
use super::multipart::Payload;
use super::objects::{self, now_millis};
use super::state::{PendingFailure, Rejection, State as World};
use super::{APP_ID, BOT_ID, Failure, RecordedRequest, Shared, gateway, interactions};

type Answer = Result<Response, Rejection>;

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(self.body)).into_response()
    }
}

fn json(value: Value) -> Answer {
    Ok(axum::Json(value).into_response())
}

fn no_content() -> Answer {
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The REST routes, the gateway websocket and the recording middleware.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/users/@me", get(current_user))
        .route("/users/@me/channels", post(open_dm))
        .route("/oauth2/applications/@me", get(application))
        .route("/gateway", get(gateway_url))
        .route("/gateway/bot", get(gateway_bot))
        .route("/channels/{c}", get(get_channel).patch(patch_channel))
        .route(
            "/channels/{c}/messages",
            post(create_message).get(list_messages),
        )
        .route(
            "/channels/{c}/messages/{m}",
            get(get_message).patch(edit_message).delete(delete_message),
        )
        .route(
            "/channels/{c}/messages/{m}/threads",
            post(thread_from_message),
        )
        .route(
            "/channels/{c}/messages/{m}/reactions/{emoji}/@me",
            put(react).delete(unreact),
        )
        .route("/channels/{c}/threads", post(thread_without_message))
        .route("/channels/{c}/typing", post(typing))
        .route("/channels/{c}/thread-members/@me", put(join_thread))
        .route(
            "/applications/{app}/commands",
            put(put_commands).get(get_commands),
        )
        .route(
            "/applications/{app}/guilds/{g}/commands",
            put(put_guild_commands).get(get_commands),
        )
        .route("/guilds/{g}/members/{u}", get(get_member))
        .route("/guilds/{g}/roles", get(get_roles))
        .route(
            "/interactions/{id}/{token}/callback",
            post(interactions::callback),
        )
        .route("/webhooks/{app}/{token}", post(interactions::followup))
        .route(
            "/webhooks/{app}/{token}/messages/{m}",
            get(interactions::get_message)
                .patch(interactions::edit_message)
                .delete(interactions::delete_message),
        )
        .fallback(unknown_route);
    Router::new()
        .nest("/api/v10", api)
        .route("/gateway", get(gateway::endpoint))
        .layer(middleware::from_fn_with_state(shared.clone(), record))
        .with_state(shared)
}

/// Records the request, then either fails it as `fail_next` asked or runs the handler.
async fn record(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/gateway" {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let payload = Payload::parse(content_type, &bytes);
    let method = parts.method.as_str().to_owned();
    let path = parts.uri.path().to_owned();
    let (index, failure) = {
        let mut state = shared.lock();
        state.requests.push(RecordedRequest {
            method: method.clone(),
            path: path.clone(),
            query: parts.uri.query().map(str::to_owned),
            body: payload.json.clone(),
            files: payload.files.clone(),
            status: 0,
        });
        (
            state.requests.len() - 1,
            take_failure(&mut state, &method, &path, &payload.json),
        )
    };
    let response = match failure {
        Some(failure) => failure_response(&failure),
        None => {
            let mut request = Request::from_parts(parts, Body::from(bytes));
            request.extensions_mut().insert(payload);
            next.run(request).await
        }
    };
    if let Some(recorded) = shared.lock().requests.get_mut(index) {
        recorded.status = response.status().as_u16();
    }
    response
}

fn take_failure(state: &mut World, method: &str, path: &str, body: &Value) -> Option<Failure> {
    let text = body.to_string();
    let pending: &mut PendingFailure = state.failures.iter_mut().find(|f| {
        f.remaining > 0
            && f.method.eq_ignore_ascii_case(method)
            && path.contains(&f.path_contains)
            && text.contains(&f.body_contains)
    })?;
    pending.remaining -= 1;
    let failure = pending.failure.clone();
    state.failures.retain(|f| f.remaining > 0);
    Some(failure)
}

/// A 429 with Discord's headers and body, or an error status with a JSON error body.
fn failure_response(failure: &Failure) -> Response {
    match *failure {
        Failure::RateLimited {
            retry_after,
            global,
        } => {
            let body = json!({
                "message": "You are being rate limited.",
                "retry_after": retry_after,
                "global": global,
                "code": 0,
            });
            let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
            let reset = now_millis() as f64 / 1000.0 + retry_after;
            let headers = response.headers_mut();
            let mut set = |name: &'static str, value: String| {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(name, value);
                }
            };
            set("retry-after", format!("{}", retry_after.ceil()));
            set("x-ratelimit-limit", "5".to_owned());
            set("x-ratelimit-remaining", "0".to_owned());
            set("x-ratelimit-reset", format!("{reset:.3}"));
            set("x-ratelimit-reset-after", format!("{retry_after:.3}"));
            set("x-ratelimit-bucket", "fake-bucket".to_owned());
            set(
                "x-ratelimit-scope",
                if global { "global" } else { "user" }.to_owned(),
            );
            if global {
                set("x-ratelimit-global", "true".to_owned());
            }
            response
        }
        Failure::Status(status) => {
            let (code, message) = match status {
                400 => (50035, "Invalid Form Body"),
                401 => (0, "401: Unauthorized"),
                403 => (50013, "Missing Permissions"),
                404 => (0, "404: Not Found"),
                _ => (0, "Internal Server Error"),
            };
            Rejection::new(status, code, message).into_response()
        }
    }
}

async fn unknown_route(request: Request) -> Response {
    eprintln!(
        "fake discord: no route for {} {}",
        request.method(),
        request.uri()
    );
    Rejection::new(404, 0, "Unknown").into_response()
}

async fn current_user() -> Answer {
    json(objects::current_user())
}

/// `GET /oauth2/applications/@me`: the bot's application, with its flags (the privileged
/// intents enabled in the developer portal).
async fn application(State(shared): State<Arc<Shared>>) -> Answer {
    let mut app = objects::application();
    app["flags"] = json!(shared.lock().application_flags);
    json(app)
}

/// `POST /users/@me/channels` `{"recipient_id"}`: the DM channel with that user, opened on
/// first use (the bot opening a DM to notify someone).
async fn open_dm(State(shared): State<Arc<Shared>>, Extension(p): Extension<Payload>) -> Answer {
    let user = p.json["recipient_id"]
        .as_str()
        .and_then(|s| s.parse::<u64>().ok())
        .or_else(|| p.json["recipient_id"].as_u64())
        .ok_or_else(|| Rejection::new(400, 50035, "Invalid Form Body: recipient_id"))?;
    let mut state = shared.lock();
    let channel = state.dm_channel(user);
    json(state.channel_json(channel)?)
}

async fn gateway_url(State(shared): State<Arc<Shared>>) -> Answer {
    json(json!({ "url": shared.gateway_url() }))
}

async fn gateway_bot(State(shared): State<Arc<Shared>>) -> Answer {
    json(json!({
        "url": shared.gateway_url(),
        "shards": 1,
        "session_start_limit": { "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1 },
    }))
}

async fn get_channel(State(shared): State<Arc<Shared>>, Path(c): Path<u64>) -> Answer {
    json(shared.lock().channel_json(c)?)
}

async fn patch_channel(
    State(shared): State<Arc<Shared>>,
    Path(c): Path<u64>,
    Extension(p): Extension<Payload>,
) -> Answer {
    json(shared.lock().update_channel(c, &p.json)?)
}

async fn create_message(
    State(shared): State<Arc<Shared>>,
    Path(c): Path<u64>,
    Extension(p): Extension<Payload>,
) -> Answer {
    let new = NewMessage {
        channel_id: c,
        author_id: BOT_ID,
        body: &p.json,
        files: &p.files,
        kind: 0,
        interaction_id: None,
        deferred: false,
    };
    json(shared.lock().create_message(new)?)
}

async fn list_messages(State(shared): State<Arc<Shared>>, Path(c): Path<u64>) -> Answer {
    let state = shared.lock();
    state.channel_json(c)?;
    let newest_first: Vec<Value> = state
        .messages
        .get(&c)
        .into_iter()
        .flatten()
        .rev()
        .take(50)
        .map(|m| state.message_json(m))
        .collect();
    json(Value::Array(newest_first))
}

async fn get_message(State(shared): State<Arc<Shared>>, Path((c, m)): Path<(u64, u64)>) -> Answer {
    let mut state = shared.lock();
    let message = state.find_message(c, m)?.clone();
    json(state.message_json(&message))
}

async fn edit_message(
    State(shared): State<Arc<Shared>>,
    Path((c, m)): Path<(u64, u64)>,
    Extension(p): Extension<Payload>,
) -> Answer {
    let mut state = shared.lock();
    if state.find_message(c, m)?.public.author_id != BOT_ID {
        return Err(Rejection::new(
            403,
            50005,
            "Cannot edit a message authored by another user",
        ));
    }
    json(state.edit_message(c, m, &p.json, &p.files)?)
}

async fn delete_message(
    State(shared): State<Arc<Shared>>,
    Path((c, m)): Path<(u64, u64)>,
) -> Answer {
    shared.lock().delete_message(c, m)?;
    no_content()
}

async fn thread_from_message(
    State(shared): State<Arc<Shared>>,
    Path((c, m)): Path<(u64, u64)>,
    Extension(p): Extension<Payload>,
) -> Answer {
    json(shared.lock().create_thread(c, Some(m), &p.json)?)
}

async fn thread_without_message(
    State(shared): State<Arc<Shared>>,
    Path(c): Path<u64>,
    Extension(p): Extension<Payload>,
) -> Answer {
    json(shared.lock().create_thread(c, None, &p.json)?)
}

async fn react(
    State(shared): State<Arc<Shared>>,
    Path((c, m, emoji)): Path<(u64, u64, String)>,
) -> Answer {
    let mut state = shared.lock();
    let message = state.find_message(c, m)?;
    if !message.public.reactions.contains(&emoji) {
        message.public.reactions.push(emoji);
    }
    no_content()
}

async fn unreact(
    State(shared): State<Arc<Shared>>,
    Path((c, m, emoji)): Path<(u64, u64, String)>,
) -> Answer {
    shared
        .lock()
        .find_message(c, m)?
        .public
        .reactions
        .retain(|e| *e != emoji);
    no_content()
}

async fn typing(State(shared): State<Arc<Shared>>, Path(c): Path<u64>) -> Answer {
    let mut state = shared.lock();
    state.channel_json(c)?;
    *state.typing.entry(c).or_default() += 1;
    no_content()
}

async fn join_thread(State(shared): State<Arc<Shared>>, Path(c): Path<u64>) -> Answer {
    let mut state = shared.lock();
    state.channel_json(c)?;
    if let Some(t) = state.threads.iter_mut().find(|t| t.public.id == c) {
        t.public.bot_joined = true;
    }
    no_content()
}

fn check_app(app: u64) -> Result<(), Rejection> {
    if app == APP_ID {
        Ok(())
    } else {
        Err(Rejection::new(404, 10002, "Unknown Application"))
    }
}

/// Replaces the registered commands, answering them with ids like Discord.
fn replace_commands(shared: &Shared, app: u64, guild: Option<u64>, p: &Payload) -> Answer {
    check_app(app)?;
    let mut state = shared.lock();
    if guild.is_some_and(|g| !state.guilds.contains_key(&g)) {
        return Err(Rejection::new(404, 10004, "Unknown Guild"));
    }
    let Some(sent) = p.json.as_array() else {
        return Err(Rejection::new(400, 50035, "Invalid Form Body"));
    };
    let commands: Vec<Value> = sent
        .iter()
        .map(|c| {
            let id = state.next_id();
            objects::command(c, id, guild)
        })
        .collect();
    state.commands.clone_from(&commands);
    json(Value::Array(commands))
}

async fn put_commands(
    State(shared): State<Arc<Shared>>,
    Path(app): Path<u64>,
    Extension(p): Extension<Payload>,
) -> Answer {
    replace_commands(&shared, app, None, &p)
}

async fn put_guild_commands(
    State(shared): State<Arc<Shared>>,
    Path((app, g)): Path<(u64, u64)>,
    Extension(p): Extension<Payload>,
) -> Answer {
    replace_commands(&shared, app, Some(g), &p)
}

async fn get_commands(State(shared): State<Arc<Shared>>) -> Answer {
    json(Value::Array(shared.lock().commands.clone()))
}

async fn get_member(State(shared): State<Arc<Shared>>, Path((g, u)): Path<(u64, u64)>) -> Answer {
    let state = shared.lock();
    if !state.guilds.contains_key(&g) {
        return Err(Rejection::new(404, 10004, "Unknown Guild"));
    }
    let user = state
        .users
        .get(&u)
        .ok_or_else(|| Rejection::new(404, 10007, "Unknown Member"))?;
    json(objects::member(user, &state.joined_at, false))
}

async fn get_roles(State(shared): State<Arc<Shared>>, Path(g): Path<u64>) -> Answer {
    let state = shared.lock();
    if !state.guilds.contains_key(&g) {
        return Err(Rejection::new(404, 10004, "Unknown Guild"));
    }
    json(Value::Array(state.roles_in(g)))
}
