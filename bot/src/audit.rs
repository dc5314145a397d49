//! `sandpiper audit`: the approval audit trail printed as a table, JSON lines or CSV, filtered
//! by workstream, person and start date; and the retention pruner `serve` runs daily.

use std::time::Duration;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use sandpiper_agent::approvals::ledger;
use sandpiper_agent::config::AuditConfig;
use sandpiper_agent::store::audit::{AuditFilter, AuditKind, AuditRow};
use sandpiper_agent::store::{Store, StoreError};

use crate::tabular::{self, without_controls};

/// How `sandpiper audit` prints: a table, JSON lines or CSV.
pub use crate::tabular::Format as AuditFormat;

/// A `--since` value that is neither a date nor a time.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a date: use YYYY-MM-DD (UTC midnight) or an RFC 3339 time")]
pub struct BadSince(pub String);

/// `--since`: a date (UTC midnight) or an RFC 3339 time, as unix ms.
pub fn parse_since(text: &str) -> Result<i64, BadSince> {
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let midnight = date
            .and_hms_opt(0, 0, 0)
            .ok_or_else(|| BadSince(text.into()))?;
        return Ok(Utc.from_utc_datetime(&midnight).timestamp_millis());
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|_| BadSince(text.into()))
}

/// The flags of `sandpiper audit`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// Only this workstream (`discord:<thread>`, `console:default`, ...).
    #[arg(long, value_name = "KEY")]
    pub workstream: Option<String>,
    /// Only events this person acted in: their user id, username or platform handle (a
    /// display name never matches: anyone can choose one).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Only events since this date (YYYY-MM-DD, UTC) or RFC 3339 time.
    #[arg(long, value_name = "DATE", value_parser = parse_since)]
    pub since: Option<i64>,
    /// table, jsonl or csv.
    #[arg(long, value_enum, default_value_t = AuditFormat::Table)]
    pub format: AuditFormat,
}

/// `sandpiper audit`: prints the events `args` select from the configured database (which it
/// never creates). The binary's edge, as [`crate::init::run`] is.
pub async fn run(args: AuditArgs, config: &sandpiper_agent::Config) -> anyhow::Result<()> {
    if let Some(none) = crate::defaults::no_database_yet(config) {
        println!("{none}");
        return Ok(());
    }
    let store = crate::wiring::open_existing_store(config).await?;
    let filter = AuditFilter {
        workstream: args.workstream,
        user: args.user,
        since: args.since,
        limit: None,
    };
    print!("{}", report(&store, &filter, args.format).await?);
    Ok(())
}

/// The events `filter` selects, rendered in `format`.
pub async fn report(
    store: &Store,
    filter: &AuditFilter,
    format: AuditFormat,
) -> Result<String, StoreError> {
    let rows = store.audit(filter).await?;
    Ok(render(&rows, format))
}

/// Renders events.
pub fn render(rows: &[AuditRow], format: AuditFormat) -> String {
    match format {
        AuditFormat::Jsonl => rows
            .iter()
            .map(|r| {
                let mut value = serde_json::to_value(r).unwrap_or_default();
                if let Some(object) = value.as_object_mut() {
                    object.insert("time".into(), time(r.event.at).into());
                }
                format!("{value}\n")
            })
            .collect(),
        AuditFormat::Csv => tabular::csv(
            [
                "time",
                "kind",
                "workstream",
                "tool",
                "actor",
                "actor_id",
                "how",
                "request",
                "detail",
            ],
            rows.iter().map(columns),
        ),
        AuditFormat::Table => {
            if rows.is_empty() {
                return "No audit events match.\n".into();
            }
            let header = [
                "TIME",
                "KIND",
                "WORKSTREAM",
                "TOOL",
                "WHO",
                "WHO ID",
                "HOW",
                "REQUEST",
                "DETAIL",
            ];
            tabular::table(header, rows.iter().map(columns))
        }
    }
}

