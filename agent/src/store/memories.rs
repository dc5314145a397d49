//! The `memories` table: typed, scoped memories. Every query takes a [`Visibility`], so a
//! caller can only ever see global memories, its own workstream's and its own user's.

use super::{Store, StoreError, now_ms};

/// Where a memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every workstream sees it.
    Global,
    /// Only its workstream sees it.
    Workstream,
    /// Only its user sees it, in any workstream.
    User,
}

impl Scope {
    /// Stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Workstream => "workstream",
            Scope::User => "user",
        }
    }

    /// Parses a stored or user-given name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "global" => Some(Scope::Global),
            "workstream" => Some(Scope::Workstream),
            "user" => Some(Scope::User),
            _ => None,
        }
    }
}

/// What one turn may see: global memories, its workstream's, and its user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visibility {
    /// The current workstream key.
    pub workstream: String,
    /// The user whose message is answered; without one, no `user` memories are visible.
    pub user_id: Option<String>,
}

impl Visibility {
    /// Whether a memory is visible from here.
    pub fn sees(&self, m: &Memory) -> bool {
        match m.scope {
            Scope::Global => true,
            Scope::Workstream => m.scope_id == self.workstream,
            Scope::User => self.user_id.as_deref().is_some_and(|u| u == m.scope_id),
        }
    }

    /// The `scope_id` a memory of `scope` gets when saved from here, or `None` when this
    /// context cannot own such a memory (a `user` memory without a known user).
    pub fn scope_id(&self, scope: Scope) -> Option<String> {
        match scope {
            Scope::Global => Some(String::new()),
            Scope::Workstream => Some(self.workstream.clone()),
            Scope::User => self.user_id.clone(),
        }
    }
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    /// Row id.
    pub id: String,
    /// snake_case name, unique within its scope.
    pub name: String,
    /// Scope.
    pub scope: Scope,
    /// `''` for global, the workstream key, or the user id.
    pub scope_id: String,
    /// `user`, `project`, `feedback` or `reference`.
    pub kind: String,
    /// Short description for relevance matching.
    pub description: Option<String>,
    /// The memory itself.
    pub content: String,
    /// Last update (unix ms).
    pub updated_at: i64,
    /// How often it was injected or returned.
    pub access_count: i64,
}

/// A memory to save.
#[derive(Debug, Clone)]
pub struct NewMemory<'a> {
    /// snake_case name.
    pub name: &'a str,
    /// Scope.
    pub scope: Scope,
    /// Type; `None` keeps the old one on update (`project` for a new memory).
    pub kind: Option<&'a str>,
    /// Description; `None` keeps the old one on update.
    pub description: Option<&'a str>,
    /// Content.
    pub content: &'a str,
    /// Who saved it.
    pub created_by: Option<&'a str>,
}

/// A `memories` row, column for column ([`COLUMNS`]).
#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    name: String,
    scope: String,
    scope_id: String,
    #[sqlx(rename = "type")]
    kind: String,
    description: Option<String>,
    content: String,
    updated_at: i64,
    access_count: i64,
}

const COLUMNS: &str =
    "id, name, scope, scope_id, type, description, content, updated_at, access_count";

/// `(scope = 'global') OR (workstream match) OR (user match)`, binding $1 = workstream and
/// $2 = user id ('' matches nothing, since no user id is empty).
const VISIBLE: &str = "(scope = 'global' OR (scope = 'workstream' AND scope_id = $1) \
                       OR (scope = 'user' AND scope_id = $2 AND $2 <> ''))";

impl Store {
    /// Saves (inserts or updates) a memory. Returns true when it was new.
    pub async fn save_memory(
        &self,
        vis: &Visibility,
        m: &NewMemory<'_>,
    ) -> Result<bool, StoreError> {
        let scope_id = vis.scope_id(m.scope).unwrap_or_default();
        let now = now_ms();
        let existed: Option<(String,)> = sqlx::query_as(
            "SELECT id FROM memories WHERE name = $1 AND scope = $2 AND scope_id = $3",
        )
        .bind(m.name)
        .bind(m.scope.as_str())
        .bind(&scope_id)
        .fetch_optional(self.pool())
        .await?;
        sqlx::query(
            "INSERT INTO memories (id, name, scope, scope_id, type, description, content, \
             created_by, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, COALESCE($5, 'project'), $6, $7, $8, $9, $9) \
             ON CONFLICT (name, scope, scope_id) DO UPDATE SET \
             type = COALESCE($5, memories.type), \
             description = COALESCE($6, memories.description), \
             content = $7, updated_at = $9",
        )
        .bind(format!("mem_{}", uuid::Uuid::new_v4().simple()))
        .bind(m.name)
        .bind(m.scope.as_str())
        .bind(&scope_id)
        .bind(m.kind)
        .bind(m.description)
        .bind(m.content)
        .bind(m.created_by)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(existed.is_none())
    }

