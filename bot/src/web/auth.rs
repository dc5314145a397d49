//! Who is looking: sign-in with a one-time link, or the operator token (or a service JWT for
//! `sandpiper-admin`) to view, the session cookie, sign-out, and the rate limit on failed
//! attempts.
//!
//! The cookie carries only a random session id, encrypted (axum-extra's private cookie jar)
//! with a key every node of the database shares; the session row decides, so signing out
//! ends it everywhere. HttpOnly, SameSite=Strict, Secure when the page is served over HTTPS
//! (the configured public URL, or `X-Forwarded-Proto: https` from a trusted proxy).
//!
//! A link is spent only by a POST: `GET /sign-in/{token}` answers a page with a button, so a
//! link previewer or a mail scanner that opens it signs nobody in. A service JWT signs in
//! once (its `jti` is remembered until it expires) and its session ends when the token would.
//! The operator token and service JWTs are nobody in chat: their sessions view, and decide
//! nothing (`decide`).
//!
//! Failed sign-ins are counted per client: the TCP peer (an IPv4 address, an IPv6 /64, as
//! the server counts connections), or, when the peer is one of `[server] trusted_proxies`,
//! the nearest address in `X-Forwarded-For` that is not one of them. Anyone else's
//! `X-Forwarded-For` is ignored.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, Key, PrivateCookieJar, SameSite};
use ipnet::IpNet;
use sandpiper_agent::store::web_access::{RedeemError, WebIdentity, WebSession};

use super::WebState;
use super::pages;
use super::read_model::Viewer;
use crate::http_server::peers::{Peer, peer_of};

/// The session cookie's name.
pub(super) const COOKIE: &str = "sandpiper_session";
/// Failed sign-ins allowed per client within [`FAILURE_WINDOW`].
const MAX_FAILURES: usize = 10;
/// The window failed sign-ins are counted in.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Most clients whose failures are remembered (the oldest are forgotten first).
const MAX_TRACKED: usize = 4096;

/// Failed sign-ins per client ([`Caller::client`]; requests without a peer, which only
/// in-process tests make, share one count).
#[derive(Debug, Clone, Default)]
pub(super) struct FailureLimit {
    seen: Arc<Mutex<HashMap<Option<Peer>, Vec<Instant>>>>,
}

impl FailureLimit {
    /// Whether `client` may try again now.
    fn allows(&self, client: Option<Peer>) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let recent = seen.entry(client).or_default();
        recent.retain(|t| t.elapsed() < FAILURE_WINDOW);
        recent.len() < MAX_FAILURES
    }

    /// Counts a failure of `client`.
    fn failed(&self, client: Option<Peer>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_TRACKED && !seen.contains_key(&client) {
            seen.retain(|_, times| times.iter().any(|t| t.elapsed() < FAILURE_WINDOW));
            if seen.len() >= MAX_TRACKED {
                seen.clear();
            }
        }
        seen.entry(client).or_default().push(Instant::now());
    }
}

/// Whether `ip` is one of the trusted proxies.
fn trusted(proxies: &[IpNet], ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    proxies.iter().any(|net| net.contains(&ip))
}

/// The client behind `peer`: `peer` itself unless it is a trusted proxy; then the nearest
/// `X-Forwarded-For` hop (read from the right, as each proxy appends) that is not a trusted
/// proxy. A hop that is not an address ends the walk: what is left of it was written by
/// whoever sent the request.
fn forwarded_client(proxies: &[IpNet], peer: IpAddr, headers: &HeaderMap) -> IpAddr {
    let mut client = peer;
    if !trusted(proxies, peer) {
        return client;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.into_iter().rev() {
        let Ok(ip) = hop.parse::<IpAddr>() else {
            break;
        };
        client = ip;
        if !trusted(proxies, ip) {
            break;
        }
    }
    client
}

/// Who is asking, as far as this node can tell: the client failed sign-ins count against,
/// and whether the browser reached the page over HTTPS.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller {
    client: Option<Peer>,
    https: bool,
}

impl FromRequestParts<WebState> for Caller {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, Infallible> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        let proxied = peer.is_some_and(|p| trusted(&state.proxies, p));
        let forwarded_https = parts
            .headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"));
        Ok(Caller {
            client: peer.map(|p| peer_of(forwarded_client(&state.proxies, p, &parts.headers))),
            https: state.https || (proxied && forwarded_https),
        })
    }
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
    form_token(key, b"sandpiper-csrf", session_id)
}

/// The token of the form a sign-in link's page carries: only this server could have
/// rendered it for that link.
fn link_form_token(key: &Key, link: &str) -> String {
    form_token(key, b"sandpiper-sign-in-link", link)
}

