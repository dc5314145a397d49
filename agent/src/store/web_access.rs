//! The status page's sign-in (issue 28): one-time links (`web_sign_in_links`), browser
//! sessions (`web_sessions`), the service tokens that signed in already (`web_used_tokens`)
//! and the key every node encrypts session cookies with (`web_keys`).
//!
//! A link's token is shown once, in chat or on the terminal; only its sha256 is stored, so a
//! copy of the database signs nobody in. Redeeming is one `UPDATE … WHERE used_at IS NULL AND
//! expires_at >= now`: of two browsers racing with one link, exactly one wins, on any node.

use sha2::{Digest, Sha256};

use super::{Store, StoreError, now_ms};

/// How long a sign-in link works.
pub const LINK_LIFETIME_MS: i64 = 10 * 60 * 1000;
/// How long a browser session lasts after sign-in.
pub const SESSION_LIFETIME_MS: i64 = 12 * 60 * 60 * 1000;

/// Who a link or a session is: a sandpiper user, an admin, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentity {
    /// The sandpiper user (`None` for the operator token, which is nobody in chat).
    pub user_id: Option<String>,
    /// Whether they see everything (chat admin roles and groups, the operator token).
    pub admin: bool,
}

/// A live browser session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSession {
    /// The session id the cookie carries.
    pub id: String,
    /// Who it is.
    pub who: WebIdentity,
    /// When it ends (unix ms).
    pub expires_at: i64,
}

/// Why a link did not sign anyone in; the text is what the browser shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RedeemError {
    /// No link has this token (mistyped, cut off, or from another deployment).
    #[error("this sign-in link is not valid: ask for a new one with /console")]
    Unknown,
    /// It was used already (each link signs in once).
    #[error("this sign-in link was already used: ask for a new one with /console")]
    Used,
    /// Its 10 minutes are over.
    #[error(
        "this sign-in link has expired (links last 10 minutes): ask for a new one with /console"
    )]
    Expired,
}

