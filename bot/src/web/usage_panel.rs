//! The usage panel (issue 42): tokens per day over the last [`DAYS`] days, as a plain SVG
//! chart (no script: the page's policy allows none inline), cut to what the viewer may see
//! (an admin everything; a person the turns they started and the workstreams they take part
//! in, as `/usage` lets them see "me" and "this thread"), and their own daily budget.
//!
//! An admin raises or lifts a person's or a thread's daily budget from the panel
//! (`POST /budget`): through the one engine function `/budget` in chat goes through
//! ([`Agent::change_budget`]), after the page's checks for every POST (the session's form
//! token, a person behind the session) and the chat's rule (only an admin).
//!
//! [`Agent::change_budget`]: sandpiper_agent::Agent::change_budget

use std::collections::HashSet;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::{Extension, Form};
use maud::{Markup, html};
use sandpiper_agent::budget::{BudgetOf, Day, NewCap};
use sandpiper_agent::store::usage::BudgetScope;
use sandpiper_agent::store::{StoreError, now_ms};

use super::WebState;
use super::auth;
use super::pages::{self, plural};
use super::read_model::{Sources, Viewer};

/// Days the chart shows, today included.
pub(super) const DAYS: usize = 14;
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// What the panel shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UsagePanel {
    /// Whose usage it is: `everyone`, or `you and your workstreams`.
    pub whose: &'static str,
    /// Each day's start (unix ms) and its tokens, oldest first, [`DAYS`] of them.
    pub days: Vec<(i64, u64)>,
    /// The viewer's own daily budget today: its cap (`None`: no cap) and what they used.
    pub budget: Option<(Option<u64>, u64)>,
}

impl UsagePanel {
    /// Tokens today.
    pub(super) fn today(&self) -> u64 {
        self.days.last().map_or(0, |d| d.1)
    }
}

/// Reads the panel for `viewer`: every workstream for an admin, else the turns they started
/// and the workstreams they may see on the page.
pub(super) async fn read(src: &Sources, viewer: &Viewer) -> Result<UsagePanel, StoreError> {
    let agent = src.local.agent();
    let store = agent.store();
    let now = now_ms();
    let first = Day::of(now).start - DAY_MS * (DAYS as i64 - 1);
    let visible: HashSet<String> = match viewer.admin {
        true => HashSet::new(),
        false => store
            .workstream_overview(i64::MAX)
            .await?
            .into_iter()
            .filter(|w| viewer.sees(w))
            .map(|w| w.key)
            .collect(),
    };
    let me = viewer.user_id.as_deref();
    let mut days: Vec<(i64, u64)> = (0..DAYS as i64).map(|i| (first + i * DAY_MS, 0)).collect();
    for row in store.usage_per_day(first).await? {
        let mine = viewer.admin
            || visible.contains(&row.thread)
            || (me.is_some() && row.person.as_deref() == me);
        let slot = usize::try_from((row.day - first) / DAY_MS).ok();
        if let Some(day) = slot.and_then(|i| days.get_mut(i)).filter(|_| mine) {
            day.1 = day.1.saturating_add(u64::try_from(row.tokens).unwrap_or(0));
        }
    }
    let budget = match me {
        Some(me) => agent
            .budgets("", Some(me), now)
            .await?
            .into_iter()
            .find(|s| s.scope == BudgetScope::Person)
            .map(|s| (s.cap, s.used)),
        None => None,
    };
    Ok(UsagePanel {
        whose: if viewer.admin {
            "everyone"
        } else {
            "you and your workstreams"
        },
        days,
        budget,
    })
}

/// Height of the chart's bars area, in SVG units.
const CHART_HEIGHT: u64 = 100;
/// Width of one day's column.
const COLUMN: usize = 24;

