//! Commands about the person asking, the same on every platform: `link` (join identities
//! across platforms), `whoami`, `rename` and `memory` (list and delete the memories they can
//! see). The console's `sandpiper link`, Discord's `/link` and Slack's `/sandpiper link` all
//! end up here.

use std::fmt::Write as _;

use sandpiper_agent::people::People;
use sandpiper_agent::people::{IdentityError, Scope, User, Visibility};

/// The person a command is about: a platform identity.
pub use sandpiper_agent::people::Identity as Person;

/// Why an account command failed; the message is for the user.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// Linking failed (bad code, too many attempts, ...).
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] sandpiper_agent::StoreError),
    /// Bad command-line input.
    #[error("{0}")]
    Usage(String),
}

async fn me(people: &People, who: Person<'_>) -> Result<User, AccountError> {
    Ok(people.person(who).await?)
}

/// The sandpiper user id of the person (created on first sight).
pub async fn user_id(people: &People, who: Person<'_>) -> Result<String, AccountError> {
    Ok(me(people, who).await?.id)
}

/// `link` (new code), `link CODE` (join), `link --unlink`.
pub async fn link(
    people: &People,
    who: Person<'_>,
    code: Option<&str>,
    unlink: bool,
) -> Result<String, AccountError> {
    if unlink {
        let user = people.unlink(who).await?;
        return Ok(format!(
            "unlinked: this {} account is now its own user, {}",
            who.platform, user.username
        ));
    }
    match code {
        None => {
            let user = me(people, who).await?;
            let code = people.new_link_code(&user.id).await?;
            Ok(format!(
                "Your link code is {code} (valid for 10 minutes, once).\n\
                 Enter it on your other account: `/link {code}` on Discord, \
                 `/sandpiper link {code}` on Slack, or `sandpiper link {code}` in a terminal \
                 (as another user)."
            ))
        }
        Some(code) => {
            let user = people.redeem_link_code(who, code).await?;
            let ids = people.identities(&user.id).await?;
            let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
            Ok(format!(
                "linked: you are {} on {}",
                user.username,
                list.join(", ")
            ))
        }
    }
}

/// `sandpiper whoami`: username and linked identities.
pub async fn whoami(people: &People, who: Person<'_>) -> Result<String, AccountError> {
    let user = me(people, who).await?;
    let ids = people.identities(&user.id).await?;
    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    Ok(format!("{} ({})", user.username, list.join(", ")))
}

/// `sandpiper rename NAME`.
pub async fn rename(
    people: &People,
    who: Person<'_>,
    username: &str,
) -> Result<String, AccountError> {
    let user = me(people, who).await?;
    let renamed = people.rename(&user.id, username).await?;
    Ok(format!("you are now {}", renamed.username))
}

/// `memory list`: what a turn of this user in `workstream` (a full key) could see.
pub async fn memory_list(
    people: &People,
    who: Person<'_>,
    workstream: &str,
) -> Result<String, AccountError> {
    let user = me(people, who).await?;
    let vis = Visibility {
        workstream: workstream.to_owned(),
        user_id: Some(user.id),
    };
    let found = people.visible_memories(&vis, 1000).await?;
    if found.is_empty() {
        return Ok("no memories\n".into());
    }
    let mut out = String::new();
    for m in &found {
        let _ = write!(out, "{:<32} {:<10} {:<9}", m.name, m.scope.as_str(), m.kind);
        let first = m
            .description
            .clone()
            .unwrap_or_else(|| m.content.lines().next().unwrap_or_default().to_owned());
        let _ = writeln!(out, " {}", first.chars().take(80).collect::<String>());
    }
    Ok(out)
}

/// Who may delete a memory of `scope`: a global memory reaches every thread's prompt, so
/// only an admin may delete one; one's own user and workstream memories are one's own.
pub fn may_delete(scope: Scope, admin: bool) -> Result<(), AccountError> {
    if scope == Scope::Global && !admin {
        return Err(AccountError::Usage(
            "deleting a global memory needs an admin (it is in every thread's prompt); \
             ask one of the bot's admins"
                .into(),
        ));
    }
    Ok(())
}

/// `memory delete NAME [--scope S]` in `workstream` (a full key). `admin`: whether the person
/// may delete global memories (see [`may_delete`]).
pub async fn memory_delete(
    people: &People,
    who: Person<'_>,
    workstream: &str,
    name: &str,
    scope: Option<&str>,
    admin: bool,
) -> Result<String, AccountError> {
    let scope = scope
        .map(|s| {
            Scope::parse(s).ok_or_else(|| {
                AccountError::Usage(format!(
                    "--scope must be global, workstream or user, not `{s}`"
                ))
            })
        })
        .transpose()?;
    let user = me(people, who).await?;
    let vis = Visibility {
        workstream: workstream.to_owned(),
        user_id: Some(user.id),
    };
    let found = people.named_memories(&vis, name, scope).await?;
    let found = match found.as_slice() {
        [one] => {
            may_delete(one.scope, admin)?;
            // Pinned to the scope just checked, so a global memory of the same name saved in
            // the meantime is not what gets deleted.
            people.delete_memory(&vis, name, Some(one.scope)).await?
        }
        _ => found,
    };
    match found.as_slice() {
        [] => Err(AccountError::Usage(format!("no memory named `{name}`"))),
        [m] => Ok(format!("deleted `{name}` ({} scope)", m.scope.as_str())),
        several => {
            let scopes: Vec<&str> = several.iter().map(|m| m.scope.as_str()).collect();
            Err(AccountError::Usage(format!(
                "`{name}` exists in several scopes ({}); add --scope",
                scopes.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_admin_deletes_a_global_memory() {
        assert!(may_delete(Scope::Global, true).is_ok());
        assert!(
            matches!(may_delete(Scope::Global, false), Err(AccountError::Usage(m)) if m.contains("needs an admin"))
        );
        assert!(may_delete(Scope::User, false).is_ok());
        assert!(may_delete(Scope::Workstream, false).is_ok());
    }
}
