//! The `users` and `identities` tables: every platform user becomes a sandpiper user on first
//! contact, and one user may be reached from several platforms (a Discord account, a Slack
//! account, an OS user name on the console).
//!
//! Usernames are unique. New ones are derived from the platform's display name and
//! de-duplicated (`alice`, `alice-2`, …) by trying to insert and moving on when the UNIQUE
//! constraint says no, so concurrent first contacts on several nodes cannot collide.
//! Linking identities with one-time codes, unlinking and merging users live in [`linking`].

pub mod linking;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use super::{Store, StoreError, now_ms};

/// Longest username, in characters (all ASCII).
pub const MAX_USERNAME_LEN: usize = 32;

/// How many usernames one first contact tries before giving up (each failure means another
/// contact took that name at the same moment).
const MAX_USERNAME_TRIES: u32 = 64;

/// A sandpiper user: the person behind one or more platform identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Stable id (a UUID): what `messages.author`, memories and notifications refer to.
    pub id: String,
    /// The unique handle people type (`notify(username=…)`); changed with
    /// [`Store::rename_user`].
    pub username: String,
    /// The platform display name the user was created from.
    pub display_name: Option<String>,
}

/// Why an identity operation was refused. Every variant except [`IdentityError::Store`] is the
/// user's to fix: show its message to them as it is.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The code is unknown, spent or expired: show this; the user asks for a new code.
    #[error(
        "that code is not valid: it may have expired (codes last 10 minutes) or been used already"
    )]
    CodeInvalid,
    /// This platform identity entered 5 codes within the last hour: show this; the code was
    /// not checked, so a valid one still works later.
    #[error("too many attempts to enter a link code (5 an hour): try again later")]
    TooManyAttempts,
    /// Another user has that username: show this; the user picks another.
    #[error("the username `{0}` is already taken: choose another one")]
    UsernameTaken(String),
    /// The requested username breaks the rules: show this; the user picks another.
    #[error(
        "`{0}` is not a valid username: use 1 to 32 characters from a-z, 0-9, `_`, `.` and `-`"
    )]
    BadUsername(String),
    /// The identity is the only one of its user (or unknown): show this; nothing changed.
    #[error("nothing to unlink: this account is not linked to any other")]
    NothingToUnlink,
    /// The code belongs to the user this identity already is: show this; the code stays valid
    /// for the platform the user meant to link.
    #[error("that code is yours already: enter it on the other platform you want to link")]
    SameUser,
    /// No user has this id (it was merged away or never existed): report it; a caller holding
    /// a stale id looks the identity up again.
    #[error("there is no user with id `{0}`")]
    UnknownUser(String),
    /// Storage failed: fatal for the operation, report it like any [`StoreError`].
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for IdentityError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(StoreError::Database(e))
    }
}

type UserRow = (String, String, Option<String>);

fn user_from_row((id, username, display_name): UserRow) -> User {
    User {
        id,
        username,
        display_name,
    }
}

impl Store {
    /// The user behind a platform identity, created (user and identity) on first contact with
    /// a username derived from `display_name`. Safe to call concurrently from any number of
    /// tasks or nodes: one identity always yields one user.
    pub async fn user_for_identity(
        &self,
        platform: &str,
        platform_user_id: &str,
        display_name: &str,
    ) -> Result<User, StoreError> {
        self.user_for_identity_at(platform, platform_user_id, display_name, now_ms())
            .await
    }

    pub(crate) async fn user_for_identity_at(
        &self,
        platform: &str,
        platform_user_id: &str,
        display_name: &str,
        now: i64,
    ) -> Result<User, StoreError> {
        if let Some(user) = self.identity_user(platform, platform_user_id).await? {
            return Ok(user);
        }
        let display_name = Some(display_name.trim()).filter(|d| !d.is_empty());
        let names = self
            .username_candidates(display_name.unwrap_or_default())
            .await?;
        let mut last_error = None;
        for username in names {
            let user = User {
                id: uuid::Uuid::new_v4().to_string(),
                username,
                display_name: display_name.map(str::to_owned),
            };
            match self
                .insert_user_with_identity(&user, platform, platform_user_id, now)
                .await
            {
                Ok(true) => return Ok(user),
                // Someone else created this identity meanwhile: theirs is the user.
                Ok(false) => {}
                // Someone else took this username meanwhile.
                Err(e) if is_unique_violation(&e) => last_error = Some(e),
                Err(e) => return Err(e.into()),
            }
            if let Some(user) = self.identity_user(platform, platform_user_id).await? {
                return Ok(user);
            }
        }
        Err(StoreError::Database(
            last_error.unwrap_or(sqlx::Error::RowNotFound),
        ))
    }

