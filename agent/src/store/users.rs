//! The `users` and `identities` tables: every platform user becomes a sandpiper user on first
//! contact, and one user may be reached from several platforms (a Discord account, a Slack
//! account, an OS user name on the console).
//!
//! Usernames are unique handles, and a new account's handle is never taken from its display
//! name: anyone can call themselves "alice" on a platform, so a name copied from there would
//! go to whoever spoke to the bot first, and `notify(username=alice)` would reach them. A new
//! account is `<platform>-<platform user id>` instead (`discord-900000000000000011`,
//! `slack-u0alice`), which no other account can produce ([`account_handle`]); an id that does
//! not fit gets `<platform>-<12 hex digits of the new user id>`. The person keeps that handle
//! when other accounts link to it, and may choose another with [`Store::rename_user`], which
//! refuses taken names and every name with a platform prefix ([`is_reserved_username`]).
//! Linking identities with one-time codes, unlinking and merging users live in [`linking`].

pub mod linking;
#[cfg(test)]
mod tests;

use super::{Store, StoreError, now_ms};

/// Longest username, in characters (all ASCII).
pub const MAX_USERNAME_LEN: usize = 32;

/// How many handles one first contact tries before giving up (after the account's own, each
/// is random: a failure means a one-in-2^48 collision).
pub(crate) const MAX_USERNAME_TRIES: u32 = 8;

/// The platforms whose accounts get `<platform>-…` handles: no one may rename to a name with
/// one of these prefixes.
const PLATFORM_PREFIXES: [&str; 3] = ["discord-", "slack-", "console-"];

/// A sandpiper user: the person behind one or more platform identities. Read as a `users`
/// row (`id, username, display_name`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct User {
    /// Stable id (a UUID): what `messages.author`, memories and notifications refer to.
    pub id: String,
    /// The unique handle people type (`notify(username=…)`); changed with
    /// [`Store::rename_user`].
    pub username: String,
    /// The platform display name the user was created from.
    pub display_name: Option<String>,
}

/// One platform identity of a user.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LinkedIdentity {
    /// `discord`, `slack`, `console`.
    pub platform: String,
    /// The platform's user id.
    pub platform_user_id: String,
    /// The handle the platform keeps unique (lower-cased), when it has one and it was seen.
    pub handle: Option<String>,
}

impl std::fmt::Display for LinkedIdentity {
    /// `discord:2001 @alice`; `console:alice` without a handle, or when the handle is the id
    /// itself (the console's OS user).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.platform, self.platform_user_id)?;
        match &self.handle {
            Some(handle) if !handle.eq_ignore_ascii_case(&self.platform_user_id) => {
                write!(f, " @{handle}")
            }
            _ => Ok(()),
        }
    }
}

/// A user with the handle of one of their identities.
#[derive(sqlx::FromRow)]
struct IdentityRow {
    handle: Option<String>,
    #[sqlx(flatten)]
    user: User,
}

/// A user with the platform of the identity whose handle matched.
#[derive(sqlx::FromRow)]
struct HandleRow {
    platform: String,
    #[sqlx(flatten)]
    user: User,
}

/// Whether `name` can name someone as people type it: a username or a platform handle in
/// any case, a legacy Discord handle with its `#1234`.
pub fn is_typed_name(name: &str) -> bool {
    let lower = name.to_lowercase();
    match lower.split_once('#') {
        Some((base, tag)) => {
            is_valid_username(base) && tag.len() == 4 && tag.bytes().all(|b| b.is_ascii_digit())
        }
        None => is_valid_username(&lower),
    }
}

/// A name as people type it, the way handles and usernames are compared: without surrounding
/// spaces, a leading `@`, or case.
fn typed_name(name: &str) -> String {
    name.trim().trim_start_matches('@').to_lowercase()
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
    /// The name starts like an account's own handle (`discord-…`, `slack-…`, `console-…`):
    /// show this; the user picks another.
    #[error(
        "`{0}` looks like an account's own handle (`discord-…`, `slack-…`, `console-…`), which \
         only that account has: choose a name without that prefix"
    )]
    ReservedUsername(String),
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