    /// Every memory of every scope (for the in-process relevance index, which filters by
    /// [`Visibility`] itself).
    pub async fn all_memories(&self) -> Result<Vec<Memory>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM memories ORDER BY updated_at, id"
        )))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(decode).collect()
    }

    /// A cheap fingerprint of the table (count and latest update) that changes whenever a
    /// memory is saved or deleted, by this node or another.
    pub async fn memories_version(&self) -> Result<(i64, i64), StoreError> {
        let v: (i64, Option<i64>) =
            sqlx::query_as("SELECT COUNT(*), MAX(updated_at) FROM memories")
                .fetch_one(self.pool())
                .await?;
        Ok((v.0, v.1.unwrap_or(0)))
    }

    /// Every memory visible from `vis`, most recently updated first, at most `limit`.
    pub async fn visible_memories(
        &self,
        vis: &Visibility,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM memories WHERE {VISIBLE} \
             ORDER BY updated_at DESC, name LIMIT $3"
        )))
        .bind(&vis.workstream)
        .bind(vis.user_id.as_deref().unwrap_or(""))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(decode).collect()
    }

    /// Visible memories whose name, description or content contains `query` (case-insensitive;
    /// `%`, `_` and `\` in the query match themselves).
    pub async fn search_memories(
        &self,
        vis: &Visibility,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let pattern = format!("%{}%", escape_like(&query.to_lowercase()));
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM memories WHERE {VISIBLE} AND \
             (LOWER(name) LIKE $3 ESCAPE '\\' OR LOWER(COALESCE(description, '')) LIKE $3 ESCAPE '\\' \
              OR LOWER(content) LIKE $3 ESCAPE '\\') \
             ORDER BY updated_at DESC, name LIMIT $4"
        )))
        .bind(&vis.workstream)
        .bind(vis.user_id.as_deref().unwrap_or(""))
        .bind(pattern)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(decode).collect()
    }

    /// The visible memories named `name` (in `scope`, when given), so that a caller can check
    /// who may delete them before [`Store::delete_memory`].
    pub async fn named_memories(
        &self,
        vis: &Visibility,
        name: &str,
        scope: Option<Scope>,
    ) -> Result<Vec<Memory>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM memories WHERE {VISIBLE} AND name = $3 \
             AND ($4 = '' OR scope = $4)"
        )))
        .bind(&vis.workstream)
        .bind(vis.user_id.as_deref().unwrap_or(""))
        .bind(name)
        .bind(scope.map(Scope::as_str).unwrap_or(""))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(decode).collect()
    }

    /// Deletes the visible memory named `name` (in `scope`, when given) when exactly one
    /// matches. Returns every match, so that none means "not found" and several means "say
    /// which scope" (nothing was deleted then).
    pub async fn delete_memory(
        &self,
        vis: &Visibility,
        name: &str,
        scope: Option<Scope>,
    ) -> Result<Vec<Memory>, StoreError> {
        let found = self.named_memories(vis, name, scope).await?;
        if found.len() == 1 {
            sqlx::query("DELETE FROM memories WHERE id = $1")
                .bind(&found[0].id)
                .execute(self.pool())
                .await?;
        }
        Ok(found)
    }

    /// Records that memories were injected or returned.
    pub async fn touch_memories(&self, ids: &[&str]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        for id in ids {
            sqlx::query(
                "UPDATE memories SET last_accessed = $1, access_count = access_count + 1 \
                 WHERE id = $2",
            )
            .bind(now)
            .bind(*id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Escapes `\`, `%` and `_` for `LIKE ... ESCAPE '\'`.
pub fn escape_like(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn decode(row: Row) -> Result<Memory, StoreError> {
    let scope = Scope::parse(&row.scope).ok_or_else(|| StoreError::Corrupt {
        table: "memories",
        message: format!("unknown scope `{}`", row.scope),
    })?;
    Ok(Memory {
        id: row.id,
        name: row.name,
        scope,
        scope_id: row.scope_id,
        kind: row.kind,
        description: row.description,
        content: row.content,
        updated_at: row.updated_at,
        access_count: row.access_count,
    })
}

#[cfg(test)]
mod tests;