/// The panel.
pub(super) fn render(viewer: &Viewer, panel: &UsagePanel) -> Markup {
    let top = panel.days.iter().map(|d| d.1).max().unwrap_or(0).max(1);
    let total: u64 = panel.days.iter().map(|d| d.1).sum();
    let width = COLUMN * panel.days.len();
    html! {
        section.card #usage {
            h2 { "Usage" }
            p.meta {
                "Tokens per day (UTC) of " span #usage-whose { (panel.whose) } ": "
                b #usage-today { (plural(panel.today(), "token")) } " today, "
                (plural(total, "token")) " in " (DAYS) " days."
            }
            svg #usage-chart role="img" aria-label="tokens per day" xmlns="http://www.w3.org/2000/svg"
                viewBox={ "0 0 " (width) " " (CHART_HEIGHT + 14) } width=(width * 2) height=((CHART_HEIGHT + 14) * 2) {
                @for (i, (day, tokens)) in panel.days.iter().enumerate() {
                    @let h = tokens.saturating_mul(CHART_HEIGHT).div_ceil(top);
                    g.day data-day=(date(*day)) data-tokens=(tokens) {
                        title { (date(*day)) ": " (plural(*tokens, "token")) }
                        rect.bar x=(i * COLUMN + 3) y=(CHART_HEIGHT - h) width=(COLUMN - 6) height=(h) {}
                        text x=(i * COLUMN + COLUMN / 2) y=(CHART_HEIGHT + 11) text-anchor="middle" {
                            (date(*day).get(8..).unwrap_or_default())
                        }
                    }
                }
            }
            @if let Some((cap, used)) = panel.budget {
                p #my-budget {
                    "Your daily budget: "
                    @match cap {
                        Some(cap) => { (plural(cap, "token")) ", " (used) " used today." }
                        None => "no cap.",
                    }
                }
            }
            @if viewer.admin && viewer.user_id.is_some() { (budget_form(viewer)) }
        }
    }
}

/// An admin's form: raise, lower or lift a person's or a thread's daily budget.
fn budget_form(viewer: &Viewer) -> Markup {
    html! {
        form.budget #budget-form method="post" action="/budget" {
            input type="hidden" name="csrf" value=(viewer.csrf);
            "Daily budget of "
            select #budget-scope name="scope" aria-label="whose budget" {
                option value="person" { "the person" }
                option value="thread" { "the thread" }
            }
            " "
            input #budget-subject type="text" name="subject" required maxlength="200"
                placeholder="username, or a thread's key" aria-label="person or thread";
            " "
            input #budget-tokens type="text" name="daily_tokens" inputmode="numeric" maxlength="20"
                placeholder="tokens per day; empty lifts it" aria-label="tokens per day";
            " "
            button #budget-set type="submit" { "Set budget" }
        }
    }
}

/// `2026-12-06` for a day's start.
fn date(day: i64) -> String {
    chrono::DateTime::from_timestamp_millis(day)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

/// The panel's form, as posted. Every field is optional so that a missing token is told
/// apart (403) from a malformed change (400).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct BudgetForm {
    csrf: Option<String>,
    scope: Option<String>,
    subject: Option<String>,
    daily_tokens: Option<String>,
}

/// Why a change was refused, as a page.
fn refused(status: StatusCode, title: &str, text: &str) -> Response {
    (status, Html(pages::problem(title, text))).into_response()
}

/// `POST /budget`: an admin sets a daily budget.
pub(super) async fn set(
    State(state): State<WebState>,
    Extension(viewer): Extension<Viewer>,
    Form(form): Form<BudgetForm>,
) -> Response {
    if !auth::csrf_ok(&viewer, form.csrf.as_deref()) {
        tracing::warn!(viewer = %viewer.name, "status page budget change refused: missing or wrong form token");
        return refused(
            StatusCode::FORBIDDEN,
            "Refused",
            "This form is not from this page (reload the status page and try again).",
        );
    }
    let Some(by) = viewer.user_id.clone().filter(|_| viewer.admin) else {
        tracing::warn!(viewer = %viewer.name, "status page budget change refused: not an admin");
        return refused(
            StatusCode::FORBIDDEN,
            "Refused",
            "Only an admin, signed in with their own link, may change a budget.",
        );
    };
    let change = match parse(&form) {
        Ok(change) => change,
        Err(text) => return refused(StatusCode::BAD_REQUEST, "Not a budget", &text),
    };
    let agent = state.sources.local.agent();
    let (subject, named) = match subject(agent, change.scope, &change.subject).await {
        Ok(Ok(found)) => found,
        Ok(Err(text)) => return refused(StatusCode::BAD_REQUEST, "Not found", &text),
        Err(e) => return super::unavailable(e),
    };
    let of = match change.scope {
        BudgetScope::Person => BudgetOf::Person(subject),
        _ => BudgetOf::Thread(subject),
    };
    let cap = change.daily_tokens.map_or(NewCap::Lift, NewCap::Tokens);
    if let Err(e) = agent.change_budget(&of, cap, &by).await {
        return super::unavailable(e);
    }
    let line = match change.daily_tokens {
        Some(n) => format!("The daily budget of {named} is now {}.", plural(n, "token")),
        None => format!("The daily budget of {named} is lifted: no cap."),
    };
    Html(pages::outcome(
        &viewer,
        "Budget set",
        "budget-outcome",
        &line,
    ))
    .into_response()
}

