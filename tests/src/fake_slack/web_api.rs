//! The HTTP side: `/api/{method}` (form, JSON or query arguments), the file upload URL, response
//! URLs, and the routing of `/socket` to the websocket handler.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde_json::{Map, Value, json};

use super::methods;
use super::socket;
use super::state::Shared;

/// Every route of the fake.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/{method}", any(api))
        .route("/upload/{file_id}", post(upload))
        .route("/response/{id}", post(response_url))
        .route("/socket", get(socket::upgrade))
        .layer(DefaultBodyLimit::disable())
        .with_state(shared)
}

/// One Web API call: record it, maybe answer 429, else answer like Slack.
async fn api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let args = arguments(query.as_deref(), &headers, &body);
    let mut ledger = shared.ledger();
    ledger.calls.push((method.clone(), args.clone()));
    if let Some(retry_after) = ledger.take_failure(&method) {
        let mut response = (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        return response;
    }
    if ledger.unscoped.contains(&method) {
        return axum::Json(json!({"ok": false, "error": "missing_scope"})).into_response();
    }
    let text = args.to_string();
    if let Some((_, _, error)) = ledger
        .refused
        .iter()
        .find(|(m, needle, _)| *m == method && text.contains(needle.as_str()))
    {
        return axum::Json(json!({"ok": false, "error": error})).into_response();
    }
    let answer = match methods::answer(&mut ledger, &shared.base_url, &method, &args) {
        Ok(Value::Object(mut fields)) => {
            fields.insert("ok".to_owned(), Value::Bool(true));
            Value::Object(fields)
        }
        Ok(other) => other,
        Err(error) => {
            if error == "unknown_method" {
                eprintln!("fake slack: unknown Web API method {method} {args}");
            }
            json!({"ok": false, "error": error})
        }
    };
    let scopes = match &ledger.scopes {
        Some(scopes) => scopes.join(","),
        None => super::MANIFEST_SCOPES.join(","),
    };
    let mut response = axum::Json(answer).into_response();
    if let Ok(value) = HeaderValue::from_str(&scopes) {
        response.headers_mut().insert("x-oauth-scopes", value);
    }
    response
}

/// The arguments of a call as one JSON object: query parameters, then the form or JSON body.
/// Form values holding JSON (`blocks`, `view`, …) are parsed, as Slack does.
fn arguments(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Value {
    let mut args = Map::new();
    if let Some(query) = query {
        form_pairs(query.as_bytes(), &mut args);
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !body.is_empty() {
        if content_type.starts_with("application/json") {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(fields)) => args.extend(fields),
                Ok(other) => {
                    args.insert("_body".to_owned(), other);
                }
                Err(_) => {
                    args.insert(
                        "_body".to_owned(),
                        Value::String(String::from_utf8_lossy(body).into_owned()),
                    );
                }
            }
        } else {
            form_pairs(body, &mut args);
        }
    }
    for key in [
        "blocks",
        "attachments",
        "view",
        "files",
        "metadata",
        "users",
    ] {
        if let Some(Value::String(text)) = args.get(key)
            && (text.starts_with('[') || text.starts_with('{'))
            && let Ok(parsed) = serde_json::from_str::<Value>(text)
        {
            args.insert(key.to_owned(), parsed);
        }
    }
    Value::Object(args)
}

/// Decodes `application/x-www-form-urlencoded` pairs into `args`.
fn form_pairs(encoded: &[u8], args: &mut Map<String, Value>) {
    for pair in encoded.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        let mut parts = pair.splitn(2, |b| *b == b'=');
        let key = percent_decode(parts.next().unwrap_or_default());
        let value = percent_decode(parts.next().unwrap_or_default());
        args.insert(key, Value::String(value));
    }
}

fn percent_decode(encoded: &[u8]) -> String {
    let mut out = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        match encoded[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < encoded.len() => {
                let hex = std::str::from_utf8(&encoded[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The upload URL handed out by `files.getUploadURLExternal`: stores the bytes.
async fn upload(
    State(shared): State<Arc<Shared>>,
    Path(file_id): Path<String>,
    body: Bytes,
) -> Response {
    let mut ledger = shared.ledger();
    match ledger.files.iter_mut().find(|f| f.id == file_id) {
        Some(file) => {
            let len = body.len();
            file.bytes = Some(body.to_vec());
            (StatusCode::OK, format!("OK - {len}")).into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such upload").into_response(),
    }
}

/// A `response_url` from an interaction or command: recorded as calls of `response_url`.
async fn response_url(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut args = arguments(None, &headers, &body);
    args["response_url_id"] = Value::String(id);
    shared
        .ledger()
        .calls
        .push(("response_url".to_owned(), args));
    axum::Json(json!({"ok": true})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_bodies_decode_and_parse_embedded_json() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let body = b"channel=C1&text=a+b%26c%3D&blocks=%5B%7B%22type%22%3A%22divider%22%7D%5D";
        let args = arguments(Some("x=1%2"), &headers, body);
        assert_eq!(
            args,
            json!({"x": "1%2", "channel": "C1", "text": "a b&c=", "blocks": [{"type": "divider"}]})
        );
    }
}