    /// Looks a user up by id.
    pub async fn user(&self, id: &str) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> =
            sqlx::query_as("SELECT id, username, display_name FROM users WHERE id = $1")
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(user_from_row))
    }

    /// Looks a user up by username, as people type it: surrounding spaces, a leading `@` and
    /// upper case are ignored.
    pub async fn user_by_username(&self, username: &str) -> Result<Option<User>, StoreError> {
        let username = username.trim().trim_start_matches('@').to_lowercase();
        let row: Option<UserRow> =
            sqlx::query_as("SELECT id, username, display_name FROM users WHERE username = $1")
                .bind(username)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(user_from_row))
    }

    /// Gives a user a new username. Unlike first contact nothing is normalised: a name that
    /// breaks the rules is refused, so people get exactly the name they asked for.
    pub async fn rename_user(&self, id: &str, new_username: &str) -> Result<User, IdentityError> {
        let username = new_username.trim();
        if !is_valid_username(username) {
            return Err(IdentityError::BadUsername(username.to_owned()));
        }
        let row: Result<Option<UserRow>, sqlx::Error> = sqlx::query_as(
            "UPDATE users SET username = $1 WHERE id = $2 RETURNING id, username, display_name",
        )
        .bind(username)
        .bind(id)
        .fetch_optional(self.pool())
        .await;
        match row {
            Ok(Some(row)) => Ok(user_from_row(row)),
            Ok(None) => Err(IdentityError::UnknownUser(id.to_owned())),
            Err(e) if is_unique_violation(&e) => {
                Err(IdentityError::UsernameTaken(username.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The platform identities of a user as `(platform, platform user id)`, sorted.
    pub async fn identities_of(&self, user_id: &str) -> Result<Vec<(String, String)>, StoreError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT platform, platform_user_id FROM identities WHERE user_id = $1 \
             ORDER BY platform, platform_user_id",
        )
        .bind(user_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows)
    }

    /// The user an identity points at, if the identity is known.
    async fn identity_user(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> = sqlx::query_as(
            "SELECT u.id, u.username, u.display_name FROM identities i \
             JOIN users u ON u.id = i.user_id \
             WHERE i.platform = $1 AND i.platform_user_id = $2",
        )
        .bind(platform)
        .bind(platform_user_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(user_from_row))
    }

    /// Creates `user` and the identity pointing at it in one transaction. False (and nothing
    /// created) when the identity exists already; a unique violation when the username is taken.
    async fn insert_user_with_identity(
        &self,
        user: &User,
        platform: &str,
        platform_user_id: &str,
        now: i64,
    ) -> Result<bool, sqlx::Error> {
        // A write first: SQLite then waits for the write lock instead of failing on upgrade.
        let mut tx = self.pool().begin().await?;
        insert_user(&mut tx, user, now).await?;
        let created = sqlx::query(
            "INSERT INTO identities (platform, platform_user_id, user_id, display_name, \
             created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (platform, platform_user_id) DO NOTHING",
        )
        .bind(platform)
        .bind(platform_user_id)
        .bind(&user.id)
        .bind(user.display_name.as_deref())
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if created {
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        Ok(created)
    }

    /// Usernames to try for a new user named `display_name`, skipping those already taken.
    pub(crate) async fn username_candidates(
        &self,
        display_name: &str,
    ) -> Result<UsernameCandidates, StoreError> {
        let base = normalise_username(display_name);
        // Every `base-N` starts with this prefix while N has at most 3 digits; beyond that the
        // insert-and-retry loop still finds a free name, only more slowly.
        let prefix: String = base.chars().take(MAX_USERNAME_LEN - 4).collect();
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT username FROM users WHERE username = $1 OR username LIKE $2 ESCAPE '\\'",
        )
        .bind(&base)
        .bind(format!("{}-%", escape_like(&prefix)))
        .fetch_all(self.pool())
        .await?;
        Ok(UsernameCandidates {
            taken: rows.into_iter().map(|r| r.0).collect(),
            base,
            next_number: 1,
            tries: 0,
        })
    }
}

/// Inserts a user row (inside the caller's transaction).
pub(crate) async fn insert_user(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    user: &User,
    now: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO users (id, username, display_name, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(&user.id)
    .bind(&user.username)
    .bind(user.display_name.as_deref())
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// `base`, `base-2`, `base-3`, … minus the names known to be taken, at most
/// [`MAX_USERNAME_TRIES`] of them.
#[derive(Debug)]
pub(crate) struct UsernameCandidates {
    base: String,
    taken: HashSet<String>,
    next_number: u32,
    tries: u32,
}

impl Iterator for UsernameCandidates {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.tries >= MAX_USERNAME_TRIES {
            return None;
        }
        loop {
            let name = numbered(&self.base, self.next_number);
            self.next_number += 1;
            if self.taken.insert(name.clone()) {
                self.tries += 1;
                return Some(name);
            }
        }
    }
}

/// The `n`th de-duplicated form of `base` (`base` itself for 1), at most 32 characters.
fn numbered(base: &str, n: u32) -> String {
    if n <= 1 {
        return base.to_owned();
    }
    let suffix = format!("-{n}");
    let keep = MAX_USERNAME_LEN.saturating_sub(suffix.len());
    let stem: String = base.chars().take(keep).collect();
    format!("{stem}{suffix}")
}

/// A username from a platform display name: trimmed, lower case, every character outside
/// `[a-z0-9_.-]` replaced by `_`, at most 32 characters, `user` when nothing is left.
pub fn normalise_username(display_name: &str) -> String {
    let name: String = display_name
        .trim()
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| if is_username_char(c) { c } else { '_' })
        .take(MAX_USERNAME_LEN)
        .collect();
    if name.is_empty() {
        "user".to_owned()
    } else {
        name
    }
}

/// Whether `name` is acceptable as it is (what [`Store::rename_user`] demands).
pub fn is_valid_username(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_USERNAME_LEN && name.chars().all(is_username_char)
}

fn is_username_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-')
}

/// Escapes `%`, `_` and `\` for a `LIKE … ESCAPE '\'` pattern.
fn escape_like(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether a query failed on a UNIQUE or PRIMARY KEY constraint (on either backend).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}
