//! What people call the places and roles a platform names by id: a channel's name and an
//! approver role's (or Slack user group's) name, recorded by the node that sees them and read
//! by the status page.

use std::collections::HashMap;

use super::{Store, StoreError, now_ms};

/// What a recorded name names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A channel, by its channel key (`slack:T1:C1`, `discord:10`): what `workstreams.channel`
    /// holds.
    Channel,
    /// A Discord role or a Slack user group, by its platform id (what approvers are given as).
    Role,
}

impl Named {
    fn as_str(self) -> &'static str {
        match self {
            Self::Channel => "channel",
            Self::Role => "role",
        }
    }
}

impl Store {
    /// Records the names of `kind`s, each `(id, name)`: a renamed channel or role takes its
    /// new name.
    pub async fn record_names(
        &self,
        kind: Named,
        names: &[(String, String)],
    ) -> Result<(), StoreError> {
        let now = now_ms();
        for (id, name) in names {
            sqlx::query(
                "INSERT INTO platform_names (kind, id, name, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (kind, id) DO UPDATE SET name = excluded.name, \
                 updated_at = excluded.updated_at WHERE platform_names.name <> excluded.name",
            )
            .bind(kind.as_str())
            .bind(id)
            .bind(name)
            .bind(now)
            .execute(self.pool())
            .await?;
        }
        Ok(())
    }

    /// Every recorded name of `kind`, by id.
    pub async fn names(&self, kind: Named) -> Result<HashMap<String, String>, StoreError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT id, name FROM platform_names WHERE kind = $1")
                .bind(kind.as_str())
                .fetch_all(self.pool())
                .await?;
        Ok(rows.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(id: &str, name: &str) -> (String, String) {
        (id.to_owned(), name.to_owned())
    }

    #[tokio::test]
    async fn a_name_is_kept_per_kind_and_a_rename_replaces_it() {
        let store = Store::memory().await.unwrap();
        store
            .record_names(Named::Channel, &[pair("slack:T1:C1", "general")])
            .await
            .unwrap();
        store
            .record_names(Named::Role, &[pair("42", "deployers"), pair("43", "sre")])
            .await
            .unwrap();
        store
            .record_names(Named::Channel, &[pair("slack:T1:C1", "ops")])
            .await
            .unwrap();
        let channels = store.names(Named::Channel).await.unwrap();
        assert_eq!(channels.len(), 1);
        assert_eq!(channels["slack:T1:C1"], "ops");
        let roles = store.names(Named::Role).await.unwrap();
        assert_eq!(
            (roles["42"].as_str(), roles["43"].as_str()),
            ("deployers", "sre")
        );
    }
}
