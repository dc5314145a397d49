//! The `prompt_templates` table: prompt templates under governance. Templates written by
//! people are `manual`; prompts discovered on MCP servers are synced in as `mcp`, read-only,
//! with their server, and a manual template of the same name always wins.

use super::{Store, StoreError, now_ms};

/// A stored template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTemplate {
    /// Unique name; MCP prompts are `mcp__{server}__{prompt}`.
    pub name: String,
    /// What it is for.
    pub description: Option<String>,
    /// The template text (for MCP prompts: a summary; the server expands them).
    pub content: String,
    /// JSON array of arguments (`[{"name", "description", "required"}]`), when known.
    pub arguments: Option<String>,
    /// `manual` or `mcp`.
    pub origin: String,
    /// The MCP server offering it.
    pub mcp_server: Option<String>,
    /// Whether people may edit or delete it.
    pub readonly: bool,
}

/// One prompt an MCP server offers, as synced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpPromptSpec {
    /// Full name, `mcp__{server}__{prompt}`.
    pub name: String,
    /// Description from the server.
    pub description: Option<String>,
    /// JSON array of arguments.
    pub arguments: String,
}

/// What a sync changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateSync {
    /// New templates.
    pub added: Vec<String>,
    /// Templates whose description or arguments changed.
    pub updated: Vec<String>,
    /// Templates the server no longer offers.
    pub removed: Vec<String>,
    /// MCP prompts skipped because a manual template has the name.
    pub skipped: Vec<String>,
}

type Row = (
    String,
    Option<String>,
    String,
    Option<String>,
    String,
    Option<String>,
    i64,
);

impl Store {
    /// Every template, by name.
    pub async fn prompt_templates(&self) -> Result<Vec<PromptTemplate>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT name, description, content, arguments, origin, mcp_server, readonly \
             FROM prompt_templates ORDER BY name",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(name, description, content, arguments, origin, mcp_server, readonly)| {
                    PromptTemplate {
                        name,
                        description,
                        content,
                        arguments,
                        origin,
                        mcp_server,
                        readonly: readonly != 0,
                    }
                },
            )
            .collect())
    }

    /// Creates or replaces a manual template. An MCP template of that name is replaced: the
    /// manual one wins. Nothing in sandpiper writes manual templates yet (no command does), so
    /// this exists for the tests of that rule.
    #[cfg(test)]
    pub(crate) async fn save_manual_template(
        &self,
        name: &str,
        content: &str,
        description: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO prompt_templates (name, description, content, origin, readonly, \
             created_at, updated_at) VALUES ($1, $2, $3, 'manual', 0, $4, $4) \
             ON CONFLICT (name) DO UPDATE SET description = $2, content = $3, \
             origin = 'manual', mcp_server = NULL, arguments = NULL, readonly = 0, updated_at = $4",
        )
        .bind(name)
        .bind(description)
        .bind(content)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Makes the MCP templates of `server` match `prompts`: new ones added, changed ones
    /// updated, vanished ones removed; names held by manual templates are skipped.
    pub async fn sync_mcp_templates(
        &self,
        server: &str,
        prompts: &[McpPromptSpec],
    ) -> Result<TemplateSync, StoreError> {
        let existing = self.prompt_templates().await?;
        let now = now_ms();
        let mut report = TemplateSync::default();
        let mut tx = self.pool().begin().await?;
        for p in prompts {
            let summary = p.description.clone().unwrap_or_else(|| p.name.clone());
            match existing.iter().find(|t| t.name == p.name) {
                Some(t) if t.origin != "mcp" || t.mcp_server.as_deref() != Some(server) => {
                    tracing::warn!(
                        template = %p.name,
                        server,
                        "a template of this name already exists; the MCP prompt is skipped"
                    );
                    report.skipped.push(p.name.clone());
                    continue;
                }
                Some(t)
                    if t.description == p.description
                        && t.arguments.as_deref() == Some(p.arguments.as_str()) =>
                {
                    continue;
                }
                Some(_) => report.updated.push(p.name.clone()),
                None => report.added.push(p.name.clone()),
            }
            sqlx::query(
                "INSERT INTO prompt_templates (name, description, content, arguments, origin, \
                 mcp_server, readonly, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, 'mcp', $5, 1, $6, $6) \
                 ON CONFLICT (name) DO UPDATE SET description = $2, content = $3, \
                 arguments = $4, updated_at = $6",
            )
            .bind(&p.name)
            .bind(p.description.as_deref())
            .bind(&summary)
            .bind(&p.arguments)
            .bind(server)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        for t in existing
            .iter()
            .filter(|t| t.origin == "mcp" && t.mcp_server.as_deref() == Some(server))
        {
            if !prompts.iter().any(|p| p.name == t.name) {
                sqlx::query("DELETE FROM prompt_templates WHERE name = $1 AND origin = 'mcp'")
                    .bind(&t.name)
                    .execute(&mut *tx)
                    .await?;
                report.removed.push(t.name.clone());
            }
        }
        tx.commit().await?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn spec(name: &str, desc: &str) -> McpPromptSpec {
        McpPromptSpec {
            name: name.into(),
            description: Some(desc.into()),
            arguments: "[]".into(),
        }
    }

    #[tokio::test]
    async fn sync_adds_updates_removes_and_manual_wins() {
        let store = Store::memory().await.unwrap();
        store
            .save_manual_template("mcp__srv__review", "our own review prompt", None)
            .await
            .unwrap();
        let first = store
            .sync_mcp_templates(
                "srv",
                &[
                    spec("mcp__srv__greet", "say hi"),
                    spec("mcp__srv__review", "theirs"),
                ],
            )
            .await
            .unwrap();
        assert_eq!(first.added, ["mcp__srv__greet"]);
        assert_eq!(first.skipped, ["mcp__srv__review"]);
        let again = store
            .sync_mcp_templates("srv", &[spec("mcp__srv__greet", "say hello")])
            .await
            .unwrap();
        assert_eq!(again.updated, ["mcp__srv__greet"]);
        let all = store.prompt_templates().await.unwrap();
        assert_eq!(all.len(), 2);
        let greet = &all[0];
        assert_eq!(
            (
                greet.origin.as_str(),
                greet.mcp_server.as_deref(),
                greet.readonly
            ),
            ("mcp", Some("srv"), true)
        );
        assert_eq!(all[1].content, "our own review prompt");
        let gone = store.sync_mcp_templates("srv", &[]).await.unwrap();
        assert_eq!(gone.removed, ["mcp__srv__greet"]);
        let left = store.prompt_templates().await.unwrap();
        assert_eq!(
            left.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["mcp__srv__review"],
            "a server's sync never removes a manual template"
        );
    }
}
