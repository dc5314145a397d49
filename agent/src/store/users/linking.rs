//! Joining platform identities into one user, and separating them again.
//!
//! A user asks for a one-time code on one platform (`/link`, `sandpiper link`) and enters it on
//! another: the second identity then points at the code's user. Codes last 10 minutes and
//! work once; each platform identity may enter 5 codes an hour. When the identity's previous
//! user is left with no identity, that user is merged into the code's user, so the person's
//! history follows them.
//!
//! Every multi-row change is one transaction that starts by writing (SQLite then waits for the
//! write lock rather than failing) and locks rows in the same order: code, identity, users.

use super::{
    IdentityError, MAX_USERNAME_TRIES, User, account_handle, insert_user, is_unique_violation,
    new_account_user,
};
use crate::store::{Store, StoreError, now_ms};

/// How long a link code stays valid.
pub const LINK_CODE_TTL_MS: i64 = 10 * 60 * 1000;

/// How many codes one platform identity may enter per [`ATTEMPT_WINDOW_MS`].
pub const MAX_LINK_ATTEMPTS: i64 = 5;

/// The window [`MAX_LINK_ATTEMPTS`] counts in: an hour.
pub const ATTEMPT_WINDOW_MS: i64 = 60 * 60 * 1000;

/// Code characters: upper-case letters and digits without look-alikes (no 0/O, 1/I/L).
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";

/// Code length: 31^8 ≈ 8.5 × 10^11 codes, against 5 guesses an hour.
const CODE_LEN: usize = 8;

impl Store {
    /// A fresh one-time code that links another platform identity to `user_id` when entered
    /// there within 10 minutes.
    pub async fn create_link_code(&self, user_id: &str) -> Result<String, StoreError> {
        self.create_link_code_at(user_id, now_ms()).await
    }

