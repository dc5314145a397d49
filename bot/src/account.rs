//! Console commands about the person at the terminal: `sandpiper link` (join identities across
//! platforms) and `sandpiper memory` (list and delete the memories they can see).

use std::fmt::Write as _;

use sandpiper_agent::store::Store;
use sandpiper_agent::store::memories::{Scope, Visibility};
use sandpiper_agent::store::users::{IdentityError, User};
use sandpiper_channels::console::PLATFORM;

/// Why an account command failed; the message is for the user.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// Linking failed (bad code, too many attempts, ...).
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] sandpiper_agent::store::StoreError),
    /// Bad command-line input.
    #[error("{0}")]
    Usage(String),
}

async fn me(store: &Store, os_user: &str) -> Result<User, AccountError> {
    Ok(store.user_for_identity(PLATFORM, os_user, os_user).await?)
}

/// `sandpiper link` (new code), `sandpiper link CODE` (join), `sandpiper link --unlink`.
pub async fn link(
    store: &Store,
    os_user: &str,
    code: Option<&str>,
    unlink: bool,
) -> Result<String, AccountError> {
    if unlink {
        let user = store.unlink(PLATFORM, os_user).await?;
        return Ok(format!(
            "unlinked: this terminal account is now its own user, {}",
            user.username
        ));
    }
    match code {
        None => {
            let user = me(store, os_user).await?;
            let code = store.create_link_code(&user.id).await?;
            Ok(format!(
                "Your link code is {code} (valid for 10 minutes, once).\n\
                 Enter it on your other account: /link {code} in Discord or Slack, or \
                 `sandpiper link {code}` as another terminal user."
            ))
        }
        Some(code) => {
            let user = store
                .redeem_link_code(PLATFORM, os_user, os_user, code)
                .await?;
            let ids = store.identities_of(&user.id).await?;
            let list: Vec<String> = ids.iter().map(|(p, id)| format!("{p}:{id}")).collect();
            Ok(format!(
                "linked: you are {} on {}",
                user.username,
                list.join(", ")
            ))
        }
    }
}

/// `sandpiper whoami`: username and linked identities.
pub async fn whoami(store: &Store, os_user: &str) -> Result<String, AccountError> {
    let user = me(store, os_user).await?;
    let ids = store.identities_of(&user.id).await?;
    let list: Vec<String> = ids.iter().map(|(p, id)| format!("{p}:{id}")).collect();
    Ok(format!("{} ({})", user.username, list.join(", ")))
}

/// `sandpiper rename NAME`.
pub async fn rename(store: &Store, os_user: &str, username: &str) -> Result<String, AccountError> {
    let user = me(store, os_user).await?;
    let renamed = store.rename_user(&user.id, username).await?;
    Ok(format!("you are now {}", renamed.username))
}

/// `sandpiper memory list`: what a turn of this user in this workstream could see.
pub async fn memory_list(
    store: &Store,
    os_user: &str,
    workstream: &str,
) -> Result<String, AccountError> {
    let user = me(store, os_user).await?;
    let vis = Visibility {
        workstream: format!("console:{workstream}"),
        user_id: Some(user.id),
    };
    let found = store.visible_memories(&vis, 1000).await?;
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

/// `sandpiper memory delete NAME [--scope S]`.
pub async fn memory_delete(
    store: &Store,
    os_user: &str,
    workstream: &str,
    name: &str,
    scope: Option<&str>,
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
    let user = me(store, os_user).await?;
    let vis = Visibility {
        workstream: format!("console:{workstream}"),
        user_id: Some(user.id),
    };
    let found = store.delete_memory(&vis, name, scope).await?;
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
