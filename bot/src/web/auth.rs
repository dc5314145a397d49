//! Who is looking: sign-in with a one-time link or the operator token (or a service JWT for
//! `sandpiper-admin`), the session cookie, sign-out, and the rate limit on failed attempts.
//!
//! The cookie carries only a random session id, encrypted (axum-extra's private cookie jar)
//! with a key every node of the database shares; the session row decides, so signing out
//! ends it everywhere. HttpOnly, SameSite=Strict, Secure when the page is served over HTTPS
//! (the configured public URL, or a proxy's `X-Forwarded-Proto: https`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, Key, PrivateCookieJar, SameSite};
use sandpiper_agent::store::web_access::{RedeemError, WebIdentity, WebSession};

use super::WebState;
use super::pages;
use super::read_model::Viewer;

/// The session cookie's name.
pub(super) const COOKIE: &str = "sandpiper_session";
/// Failed sign-ins allowed per client within [`FAILURE_WINDOW`].
const MAX_FAILURES: usize = 10;
/// The window failed sign-ins are counted in.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Most clients whose failures are remembered (the oldest are forgotten first).
const MAX_TRACKED: usize = 4096;

/// Failed sign-ins per client (its address as the proxy reports it, else one shared bucket).
#[derive(Debug, Clone, Default)]
pub(super) struct FailureLimit {
    seen: Arc<Mutex<HashMap<String, Vec<Instant>>>>,
}

impl FailureLimit {
    /// Whether `client` may try again now.
    fn allows(&self, client: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let recent = seen.entry(client.to_owned()).or_default();
        recent.retain(|t| t.elapsed() < FAILURE_WINDOW);
        recent.len() < MAX_FAILURES
    }

    /// Counts a failure of `client`.
    fn failed(&self, client: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_TRACKED && !seen.contains_key(client) {
            seen.retain(|_, times| times.iter().any(|t| t.elapsed() < FAILURE_WINDOW));
            if seen.len() >= MAX_TRACKED {
                seen.clear();
            }
        }
        seen.entry(client.to_owned())
            .or_default()
            .push(Instant::now());
    }
}

/// The client as far as this node can tell: the first `X-Forwarded-For` hop behind a proxy.
fn client_of(headers: &HeaderMap) -> String {
    headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "direct".into())
}

/// Whether the browser reached the page over HTTPS.
fn over_https(state: &WebState, headers: &HeaderMap) -> bool {
    state.https
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

fn session_cookie(id: String, secure: bool) -> Cookie<'static> {
    Cookie::build((COOKIE, id))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .path("/")
        .build()
}

/// The session the request's cookie names, if it is live.
async fn session_of(state: &WebState, headers: &HeaderMap) -> Option<WebSession> {
    let jar = PrivateCookieJar::from_headers(headers, state.key.clone());
    let id = jar.get(COOKIE)?.value().to_owned();
    match state.sources.local.agent().store().web_session(&id).await {
        Ok(session) => session,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a status page session");
            None
        }
    }
}

/// The viewer a session is.
async fn viewer_of(state: &WebState, session: &WebSession) -> Viewer {
    let name = match &session.who.user_id {
        None => "operator".to_owned(),
        Some(id) => match state.sources.local.agent().store().public_name(id).await {
            Ok(Some(name)) => name,
            _ => id.clone(),
        },
    };
    Viewer {
        user_id: session.who.user_id.clone(),
        name,
        admin: session.who.admin,
        csrf: csrf_token(&state.key, &session.id),
    }
}

/// The token every form of a session carries (hex sha256 over the cookie key's signing half
/// and the session id): only a page this server rendered for that session knows it, it is the
/// same on every node sharing the key, and it ends with the session. The session cookie being
/// SameSite=Strict is the first guard against a cross-site POST; this is the second.
pub(super) fn csrf_token(key: &Key, session_id: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"sandpiper-csrf\0");
    h.update(key.signing());
    h.update(b"\0");
    h.update(session_id.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `given` is the session's form token.
pub(super) fn csrf_ok(viewer: &Viewer, given: Option<&str>) -> bool {
    given.is_some_and(|g| !g.is_empty() && constant_time_eq(g.as_bytes(), viewer.csrf.as_bytes()))
}

/// Lets requests with a live session through, the [`Viewer`] and the [`WebSession`] in
/// their extensions; the page
/// itself answers with the sign-in page, everything else with a bare 401.
pub(super) async fn require(
    State(state): State<WebState>,
    mut req: Request,
    next: Next,
) -> Response {
    match session_of(&state, req.headers()).await {
        Some(session) => {
            let viewer = viewer_of(&state, &session).await;
            req.extensions_mut().insert(viewer);
            req.extensions_mut().insert(session);
            next.run(req).await
        }
        None if req.uri().path() == "/" => {
            (StatusCode::UNAUTHORIZED, Html(pages::sign_in(None))).into_response()
        }
        None => (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "sign in first: /console in chat gives you a link\n",
        )
            .into_response(),
    }
}

/// Starts a session for `who` and sends the browser to the page.
async fn start(state: &WebState, headers: &HeaderMap, who: &WebIdentity) -> Response {
    match state
        .sources
        .local
        .agent()
        .store()
        .create_web_session(who)
        .await
    {
        Ok(session) => {
            tracing::info!(
                user = who.user_id.as_deref().unwrap_or("-"),
                admin = who.admin,
                "signed in to the status page"
            );
            let jar = PrivateCookieJar::new(state.key.clone())
                .add(session_cookie(session.id, over_https(state, headers)));
            (jar, Redirect::to("/")).into_response()
        }
        Err(e) => unavailable(e),
    }
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    tracing::warn!(error = %e, "status page: the database failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Html(pages::problem(
            "Not available",
            "The database did not answer; try again in a moment.",
        )),
    )
        .into_response()
}