    pub(crate) async fn create_link_code_at(
        &self,
        user_id: &str,
        now: i64,
    ) -> Result<String, StoreError> {
        sqlx::query("DELETE FROM link_codes WHERE expires_at <= $1")
            .bind(now)
            .execute(self.pool())
            .await?;
        let mut last_error = None;
        // A collision among live codes is a one-in-billions event; a few retries are plenty.
        for _ in 0..4 {
            let code = random_code();
            let inserted = sqlx::query(
                "INSERT INTO link_codes (code, user_id, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&code)
            .bind(user_id)
            .bind(now)
            .bind(now + LINK_CODE_TTL_MS)
            .execute(self.pool())
            .await;
            match inserted {
                Ok(_) => return Ok(code),
                Err(e) if is_unique_violation(&e) => last_error = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Database(
            last_error.unwrap_or(sqlx::Error::RowNotFound),
        ))
    }

    /// Enters `code` for a platform identity (created on first contact like any other) and
    /// points the identity at the code's user, which is returned. Spends one of the identity's
    /// 5 attempts an hour whatever the outcome; past the limit the code is not even checked.
    pub async fn redeem_link_code(
        &self,
        platform: &str,
        platform_user_id: &str,
        display_name: &str,
        code: &str,
    ) -> Result<User, IdentityError> {
        self.redeem_link_code_at(platform, platform_user_id, display_name, code, now_ms())
            .await
    }

    pub(crate) async fn redeem_link_code_at(
        &self,
        platform: &str,
        platform_user_id: &str,
        display_name: &str,
        code: &str,
        now: i64,
    ) -> Result<User, IdentityError> {
        self.record_link_attempt(platform, platform_user_id, now)
            .await?;
        let code = code.trim().to_ascii_uppercase();
        self.user_for_identity_at(platform, platform_user_id, display_name, None, now)
            .await?;

        let mut tx = self.pool().begin().await?;
        let claimed: Option<(String,)> = sqlx::query_as(
            "UPDATE link_codes SET used_at = $1 \
             WHERE code = $2 AND used_at IS NULL AND expires_at > $1 RETURNING user_id",
        )
        .bind(now)
        .bind(&code)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((target,)) = claimed else {
            tx.rollback().await?;
            return Err(IdentityError::CodeInvalid);
        };
        let Some(previous) = lock_identity(&mut tx, platform, platform_user_id).await? else {
            // The identity was created above; only a concurrent merge could have moved it.
            tx.rollback().await?;
            return Err(IdentityError::CodeInvalid);
        };
        if previous == target {
            // Rolling back leaves the code unspent for the platform the user meant.
            tx.rollback().await?;
            return Err(IdentityError::SameUser);
        }
        lock_user(&mut tx, &previous).await?;
        sqlx::query(
            "UPDATE identities SET user_id = $1 WHERE platform = $2 AND platform_user_id = $3",
        )
        .bind(&target)
        .bind(platform)
        .bind(platform_user_id)
        .execute(&mut *tx)
        .await?;
        if identity_count(&mut tx, &previous).await? == 0 {
            merge_users_in(&mut tx, &previous, &target).await?;
        }
        let user: Option<User> =
            sqlx::query_as("SELECT id, username, display_name FROM users WHERE id = $1")
                .bind(&target)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(user) = user else {
            tx.rollback().await?;
            return Err(IdentityError::UnknownUser(target));
        };
        tx.commit().await?;
        Ok(user)
    }

    /// Gives a platform identity a fresh user of its own (with the account's own handle),
    /// separating it from the user it was linked to. The identity's messages stay with that
    /// user.
    pub async fn unlink(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<User, IdentityError> {
        self.unlink_at(platform, platform_user_id, now_ms()).await
    }

    pub(crate) async fn unlink_at(
        &self,
        platform: &str,
        platform_user_id: &str,
        now: i64,
    ) -> Result<User, IdentityError> {
        let display: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT display_name FROM identities WHERE platform = $1 AND platform_user_id = $2",
        )
        .bind(platform)
        .bind(platform_user_id)
        .fetch_optional(self.pool())
        .await?;
        let Some((display_name,)) = display else {
            return Err(IdentityError::NothingToUnlink);
        };
        let mut last_error = None;
        for attempt in 0..MAX_USERNAME_TRIES {
            let user =
                new_account_user(platform, platform_user_id, display_name.as_deref(), attempt);
            let mut tx = self.pool().begin().await?;
            let Some(previous) = lock_identity(&mut tx, platform, platform_user_id).await? else {
                tx.rollback().await?;
                return Err(IdentityError::NothingToUnlink);
            };
            // Locking the user makes a concurrent unlink of its other identity wait, then see
            // this one gone and refuse, so a user never ends up with no identity.
            lock_user(&mut tx, &previous).await?;
            if identity_count(&mut tx, &previous).await? <= 1 {
                tx.rollback().await?;
                return Err(IdentityError::NothingToUnlink);
            }
            // The account leaving takes its own handle with it: the user it leaves, if it
            // was known by that handle, is renamed after one of the accounts it keeps, so the
            // name never reaches an account it does not name.
            if attempt == 0 {
                hand_back_handle(&mut tx, &previous, platform, platform_user_id).await?;
            }
            match insert_user(&mut tx, &user, now).await {
                Ok(()) => {}
                Err(e) if is_unique_violation(&e) => {
                    tx.rollback().await?;
                    last_error = Some(e);
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            sqlx::query(
                "UPDATE identities SET user_id = $1 WHERE platform = $2 AND platform_user_id = $3",
            )
            .bind(&user.id)
            .bind(platform)
            .bind(platform_user_id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            return Ok(user);
        }
        Err(last_error.unwrap_or(sqlx::Error::RowNotFound).into())
    }

    /// Counts this identity's attempt, refusing it (and not counting it) past the limit.
    /// Inserting before counting keeps concurrent attempts from all slipping under the limit;
    /// at worst two racing attempts are both refused.
    async fn record_link_attempt(
        &self,
        platform: &str,
        platform_user_id: &str,
        now: i64,
    ) -> Result<(), IdentityError> {
        let since = now - ATTEMPT_WINDOW_MS;
        sqlx::query(
            "DELETE FROM link_attempts \
             WHERE platform = $1 AND platform_user_id = $2 AND attempted_at <= $3",
        )
        .bind(platform)
        .bind(platform_user_id)
        .bind(since)
        .execute(self.pool())
        .await?;
        let id = uuid::Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO link_attempts (id, platform, platform_user_id, attempted_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(&id)
        .bind(platform)
        .bind(platform_user_id)
        .bind(now)
        .execute(self.pool())
        .await?;
        let (count,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM link_attempts \
             WHERE platform = $1 AND platform_user_id = $2 AND attempted_at > $3",
        )
        .bind(platform)
        .bind(platform_user_id)
        .bind(since)
        .fetch_one(self.pool())
        .await?;
        if count > MAX_LINK_ATTEMPTS {
            sqlx::query("DELETE FROM link_attempts WHERE id = $1")
                .bind(&id)
                .execute(self.pool())
                .await?;
            return Err(IdentityError::TooManyAttempts);
        }
        Ok(())
    }
}

type Tx<'c> = sqlx::Transaction<'c, sqlx::Any>;

/// Merges user `from` into user `into` inside the caller's transaction (the one of
/// [`Store::redeem_link_code`]): `from`'s identities and the messages it wrote become
/// `into`'s, its link codes go, and `from` is deleted. The one place that knows every table
/// referring to a user: tables added later (memories) join it here. Refuses merging a user
/// into itself and unknown ids.
async fn merge_users_in(tx: &mut Tx<'_>, from: &str, into: &str) -> Result<(), IdentityError> {
    if from == into {
        return Err(IdentityError::SameUser);
    }
    for id in [from, into] {
        if !lock_user(tx, id).await? {
            return Err(IdentityError::UnknownUser(id.to_owned()));
        }
    }
    sqlx::query("UPDATE identities SET user_id = $1 WHERE user_id = $2")
        .bind(into)
        .bind(from)
        .execute(&mut **tx)
        .await?;
    sqlx::query("UPDATE messages SET author = $1 WHERE author = $2")
        .bind(into)
        .bind(from)
        .execute(&mut **tx)
        .await?;
    // The person's `user` memories follow them; where both users had one of the same name,
    // the surviving user's version wins.
    sqlx::query(
        "UPDATE memories SET scope_id = $1 WHERE scope = 'user' AND scope_id = $2 \
         AND name NOT IN (SELECT name FROM memories WHERE scope = 'user' AND scope_id = $1)",
    )
    .bind(into)
    .bind(from)
    .execute(&mut **tx)
    .await?;
    sqlx::query("DELETE FROM memories WHERE scope = 'user' AND scope_id = $1")
        .bind(from)
        .execute(&mut **tx)
        .await?;
    sqlx::query("UPDATE memories SET created_by = $1 WHERE created_by = $2")
        .bind(into)
        .bind(from)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM link_codes WHERE user_id = $1")
        .bind(from)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM users WHERE id = $1")
        .bind(from)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Locks an identity row for the transaction and returns its user (`None`: no such identity).
async fn lock_identity(
    tx: &mut Tx<'_>,
    platform: &str,
    platform_user_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let row: Option<(String,)> = sqlx::query_as(
        "UPDATE identities SET user_id = user_id \
         WHERE platform = $1 AND platform_user_id = $2 RETURNING user_id",
    )
    .bind(platform)
    .bind(platform_user_id)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(row.map(|r| r.0))
}

/// Locks a user row for the transaction (a portable `SELECT … FOR UPDATE`); false when the
/// user does not exist.
async fn lock_user(tx: &mut Tx<'_>, id: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("UPDATE users SET username = username WHERE id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// When user `previous` is called by the handle of the account `platform`/`platform_user_id`
/// (about to leave it), renames it after the first account it keeps (or a random handle).
async fn hand_back_handle(
    tx: &mut Tx<'_>,
    previous: &str,
    platform: &str,
    platform_user_id: &str,
) -> Result<(), sqlx::Error> {
    let Some(handle) = account_handle(platform, platform_user_id) else {
        return Ok(());
    };
    let (username,): (String,) = sqlx::query_as("SELECT username FROM users WHERE id = $1")
        .bind(previous)
        .fetch_one(&mut **tx)
        .await?;
    if username != handle {
        return Ok(());
    }
    let kept: Option<(String, String)> = sqlx::query_as(
        "SELECT platform, platform_user_id FROM identities WHERE user_id = $1 \
         AND NOT (platform = $2 AND platform_user_id = $3) \
         ORDER BY created_at, platform, platform_user_id LIMIT 1",
    )
    .bind(previous)
    .bind(platform)
    .bind(platform_user_id)
    .fetch_optional(&mut **tx)
    .await?;
    let (kept_platform, kept_id) = kept.unwrap_or_else(|| (platform.to_owned(), String::new()));
    let renamed = new_account_user(&kept_platform, &kept_id, None, 0).username;
    sqlx::query("UPDATE users SET username = $1 WHERE id = $2")
        .bind(renamed)
        .bind(previous)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// How many identities point at a user.
async fn identity_count(tx: &mut Tx<'_>, user_id: &str) -> Result<i64, sqlx::Error> {
    let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM identities WHERE user_id = $1")
        .bind(user_id)
        .fetch_one(&mut **tx)
        .await?;
    Ok(count)
}

/// Eight characters from [`CODE_ALPHABET`], from a v4 UUID's 122 random bits.
fn random_code() -> String {
    let mut bits = uuid::Uuid::new_v4().as_u128();
    let base = CODE_ALPHABET.len() as u128;
    (0..CODE_LEN)
        .map(|_| {
            let i = (bits % base) as usize;
            bits /= base;
            char::from(CODE_ALPHABET[i])
        })
        .collect()
}
