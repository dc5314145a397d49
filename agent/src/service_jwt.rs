//! Service JWTs: HS256 bearer tokens between sandpiper's own parts and operators' tools, with
//! issuer `sandpiper`, a caller-chosen audience (`sandpiper-admin` for the admin API,
//! `sandpiper-channel` for the notify endpoint), an expiry at most [`MAX_LIFETIME`] ahead and
//! [`LEEWAY`] for clock skew. Only HS256 is accepted: `alg: none`, any other algorithm, a
//! wrong audience or issuer, an expired or over-long token and a bad signature are refused.
//!
//! It lives in the agent crate because both sides use it: the notify tool signs tokens, the
//! binary's HTTP endpoints check them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// The `iss` of every service token.
pub const ISSUER: &str = "sandpiper";
/// The audience of the admin API.
pub const ADMIN_AUDIENCE: &str = "sandpiper-admin";
/// The audience of the notify endpoint on gateway nodes.
pub const CHANNEL_AUDIENCE: &str = "sandpiper-channel";
/// The longest a token may live (`exp` − now, and `exp` − `iat`).
pub const MAX_LIFETIME: Duration = Duration::from_secs(300);
/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const LEEWAY: Duration = Duration::from_secs(30);
/// The shortest secret accepted (HS256 wants at least the hash size).
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a token or a secret was refused. The text is safe to return to the caller (it never
/// contains the token or the secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// No secret is configured: every token is refused.
    #[error("service tokens are not configured on this server")]
    NoSecret,
    /// The configured secret is too short (an operator's error, said at start-up).
    #[error("the service token secret must be at least {MIN_SECRET_BYTES} bytes")]
    WeakSecret,
    /// The token is missing, malformed, badly signed, for another audience or issuer, or
    /// expired.
    #[error("invalid service token: {0}")]
    Invalid(String),
}

/// The claims sandpiper issues and checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// `sandpiper`.
    pub iss: String,
    /// Who the token is for (`sandpiper-admin`, `sandpiper-channel`).
    pub aud: String,
    /// Who the token speaks for (a node, an operator's tool).
    pub sub: String,
    /// Issued at (unix seconds).
    pub iat: u64,
    /// Expires at (unix seconds).
    pub exp: u64,
    /// The token's own id (random, set by [`ServiceKey::sign`]): the status page lets a token
    /// sign in once, and remembers its id until it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
}

/// The shared HS256 secret.
#[derive(Clone)]
pub struct ServiceKey {
    secret: Vec<u8>,
}

impl std::fmt::Debug for ServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceKey(<redacted>)")
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl ServiceKey {
    /// A key from a secret of at least [`MIN_SECRET_BYTES`].
    pub fn new(secret: impl Into<Vec<u8>>) -> Result<Self, JwtError> {
        let secret = secret.into();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(JwtError::WeakSecret);
        }
        Ok(Self { secret })
    }

    /// The key named by `[auth] jwt_secret_env` (default `SANDPIPER_JWT_SECRET`); `None` when
    /// the variable is unset or empty.
    pub fn from_env(
        auth: &crate::config::AuthConfig,
        env: &dyn crate::config::Env,
    ) -> Result<Option<Self>, JwtError> {
        match env.var(auth.effective_secret_env()) {
            Some(s) if !s.is_empty() => Self::new(s).map(Some),
            _ => Ok(None),
        }
    }

    /// A token for `audience` valid for `lifetime` (capped at [`MAX_LIFETIME`]).
    pub fn sign(
        &self,
        audience: &str,
        subject: &str,
        lifetime: Duration,
    ) -> Result<String, JwtError> {
        let iat = now();
        let claims = Claims {
            iss: ISSUER.into(),
            aud: audience.into(),
            sub: subject.into(),
            iat,
            exp: iat + lifetime.min(MAX_LIFETIME).as_secs(),
            jti: Some(uuid::Uuid::new_v4().simple().to_string()),
        };
        self.sign_claims(&claims)
    }

    /// Signs arbitrary claims (tests forge bad ones with it).
    pub fn sign_claims(&self, claims: &Claims) -> Result<String, JwtError> {
        let key =
            EncodingKey::from_secret(&self.secret).map_err(|e| JwtError::Invalid(e.to_string()))?;
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &key)
            .map_err(|e| JwtError::Invalid(e.to_string()))
    }

    /// Checks a token for `audience`: HS256 only, signature, `iss`, `aud`, `exp` (with
    /// [`LEEWAY`]) and a lifetime of at most [`MAX_LIFETIME`].
    pub fn verify(&self, token: &str, audience: &str) -> Result<Claims, JwtError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "iat"]);
        validation.leeway = LEEWAY.as_secs();
        let key =
            DecodingKey::from_secret(&self.secret).map_err(|e| JwtError::Invalid(e.to_string()))?;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| JwtError::Invalid(e.to_string()))?;
        let claims = data.claims;
        let max = MAX_LIFETIME.as_secs();
        let leeway = LEEWAY.as_secs();
        if claims.exp.saturating_sub(claims.iat) > max || claims.exp > now() + max + leeway {
            return Err(JwtError::Invalid(format!(
                "the token lives longer than {max} s"
            )));
        }
        if claims.iat > now() + leeway {
            return Err(JwtError::Invalid(
                "the token is issued in the future".into(),
            ));
        }
        Ok(claims)
    }
}

