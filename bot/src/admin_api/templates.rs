//! Prompt templates under governance (issue 30; the reference's "Governance Sync"):
//!
//! - `GET /v1/api/prompt-templates`: every template, by name, with its `origin` (`manual` or
//!   `mcp`), `mcp_server` and `readonly`.
//! - `POST /v1/api/prompt-templates`: creates a manual template from
//!   `{"name", "content", "description"?, "arguments"?}`; 201. A manual template of that name
//!   is a 409; an MCP prompt of that name is replaced (the manual template wins, and later
//!   syncs skip the prompt, logging a warning).
//! - `GET /v1/api/prompt-templates/{name}`: one template; 404 when unknown.
//! - `PUT /v1/api/prompt-templates/{name}`: replaces a manual template's `content`,
//!   `description` and `arguments`; 403 for an MCP prompt (read-only), 404 when unknown.
//! - `DELETE /v1/api/prompt-templates/{name}`: 204; 403 for an MCP prompt, 404 when unknown.
//!
//! Every error is JSON `{"error": …}`; a malformed or invalid body is a 400 naming the field.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandpiper_agent::store::prompt_templates::{ManualTemplate, PromptTemplate, TemplateChange};
use serde_json::{Map, Value, json};

use super::{AdminState, ApiError};
use crate::service_jwt::Claims;

/// Longest name, in characters.
const MAX_NAME: usize = 128;
/// Longest description, in characters.
const MAX_DESCRIPTION: usize = 1_000;
/// Longest content, in bytes.
const MAX_CONTENT: usize = 64 * 1024;
/// Most arguments.
const MAX_ARGUMENTS: usize = 32;

/// A template as the API shows it (`arguments` as JSON, not text).
pub(super) fn view(t: &PromptTemplate) -> Value {
    let arguments = t
        .arguments
        .as_deref()
        .and_then(|a| serde_json::from_str::<Value>(a).ok())
        .unwrap_or(Value::Null);
    json!({
        "name": t.name,
        "description": t.description,
        "content": t.content,
        "arguments": arguments,
        "origin": t.origin,
        "mcp_server": t.mcp_server,
        "readonly": t.readonly,
    })
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest(message.into())
}

/// A template's name: letters, digits, `_`, `-`, `.`; at most [`MAX_NAME`].
fn check_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.chars().count() > MAX_NAME {
        return Err(bad(format!("name must be 1 to {MAX_NAME} characters")));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(bad("name may hold only letters, digits, `_`, `-` and `.`"));
    }
    Ok(())
}

/// A checked body: the fields a manual template has.
struct Body {
    name: Option<String>,
    description: Option<String>,
    content: String,
    arguments: Option<String>,
}

fn parse(bytes: &Bytes) -> Result<Body, ApiError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("the body is not JSON: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(bad("the body must be a JSON object"));
    };
    if let Some(unknown) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "name" | "description" | "content" | "arguments"))
    {
        return Err(bad(format!(
            "unknown field `{unknown}` (name, description, content, arguments)"
        )));
    }
    let name = match obj.remove("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err(bad("name must be a string")),
    };
    let content = match obj.remove("content") {
        Some(Value::String(s)) if !s.trim().is_empty() => s,
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(bad("content is required and may not be empty"));
        }
        Some(_) => return Err(bad("content must be a string")),
    };
    if content.len() > MAX_CONTENT {
        return Err(bad(format!("content is at most {MAX_CONTENT} bytes")));
    }
    let description = match obj.remove("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() <= MAX_DESCRIPTION => Some(s),
        Some(Value::String(_)) => {
            return Err(bad(format!(
                "description is at most {MAX_DESCRIPTION} characters"
            )));
        }
        Some(_) => return Err(bad("description must be a string")),
    };
    let arguments = match obj.remove("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(check_arguments(items)?),
        Some(_) => return Err(bad("arguments must be a list")),
    };
    Ok(Body {
        name,
        description,
        content,
        arguments,
    })
}

/// `[{"name", "description"?, "required"?}]`, names unique; stored as JSON text.
fn check_arguments(items: Vec<Value>) -> Result<String, ApiError> {
    if items.len() > MAX_ARGUMENTS {
        return Err(bad(format!("at most {MAX_ARGUMENTS} arguments")));
    }
    let mut out = Vec::with_capacity(items.len());
    let mut names: Vec<String> = Vec::new();
    for item in items {
        let Value::Object(arg) = item else {
            return Err(bad("each argument must be an object with a name"));
        };
        let mut clean = Map::new();
        for (k, v) in arg {
            match (k.as_str(), v) {
                ("name", Value::String(n)) => {
                    check_name(&n).map_err(|_| {
                        bad("an argument's name may hold only letters, digits, `_`, `-`, `.`")
                    })?;
                    if names.contains(&n) {
                        return Err(bad(format!("argument `{n}` is given twice")));
                    }
                    names.push(n.clone());
                    clean.insert(k, Value::String(n));
                }
                ("description", v @ (Value::String(_) | Value::Null)) => {
                    clean.insert(k, v);
                }
                ("required", v @ Value::Bool(_)) => {
                    clean.insert(k, v);
                }
                (other, _) => {
                    return Err(bad(format!(
                        "argument field `{other}` is unknown or of the wrong type \
                         (name: string, description: string, required: bool)"
                    )));
                }
            }
        }
        if !clean.contains_key("name") {
            return Err(bad("each argument needs a name"));
        }
        out.push(Value::Object(clean));
    }
    Ok(Value::Array(out).to_string())
}

