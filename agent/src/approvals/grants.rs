//! A workstream's always-allow grants as the pipeline consults them: read fresh from the store
//! for every batch (so a revoke, or a grant made on another node, applies to the next call),
//! and asked which grant, if any, lets a call run unasked and who made it.

use super::grant::Grant;
use super::ledger::{self, Change};
use super::pattern;
use crate::store::approvals::GrantRow;
use crate::store::{Store, StoreError};
use crate::{Agent, AgentError};

/// What `/grants revoke` takes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeTarget {
    /// Every grant of the workstream.
    All,
    /// Grants named by this text: a stored grant exactly (`bash:git status`), a tool (its
    /// grant and its patterns), a pattern's prefix (`git status`), or an MCP server.
    Named(String),
}

impl RevokeTarget {
    /// `all`, or what to match.
    pub fn parse(text: &str) -> Self {
        let text = text.trim().trim_matches('`').trim();
        if text.eq_ignore_ascii_case("all") {
            RevokeTarget::All
        } else {
            RevokeTarget::Named(text.split_whitespace().collect::<Vec<_>>().join(" "))
        }
    }

    /// Whether it names the stored grant `stored`.
    pub fn names(&self, stored: &str) -> bool {
        let RevokeTarget::Named(name) = self else {
            return true;
        };
        if stored == name || Grant::tool_of(stored) == name {
            return true;
        }
        match stored.parse::<Grant>() {
            Ok(Grant::Pattern { prefix, .. }) => &prefix == name,
            Ok(Grant::Server(server)) => &server == name,
            Ok(Grant::Tool(_)) | Err(_) => false,
        }
    }
}

impl Agent {
    /// A workstream's grants: what, who granted, when.
    pub async fn grants_of(&self, workstream: &str) -> Result<Vec<GrantRow>, AgentError> {
        Ok(self.store().grant_rows(workstream).await?)
    }

    /// Takes back the grants `target` names (the caller checked who may); returns those taken
    /// back. Each is recorded in the audit trail; the next call asks again.
    pub async fn revoke_grants(
        &self,
        workstream: &str,
        target: &RevokeTarget,
        by: &str,
        by_id: Option<&str>,
    ) -> Result<Vec<String>, AgentError> {
        let named: Vec<String> = self
            .store()
            .grant_rows(workstream)
            .await?
            .into_iter()
            .map(|row| row.grant)
            .filter(|g| target.names(g))
            .collect();
        let change = Change::Revoked {
            workstream,
            grants: &named,
            by,
            by_id,
        };
        ledger::record(self.store(), change).await?;
        tracing::info!(workstream, by, grants = ?named, "grants revoked");
        Ok(named)
    }
}

/// The grant a call ran under, and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantedBy {
    /// The grant.
    pub grant: Grant,
    /// Who made it (shown name), when known.
    pub by: Option<String>,
}

/// A workstream's grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    grants: Vec<GrantedBy>,
}

impl Grants {
    /// The grants of `workstream`, as stored now.
    pub async fn load(store: &Store, workstream: &str) -> Result<Self, StoreError> {
        Ok(Self::from_rows(store.grant_rows(workstream).await?))
    }

    /// Grants from stored rows; a row that is no grant (written by something else) is
    /// skipped with a warning, never read as a wider one.
    pub fn from_rows(rows: Vec<GrantRow>) -> Self {
        let grants = rows
            .into_iter()
            .filter_map(|row| match row.grant.parse::<Grant>() {
                Ok(grant) => Some(GrantedBy {
                    grant,
                    by: row.granted_by,
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping an unreadable grant");
                    None
                }
            })
            .collect();
        Self { grants }
    }

    /// Adds a grant (tests, and a batch that just made one).
    pub fn with(mut self, grant: Grant, by: Option<&str>) -> Self {
        self.grants.push(GrantedBy {
            grant,
            by: by.map(str::to_owned),
        });
        self
    }

    /// The grant that lets `tool` run `command` (bash's command, when the tool has one)
    /// unasked: a grant of the whole tool or of its MCP server first; else, when every part
    /// of the command matches one of the tool's patterns, the first of those patterns.
    pub fn covering(&self, tool: &str, command: Option<&str>) -> Option<&GrantedBy> {
        if let Some(whole) = self
            .grants
            .iter()
            .find(|g| !matches!(g.grant, Grant::Pattern { .. }) && g.grant.allows(tool, None))
        {
            return Some(whole);
        }
        let command = command?;
        let patterns: Vec<(&GrantedBy, &str)> = self
            .grants
            .iter()
            .filter_map(|g| match &g.grant {
                Grant::Pattern { tool: t, prefix } if t == tool => Some((g, prefix.as_str())),
                _ => None,
            })
            .collect();
        let prefixes: Vec<&str> = patterns.iter().map(|(_, p)| *p).collect();
        if !pattern::allowed(command, &prefixes) {
            return None;
        }
        patterns
            .iter()
            .find(|(_, p)| pattern::allowed(command, &[p]))
            .or(patterns.first())
            .map(|(g, _)| *g)
    }

    /// Every grant, in stored order.
    pub fn iter(&self) -> impl Iterator<Item = &GrantedBy> {
        self.grants.iter()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_call_runs_under_the_grant_that_covers_it_and_names_who_made_it() {
        let grants = Grants::default()
            .with("bash:git status".parse().unwrap(), Some("alice"))
            .with("bash:ls".parse().unwrap(), Some("bob"))
            .with("mcp__github__*".parse().unwrap(), Some("carol"))
            .with(Grant::Tool("write_file".into()), None);
        let by = |tool: &str, command: Option<&str>| {
            grants.covering(tool, command).map(|g| g.by.clone())
        };
        assert_eq!(
            by("bash", Some("git status -s")),
            Some(Some("alice".into()))
        );
        assert_eq!(by("bash", Some("ls -la")), Some(Some("bob".into())));
        assert_eq!(
            by("bash", Some("git status && ls")),
            Some(Some("alice".into()))
        );
        assert_eq!(by("bash", Some("git status && rm -rf /")), None);
        assert_eq!(by("bash", None), None);
        assert_eq!(
            by("mcp__github__create_issue", None),
            Some(Some("carol".into()))
        );
        assert_eq!(by("write_file", None), Some(None));
        assert_eq!(by("edit_file", None), None);
    }

    #[test]
    fn a_revoke_names_a_grant_its_tool_its_prefix_or_its_server() {
        let stored = [
            "bash",
            "bash:git status",
            "bash:ls",
            "mcp__github__*",
            "write_file",
        ];
        let named = |t: &str| -> Vec<&str> {
            let target = RevokeTarget::parse(t);
            stored.iter().copied().filter(|g| target.names(g)).collect()
        };
        assert_eq!(named("all"), stored.to_vec());
        assert_eq!(named("bash"), vec!["bash", "bash:git status", "bash:ls"]);
        assert_eq!(named("git  status"), vec!["bash:git status"]);
        assert_eq!(named("`bash:ls`"), vec!["bash:ls"]);
        assert_eq!(named("github"), vec!["mcp__github__*"]);
        assert_eq!(named("write_file"), vec!["write_file"]);
        assert_eq!(named("git"), Vec::<&str>::new());
    }

    #[test]
    fn an_unreadable_row_grants_nothing() {
        let grants = Grants::from_rows(vec![GrantRow {
            grant: "bash:".into(),
            granted_by: None,
            created_at: 1,
        }]);
        assert!(grants.is_empty());
    }
}
