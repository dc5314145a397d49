//! The `messages` table: a workstream's history, one row per message, ordered by `seq`, each
//! with the context note it was first sent to the model with ([`crate::turn::request`]).

use super::usage::{ModelCall, count};
use super::{Backend, RECONNECTS, Store, StoreError, connection_lost, now_ms};
use crate::model::{ImagePart, Message, Role, ToolCall, Usage};
use crate::turn::request::Note;

/// A `messages` row as it is read back: the message, without its place, and its note.
#[derive(sqlx::FromRow)]
struct Row {
    role: String,
    content: String,
    tool_calls: Option<String>,
    tool_call_id: Option<String>,
    name: Option<String>,
    images: Option<String>,
    note: Option<String>,
}

/// A workstream's history as stored.
#[derive(Debug, Default, PartialEq)]
pub struct History {
    /// Every message, oldest first.
    pub messages: Vec<Message>,
    /// The context notes messages were first sent with, by their index in `messages`.
    pub notes: Vec<(usize, Note)>,
}

// Macros rather than constants, so that `concat!` can join them at compile time.
macro_rules! insert {
    () => {
        "INSERT INTO messages (workstream, seq, role, content, tool_calls, tool_call_id, name, \
         images, author, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    };
}
macro_rules! activity {
    () => {
        "UPDATE workstreams SET updated_at = $10 WHERE key = $1"
    };
}
macro_rules! usage {
    () => {
        "UPDATE workstreams SET tokens_in = tokens_in + $11, tokens_out = tokens_out + $12 \
         WHERE key = $1"
    };
}
macro_rules! counted {
    () => {
        "INSERT INTO model_usage (workstream, person, model, input_tokens, cached_tokens, \
         cache_write_tokens, output_tokens, created_at) \
         VALUES ($13, $14, $15, $11, $16, $17, $12, $10)"
    };
}

/// What appending a message also changes on its workstream's row, in the same statement:
/// each statement is a round trip to the database (for SQLite, to its worker thread), and
/// appends are on every turn's hot path.
#[derive(Debug, Clone)]
enum Touch<'a> {
    /// Nothing.
    Nothing,
    /// The activity time (a user message): it only orders workstream lists.
    Activity,
    /// The model's token usage (its answer): added to the workstream's totals and counted
    /// as a call.
    Usage(ModelCall<'a>),
}

impl Touch<'_> {
    /// The statement for `backend`. SQLite runs several statements in one call, sharing the
    /// numbered parameters; PostgreSQL takes one statement per call, so the update rides in
    /// a data-modifying `WITH` of the insert (one statement, hence atomic).
    fn sql(&self, backend: Backend) -> &'static str {
        match (self, backend) {
            (Touch::Nothing, _) => insert!(),
            (Touch::Activity, Backend::Sqlite) => concat!(insert!(), "; ", activity!()),
            (Touch::Activity, Backend::Postgres) => {
                concat!("WITH touched AS (", activity!(), ") ", insert!())
            }
            (Touch::Usage(_), Backend::Sqlite) => {
                concat!(insert!(), "; ", usage!(), "; ", counted!())
            }
            (Touch::Usage(_), Backend::Postgres) => concat!(
                "WITH totals AS (",
                usage!(),
                "), counted AS (",
                counted!(),
                ") ",
                insert!()
            ),
        }
    }
}

