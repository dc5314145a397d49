//! The page's HTML, written with maud: compiled into the binary, and every value spliced in
//! with `(…)` is escaped, so a tool's output or a thread's text can never become markup. The
//! live part of each page (`#live`) is rendered by the same functions for the first answer
//! and for every server-sent update.

use maud::{DOCTYPE, Markup, html};
use sandpiper_agent::approvals::ClickAction;
use sandpiper_agent::model::Role;

use sandpiper_agent::protocol;
use sandpiper_agent::protocol::ApprovalKind;

use super::markdown;
use super::read_model::{
    ApprovalView, ClusterView, NodeView, Viewer, WorkstreamDetail, WorkstreamView,
};
use super::search;

/// Longest note accepted, in characters.
pub(super) const MAX_NOTE: usize = 2000;

/// The buttons the page offers for a request of `kind`: the card's row
/// ([`ClickAction::for_kind`]), one button per verdict. The page has one note field for every
/// button, so the card's with-note buttons are the plain ones pressed with a note (see
/// `decide`).
pub(super) fn buttons(kind: ApprovalKind) -> impl Iterator<Item = ClickAction> {
    let row = ClickAction::for_kind(kind);
    row.iter()
        .enumerate()
        .filter(|(i, action)| row[..*i].iter().all(|b| b.verdict() != action.verdict()))
        .map(|(_, action)| *action)
}

/// The stylesheet: light and dark follow the system setting; narrow screens stack.
pub(super) const STYLE: &str = include_str!("style.css");
/// The script: follows `/events`, and keeps ages current.
pub(super) const SCRIPT: &str = include_str!("app.js");

pub(super) fn layout(title: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " · sandpiper" }
                @if let Some(v) = viewer { meta name="csrf-token" content=(v.csrf); }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "sandpiper" }
                    @if let Some(v) = viewer {
                        span.who {
                            "signed in as " strong #viewer { (v.name) }
                            @if v.admin { " " span.badge.admin { "admin" } }
                        }
                        span #conn .conn { "connecting…" }
                        form.signout method="post" action="/sign-out" {
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The card's buttons for one pending approval, with an optional note; a press asks for
/// confirmation (see `decide`).
/// The buttons of a listed request; none for a viewer who is nobody in chat (the operator
/// token), whom no thread's rules let decide.
fn decide_form(viewer: &Viewer, a: &ApprovalView) -> Markup {
    if viewer.user_id.is_none() {
        return html! {};
    }
    let kind = if a.review {
        ApprovalKind::Review
    } else {
        ApprovalKind::ToolCall
    };
    html! {
        form.decide method="post" action={ "/approvals/" (a.id) } data-request=(a.id) {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input.note type="text" name="note" maxlength=(MAX_NOTE)
                placeholder="note (optional)" aria-label="note";
            @for action in buttons(kind) {
                button type="submit" name="action" value=(action.code()) { (action.label()) }
            }
        }
    }
}

/// The confirmation of a press: what is decided how, and the button that decides it. `record`
/// is shown only to a viewer the page lists it for; the decision itself is the engine's.
pub(super) fn confirm_decision(
    viewer: &Viewer,
    record: &protocol::ApprovalView,
    code: &str,
    label: &str,
    note: Option<&str>,
) -> String {
    let shown = viewer.admin
        || viewer.user_id.is_some() && record.owner.as_ref() == viewer.user_id.as_ref();
    layout(
        "Confirm",
        Some(viewer),
        html! {
            section.card.confirm #confirm {
                h1 { (label) "?" }
                @if shown {
                    p { b.tool { (record.item.name) } " " span.header { (record.item.header) } }
                    pre.preview { (record.item.preview) }
                    p.meta { "in " code { (record.workstream) } }
                } @else {
                    p { "Request " code { (record.item.request_id) } }
                }
                @if let Some(n) = note { p { "Note: " q { (n) } } }
                form method="post" action={ "/approvals/" (record.item.request_id) "/decide" } {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    input type="hidden" name="action" value=(code);
                    @if let Some(n) = note { input type="hidden" name="note" value=(n); }
                    button #confirm-decision type="submit" { "Confirm: " (label) }
                    " "
                    a href="/" { "Cancel" }
                }
            }
        },
    )
    .into_string()
}

/// What a confirmed decision did: the card's own words.
pub(super) fn decided(
    viewer: &Viewer,
    record: &protocol::ApprovalView,
    line: &str,
    next: &str,
) -> String {
    layout(
        "Decided",
        Some(viewer),
        html! {
            section.card #decided data-request=(record.item.request_id) {
                h1 { "Decided" }
                p { b.tool { (record.item.name) } " " span.header { (record.item.header) } }
                p #outcome { (line) }
                p { (next) }
                p { a href="/" { "Back to the status page" } }
            }
        },
    )
    .into_string()
}