/// A change as asked for.
struct Change {
    scope: BudgetScope,
    subject: String,
    daily_tokens: Option<u64>,
}

fn parse(form: &BudgetForm) -> Result<Change, String> {
    let scope = match form.scope.as_deref() {
        Some("person") => BudgetScope::Person,
        Some("thread") => BudgetScope::Thread,
        _ => return Err("Choose a person's or a thread's budget.".into()),
    };
    let subject = form.subject.as_deref().unwrap_or_default().trim();
    if subject.is_empty() || subject.chars().count() > 200 {
        return Err("Name the person (their username) or the thread (its key).".into());
    }
    let tokens = form.daily_tokens.as_deref().unwrap_or_default().trim();
    let daily_tokens = match tokens {
        "" | "none" | "off" => None,
        n => Some(n.replace(['_', ','], "").parse::<u64>().map_err(|_| {
            format!("`{n}` is not a number of tokens (leave it empty to lift the budget).")
        })?),
    };
    Ok(Change {
        scope,
        subject: subject.to_owned(),
        daily_tokens,
    })
}

/// The budget's subject (a user id, a workstream key) and how the page names it; or why
/// there is none.
async fn subject(
    agent: &sandpiper_agent::Agent,
    scope: BudgetScope,
    given: &str,
) -> Result<Result<(String, String), String>, StoreError> {
    match scope {
        BudgetScope::Person => Ok(match agent.people().one_named(given).await? {
            Ok(user) => {
                let shown = agent.store().public_name_of(&user).await?;
                Ok((user.id, shown))
            }
            Err(refusal) => Err(format!("{refusal}.")),
        }),
        BudgetScope::Thread | BudgetScope::Channel => Ok(match agent.workstream(given).await? {
            Some(_) => Ok((given.to_owned(), format!("the thread {given}"))),
            None => Err(format!("There is no thread `{given}`.")),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn form(scope: &str, subject: &str, tokens: &str) -> BudgetForm {
        BudgetForm {
            csrf: None,
            scope: Some(scope.into()),
            subject: Some(subject.into()),
            daily_tokens: Some(tokens.into()),
        }
    }

    #[test]
    fn a_change_names_its_scope_subject_and_tokens() {
        let c = parse(&form("person", " bob ", "5_000")).unwrap();
        assert_eq!(
            (c.scope, c.subject.as_str(), c.daily_tokens),
            (BudgetScope::Person, "bob", Some(5000))
        );
        assert_eq!(
            parse(&form("thread", "discord:1", ""))
                .unwrap()
                .daily_tokens,
            None
        );
        assert!(parse(&form("channel", "x", "1")).is_err());
        assert!(parse(&form("person", "", "1")).is_err());
        assert!(
            parse(&form("person", "bob", "-5"))
                .err()
                .unwrap()
                .contains("not a number")
        );
    }

    #[test]
    fn the_chart_is_svg_with_one_bar_per_day_and_no_script() {
        let viewer = Viewer {
            user_id: Some("u".into()),
            name: "@u".into(),
            admin: false,
            csrf: "t".into(),
        };
        let panel = UsagePanel {
            whose: "you and your workstreams",
            days: (0..DAYS as i64)
                .map(|i| (i * DAY_MS, i as u64 * 10))
                .collect(),
            budget: Some((Some(1000), 130)),
        };
        let html = render(&viewer, &panel).into_string();
        assert_eq!(html.matches("<rect").count(), DAYS);
        assert!(html.contains("130 tokens</b> today"), "{html}");
        assert!(html.contains("Your daily budget: 1000 tokens, 130 used today."));
        assert!(!html.contains("budget-form"), "only an admin gets the form");
        assert!(!html.contains("<script") && !html.contains("style="));
    }
}