impl User {
    /// How the person is greeted: the platform display name they arrived with, or the
    /// username. Anyone can choose a display name, so it never names anyone in a record:
    /// that is [`User::public_name`].
    pub fn shown_name(&self) -> &str {
        self.display_name.as_deref().unwrap_or(&self.username)
    }

    /// How records name the person to others (who decided a card, granted, asked, in the
    /// audit and on the page): `Alice (@alice)`, the display name to recognise them by and
    /// a handle no one else holds, or `@alice` alone when the two are the same. `handle` is
    /// the platform handle to show; without one, the username. The display name loses `@`,
    /// brackets and control characters, so it cannot pass for a handle of its own.
    pub fn public_name(&self, handle: Option<&str>) -> String {
        let handle = handle.unwrap_or(&self.username);
        let display: String = self
            .display_name
            .as_deref()
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_control() && !matches!(c, '@' | '(' | ')' | '[' | ']'))
            .take(MAX_DISPLAY_CHARS)
            .collect();
        let display = display.trim();
        if display.is_empty() || display.eq_ignore_ascii_case(handle) {
            format!("@{handle}")
        } else {
            format!("{display} (@{handle})")
        }
    }
}

/// The most characters of a display name a record shows.
const MAX_DISPLAY_CHARS: usize = 40;

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
        self.user_for_identity_at(platform, platform_user_id, display_name, None, now_ms())
            .await
    }

    /// [`Store::user_for_identity`] for an identity that may have a platform handle (a
    /// Discord username, a Slack member's `name`): the handle is recorded, and kept current
    /// when the person changes it.
    pub(crate) async fn user_for_identity_at(
        &self,
        platform: &str,
        platform_user_id: &str,
        display_name: &str,
        handle: Option<&str>,
        now: i64,
    ) -> Result<User, StoreError> {
        let handle = handle.map(typed_name).filter(|h| !h.is_empty());
        if let Some((user, known)) = self.identity_user(platform, platform_user_id).await? {
            if handle.is_some() && handle != known {
                self.set_handle(platform, platform_user_id, handle.as_deref())
                    .await?;
            }
            return Ok(user);
        }
        let display_name = Some(display_name.trim()).filter(|d| !d.is_empty());
        let mut last_error = None;
        for attempt in 0..MAX_USERNAME_TRIES {
            let user = new_account_user(platform, platform_user_id, display_name, attempt);
            match self
                .insert_user_with_identity(&user, platform, platform_user_id, now)
                .await
            {
                Ok(true) => {
                    self.set_handle(platform, platform_user_id, handle.as_deref())
                        .await?;
                    return Ok(user);
                }
                // Someone else created this identity meanwhile: theirs is the user.
                Ok(false) => {}
                // The handle is held (only a random one colliding, or a row from before
                // handles): the next attempt takes a random one.
                Err(e) if is_unique_violation(&e) => last_error = Some(e),
                Err(e) => return Err(e.into()),
            }
            if let Some((user, _)) = self.identity_user(platform, platform_user_id).await? {
                return Ok(user);
            }
        }
        Err(StoreError::Database(
            last_error.unwrap_or(sqlx::Error::RowNotFound),
        ))
    }

    /// Records `handle` as the identity's: the platform keeps handles unique, so another
    /// identity of the platform that held it before (its owner renamed since) loses it.
    async fn set_handle(
        &self,
        platform: &str,
        platform_user_id: &str,
        handle: Option<&str>,
    ) -> Result<(), StoreError> {
        let Some(handle) = handle else {
            return Ok(());
        };
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "UPDATE identities SET handle = NULL              WHERE platform = $1 AND handle = $2 AND platform_user_id <> $3",
        )
        .bind(platform)
        .bind(handle)
        .bind(platform_user_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE identities SET handle = $1 WHERE platform = $2 AND platform_user_id = $3",
        )
        .bind(handle)
        .bind(platform)
        .bind(platform_user_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The people whose platform handle is `name` (as people type it), with the platform: one
    /// per platform at most, since each keeps its handles unique.
    pub async fn users_with_handle(&self, name: &str) -> Result<Vec<(String, User)>, StoreError> {
        let rows: Vec<HandleRow> = sqlx::query_as(
            "SELECT i.platform AS platform, u.id AS id, u.username AS username, \
             u.display_name AS display_name \
             FROM identities i JOIN users u ON u.id = i.user_id \
             WHERE i.handle = $1 ORDER BY i.platform",
        )
        .bind(typed_name(name))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|r| (r.platform, r.user)).collect())
    }

    /// How records name user `id` ([`User::public_name`]): with the username when they chose
    /// one, else with their first platform handle (by platform), else with their account's
    /// own `discord-…` username. `None` for an unknown id.
    pub async fn public_name(&self, id: &str) -> Result<Option<String>, StoreError> {
        match self.user(id).await? {
            Some(user) => Ok(Some(self.public_name_of(&user).await?)),
            None => Ok(None),
        }
    }

    /// [`Store::public_name`], or the id itself when it names nobody or the database cannot
    /// say (what a card or a record shows rather than nothing).
    pub async fn public_name_or_id(&self, id: &str) -> String {
        match self.public_name(id).await {
            Ok(Some(name)) => name,
            Ok(None) => id.to_owned(),
            Err(e) => {
                tracing::warn!(user = id, error = %e, "cannot name a user");
                id.to_owned()
            }
        }
    }

    /// [`Store::public_name`] of a user already read.
    pub async fn public_name_of(&self, user: &User) -> Result<String, StoreError> {
        if !is_reserved_username(&user.username) {
            return Ok(user.public_name(None));
        }
        let handle = self
            .identities_of(&user.id)
            .await?
            .into_iter()
            .find_map(|i| i.handle);
        Ok(user.public_name(handle.as_deref()))
    }

    /// Looks a user up by id.
    pub async fn user(&self, id: &str) -> Result<Option<User>, StoreError> {
        let row: Option<User> =
            sqlx::query_as("SELECT id, username, display_name FROM users WHERE id = $1")
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
        Ok(row)
    }

    /// Looks a user up by username, as people type it: surrounding spaces, a leading `@` and
    /// upper case are ignored.
    pub async fn user_by_username(&self, username: &str) -> Result<Option<User>, StoreError> {
        let username = typed_name(username);
        let row: Option<User> =
            sqlx::query_as("SELECT id, username, display_name FROM users WHERE username = $1")
                .bind(username)
                .fetch_optional(self.pool())
                .await?;
        Ok(row)
    }

    /// Gives a user a new username. Nothing is normalised: a name that breaks the rules is
    /// refused, so people get exactly the name they asked for; so is a taken name and one
    /// that looks like an account's own handle.
    pub async fn rename_user(&self, id: &str, new_username: &str) -> Result<User, IdentityError> {
        let username = new_username.trim();
        if !is_valid_username(username) {
            return Err(IdentityError::BadUsername(username.to_owned()));
        }
        if is_reserved_username(username) {
            return Err(IdentityError::ReservedUsername(username.to_owned()));
        }
        // Another person's platform handle would make `@name` on a card theirs too.
        let holders = self.users_with_handle(username).await?;
        if holders.iter().any(|(_, holder)| holder.id != id) {
            return Err(IdentityError::UsernameTaken(username.to_owned()));
        }
        let row: Result<Option<User>, sqlx::Error> = sqlx::query_as(
            "UPDATE users SET username = $1 WHERE id = $2 RETURNING id, username, display_name",
        )
        .bind(username)
        .bind(id)
        .fetch_optional(self.pool())
        .await;
        match row {
            Ok(Some(user)) => Ok(user),
            Ok(None) => Err(IdentityError::UnknownUser(id.to_owned())),
            Err(e) if is_unique_violation(&e) => {
                Err(IdentityError::UsernameTaken(username.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The platform identities of a user as `(platform, platform user id)`, sorted.
    pub async fn identities_of(&self, user_id: &str) -> Result<Vec<LinkedIdentity>, StoreError> {
        let rows: Vec<LinkedIdentity> = sqlx::query_as(
            "SELECT platform, platform_user_id, handle FROM identities WHERE user_id = $1 \
             ORDER BY platform, platform_user_id",
        )
        .bind(user_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows)
    }

    /// The user an identity points at, and the identity's handle, if the identity is known.
    async fn identity_user(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<(User, Option<String>)>, StoreError> {
        let row: Option<IdentityRow> = sqlx::query_as(
            "SELECT i.handle AS handle, u.id AS id, u.username AS username, \
             u.display_name AS display_name \
             FROM identities i \
             JOIN users u ON u.id = i.user_id \
             WHERE i.platform = $1 AND i.platform_user_id = $2",
        )
        .bind(platform)
        .bind(platform_user_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|r| (r.user, r.handle)))
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

    /// Users who are not called `name` but show it as their display name, on the user or on
    /// one of their identities (compared without case): the people an unknown username may
    /// have meant. Never used to pick one: only to say that the name is not theirs to answer.
    pub async fn users_showing_name(&self, name: &str) -> Result<Vec<User>, StoreError> {
        let name = typed_name(name);
        let rows: Vec<User> = sqlx::query_as(
            "SELECT u.id AS id, u.username AS username, u.display_name AS display_name \
             FROM users u \
             WHERE u.username <> $1 AND (LOWER(u.display_name) = $1 OR EXISTS \
             (SELECT 1 FROM identities i WHERE i.user_id = u.id AND LOWER(i.display_name) = $1)) \
             ORDER BY u.username LIMIT 10",
        )
        .bind(name)
        .fetch_all(self.pool())
        .await?;
        Ok(rows)
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

/// A new user for a platform account's first contact (or its unlink): attempt 0 takes the
/// account's own handle when it has one, later attempts (and accounts without one) a random
/// handle under the platform's prefix.
pub(crate) fn new_account_user(
    platform: &str,
    platform_user_id: &str,
    display_name: Option<&str>,
    attempt: u32,
) -> User {
    let id = uuid::Uuid::new_v4();
    let own = (attempt == 0)
        .then(|| account_handle(platform, platform_user_id))
        .flatten();
    User {
        id: id.to_string(),
        username: own.unwrap_or_else(|| random_handle(platform, id)),
        display_name: display_name.map(str::to_owned),
    }
}

/// The handle of a platform account: `<platform>-<id>`, the id as it is when it is made of
/// username characters, or lower-cased when it is upper-case letters and digits (Slack's
/// `U0ALICE`). Two accounts never share one, since the platform's ids are unique; `None`
/// when the id fits neither (the account gets a random handle). Migration 0016 computes the
/// same for existing users.
pub fn account_handle(platform: &str, platform_user_id: &str) -> Option<String> {
    let id = platform_user_id;
    let as_is = id.chars().all(is_username_char);
    let upper = id
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if id.is_empty() || !(as_is || upper) {
        return None;
    }
    let handle = format!("{platform}-{}", id.to_ascii_lowercase());
    is_valid_username(&handle).then_some(handle)
}

/// `<platform>-` and the first 12 hex digits of the new user's id.
fn random_handle(platform: &str, id: uuid::Uuid) -> String {
    let hex = id.simple().to_string();
    let platform: String = platform
        .chars()
        .filter(|c| is_username_char(*c))
        .take(MAX_USERNAME_LEN - 13)
        .collect();
    format!("{platform}-{}", &hex[..12])
}

/// Whether `name` starts like an account's own handle (`discord-`, `slack-`, `console-`):
/// only first contact gives such names, so no one can take another account's handle before
/// that account arrives.
pub fn is_reserved_username(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    PLATFORM_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether `name` is acceptable as it is (what [`Store::rename_user`] demands).
pub fn is_valid_username(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_USERNAME_LEN && name.chars().all(is_username_char)
}

fn is_username_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-')
}

/// Whether a query failed on a UNIQUE or PRIMARY KEY constraint (on either backend).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}