/// What a change made from the page did (a budget set): one line under `title`, in the
/// element `id`.
pub(super) fn outcome(viewer: &Viewer, title: &str, id: &str, line: &str) -> String {
    layout(
        title,
        Some(viewer),
        html! {
            section.card {
                h1 { (title) }
                p id=(id) { (line) }
                p { a href="/" { "Back to the status page" } }
            }
        },
    )
    .into_string()
}

/// The sign-in page: how to get a link, and the operator token form. `problem` says why the
/// last attempt failed.
pub(super) fn sign_in(problem: Option<&str>) -> String {
    layout(
        "Sign in",
        None,
        html! {
            section.card.signin {
                h1 { "Sign in to the status page" }
                @if let Some(p) = problem { p.problem #problem { (p) } }
                p { "Type " code { "/console" } " in Discord or Slack (or run "
                    code { "sandpiper console-link" } " on the server): you get a link that signs you in once, within 10 minutes." }
                form method="post" action="/sign-in" {
                    label for="token" { "Operator token (to view; deciding needs your own link)" }
                    input #token type="password" name="token" autocomplete="off";
                    button type="submit" { "Sign in to view" }
                }
            }
        },
    )
    .into_string()
}

/// A sign-in link's page: one button that spends the link (`POST` to the same path, with the
/// form token `form` only this server renders), so opening the link alone signs nobody in.
pub(super) fn sign_in_link(token: &str, form: &str) -> String {
    let action = format!(
        "{}{}",
        sandpiper_agent::sign_in::SIGN_IN_PATH,
        url::form_urlencoded::byte_serialize(token.as_bytes()).collect::<String>()
    );
    layout(
        "Sign in",
        None,
        html! {
            section.card.signin {
                h1 { "Sign in to the status page" }
                p { "This link signs this browser in as you, once. Press the button to go on." }
                form #sign-in-link method="post" action=(action) {
                    input type="hidden" name="csrf" value=(form);
                    button #sign-in type="submit" { "Sign in" }
                }
            }
        },
    )
    .into_string()
}

/// The cluster page: the search form (outside the live part, so an update never sweeps away
/// what is typed), the live part, whose stream carries the same search, and `extra` (the
/// usage panel) below it.
pub(super) fn index(viewer: &Viewer, view: &ClusterView, extra: Markup) -> String {
    let query = view.filter.query_string();
    let events = match query.is_empty() {
        true => "/events".to_owned(),
        false => format!("/events?{query}"),
    };
    layout(
        "Status",
        Some(viewer),
        html! {
            (search_form(view))
            div #live data-events=(events) { (cluster_live(viewer, view)) }
            (extra)
            (new_conversation(viewer))
        },
    )
    .into_string()
}