fn too_many() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "60")],
        Html(pages::problem(
            "Too many attempts",
            "Too many failed sign-ins from here; wait a minute and use a new link.",
        )),
    )
        .into_response()
}

/// `GET /sign-in/{token}`: a one-time link.
pub(super) async fn link(
    State(state): State<WebState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let client = client_of(&headers);
    if !state.failures.allows(&client) {
        return too_many();
    }
    let redeemed = state
        .sources
        .local
        .agent()
        .store()
        .redeem_sign_in_link(&token)
        .await;
    match redeemed {
        Ok(Ok(who)) => start(&state, &headers, &who).await,
        Ok(Err(e)) => {
            state.failures.failed(&client);
            tracing::info!(client = %crate::log_format::escape_controls(&client), reason = ?e, "status page sign-in link refused");
            let status = match e {
                RedeemError::Unknown => StatusCode::UNAUTHORIZED,
                RedeemError::Used | RedeemError::Expired => StatusCode::GONE,
            };
            (
                status,
                Html(pages::problem("Sign-in refused", &e.to_string())),
            )
                .into_response()
        }
        Err(e) => unavailable(e),
    }
}

/// The operator token form.
#[derive(Debug, serde::Deserialize)]
pub(super) struct TokenForm {
    token: String,
}

/// `POST /sign-in`: the operator token, or a service JWT for `sandpiper-admin`.
pub(super) async fn token(
    State(state): State<WebState>,
    headers: HeaderMap,
    Form(form): Form<TokenForm>,
) -> Response {
    let client = client_of(&headers);
    if !state.failures.allows(&client) {
        return too_many();
    }
    let given = form.token.trim();
    let operator = state
        .operator_token
        .as_ref()
        .is_some_and(|t| !given.is_empty() && constant_time_eq(t.as_bytes(), given.as_bytes()));
    let jwt = state
        .service_key
        .as_ref()
        .is_some_and(|k| k.verify(given, crate::service_jwt::ADMIN_AUDIENCE).is_ok());
    if operator || jwt {
        let who = WebIdentity {
            user_id: None,
            admin: true,
        };
        return start(&state, &headers, &who).await;
    }
    state.failures.failed(&client);
    tracing::info!(client = %crate::log_format::escape_controls(&client), "status page operator sign-in refused");
    (
        StatusCode::UNAUTHORIZED,
        Html(pages::sign_in(Some(
            "That is not the operator token (nor a service token for sandpiper-admin).",
        ))),
    )
        .into_response()
}

/// `POST /sign-out`: ends the session everywhere and forgets the cookie.
pub(super) async fn sign_out(State(state): State<WebState>, headers: HeaderMap) -> Response {
    if let Some(session) = session_of(&state, &headers).await
        && let Err(e) = state
            .sources
            .local
            .agent()
            .store()
            .end_web_session(&session.id)
            .await
    {
        return unavailable(e);
    }
    let jar =
        PrivateCookieJar::new(state.key.clone()).remove(Cookie::build(COOKIE).path("/").build());
    (jar, Redirect::to("/")).into_response()
}

/// Equal bytes, compared in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The cookie key (64 bytes: encryption and signing) from the database's shared secret.
pub(super) fn key_from(secret: &str) -> Key {
    use sha2::Digest;
    Key::from(&sha2::Sha512::digest(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_limited_per_client() {
        let limit = FailureLimit::default();
        for _ in 0..MAX_FAILURES {
            assert!(limit.allows("a"));
            limit.failed("a");
        }
        assert!(!limit.allows("a"));
        assert!(limit.allows("b"));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn form_tokens_differ_per_session_and_key() {
        let a = key_from("secret-a");
        let b = key_from("secret-b");
        let t = csrf_token(&a, "s1");
        assert_eq!(t.len(), 64);
        assert_eq!(
            t,
            csrf_token(&a, "s1"),
            "the same on every node sharing the key"
        );
        assert_ne!(t, csrf_token(&a, "s2"));
        assert_ne!(t, csrf_token(&b, "s1"));
        let viewer = Viewer {
            user_id: None,
            name: "operator".into(),
            admin: true,
            csrf: t.clone(),
        };
        assert!(csrf_ok(&viewer, Some(&t)));
        assert!(!csrf_ok(&viewer, Some(&csrf_token(&a, "s2"))));
        assert!(!csrf_ok(&viewer, Some("")));
        assert!(!csrf_ok(&viewer, None));
    }
}