/// Hex sha256 over `purpose`, the cookie key's signing half and `id`.
fn form_token(key: &Key, purpose: &[u8], id: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(purpose);
    h.update(b"\0");
    h.update(key.signing());
    h.update(b"\0");
    h.update(id.as_bytes());
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

/// Starts a session for `who` (ending by `ends_by`, unix ms, when its credential does) and
/// sends the browser to the page.
async fn start(
    state: &WebState,
    caller: Caller,
    who: &WebIdentity,
    ends_by: Option<i64>,
) -> Response {
    let store = state.sources.local.agent().store();
    match store.create_web_session(who, ends_by).await {
        Ok(session) => {
            tracing::info!(
                user = who.user_id.as_deref().unwrap_or("-"),
                admin = who.admin,
                expires_at = session.expires_at,
                "signed in to the status page"
            );
            let jar = PrivateCookieJar::new(state.key.clone())
                .add(session_cookie(session.id, caller.https));
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

/// `GET /sign-in/{token}`: the link's page, whose button signs in. Opening a link spends
/// nothing, so a previewer that fetches it takes no session.
pub(super) async fn link_page(
    State(state): State<WebState>,
    Path(token): Path<String>,
) -> Response {
    let form = link_form_token(&state.key, &token);
    Html(pages::sign_in_link(&token, &form)).into_response()
}

/// The sign-in link page's form.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct LinkForm {
    csrf: Option<String>,
}

/// `POST /sign-in/{token}`: the link's button, which spends the link.
pub(super) async fn link(
    State(state): State<WebState>,
    caller: Caller,
    Path(token): Path<String>,
    Form(form): Form<LinkForm>,
) -> Response {
    let expected = link_form_token(&state.key, &token);
    let from_our_page = form
        .csrf
        .as_deref()
        .is_some_and(|g| constant_time_eq(g.as_bytes(), expected.as_bytes()));
    if !from_our_page {
        tracing::warn!(client = ?caller.client, "status page sign-in refused: missing or wrong form token");
        return (
            StatusCode::FORBIDDEN,
            Html(pages::problem(
                "Refused",
                "This form is not from the sign-in link's page. Open the link again.",
            )),
        )
            .into_response();
    }
    if !state.failures.allows(caller.client) {
        return too_many();
    }
    let store = state.sources.local.agent().store();
    match store.redeem_sign_in_link(&token).await {
        Ok(Ok(who)) => start(&state, caller, &who, None).await,
        Ok(Err(e)) => {
            state.failures.failed(caller.client);
            tracing::info!(client = ?caller.client, reason = ?e, "status page sign-in link refused");
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

/// What a token typed into the sign-in form is.
enum Typed {
    /// The operator token: a view until the usual session lifetime.
    Operator,
    /// A service JWT for `sandpiper-admin`, not used before: a view until it expires (unix
    /// ms).
    ServiceToken { expires_at: i64 },
    /// Neither, or a JWT used already.
    Refused,
}

/// Checks a typed token; a valid JWT is spent here (the store remembers its `jti`).
async fn typed(state: &WebState, given: &str) -> Result<Typed, sandpiper_agent::StoreError> {
    let operator = state
        .operator_token
        .as_ref()
        .is_some_and(|t| !given.is_empty() && constant_time_eq(t.as_bytes(), given.as_bytes()));
    if operator {
        return Ok(Typed::Operator);
    }
    let claims = state
        .service_key
        .as_ref()
        .and_then(|k| k.verify(given, crate::service_jwt::ADMIN_AUDIENCE).ok());
    let Some((jti, exp)) = claims.and_then(|c| Some((c.jti?, c.exp))) else {
        return Ok(Typed::Refused);
    };
    let expires_at = i64::try_from(exp.saturating_mul(1000)).unwrap_or(i64::MAX);
    let store = state.sources.local.agent().store();
    Ok(match store.use_token_once(&jti, expires_at).await? {
        true => Typed::ServiceToken { expires_at },
        false => Typed::Refused,
    })
}

/// `POST /sign-in`: the operator token, or a service JWT for `sandpiper-admin` (once). Either
/// signs in to view everything; neither is a person in chat, so neither decides.
pub(super) async fn token(
    State(state): State<WebState>,
    caller: Caller,
    Form(form): Form<TokenForm>,
) -> Response {
    if !state.failures.allows(caller.client) {
        return too_many();
    }
    let viewer = WebIdentity {
        user_id: None,
        admin: true,
    };
    match typed(&state, form.token.trim()).await {
        Ok(Typed::Operator) => start(&state, caller, &viewer, None).await,
        Ok(Typed::ServiceToken { expires_at }) => {
            start(&state, caller, &viewer, Some(expires_at)).await
        }
        Ok(Typed::Refused) => {
            state.failures.failed(caller.client);
            tracing::info!(client = ?caller.client, "status page operator sign-in refused");
            (
                StatusCode::UNAUTHORIZED,
                Html(pages::sign_in(Some(
                    "That is not the operator token (nor an unused service token for \
                     sandpiper-admin).",
                ))),
            )
                .into_response()
        }
        Err(e) => unavailable(e),
    }
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
        let a = Some(peer_of("192.0.2.1".parse().unwrap()));
        let b = Some(peer_of("192.0.2.2".parse().unwrap()));
        for _ in 0..MAX_FAILURES {
            assert!(limit.allows(a));
            limit.failed(a);
        }
        assert!(!limit.allows(a));
        assert!(limit.allows(b));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn a_forwarded_client_is_believed_only_from_a_trusted_proxy() {
        let proxies: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut headers = HeaderMap::new();
        headers.append(
            "x-forwarded-for",
            "203.0.113.9, 198.51.100.4".parse().unwrap(),
        );
        headers.append("x-forwarded-for", "10.1.1.1".parse().unwrap());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (peer, want) in [
            // A stranger's header is ignored: the stranger is the client.
            ("192.0.2.1", "192.0.2.1"),
            // Behind the proxies, the nearest hop they did not write.
            ("10.0.0.1", "198.51.100.4"),
            ("::ffff:10.0.0.1", "198.51.100.4"),
        ] {
            assert_eq!(
                forwarded_client(&proxies, ip(peer), &headers),
                ip(want),
                "{peer}"
            );
        }
        let mut forged = HeaderMap::new();
        forged.insert(
            "x-forwarded-for",
            "1.2.3.4, not-an-address".parse().unwrap(),
        );
        assert_eq!(
            forwarded_client(&proxies, ip("10.0.0.1"), &forged),
            ip("10.0.0.1"),
            "a hop that is not an address ends the walk"
        );
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
        assert_ne!(
            link_form_token(&a, "s1"),
            t,
            "a link's form is not a session's"
        );
    }
}