/// Search workstreams by text, and filter them by channel, person and state.
fn search_form(view: &ClusterView) -> Markup {
    let f = &view.filter;
    html! {
        form.card.search #search method="get" action="/" role="search" {
            input #search-q type="search" name="q" value=(f.q) maxlength=(search::MAX_QUERY)
                placeholder="search workstreams" aria-label="search workstreams";
            select #search-channel name="channel" aria-label="channel" {
                option value="" { "any channel" }
                @for (key, label) in &view.facets.channels {
                    option value=(key) selected[f.channel == *key] { (label) }
                }
            }
            select #search-person name="person" aria-label="person" {
                option value="" { "anyone" }
                @for (id, name) in &view.facets.people {
                    option value=(id) selected[f.person == *id] { (name) }
                }
            }
            select #search-state name="state" aria-label="state" {
                option value="" { "any state" }
                @for (code, label) in search::STATES {
                    option value=(code) selected[f.state == *code] { (label) }
                }
            }
            button #search-go type="submit" { "Search" }
            @if !f.is_empty() { " " a #search-clear href="/" { "clear" } }
            @if let Some(problem) = &view.search_problem { p.problem #search-problem { (problem) } }
        }
    }
}

/// `n thing` or `n things`: the page's one plural rule.
pub(super) fn plural(n: u64, thing: &str) -> String {
    format!("{n} {}", noun(n, thing))
}

/// `thing` or `things`, after a count of `n` shown on its own.
pub(super) fn noun(n: u64, thing: &str) -> String {
    match n {
        1 => thing.to_owned(),
        _ => format!("{thing}s"),
    }
}

/// A count as [`noun`] takes it.
fn count(n: impl TryInto<u64>) -> u64 {
    n.try_into().unwrap_or(0)
}