fn unknown(name: &str) -> ApiError {
    ApiError::NotFound(format!("no prompt template `{name}`"))
}

fn read_only(name: &str) -> ApiError {
    ApiError::Forbidden(format!(
        "prompt template `{name}` comes from an MCP server and is read-only; create a manual \
         template of the same name to override it"
    ))
}

pub(super) async fn list(State(state): State<AdminState>) -> Result<Json<Value>, ApiError> {
    let all = state.agent.store().prompt_templates().await?;
    Ok(Json(
        json!({ "templates": all.iter().map(view).collect::<Vec<_>>() }),
    ))
}

pub(super) async fn get_one(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.agent.store().prompt_template(&name).await? {
        Some(t) => Ok(Json(view(&t))),
        None => Err(unknown(&name)),
    }
}

pub(super) async fn create(
    State(state): State<AdminState>,
    Extension(claims): Extension<Claims>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let body = parse(&bytes)?;
    let name = body.name.clone().ok_or_else(|| bad("name is required"))?;
    check_name(&name)?;
    let store = state.agent.store();
    let template = ManualTemplate {
        name: &name,
        description: body.description.as_deref(),
        content: &body.content,
        arguments: body.arguments.as_deref(),
    };
    match store.create_manual_template(&template).await? {
        TemplateChange::Done => {}
        TemplateChange::Exists | TemplateChange::ReadOnly | TemplateChange::Missing => {
            return Err(ApiError::Conflict(format!(
                "a manual prompt template `{name}` exists; change it with PUT"
            )));
        }
    }
    tracing::info!(template = %name, by = %claims.sub, "prompt template created over HTTP");
    let stored = store
        .prompt_template(&name)
        .await?
        .ok_or_else(|| unknown(&name))?;
    Ok((StatusCode::CREATED, Json(view(&stored))).into_response())
}

pub(super) async fn update(
    State(state): State<AdminState>,
    Extension(claims): Extension<Claims>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body = parse(&bytes)?;
    if body.name.as_deref().is_some_and(|n| n != name) {
        return Err(bad("name cannot be changed: it is the path's"));
    }
    let store = state.agent.store();
    let template = ManualTemplate {
        name: &name,
        description: body.description.as_deref(),
        content: &body.content,
        arguments: body.arguments.as_deref(),
    };
    match store.update_manual_template(&template).await? {
        TemplateChange::Done => {}
        TemplateChange::Missing => return Err(unknown(&name)),
        TemplateChange::ReadOnly | TemplateChange::Exists => return Err(read_only(&name)),
    }
    tracing::info!(template = %name, by = %claims.sub, "prompt template updated over HTTP");
    let stored = store
        .prompt_template(&name)
        .await?
        .ok_or_else(|| unknown(&name))?;
    Ok(Json(view(&stored)))
}

pub(super) async fn delete(
    State(state): State<AdminState>,
    Extension(claims): Extension<Claims>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    match state.agent.store().delete_manual_template(&name).await? {
        TemplateChange::Done => {
            tracing::info!(template = %name, by = %claims.sub, "prompt template deleted over HTTP");
            Ok(StatusCode::NO_CONTENT)
        }
        TemplateChange::Missing => Err(unknown(&name)),
        TemplateChange::ReadOnly | TemplateChange::Exists => Err(read_only(&name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked_field_by_field() {
        let ok = parse(&Bytes::from_static(
            br#"{"name":"standup","content":"hi","arguments":[{"name":"who","required":true}]}"#,
        ))
        .unwrap();
        assert_eq!(ok.name.as_deref(), Some("standup"));
        assert_eq!(
            ok.arguments.as_deref(),
            Some(r#"[{"name":"who","required":true}]"#)
        );
        for (body, says) in [
            (&b"nope"[..], "not JSON"),
            (b"[]", "object"),
            (br#"{"name":"a"}"#, "content is required"),
            (br#"{"name":"a","content":"  "}"#, "content is required"),
            (
                br#"{"name":"a","content":"x","colour":1}"#,
                "unknown field `colour`",
            ),
            (
                br#"{"name":"a","content":"x","arguments":{}}"#,
                "must be a list",
            ),
            (
                br#"{"name":"a","content":"x","arguments":[{"name":"b"},{"name":"b"}]}"#,
                "twice",
            ),
            (
                br#"{"name":"a","content":"x","arguments":[{"required":true}]}"#,
                "needs a name",
            ),
            (
                br#"{"name":"a","content":"x","arguments":[{"name":"b","x":1}]}"#,
                "`x`",
            ),
            (br#"{"name":"a","content":5}"#, "must be a string"),
        ] {
            let err = parse(&Bytes::copy_from_slice(body)).err().expect("refused");
            assert!(
                err.to_string().contains(says),
                "{}: {err}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(check_name("mcp__srv__greet").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name("<script>").is_err());
        assert!(check_name(&"x".repeat(MAX_NAME + 1)).is_err());
    }
}
