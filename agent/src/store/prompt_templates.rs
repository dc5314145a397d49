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

/// A manual template as people write it (the admin API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualTemplate<'a> {
    /// Unique name.
    pub name: &'a str,
    /// What it is for.
    pub description: Option<&'a str>,
    /// The template text.
    pub content: &'a str,
    /// JSON array of arguments, when given.
    pub arguments: Option<&'a str>,
}

/// What a change to a template did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateChange {
    /// Done.
    Done,
    /// No template has the name.
    Missing,
    /// The name is held by a template people may not change (an MCP prompt).
    ReadOnly,
    /// (Create) a manual template has the name already.
    Exists,
}

/// A `prompt_templates` row, column for column.
#[derive(sqlx::FromRow)]
struct Row {
    name: String,
    description: Option<String>,
    content: String,
    arguments: Option<String>,
    origin: String,
    mcp_server: Option<String>,
    readonly: i64,
}

impl From<Row> for PromptTemplate {
    fn from(row: Row) -> Self {
        Self {
            name: row.name,
            description: row.description,
            content: row.content,
            arguments: row.arguments,
            origin: row.origin,
            mcp_server: row.mcp_server,
            readonly: row.readonly != 0,
        }
    }
}

impl Store {
    /// Every template, by name.
    pub async fn prompt_templates(&self) -> Result<Vec<PromptTemplate>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT name, description, content, arguments, origin, mcp_server, readonly \
             FROM prompt_templates ORDER BY name",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(PromptTemplate::from).collect())
    }

    /// One template by name.
    pub async fn prompt_template(&self, name: &str) -> Result<Option<PromptTemplate>, StoreError> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT name, description, content, arguments, origin, mcp_server, readonly \
             FROM prompt_templates WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(PromptTemplate::from))
    }

    /// Creates a manual template. An MCP prompt of that name is replaced (the manual template
    /// wins, and later syncs skip the prompt); a manual template of that name is
    /// [`TemplateChange::Exists`]. One statement, so two creators racing get one each answer.
    pub async fn create_manual_template(
        &self,
        t: &ManualTemplate<'_>,
    ) -> Result<TemplateChange, StoreError> {
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO prompt_templates (name, description, content, arguments, origin, \
             mcp_server, readonly, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 'manual', NULL, 0, $5, $5) \
             ON CONFLICT (name) DO UPDATE SET description = $2, content = $3, arguments = $4, \
             origin = 'manual', mcp_server = NULL, readonly = 0, created_at = $5, updated_at = $5 \
             WHERE prompt_templates.origin = 'mcp'",
        )
        .bind(t.name)
        .bind(t.description)
        .bind(t.content)
        .bind(t.arguments)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(if done.rows_affected() == 1 {
            TemplateChange::Done
        } else {
            TemplateChange::Exists
        })
    }

    /// Replaces a manual template's description, content and arguments.
    pub async fn update_manual_template(
        &self,
        t: &ManualTemplate<'_>,
    ) -> Result<TemplateChange, StoreError> {
        let done = sqlx::query(
            "UPDATE prompt_templates SET description = $2, content = $3, arguments = $4, \
             updated_at = $5 WHERE name = $1 AND readonly = 0 AND origin = 'manual'",
        )
        .bind(t.name)
        .bind(t.description)
        .bind(t.content)
        .bind(t.arguments)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        self.change_of(t.name, done.rows_affected()).await
    }

    /// Deletes a manual template (an MCP prompt of the name comes back with the next sync).
    pub async fn delete_manual_template(&self, name: &str) -> Result<TemplateChange, StoreError> {
        let done = sqlx::query(
            "DELETE FROM prompt_templates WHERE name = $1 AND readonly = 0 AND origin = 'manual'",
        )
        .bind(name)
        .execute(self.pool())
        .await?;
        self.change_of(name, done.rows_affected()).await
    }

    /// What an update or delete that changed `rows` rows did.
    async fn change_of(&self, name: &str, rows: u64) -> Result<TemplateChange, StoreError> {
        if rows == 1 {
            return Ok(TemplateChange::Done);
        }
        Ok(match self.prompt_template(name).await? {
            None => TemplateChange::Missing,
            Some(_) => TemplateChange::ReadOnly,
        })
    }

    /// Creates or replaces a manual template. An MCP template of that name is replaced: the
    /// manual one wins. For the tests of that rule.
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
    /// updated, vanished ones removed; names held by manual templates or by another server's
    /// prompts are skipped. One transaction that reads what it then changes; every write is
    /// guarded by the row's server, so a name another server took meanwhile is skipped too,
    /// never overwritten or removed.
    pub async fn sync_mcp_templates(
        &self,
        server: &str,
        prompts: &[McpPromptSpec],
    ) -> Result<TemplateSync, StoreError> {
        let now = now_ms();
        let mut report = TemplateSync::default();
        let mut tx = self.begin_write().await?;
        let existing: Vec<PromptTemplate> = sqlx::query_as::<_, Row>(
            "SELECT name, description, content, arguments, origin, mcp_server, readonly \
             FROM prompt_templates ORDER BY name",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(PromptTemplate::from)
        .collect();
        for p in prompts {
            let plan = match existing.iter().find(|t| t.name == p.name) {
                Some(t) if !t.is_from(server) => Plan::Skip,
                Some(t)
                    if t.description == p.description
                        && t.arguments.as_deref() == Some(p.arguments.as_str()) =>
                {
                    continue;
                }
                Some(_) => Plan::Update,
                None => Plan::Add,
            };
            let written =
                plan != Plan::Skip && upsert_mcp_template(&mut tx, server, p, now).await?;
            match (plan, written) {
                (Plan::Add, true) => report.added.push(p.name.clone()),
                (Plan::Update, true) => report.updated.push(p.name.clone()),
                _ => {
                    tracing::warn!(
                        template = %p.name,
                        server,
                        "a template of this name already exists; the MCP prompt is skipped"
                    );
                    report.skipped.push(p.name.clone());
                }
            }
        }
        for t in existing.iter().filter(|t| t.is_from(server)) {
            if prompts.iter().any(|p| p.name == t.name) {
                continue;
            }
            let gone = sqlx::query(
                "DELETE FROM prompt_templates \
                 WHERE name = $1 AND origin = 'mcp' AND mcp_server = $2",
            )
            .bind(&t.name)
            .bind(server)
            .execute(&mut *tx)
            .await?;
            if gone.rows_affected() == 1 {
                report.removed.push(t.name.clone());
            }
        }
        tx.commit().await?;
        Ok(report)
    }
}