/// Checks an `Authorization` header value (`Bearer <token>`) for `audience`.
pub fn verify_bearer(
    key: Option<&ServiceKey>,
    header: Option<&str>,
    audience: &str,
) -> Result<Claims, JwtError> {
    let key = key.ok_or(JwtError::NoSecret)?;
    let token = header
        .and_then(|h| {
            let (scheme, token) = h.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(token.trim())
        })
        .filter(|t| !t.is_empty())
        .ok_or_else(|| JwtError::Invalid("missing bearer token".into()))?;
    key.verify(token, audience)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use pretty_assertions::assert_eq;

    fn key() -> ServiceKey {
        ServiceKey::new("0123456789abcdef0123456789abcdef").unwrap()
    }

    fn claims(aud: &str) -> Claims {
        let t = now();
        Claims {
            iss: ISSUER.into(),
            aud: aud.into(),
            sub: "ops".into(),
            iat: t,
            exp: t + 60,
            jti: None,
        }
    }

    fn invalid(r: Result<Claims, JwtError>) -> bool {
        matches!(r, Err(JwtError::Invalid(_)))
    }

    #[test]
    fn a_good_token_passes_for_its_audience_only() {
        let k = key();
        let token = k
            .sign(ADMIN_AUDIENCE, "ops", Duration::from_secs(60))
            .unwrap();
        let claims = k.verify(&token, ADMIN_AUDIENCE).unwrap();
        assert_eq!(claims.sub, "ops");
        let other = k
            .sign(ADMIN_AUDIENCE, "ops", Duration::from_secs(60))
            .unwrap();
        let other = k.verify(&other, ADMIN_AUDIENCE).unwrap();
        assert!(claims.jti.is_some(), "every signed token has an id");
        assert_ne!(claims.jti, other.jti, "each its own");
        assert!(invalid(k.verify(&token, "sandpiper-channel")));
        let header = format!("Bearer {token}");
        assert!(verify_bearer(Some(&k), Some(&header), ADMIN_AUDIENCE).is_ok());
    }

    #[test]
    fn bad_tokens_are_refused() {
        let k = key();
        let other = ServiceKey::new("another secret that is long enough!!").unwrap();
        let wrong_iss = Claims {
            iss: "someone".into(),
            ..claims(ADMIN_AUDIENCE)
        };
        let expired = Claims {
            iat: now() - 400,
            exp: now() - 100,
            ..claims(ADMIN_AUDIENCE)
        };
        let too_long = Claims {
            exp: now() + 3600,
            ..claims(ADMIN_AUDIENCE)
        };
        for (what, token) in [
            ("wrong issuer", k.sign_claims(&wrong_iss).unwrap()),
            ("expired", k.sign_claims(&expired).unwrap()),
            ("too long", k.sign_claims(&too_long).unwrap()),
            (
                "bad signature",
                other.sign_claims(&claims(ADMIN_AUDIENCE)).unwrap(),
            ),
            ("garbage", "not.a.token".into()),
        ] {
            assert!(invalid(k.verify(&token, ADMIN_AUDIENCE)), "{what}");
        }
        // alg none and another algorithm, with the right claims.
        let body = B64.encode(serde_json::to_vec(&claims(ADMIN_AUDIENCE)).unwrap());
        let none = format!("{}.{body}.", B64.encode(r#"{"alg":"none","typ":"JWT"}"#));
        assert!(invalid(k.verify(&none, ADMIN_AUDIENCE)), "alg none");
        let hs512 = jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &claims(ADMIN_AUDIENCE),
            &EncodingKey::from_secret(b"0123456789abcdef0123456789abcdef").unwrap(),
        )
        .unwrap();
        assert!(invalid(k.verify(&hs512, ADMIN_AUDIENCE)), "HS512");
        // Expired within the leeway still passes.
        let just = Claims {
            iat: now() - 100,
            exp: now() - 10,
            ..claims(ADMIN_AUDIENCE)
        };
        assert!(
            k.verify(&k.sign_claims(&just).unwrap(), ADMIN_AUDIENCE)
                .is_ok()
        );
    }

    #[test]
    fn missing_tokens_and_secrets_are_refused() {
        let k = key();
        assert!(invalid(verify_bearer(Some(&k), None, ADMIN_AUDIENCE)));
        assert!(invalid(verify_bearer(
            Some(&k),
            Some("Bearer "),
            ADMIN_AUDIENCE
        )));
        assert!(invalid(verify_bearer(
            Some(&k),
            Some("Basic abc"),
            ADMIN_AUDIENCE
        )));
        assert_eq!(
            verify_bearer(None, Some("Bearer x"), ADMIN_AUDIENCE),
            Err(JwtError::NoSecret)
        );
        assert_eq!(ServiceKey::new("short").unwrap_err(), JwtError::WeakSecret);
    }
}
