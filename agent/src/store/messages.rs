//! The `messages` table: a workstream's history, one row per message, ordered by `seq`.

use super::{RECONNECTS, Store, StoreError, connection_lost, now_ms};
use crate::model::{ImagePart, Message, Role, ToolCall};

type Row = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

impl Store {
    /// Appends `message` at position `seq` and commits it. `author` records who sent a user
    /// message. A user message also marks the workstream as active (one statement per message
    /// otherwise: appends are on every turn's hot path).
    ///
    /// When the connection goes away mid-statement (a restart, a failover) the insert is tried
    /// again on a new connection; as the first try may have landed before the connection went,
    /// finding this very message already at `seq` counts as done.
    pub async fn append_message(
        &self,
        workstream: &str,
        seq: i64,
        message: &Message,
        author: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let tool_calls = non_empty_json(&message.tool_calls)?;
        let images = non_empty_json(&message.images)?;
        let mut lost = 0;
        loop {
            let insert = sqlx::query(
                "INSERT INTO messages (workstream, seq, role, content, tool_calls, tool_call_id, \
                 name, images, author, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(workstream)
            .bind(seq)
            .bind(message.role.as_str())
            .bind(message.content.as_str())
            .bind(tool_calls.as_deref())
            .bind(message.tool_call_id.as_deref())
            .bind(message.name.as_deref())
            .bind(images.as_deref())
            .bind(author)
            .bind(now);
            match insert.execute(self.pool()).await {
                Ok(_) => break,
                Err(e) if lost < RECONNECTS && connection_lost(&e) => {
                    lost += 1;
                    tracing::warn!(workstream, seq, error = %e, "database connection lost while appending; trying again");
                }
                Err(e)
                    if lost > 0
                        && self.message_at(workstream, seq).await? == Some(message.clone()) =>
                {
                    tracing::info!(workstream, seq, error = %e, "the append had landed before the connection went");
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if message.role == Role::User {
            // Activity time only orders workstream lists; it needs no transaction.
            sqlx::query("UPDATE workstreams SET updated_at = $1 WHERE key = $2")
                .bind(now)
                .bind(workstream)
                .execute(self.pool())
                .await?;
        }
        Ok(())
    }

    /// The message at `seq`, if any.
    async fn message_at(&self, workstream: &str, seq: i64) -> Result<Option<Message>, StoreError> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT role, content, tool_calls, tool_call_id, name, images FROM messages \
             WHERE workstream = $1 AND seq = $2",
        )
        .bind(workstream)
        .bind(seq)
        .fetch_optional(self.pool())
        .await?;
        row.map(decode).transpose()
    }

    /// Rewinds a workstream to its first `len` messages (later ones are deleted).
    pub async fn rewind_workstream(&self, workstream: &str, len: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM messages WHERE workstream = $1 AND seq >= $2")
            .bind(workstream)
            .bind(len)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// The whole history of a workstream, oldest first.
    pub async fn load_messages(&self, workstream: &str) -> Result<Vec<Message>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT role, content, tool_calls, tool_call_id, name, images FROM messages \
             WHERE workstream = $1 ORDER BY seq",
        )
        .bind(workstream)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(decode).collect()
    }
}

fn non_empty_json<T: serde::Serialize>(items: &[T]) -> Result<Option<String>, StoreError> {
    if items.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(items)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            table: "messages",
            message: e.to_string(),
        })
}

fn decode(row: Row) -> Result<Message, StoreError> {
    let (role, content, tool_calls, tool_call_id, name, images) = row;
    let corrupt = |message: String| StoreError::Corrupt {
        table: "messages",
        message,
    };
    let role = Role::parse(&role).ok_or_else(|| corrupt(format!("unknown role `{role}`")))?;
    let tool_calls: Vec<ToolCall> = match tool_calls {
        Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(e.to_string()))?,
        None => Vec::new(),
    };
    let images: Vec<ImagePart> = match images {
        Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(e.to_string()))?,
        None => Vec::new(),
    };
    Ok(Message {
        role,
        content,
        tool_calls,
        tool_call_id,
        name,
        images,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn messages_round_trip_in_order() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        let mut assistant = Message::assistant("");
        assistant.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: "{\"command\":\"ls\"}".into(),
        });
        let mut tool = Message::tool_result("c1", "bash", "a\nb");
        tool.images.push(ImagePart {
            media_type: "image/png".into(),
            data: "AAAA".into(),
        });
        let msgs = vec![Message::user("hi"), assistant, tool];
        // Inserted out of order on purpose: parallel tool results commit as they finish.
        for i in [0usize, 2, 1] {
            store
                .append_message("w", i as i64, &msgs[i], Some("alice"))
                .await
                .unwrap();
        }
        assert_eq!(store.load_messages("w").await.unwrap(), msgs);
        assert_eq!(store.load_messages("other").await.unwrap(), vec![]);
    }

    #[tokio::test]
    async fn rewind_keeps_the_first_messages() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", None).await.unwrap();
        for i in 0..4 {
            store
                .append_message("w", i, &Message::user(format!("m{i}")), None)
                .await
                .unwrap();
        }
        store.rewind_workstream("w", 2).await.unwrap();
        assert_eq!(
            store.load_messages("w").await.unwrap(),
            vec![Message::user("m0"), Message::user("m1")]
        );
    }

    #[tokio::test]
    async fn a_duplicate_seq_is_refused() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", None).await.unwrap();
        store
            .append_message("w", 0, &Message::user("a"), None)
            .await
            .unwrap();
        assert!(
            store
                .append_message("w", 0, &Message::user("b"), None)
                .await
                .is_err()
        );
    }
}