/// A fresh random token: 64 hex digits from two v4 UUIDs (244 random bits from the OS).
pub fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The stored form of a token.
fn digest(token: &str) -> String {
    let mut out = String::with_capacity(64);
    for b in Sha256::digest(token.as_bytes()) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

impl Store {
    /// Makes a one-time sign-in link for `who`, valid for [`LINK_LIFETIME_MS`]; returns its
    /// token (shown once, never stored).
    pub async fn create_sign_in_link(&self, who: &WebIdentity) -> Result<String, StoreError> {
        let token = new_token();
        let now = now_ms();
        sqlx::query(
            "INSERT INTO web_sign_in_links (token_hash, user_id, admin, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(digest(&token))
        .bind(who.user_id.as_deref())
        .bind(i64::from(who.admin))
        .bind(now)
        .bind(now + LINK_LIFETIME_MS)
        .execute(self.pool())
        .await?;
        // Links nobody used stay a day for the "expired" answer, then go.
        sqlx::query("DELETE FROM web_sign_in_links WHERE expires_at < $1")
            .bind(now - 24 * 60 * 60 * 1000)
            .execute(self.pool())
            .await?;
        Ok(token)
    }

    /// Uses the link with `token`: who it signs in, or why not. A link works once.
    pub async fn redeem_sign_in_link(
        &self,
        token: &str,
    ) -> Result<Result<WebIdentity, RedeemError>, StoreError> {
        let hash = digest(token);
        let now = now_ms();
        let taken = sqlx::query(
            "UPDATE web_sign_in_links SET used_at = $1 \
             WHERE token_hash = $2 AND used_at IS NULL AND expires_at >= $1",
        )
        .bind(now)
        .bind(&hash)
        .execute(self.pool())
        .await?;
        /// A `web_sign_in_links` row: who it signs in, and whether it was used.
        #[derive(sqlx::FromRow)]
        struct Row {
            user_id: Option<String>,
            admin: i64,
            used_at: Option<i64>,
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT user_id, admin, used_at FROM web_sign_in_links WHERE token_hash = $1",
        )
        .bind(&hash)
        .fetch_optional(self.pool())
        .await?;
        Ok(match row {
            None => Err(RedeemError::Unknown),
            Some(row) if taken.rows_affected() == 1 => Ok(WebIdentity {
                user_id: row.user_id,
                admin: row.admin != 0,
            }),
            Some(Row {
                used_at: Some(_), ..
            }) => Err(RedeemError::Used),
            Some(_) => Err(RedeemError::Expired),
        })
    }

    /// Starts a browser session for `who`, lasting [`SESSION_LIFETIME_MS`], or until
    /// `ends_by` (unix ms) when that is sooner: a session never outlives the credential that
    /// started it.
    pub async fn create_web_session(
        &self,
        who: &WebIdentity,
        ends_by: Option<i64>,
    ) -> Result<WebSession, StoreError> {
        let id = new_token();
        let now = now_ms();
        let lifetime = now + SESSION_LIFETIME_MS;
        let expires_at = ends_by.map_or(lifetime, |end| end.min(lifetime));
        sqlx::query(
            "INSERT INTO web_sessions (id, user_id, admin, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(digest(&id))
        .bind(who.user_id.as_deref())
        .bind(i64::from(who.admin))
        .bind(now)
        .bind(expires_at)
        .execute(self.pool())
        .await?;
        sqlx::query("DELETE FROM web_sessions WHERE expires_at < $1")
            .bind(now)
            .execute(self.pool())
            .await?;
        Ok(WebSession {
            id,
            who: who.clone(),
            expires_at,
        })
    }

    /// The live session with `id`, if it exists and has not ended.
    pub async fn web_session(&self, id: &str) -> Result<Option<WebSession>, StoreError> {
        /// A live `web_sessions` row.
        #[derive(sqlx::FromRow)]
        struct Row {
            user_id: Option<String>,
            admin: i64,
            expires_at: i64,
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT user_id, admin, expires_at FROM web_sessions \
             WHERE id = $1 AND expires_at >= $2",
        )
        .bind(digest(id))
        .bind(now_ms())
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|row| WebSession {
            id: id.to_owned(),
            who: WebIdentity {
                user_id: row.user_id,
                admin: row.admin != 0,
            },
            expires_at: row.expires_at,
        }))
    }

    /// Ends the session with `id` on every node (sign-out).
    pub async fn end_web_session(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM web_sessions WHERE id = $1")
            .bind(digest(id))
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Takes the service token `jti` (valid until `expires_at`, unix ms) for a sign-in: `true`
    /// the first time on any node of the database, `false` for every later use. Rows of
    /// tokens that expired go on the way.
    pub async fn use_token_once(&self, jti: &str, expires_at: i64) -> Result<bool, StoreError> {
        let now = now_ms();
        sqlx::query("DELETE FROM web_used_tokens WHERE expires_at < $1")
            .bind(now)
            .execute(self.pool())
            .await?;
        let taken = sqlx::query(
            "INSERT INTO web_used_tokens (jti, expires_at) VALUES ($1, $2) \
             ON CONFLICT (jti) DO NOTHING",
        )
        .bind(digest(jti))
        .bind(expires_at)
        .execute(self.pool())
        .await?;
        Ok(taken.rows_affected() == 1)
    }

    /// The secret session cookies are encrypted with, the same on every node of this
    /// database: made (64 random hex digits) by the first node that asks.
    pub async fn web_cookie_secret(&self) -> Result<String, StoreError> {
        sqlx::query(
            "INSERT INTO web_keys (id, secret, created_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(new_token())
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(
            sqlx::query_scalar("SELECT secret FROM web_keys WHERE id = 1")
                .fetch_one(self.pool())
                .await?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn alice() -> WebIdentity {
        WebIdentity {
            user_id: Some("u-alice".into()),
            admin: false,
        }
    }

    #[tokio::test]
    async fn a_link_signs_in_once_and_a_wrong_one_never() {
        let store = Store::memory().await.unwrap();
        let token = store.create_sign_in_link(&alice()).await.unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(
            store.redeem_sign_in_link(&token).await.unwrap(),
            Ok(alice())
        );
        assert_eq!(
            store.redeem_sign_in_link(&token).await.unwrap(),
            Err(RedeemError::Used)
        );
        assert_eq!(
            store.redeem_sign_in_link("0123").await.unwrap(),
            Err(RedeemError::Unknown)
        );
    }

    #[tokio::test]
    async fn an_old_link_is_expired() {
        let store = Store::memory().await.unwrap();
        let token = store.create_sign_in_link(&alice()).await.unwrap();
        sqlx::query("UPDATE web_sign_in_links SET expires_at = 1")
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(
            store.redeem_sign_in_link(&token).await.unwrap(),
            Err(RedeemError::Expired)
        );
    }

    #[tokio::test]
    async fn a_session_lives_until_signed_out_and_the_key_stays() {
        let store = Store::memory().await.unwrap();
        let session = store.create_web_session(&alice(), None).await.unwrap();
        let found = store.web_session(&session.id).await.unwrap().unwrap();
        assert_eq!(found.who, alice());
        store.end_web_session(&session.id).await.unwrap();
        assert_eq!(store.web_session(&session.id).await.unwrap(), None);
        let key = store.web_cookie_secret().await.unwrap();
        assert_eq!(store.web_cookie_secret().await.unwrap(), key);
    }

    #[tokio::test]
    async fn a_session_ends_with_its_credential_and_a_token_signs_in_once() {
        let store = Store::memory().await.unwrap();
        let soon = now_ms() + 60_000;
        let short = store
            .create_web_session(&alice(), Some(soon))
            .await
            .unwrap();
        assert_eq!(short.expires_at, soon);
        let far = store
            .create_web_session(&alice(), Some(now_ms() + 10 * SESSION_LIFETIME_MS))
            .await
            .unwrap();
        assert!(far.expires_at <= now_ms() + SESSION_LIFETIME_MS);
        let ended = store.create_web_session(&alice(), Some(1)).await.unwrap();
        assert_eq!(store.web_session(&ended.id).await.unwrap(), None);

        assert!(store.use_token_once("jti-1", soon).await.unwrap());
        assert!(!store.use_token_once("jti-1", soon).await.unwrap());
        assert!(store.use_token_once("jti-2", soon).await.unwrap());
        // An expired token's row goes; the token itself is refused by its expiry.
        assert!(store.use_token_once("jti-old", 1).await.unwrap());
        assert!(store.use_token_once("jti-old", 1).await.unwrap());
    }
}
