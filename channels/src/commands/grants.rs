//! `/grants`: what is always allowed in this thread (tool, pattern, who granted it, when), and
//! `/grants revoke <tool|pattern|all>` to take it back. The same on every platform: the
//! command table parses it, [`answer`] answers it, and [`may_revoke`] is the one rule: the
//! thread's owner or an admin may revoke; anyone else is refused (privately, as every
//! command answer is).

use std::fmt::Write as _;

use sandpiper_agent::Agent;
use sandpiper_agent::approvals::{Grant, RevokeTarget};

use crate::commands::account::{self, Person};
use crate::commands::{CommandError, Where};
use crate::permissions::Standing;

/// `/grants` actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantsAction {
    /// The thread's grants.
    List,
    /// Take back the grants this names (`all`, a tool, a pattern).
    Revoke(String),
}

/// `grants [list | revoke <what>]`.
pub fn parse(
    action: Option<&str>,
    what: Option<&str>,
) -> Result<crate::commands::Command, CommandError> {
    let action = match (action.unwrap_or("list"), what) {
        ("list", None) => GrantsAction::List,
        ("list", Some(_)) => return Err(CommandError::Usage("grants list takes nothing".into())),
        ("revoke", Some(what)) => GrantsAction::Revoke(what.to_owned()),
        ("revoke", None) => {
            return Err(CommandError::Usage(
                "grants revoke needs what to take back: grants revoke <tool|pattern|all>".into(),
            ));
        }
        (other, _) => {
            return Err(CommandError::Usage(format!(
                "grants: `{other}` is not an action; use list or revoke <tool|pattern|all>"
            )));
        }
    };
    Ok(crate::commands::Command::Grants { action })
}

/// Why a revoke was refused; the text is the person's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevokeRefusal {
    /// Neither the owner nor an admin.
    #[error("🚫 Only the person who started this thread, or an admin, can revoke its grants.")]
    NotOwnerOrAdmin,
}

/// Who may take a thread's grants back: its owner or an admin (an approver decides single
/// calls; a grant is the owner's, as Always allow is).
pub fn may_revoke(who: Standing) -> Result<(), RevokeRefusal> {
    if who.owner || who.admin {
        Ok(())
    } else {
        Err(RevokeRefusal::NotOwnerOrAdmin)
    }
}

/// The answer to `/grants` typed by `who` at `at`.
pub async fn answer(
    agent: &Agent,
    action: &GrantsAction,
    who: Person<'_>,
    at: Where<'_>,
) -> String {
    let Some(workstream) = at.workstream else {
        return format!("Use {}grants inside a thread I answer in.", at.prefix);
    };
    match action {
        GrantsAction::List => list(agent, workstream, at.prefix).await,
        GrantsAction::Revoke(what) => revoke(agent, workstream, what, who, at).await,
    }
}

async fn list(agent: &Agent, workstream: &str, prefix: &str) -> String {
    let rows = match agent.grants_of(workstream).await {
        Ok(rows) => rows,
        Err(e) => return format!("grants: {e}"),
    };
    if rows.is_empty() {
        return "Nothing is always allowed in this thread: every call that needs approval asks."
            .into();
    }
    let mut out = String::from("Always allowed in this thread:\n");
    for row in rows {
        let what = row
            .grant
            .parse::<Grant>()
            .map_or_else(|_| row.grant.clone(), |g| g.describe());
        let when = chrono::DateTime::from_timestamp_millis(row.created_at)
            .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_default();
        let by = row.granted_by.as_deref().unwrap_or("someone");
        let _ = writeln!(out, "• {what} — granted by {by}, {when}");
    }
    let _ = write!(
        out,
        "Take one back with {prefix}grants revoke <tool|pattern|all>."
    );
    out
}

async fn revoke(
    agent: &Agent,
    workstream: &str,
    what: &str,
    who: Person<'_>,
    at: Where<'_>,
) -> String {
    let user = match account::user_id(&agent.people(), who).await {
        Ok(id) => id,
        Err(e) => return format!("grants: {e}"),
    };
    let owner = match agent.status(workstream).await {
        Ok(status) => status.and_then(|s| s.owner),
        Err(e) => return format!("grants: {e}"),
    };
    let standing = Standing {
        owner: owner.as_deref() == Some(user.as_str()),
        approver: at.approver,
        admin: at.admin,
    };
    if let Err(refusal) = may_revoke(standing) {
        tracing::info!(workstream, by = who.display_name, "grant revoke refused");
        return refusal.to_string();
    }
    let target = RevokeTarget::parse(what);
    match agent
        .revoke_grants(workstream, &target, who.display_name, Some(&user))
        .await
    {
        Ok(gone) if gone.is_empty() => format!(
            "Nothing always allowed here matches `{what}`; {}grants lists what is.",
            at.prefix
        ),
        Ok(gone) => {
            let names: Vec<String> = gone
                .iter()
                .map(|g| {
                    g.parse::<Grant>()
                        .map_or_else(|_| g.clone(), |g| g.describe())
                })
                .collect();
            format!(
                "🔒 Revoked: {}. Those calls ask for approval again.",
                names.join(", ")
            )
        }
        Err(e) => format!("grants: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::Command;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_owner_or_an_admin_revokes_not_an_approver_or_a_participant() {
        let four = [
            (
                "owner",
                Standing {
                    owner: true,
                    ..Standing::default()
                },
                true,
            ),
            (
                "approver",
                Standing {
                    approver: true,
                    ..Standing::default()
                },
                false,
            ),
            (
                "admin",
                Standing {
                    admin: true,
                    ..Standing::default()
                },
                true,
            ),
            ("participant", Standing::default(), false),
        ];
        for (who, standing, allowed) in four {
            assert_eq!(may_revoke(standing).is_ok(), allowed, "{who}");
        }
        assert_eq!(
            may_revoke(Standing::default()).unwrap_err().to_string(),
            "🚫 Only the person who started this thread, or an admin, can revoke its grants."
        );
    }

    #[test]
    fn grants_parses_list_and_revoke() {
        assert_eq!(
            Command::from_text("grants"),
            Ok(Command::Grants {
                action: GrantsAction::List
            })
        );
        assert_eq!(
            Command::from_text("grants revoke git status"),
            Ok(Command::Grants {
                action: GrantsAction::Revoke("git status".into())
            })
        );
        assert!(matches!(
            Command::from_text("grants revoke"),
            Err(CommandError::Usage(u)) if u.contains("tool|pattern|all")
        ));
        assert!(matches!(
            Command::from_text("grants burn"),
            Err(CommandError::Usage(_))
        ));
    }
}