fn time(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// time, kind, workstream, tool, who (as records name them) and their user id, how, request,
/// detail.
fn columns(r: &AuditRow) -> [String; 9] {
    let e = &r.event;
    let (how, detail) = match &e.kind {
        AuditKind::Requested { preview, .. } => (String::new(), one_line(preview)),
        AuditKind::Decided {
            decision,
            path,
            note,
        } => (
            path.to_string(),
            format!(
                "{}{}",
                json_word(decision),
                note.as_deref()
                    .map(|n| format!(": {}", one_line(n)))
                    .unwrap_or_default()
            ),
        ),
        AuditKind::AutoApproved {
            reason,
            grant,
            granted_by,
        } => (
            json_word(reason),
            match (grant, granted_by) {
                (Some(g), Some(by)) => format!("grant {g} by {by}"),
                (Some(g), None) => format!("grant {g}"),
                _ => String::new(),
            },
        ),
        AuditKind::TimedOut => (String::new(), String::new()),
        AuditKind::Cancelled { cause } => (json_word(cause), String::new()),
        AuditKind::GrantCreated { grant } | AuditKind::GrantRevoked { grant } => {
            (String::new(), grant.clone())
        }
        AuditKind::AutoApproveSession { source } => (source.clone(), String::new()),
        AuditKind::BudgetChanged {
            scope,
            subject,
            subject_name,
            unit,
            old,
            new,
        } => (
            json_word(scope),
            format!(
                "{}: {}",
                without_controls(subject_name.as_deref().unwrap_or(subject)),
                sandpiper_agent::budget::old_to_new(*unit, *old, *new)
            ),
        ),
    };
    [
        time(e.at),
        e.kind.name().to_owned(),
        e.workstream.clone(),
        e.tool.clone().unwrap_or_default(),
        e.actor.clone().unwrap_or_default(),
        e.actor_id.clone().unwrap_or_default(),
        how,
        e.request.clone().unwrap_or_default(),
        detail,
    ]
}

/// A unit enum's serde name (`always_allowed`, `new_message`).
fn json_word(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// A field on one line of the table, without control characters (a note could otherwise
/// move the cursor or retitle the terminal it is printed in).
fn one_line(text: &str) -> String {
    let line: String = without_controls(&text.split_whitespace().collect::<Vec<_>>().join(" "));
    if line.chars().count() > 80 {
        format!("{}…", line.chars().take(79).collect::<String>())
    } else {
        line
    }
}

/// Prunes the trail once a day while the process runs (`serve`); the first pruning happens at
/// start ([`ledger::session_started`]).
pub fn prune_daily(store: Store, audit: AuditConfig) {
    if audit.retention_days == 0 {
        return;
    }
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(24 * 60 * 60));
        every.tick().await;
        loop {
            every.tick().await;
            if let Err(e) = ledger::prune(&store, &audit).await {
                tracing::warn!(error = %e, "pruning the audit trail failed");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use sandpiper_agent::protocol::DecisionPath;
    use sandpiper_agent::store::audit::{AuditEvent, DecisionKind};

    #[test]
    fn since_takes_a_date_or_a_time() {
        assert_eq!(parse_since("2026-12-01").unwrap(), 1_796_083_200_000);
        assert_eq!(
            parse_since("2026-12-01T01:00:00Z").unwrap(),
            1_796_083_200_000 + 3_600_000
        );
        assert!(parse_since("yesterday").is_err());
    }

    #[test]
    fn every_format_says_who_and_how() {
        let row = AuditRow {
            id: 1,
            event: AuditEvent {
                at: 1_796_083_200_000,
                workstream: "discord:1".into(),
                request: Some("ap_1".into()),
                call_id: Some("c1".into()),
                tool: Some("bash".into()),
                actor: Some("@alice".into()),
                actor_id: Some("u-1".into()),
                kind: AuditKind::Decided {
                    decision: DecisionKind::Denied,
                    path: DecisionPath::NoteDialog,
                    note: Some("use staging, not prod".into()),
                },
            },
        };
        assert_eq!(
            render(std::slice::from_ref(&row), AuditFormat::Csv),
            "time,kind,workstream,tool,actor,actor_id,how,request,detail\n\
             2026-12-01T00:00:00.000Z,decided,discord:1,bash,\"'@alice\",u-1,note_dialog,ap_1,\
             \"denied: use staging, not prod\"\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(render(std::slice::from_ref(&row), AuditFormat::Jsonl).trim())
                .unwrap();
        assert_eq!(json["actor"], "@alice");
        assert_eq!(json["actor_id"], "u-1");
        assert_eq!(json["path"], "note_dialog");
        assert_eq!(json["decision"], "denied");
        assert_eq!(json["time"], "2026-12-01T00:00:00.000Z");
        let table = render(&[row], AuditFormat::Table);
        assert!(table.starts_with("TIME"), "{table}");
        assert!(
            table.contains("note_dialog") && table.contains("@alice") && table.contains("u-1"),
            "{table}"
        );
    }

    #[test]
    fn fields_a_spreadsheet_or_a_terminal_would_run_are_shown_as_text() {
        assert_eq!(
            tabular::csv_field("=HYPERLINK(\"http://x\")"),
            "\"'=HYPERLINK(\"\"http://x\"\")\""
        );
        assert_eq!(tabular::csv_field("@SUM(A1)"), "\"'@SUM(A1)\"");
        assert_eq!(tabular::csv_field("-2+3"), "\"'-2+3\"");
        assert_eq!(tabular::csv_field("\tcmd"), "\"'\u{FFFD}cmd\"");
        assert_eq!(tabular::csv_field("plain text"), "plain text");
        assert_eq!(tabular::csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(
            tabular::csv_field("bell\u{7}esc\u{1b}]0;owned\u{7}"),
            "bell\u{FFFD}esc\u{FFFD}]0;owned\u{FFFD}"
        );
        assert_eq!(one_line("a\u{1b}[2Jb\n c"), "a\u{FFFD}[2Jb c");
    }
}