/// The live part of the cluster page.
pub(super) fn cluster_live(viewer: &Viewer, view: &ClusterView) -> Markup {
    html! {
        section.bar #cluster-bar {
            span.metric { span.led.ok {} b #nodes-count { (view.nodes.len()) } " " (noun(count(view.nodes.len()), "node")) }
            span.metric { b #live-count { (view.live_workstreams) } " live" }
            span.metric { b #stored-count { (view.stored_workstreams) } " stored " (noun(count(view.stored_workstreams), "workstream")) }
            span.metric { b #turns-count { (view.turns_last_hour) } " " (noun(count(view.turns_last_hour), "turn")) " in the last hour" }
            span.divider {}
            span.metric.mcp title={ (view.mcp.resources) " resources, " (view.mcp.prompts) " prompts" } {
                span.led.mcp {}
                "MCP " b #mcp-servers { (view.mcp.servers) } " " (noun(count(view.mcp.servers), "server")) " · "
                b #mcp-resources { (view.mcp.resources) } " " (noun(count(view.mcp.resources), "resource")) " · "
                b #mcp-prompts { (view.mcp.prompts) } " " (noun(count(view.mcp.prompts), "prompt"))
            }
        }
        section.card #nodes {
            h2 { "Nodes" }
            @for node in &view.nodes { (node_card(node, view)) }
        }
        section.card #approvals {
            h2 { "Pending approvals" }
            @if view.approvals.is_empty() { p.empty { "Nothing waits for a decision." } }
            @for a in &view.approvals {
                div.approval data-workstream=(a.workstream) {
                    div.row {
                        b.tool { (a.tool) } " " span.header { (a.header) }
                        span.age data-ts=(a.created_at) { (age(view.at - a.created_at)) }
                    }
                    pre.preview { (a.preview) }
                    div.meta {
                        "asked by " span.requester { (a.requester) } " · may be decided by "
                        span.deciders { (a.deciders) } " · in "
                        a.thread href=(detail_href(&a.workstream)) title=(a.workstream) { (a.thread) }
                        @if let Some(url) = &a.thread_url {
                            " · " a href=(url) target="_blank" rel="noopener noreferrer" { "open the card's thread ↗" }
                        }
                    }
                    (decide_form(viewer, a))
                }
            }
        }
        section.card #workstreams {
            h2 { "Workstreams" }
            @if view.workstreams.is_empty() {
                @if view.filter.is_empty() { p.empty { "No workstreams you take part in yet." } }
                @else { p.empty #no-match { "No workstream you take part in matches." } }
            }
            div.table {
                table {
                    thead { tr { th { "thread" } th { "channel" } th { "owner" } th { "state" } th { "last activity" } th { "tokens" } } }
                    tbody {
                        @for w in &view.workstreams { (workstream_row(w, view.at)) }
                    }
                }
            }
        }
        section.card #templates {
            h2 { "Prompt templates" }
            @if view.templates.is_empty() { p.empty { "No prompt templates." } }
            div.table {
                table {
                    thead { tr { th { "name" } th { "origin" } th { "description" } } }
                    tbody {
                        @for t in &view.templates {
                            tr.template data-name=(t.name) {
                                td { code { (t.name) } }
                                td {
                                    span.badge.origin data-origin=(t.origin) { (t.origin) }
                                    @if let Some(server) = &t.mcp_server { " " (server) }
                                    @if t.readonly { " " span.muted { "read-only" } }
                                }
                                td { (t.description.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
        section.card #watches {
            h2 { "Watches" }
            @if view.watches.is_empty() { p.empty { "No watches." } }
            div.table {
                table {
                    thead { tr { th { "name" } th { "thread" } th { "command" } th { "every" } th { "polls" } th { "next poll" } th { "condition" } th { "last result" } } }
                    tbody {
                        @for w in &view.watches {
                            tr.watch {
                                td { (w.name) br; span.state { (w.state) } }
                                td { a href=(detail_href(&w.workstream)) title=(w.workstream) { (title_in(view, &w.workstream)) } }
                                td { code { (w.command) } }
                                td { (age(w.poll_every_ms)) }
                                td { (w.polls) " / " (w.max_polls) }
                                td { @if w.state == "active" { span data-ts=(w.next_poll_at) data-future="1" { (until(w.next_poll_at - view.at)) } } @else { "–" } }
                                td { code { (w.stop_on.as_deref().unwrap_or("output changes")) } }
                                td {
                                    @if let Some(code) = w.last_exit_code { "exit " (code) " " }
                                    @if let Some(out) = &w.last_output { pre.out { (clip(out, 400)) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What the page calls workstream `key` in `view`: its title, or its key when not listed.
fn title_in<'a>(view: &'a ClusterView, key: &'a str) -> &'a str {
    view.titles.get(key).map_or(key, String::as_str)
}

fn node_card(node: &NodeView, view: &ClusterView) -> Markup {
    let now = view.at;
    html! {
        div.node data-node=(node.id) {
            div.row {
                span class={ "led " (if node.healthy { "ok" } else { "bad" }) } {}
                b { (node.id) } " "
                span.badge { (node.role) }
                @if node.this_node { " " span.badge { "this node" } }
                " v" (node.version)
                @if !node.url.is_empty() { " · " code { (node.url) } }
                " · heartbeat " span.age data-ts=(node.heartbeat_at) { (age(now - node.heartbeat_at)) }
                " · " @if node.healthy { span.good { "healthy" } } @else { span.bad { "stale" } }
            }
            @match &node.status {
                None => p.bad.unreachable { "Could not be reached: this node has not reported its channels, MCP servers and turns for a while." },
                Some(s) => {
                    div.grid {
                        div {
                            h3 { "Channels" }
                            @if s.channels.is_empty() { p.empty { "none" } }
                            ul { @for c in &s.channels {
                                li { span class={ "led " (if c.connected { "ok" } else { "bad" }) } {} (c.platform) ": " (c.state) }
                            } }
                            h3 { "Model" }
                            p {
                                code { (s.model.endpoint) } " "
                                @match s.model.reachable {
                                    Some(true) => span.good { "reachable" },
                                    Some(false) => span.bad { "unreachable" },
                                    None => span { "not probed" },
                                }
                                @if let Some(e) = &s.model.error { " (" (e) ")" }
                            }
                            h3 { "Running turns" }
                            @if s.live.is_empty() { p.empty { "none" } }
                            ul { @for l in &s.live {
                                li { a href=(detail_href(&l.workstream)) title=(l.workstream) { (title_in(view, &l.workstream)) } " " (l.state) @if let Some(t) = &l.tool { " " code { (t) } } }
                            } }
                        }
                        div.mcp-detail {
                            h3 { span.led.mcp {} "MCP servers" }
                            @if s.mcp.is_empty() { p.empty { "none configured" } }
                            ul { @for m in &s.mcp {
                                li.mcp-server {
                                    b { (m.name) } " " span class={ "state " (m.state.replace(' ', "-")) } { (m.state) }
                                    " · " (plural(count(m.tools), "tool")) " · " (plural(count(m.resources), "resource")) " · " (plural(count(m.prompts), "prompt"))
                                    @if let Some(e) = &m.error { div.bad { (e) } }
                                }
                            } }
                        }
                    }
                }
            }
        }
    }
}

fn workstream_row(w: &WorkstreamView, now: i64) -> Markup {
    html! {
        tr.workstream data-key=(w.key) data-platform=(w.platform) {
            td {
                a.title href=(detail_href(&w.key)) title=(w.key) { (w.title) }
                @if let Some(url) = &w.thread_url { " " a.open href=(url) target="_blank" rel="noopener noreferrer" { "open ↗" } }
            }
            td.channel { (w.channel) }
            td { (w.owner) }
            td { span class={ "state " (w.state.replace(' ', "-")) } { (w.state) } @if let Some(t) = &w.tool { " " code { (t) } } }
            td { span.age data-ts=(w.last_activity) { (age(now - w.last_activity)) } }
            td { (plural(w.tokens, "token")) }
        }
    }
}

/// A workstream's own page.
pub(super) fn detail(viewer: &Viewer, d: &WorkstreamDetail) -> String {
    let events = format!("{}/events", detail_href(&d.key));
    layout(
        &d.title,
        Some(viewer),
        html! {
            p { a href="/" { "← all workstreams" } }
            div #live data-events=(events) { (detail_live(d)) }
            (under_conversation(viewer, d))
        },
    )
    .into_string()
}

/// The live part of a workstream's page: its conversation, and the running turn.
pub(super) fn detail_live(d: &WorkstreamDetail) -> Markup {
    html! {
        section.card {
            h1 #title title=(d.key) { (d.title) }
            p.meta {
                span #channel { (d.channel) } " · owner " span #owner { (d.owner) } " · " (plural(d.tokens, "token"))
                @if d.closed { " · closed" }
                @if let Some(url) = &d.thread_url { " · " a href=(url) target="_blank" rel="noopener noreferrer" { "open the thread ↗" } }
            }
        }
        section.card.conversation #conversation {
            @for (i, m) in d.messages.iter().enumerate() {
                @match m.role {
                    Role::User => div.msg.user {
                        div.role.author { (d.authors.get(i).cloned().flatten().unwrap_or_else(|| "someone".into())) }
                        div.md { (markdown::render(&m.content)) }
                    },
                    Role::Assistant => div.msg.assistant {
                        div.role.author { "sandpiper" }
                        @if !m.content.is_empty() { div.md { (markdown::render(&m.content)) } }
                        @for c in &m.tool_calls {
                            div.call { b { (c.name) } pre.args { (clip(&c.arguments, 4000)) } }
                        }
                    },
                    Role::Tool => div.msg.tool {
                        div.role { "tool result " @if let Some(n) = &m.name { code { (n) } } }
                        pre.tool-output { (clip(&m.content, 8000)) }
                    },
                }
            }
            @if let Some(t) = &d.live {
                div.msg.assistant.streaming #streaming {
                    div.role { "sandpiper · " (phase(&t.phase)) }
                    @for c in &t.calls {
                        div.call {
                            b { (c.name) } " " (c.header)
                            @if c.needs_approval { " " span.state.waiting-for-approval { "waiting for approval" } }
                            @if !c.preview.is_empty() { pre.args { (c.preview) } }
                            @if !c.output.is_empty() { pre.tool-output { (c.output) } }
                        }
                    }
                    @if !t.text.is_empty() { div.md { (markdown::render(&t.text)) } }
                }
            }
        }
    }
}

fn phase(p: &sandpiper_agent::activity::TurnPhase) -> String {
    use sandpiper_agent::activity::TurnPhase;
    match p {
        TurnPhase::Thinking => "thinking".into(),
        TurnPhase::RunningTool(t) => format!("running {t}"),
        TurnPhase::WaitingForApproval(t) => format!("waiting for approval of {t}"),
    }
}

/// The page of workstream `key`.
pub(super) fn detail_href(key: &str) -> String {
    let encoded: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
    format!("/w/{encoded}")
}

/// A page saying what went wrong (a refused link, a missing workstream).
pub(super) fn problem(title: &str, text: &str) -> String {
    layout(
        title,
        None,
        html! {
            section.card {
                h1 { (title) }
                p.problem #problem { (text) }
                p { a href="/" { "Back to the status page" } }
            }
        },
    )
    .into_string()
}

fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes more)", &s[..end], s.len() - end)
}

/// `5s`, `3m`, `2h`, `4d` for a span of milliseconds.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn until(ms: i64) -> String {
    if ms <= 0 {
        return "due".into();
    }
    format!("in {}", age(ms))
}

// --- Talking from the page (`chat` answers the posts) -----------------------------------------

/// The path that starts a conversation on the page.
pub(super) const NEW_PATH: &str = "/conversations";

pub(super) fn say_href(key: &str) -> String {
    format!("{}/say", detail_href(key))
}

/// A message box posting to `action`, holding `text`.
pub(super) fn say_box(viewer: &Viewer, action: &str, text: &str, button: &str) -> Markup {
    html! {
        form.say method="post" action=(action) {
            input type="hidden" name="csrf" value=(viewer.csrf);
            textarea #say-text name="text" rows="3" required
                placeholder="Write to sandpiper…" aria-label="message" { (text) }
            button #say type="submit" { (button) }
        }
    }
}

/// What goes under a workstream's conversation: the box, or why there is none.
pub(super) fn under_conversation(viewer: &Viewer, d: &WorkstreamDetail) -> Markup {
    html! {
        section.card.talk #talk {
            @if d.closed {
                p.muted { "This workstream is closed: nothing more runs in it." }
            } @else if viewer.user_id.is_none() {
                p.muted { "The operator token views only; sign in as yourself to write." }
            } @else {
                (say_box(viewer, &say_href(&d.key), "", "Send"))
                p.meta { "Sent as you, under the thread's rules; a Discord or Slack thread shows it too." }
            }
        }
    }
}

/// The box that starts a conversation on the page (for a person, not the operator token).
pub(super) fn new_conversation(viewer: &Viewer) -> Markup {
    if viewer.user_id.is_none() {
        return html! {};
    }
    html! {
        section.card.talk #new-conversation {
            h2 { "New conversation" }
            form.say method="post" action=(NEW_PATH) {
                input type="hidden" name="csrf" value=(viewer.csrf);
                textarea #new-text name="text" rows="2" required
                    placeholder="Ask sandpiper something; the answer shows here only"
                    aria-label="first message" {}
                button #start type="submit" { "Start" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn ages_and_links_read_well() {
        assert_eq!(age(5_000), "5s");
        assert_eq!(age(180_000), "3m");
        assert_eq!(age(-1), "0s");
        assert_eq!(until(-5), "due");
        assert_eq!(detail_href("slack:T:C:1.2"), "/w/slack%3AT%3AC%3A1.2");
        assert_eq!(clip("ab", 1), "a… (1 bytes more)");
    }

    #[test]
    fn the_page_offers_one_button_per_verdict_from_the_cards_row() {
        let row = |kind| {
            buttons(kind)
                .map(|a| (a.code(), a.label()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            (row(ApprovalKind::ToolCall), row(ApprovalKind::Review)),
            (
                vec![("a", "Approve"), ("d", "Deny"), ("aa", "Always allow")],
                vec![("ok", "Accept"), ("rj", "Reject"), ("nt", "Annotate")],
            )
        );
    }

    #[test]
    fn a_problem_is_text_not_markup() {
        let page = problem("No", "<script>alert(1)</script>");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(!page.contains("<script>alert"));
    }
}