impl Store {
    /// Appends `message` at position `seq` and commits it. `author` records who sent a user
    /// message. A user message also marks the workstream as active, in the same statement.
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
        let touch = match message.role {
            Role::User => Touch::Activity,
            Role::Assistant | Role::Tool => Touch::Nothing,
        };
        self.insert_message(workstream, seq, message, author, touch)
            .await
    }

    /// Appends the model's answer at `seq`, adds its token usage to the workstream's counts
    /// and counts the call, in one statement (so a retried append never counts it twice).
    pub async fn append_answer(
        &self,
        workstream: &str,
        seq: i64,
        message: &Message,
        call: &ModelCall<'_>,
    ) -> Result<(), StoreError> {
        let touch = if call.usage == Usage::default() {
            Touch::Nothing
        } else {
            Touch::Usage(call.clone())
        };
        self.insert_message(workstream, seq, message, None, touch)
            .await
    }

    async fn insert_message(
        &self,
        workstream: &str,
        seq: i64,
        message: &Message,
        author: Option<&str>,
        touch: Touch<'_>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let tool_calls = non_empty_json(&message.tool_calls)?;
        let images = non_empty_json(&message.images)?;
        let sql = touch.sql(self.backend());
        let mut lost = 0;
        loop {
            let mut insert = sqlx::query(sql)
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
            if let Touch::Usage(call) = &touch {
                insert = insert
                    .bind(count(call.usage.input_tokens))
                    .bind(count(call.usage.output_tokens))
                    .bind(call.thread.as_ref())
                    .bind(call.person)
                    .bind(call.model)
                    .bind(count(call.usage.cached_tokens))
                    .bind(count(call.usage.cache_write_tokens));
            }
            match insert.execute(self.pool()).await {
                Ok(_) => return Ok(()),
                Err(e) if lost < RECONNECTS && connection_lost(&e) => {
                    lost += 1;
                    tracing::warn!(workstream, seq, error = %e, "database connection lost while appending; trying again");
                }
                Err(e)
                    if lost > 0
                        && self.message_at(workstream, seq).await? == Some(message.clone()) =>
                {
                    tracing::info!(workstream, seq, error = %e, "the append had landed before the connection went");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The message at `seq`, if any.
    async fn message_at(&self, workstream: &str, seq: i64) -> Result<Option<Message>, StoreError> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT role, content, tool_calls, tool_call_id, name, images, note FROM messages \
             WHERE workstream = $1 AND seq = $2",
        )
        .bind(workstream)
        .bind(seq)
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| decode(row).map(|(message, _)| message))
            .transpose()
    }

    /// Stores the context notes `notes` (by seq) with their messages: a history loaded again
    /// sends each message with the note it was first sent with. Writing a note again
    /// replaces it (one that grew before its request was sent).
    pub async fn store_notes(
        &self,
        workstream: &str,
        notes: &[(usize, &Note)],
    ) -> Result<(), StoreError> {
        for (index, note) in notes {
            let note = serde_json::to_string(note).map_err(|e| StoreError::Corrupt {
                table: "messages",
                message: e.to_string(),
            })?;
            sqlx::query("UPDATE messages SET note = $3 WHERE workstream = $1 AND seq = $2")
                .bind(workstream)
                .bind(i64::try_from(*index).unwrap_or(i64::MAX))
                .bind(note)
                .execute(self.pool())
                .await?;
        }
        Ok(())
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

    /// Whether `user` wrote a message in `workstream`.
    pub async fn wrote_in(&self, workstream: &str, user: &str) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT seq FROM messages WHERE workstream = $1 AND author = $2 LIMIT 1",
        )
        .bind(workstream)
        .bind(user)
        .fetch_optional(self.pool())
        .await?;
        Ok(found.is_some())
    }

    /// The whole history of a workstream, oldest first.
    pub async fn load_messages(&self, workstream: &str) -> Result<Vec<Message>, StoreError> {
        Ok(self.load_history(workstream).await?.messages)
    }

    /// The whole history of a workstream with the notes its messages were sent with.
    pub async fn load_history(&self, workstream: &str) -> Result<History, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT role, content, tool_calls, tool_call_id, name, images, note FROM messages \
             WHERE workstream = $1 ORDER BY seq",
        )
        .bind(workstream)
        .fetch_all(self.pool())
        .await?;
        let mut history = History::default();
        for (index, row) in rows.into_iter().enumerate() {
            let (message, note) = decode(row)?;
            history.messages.push(message);
            history.notes.extend(note.map(|note| (index, note)));
        }
        Ok(history)
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

