//! The `recall` tool: full-text search over past conversations.
//!
//! Searches the messages, tool calls and tool results of the workstreams the asking user took
//! part in, plus the current one (see [`crate::store::recall`]), so a user never recalls a
//! thread they were not in. Auto-approved: it reads only what the user could already see.

use serde::Deserialize;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput, truncate_output};
use crate::store::recall::{MAX_LIMIT, RecallHit, search_terms};

/// The `recall` tool.
#[derive(Debug, Default)]
pub(super) struct Recall;

/// Hits returned when the model gives no `limit`.
const DEFAULT_LIMIT: usize = 20;

/// The arguments of `tools/recall.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    query: String,
    limit: Option<i64>,
}

/// A validated request.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Request {
    query: String,
    limit: usize,
    /// The limit the model asked for, when it was above [`MAX_LIMIT`].
    clamped_from: Option<i64>,
}

fn parse(args: &Args) -> Result<Request, ToolError> {
    let query = args.query.trim().to_owned();
    search_terms(&query).map_err(|e| ToolError::model(e.to_string()))?;
    let (limit, clamped_from) = match args.limit {
        None => (DEFAULT_LIMIT, None),
        Some(n) if n < 1 => {
            return Err(ToolError::model(format!(
                "`limit` must be between 1 and {MAX_LIMIT}, got {n}; leave it out for \
                 {DEFAULT_LIMIT}"
            )));
        }
        Some(n) => match usize::try_from(n) {
            Ok(n) if n <= MAX_LIMIT => (n, None),
            _ => (MAX_LIMIT, Some(n)),
        },
    };
    Ok(Request {
        query,
        limit,
        clamped_from,
    })
}

#[async_trait::async_trait]
impl Tool for Recall {
    type Args = Args;
    type Call = Request;
    const USAGE: &'static str =
        "send {\"query\": \"<words to find>\"} and optionally \"limit\" (1 to 100)";

    fn name(&self) -> &'static str {
        "recall"
    }

    fn prepare(&self, args: Args, _ctx: &ToolContext) -> Result<(Prepared, Request), ToolError> {
        let request = parse(&args)?;
        let prepared = Prepared {
            header: format!("recall: {}", request.query),
            preview: String::new(),
            ask: false,
        };
        Ok((prepared, request))
    }

    async fn execute(
        &self,
        request: &Request,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let store = ctx.store()?;
        let search = store.recall(
            &request.query,
            ctx.user_id.as_deref(),
            &ctx.workstream,
            request.limit,
        );
        let hits = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            hits = search => hits.map_err(|e| ToolError::store("cannot search conversation history", e))?,
        };
        Ok(ToolOutput::text(truncate_output(
            &render(request, &hits),
            ctx.config.max_output_bytes,
        )))
    }
}

/// One block per hit, best first, then notes about the limit.
fn render(request: &Request, hits: &[RecallHit]) -> String {
    let mut text = if hits.is_empty() {
        format!("no matches for \"{}\" in your conversations", request.query)
    } else {
        let blocks: Vec<String> = hits.iter().map(block).collect();
        blocks.join("\n\n")
    };
    if let Some(asked) = request.clamped_from {
        text.push_str(&format!(
            "\n\n[limit {asked} is above the maximum of {MAX_LIMIT}; searched for at most \
             {MAX_LIMIT} matches]"
        ));
    } else if !hits.is_empty() && hits.len() == request.limit && request.limit < MAX_LIMIT {
        text.push_str(&format!(
            "\n\n[showing the best {} matches; there may be more: narrow the query or raise \
             limit (at most {MAX_LIMIT})]",
            hits.len()
        ));
    }
    text
}

/// `[<workstream> · <YYYY-MM-DD HH:MM UTC> · <role>] <snippet>`.
fn block(hit: &RecallHit) -> String {
    let when = chrono::DateTime::from_timestamp_millis(hit.created_at)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| "unknown time".to_owned());
    format!(
        "[{} · {when} · {}] {}",
        hit.workstream, hit.role, hit.snippet
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::store::Store;
    use crate::tools::{NoOutput, prepare_json, typed};
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};
    use std::path::Path;

    async fn recall(ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let prepared = prepare_json(Recall, args, ctx)?;
        prepared.execute(ctx, &NoOutput).await
    }

    fn context(store: Option<Store>, user: Option<&str>) -> ToolContext {
        let mut ctx = ToolContext::for_test(Path::new("/tmp"));
        ctx.workstream = "console:here".into();
        ctx.user_id = user.map(str::to_owned);
        ctx.store = store;
        ctx
    }

    #[test]
    fn prepare_is_auto_approved_and_checks_the_arguments() {
        let ctx = context(None, None);
        let p = prepare_json(Recall, json!({"query": " deploy key "}), &ctx).unwrap();
        assert_eq!(
            p.prepared,
            Prepared {
                header: "recall: deploy key".into(),
                preview: String::new(),
                ask: false,
            }
        );
        let err = prepare_json(Recall, json!({"query": "\"*\""}), &ctx).unwrap_err();
        assert!(
            matches!(&err, ToolError::Model(m) if m.starts_with("nothing to search for in \"\\\"*\\\"\"")),
            "{err}"
        );
        let err = prepare_json(Recall, json!({"query": "x", "limit": 0}), &ctx).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`limit` must be between 1 and 100, got 0; leave it out for 20"
        );
        let r = parse(&typed(json!({"query": "x", "limit": 500}))).unwrap();
        assert_eq!((r.limit, r.clamped_from), (100, Some(500)));
        assert_eq!(parse(&typed(json!({"query": "x"}))).unwrap().limit, 20);
        assert!(Recall::USAGE.contains(&format!("(1 to {MAX_LIMIT})")));
    }

    #[tokio::test]
    async fn hits_are_blocks_with_place_time_and_role() {
        let store = Store::memory().await.unwrap();
        store
            .ensure_workstream("console:old", Some("al"))
            .await
            .unwrap();
        let msg = Message::user("rotate the walrus certificate\non Friday");
        store
            .append_message("console:old", 0, &msg, Some("al"))
            .await
            .unwrap();
        sqlx::query("UPDATE messages SET created_at = 1767268800000")
            .execute(store.pool())
            .await
            .unwrap();
        let ctx = context(Some(store), Some("al"));
        let out = recall(&ctx, json!({"query": "walrus", "limit": 1000}))
            .await
            .unwrap();
        assert_eq!(
            out.text,
            "[console:old · 2026-01-01 12:00 UTC · user] rotate the walrus certificate on Friday\
             \n\n[limit 1000 is above the maximum of 100; searched for at most 100 matches]"
        );
        let out = recall(&ctx, json!({"query": "walrus", "limit": 1}))
            .await
            .unwrap();
        assert!(
            out.text.ends_with("raise limit (at most 100)]"),
            "{}",
            out.text
        );
        let out = recall(&ctx, json!({"query": "narwhal"})).await.unwrap();
        assert_eq!(
            out,
            ToolOutput::text("no matches for \"narwhal\" in your conversations")
        );
        // Another user, elsewhere, finds nothing of al's.
        let other = context(ctx.store.clone(), Some("bo"));
        let out = recall(&other, json!({"query": "walrus"})).await.unwrap();
        assert_eq!(out.text, "no matches for \"walrus\" in your conversations");
    }

    #[tokio::test]
    async fn without_a_store_the_model_is_told() {
        let err = recall(&context(None, None), json!({"query": "x"}))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "this tool needs storage, which is not available here"
        );
    }
}