/// What a sync means to do with one offered prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// The name is free.
    Add,
    /// The server's own template changed.
    Update,
    /// The name is a manual template's or another server's.
    Skip,
}

impl PromptTemplate {
    /// Whether this is the MCP prompt of `server` (the one server whose syncs may change it).
    fn is_from(&self, server: &str) -> bool {
        self.origin == "mcp" && self.mcp_server.as_deref() == Some(server)
    }
}

/// Writes `p` as `server`'s MCP template: inserted if the name is free, updated if it is
/// `server`'s own; a name held by a manual template or another server is left alone. Whether
/// it was written.
async fn upsert_mcp_template(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    server: &str,
    p: &McpPromptSpec,
    now: i64,
) -> Result<bool, StoreError> {
    let summary = p.description.clone().unwrap_or_else(|| p.name.clone());
    let done = sqlx::query(
        "INSERT INTO prompt_templates (name, description, content, arguments, origin, \
         mcp_server, readonly, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 'mcp', $5, 1, $6, $6) \
         ON CONFLICT (name) DO UPDATE SET description = $2, content = $3, \
         arguments = $4, updated_at = $6 \
         WHERE prompt_templates.origin = 'mcp' AND prompt_templates.mcp_server = $5",
    )
    .bind(&p.name)
    .bind(p.description.as_deref())
    .bind(&summary)
    .bind(&p.arguments)
    .bind(server)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
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

    #[tokio::test]
    async fn manual_templates_are_created_once_and_mcp_ones_are_read_only() {
        let store = Store::memory().await.unwrap();
        store
            .sync_mcp_templates("srv", &[spec("mcp__srv__greet", "say hi")])
            .await
            .unwrap();
        let mine = ManualTemplate {
            name: "standup",
            description: Some("daily"),
            content: "What did you do?",
            arguments: None,
        };
        assert_eq!(
            store.create_manual_template(&mine).await.unwrap(),
            TemplateChange::Done
        );
        assert_eq!(
            store.create_manual_template(&mine).await.unwrap(),
            TemplateChange::Exists
        );
        let edited = ManualTemplate {
            content: "And today?",
            ..mine.clone()
        };
        assert_eq!(
            store.update_manual_template(&edited).await.unwrap(),
            TemplateChange::Done
        );
        assert_eq!(
            store
                .prompt_template("standup")
                .await
                .unwrap()
                .unwrap()
                .content,
            "And today?"
        );
        let theirs = ManualTemplate {
            name: "mcp__srv__greet",
            ..mine.clone()
        };
        assert_eq!(
            store.update_manual_template(&theirs).await.unwrap(),
            TemplateChange::ReadOnly
        );
        assert_eq!(
            store
                .delete_manual_template("mcp__srv__greet")
                .await
                .unwrap(),
            TemplateChange::ReadOnly
        );
        assert_eq!(
            store.delete_manual_template("nope").await.unwrap(),
            TemplateChange::Missing
        );
        let missing = ManualTemplate {
            name: "nope",
            ..mine.clone()
        };
        assert_eq!(
            store.update_manual_template(&missing).await.unwrap(),
            TemplateChange::Missing
        );
        // A manual template of an MCP prompt's name wins, and the next sync skips the prompt.
        assert_eq!(
            store.create_manual_template(&theirs).await.unwrap(),
            TemplateChange::Done
        );
        let t = store
            .prompt_template("mcp__srv__greet")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.origin.as_str(), t.readonly, t.mcp_server),
            ("manual", false, None)
        );
        let sync = store
            .sync_mcp_templates("srv", &[spec("mcp__srv__greet", "say hi")])
            .await
            .unwrap();
        assert_eq!(sync.skipped, ["mcp__srv__greet"]);
        assert_eq!(
            store.delete_manual_template("standup").await.unwrap(),
            TemplateChange::Done
        );
        assert_eq!(store.prompt_template("standup").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_template_reads_the_same_alone_and_in_the_list() {
        let store = Store::memory().await.unwrap();
        store
            .sync_mcp_templates("srv", &[spec("mcp__srv__greet", "say hi")])
            .await
            .unwrap();
        store
            .save_manual_template("standup", "What did you do?", Some("daily"))
            .await
            .unwrap();
        let all = store.prompt_templates().await.unwrap();
        let mut alone = Vec::new();
        for t in &all {
            alone.push(store.prompt_template(&t.name).await.unwrap().unwrap());
        }
        assert_eq!(alone, all);
        assert_eq!(
            all.iter()
                .map(|t| (t.name.as_str(), t.readonly))
                .collect::<Vec<_>>(),
            [("mcp__srv__greet", true), ("standup", false)]
        );
    }
}