fn decode(row: Row) -> Result<(Message, Option<Note>), StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        table: "messages",
        message,
    };
    let role =
        Role::parse(&row.role).ok_or_else(|| corrupt(format!("unknown role `{}`", row.role)))?;
    let tool_calls: Vec<ToolCall> = match row.tool_calls {
        Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(e.to_string()))?,
        None => Vec::new(),
    };
    let images: Vec<ImagePart> = match row.images {
        Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(e.to_string()))?,
        None => Vec::new(),
    };
    let note: Option<Note> = match row.note {
        Some(t) => Some(serde_json::from_str(&t).map_err(|e| corrupt(e.to_string()))?),
        None => None,
    };
    let message = Message {
        role,
        content: row.content,
        tool_calls,
        tool_call_id: row.tool_call_id,
        name: row.name,
        images,
    };
    Ok((message, note))
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
    async fn notes_are_read_back_with_the_history() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        let msgs = vec![
            Message::user("hi"),
            Message::assistant("hello"),
            Message::user("and?"),
        ];
        for (seq, m) in msgs.iter().enumerate() {
            store
                .append_message("w", seq as i64, m, Some("alice"))
                .await
                .unwrap();
        }
        let first = Note {
            text: "\n\n<context>\nIt is noon.\n</context>".into(),
            memories: vec!["deploy".into()],
            personal: Some(crate::turn::request::PersonalNote {
                user: "alice".into(),
                text: "\n\n<context>\ntabs\n</context>".into(),
                memories: vec!["editor".into()],
            }),
        };
        let newest = Note {
            text: "x".into(),
            ..Note::default()
        };
        store
            .store_notes("w", &[(0, &first), (2, &Note::default())])
            .await
            .unwrap();
        // Stored again, a note is replaced.
        store.store_notes("w", &[(2, &newest)]).await.unwrap();
        assert_eq!(
            store.load_history("w").await.unwrap(),
            History {
                messages: msgs.clone(),
                notes: vec![(0, first), (2, newest)],
            }
        );
        assert_eq!(store.load_messages("w").await.unwrap(), msgs);
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
    async fn an_answer_counts_its_usage_once_and_a_user_message_marks_activity() {
        let store = Store::memory().await.unwrap();
        store.ensure_workstream("w", Some("alice")).await.unwrap();
        store.ensure_workstream("x", Some("alice")).await.unwrap();
        // `x` was created after `w`; a message in `w` makes `w` the most recently active.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        store
            .append_message("w", 0, &Message::user("hi"), Some("alice"))
            .await
            .unwrap();
        assert_eq!(store.list_workstreams().await.unwrap(), vec!["w", "x"]);
        let usage = Usage {
            input_tokens: 100,
            output_tokens: 20,
            cached_tokens: 60,
            cache_write_tokens: 0,
        };
        let call = ModelCall::new("w", Some("alice"), "m", usage);
        let answer = Message::assistant("hello");
        store.append_answer("w", 1, &answer, &call).await.unwrap();
        // A second append at the same place fails and adds nothing.
        assert!(store.append_answer("w", 1, &answer, &call).await.is_err());
        let nothing = ModelCall::new("w", Some("alice"), "m", Usage::default());
        store
            .append_answer("w", 2, &Message::assistant("more"), &nothing)
            .await
            .unwrap();
        let info = store.workstream("w").await.unwrap().unwrap();
        assert_eq!((info.tokens_in, info.tokens_out), (100, 20));
        let counted = store
            .usage(crate::store::usage::UsageOf::Person("alice"), 0)
            .await
            .unwrap();
        assert_eq!(
            (counted.calls, counted.input_tokens, counted.cached_tokens),
            (1, 100, 60)
        );
        assert_eq!(
            store.load_messages("w").await.unwrap(),
            vec![Message::user("hi"), answer, Message::assistant("more")]
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
