//! What the status page shows, read from the store, this node's running turns and the status
//! every node writes about itself, and cut to what the viewer may see: an admin sees
//! everything; a person the workstreams they own or wrote in, the approvals they may decide
//! and the watches of their workstreams. Nodes' URLs and the errors of their MCP servers and
//! model are an admin's alone, and shown redacted (the configuration's own [`redact_url`]): an
//! error may quote a URL with a password or a key in it. People are named by their public
//! name ([`Store::public_name`]: `Display (@handle)`), threads by their first message and
//! their channel; a workstream's key stays in links and tooltips.
//!
//! [`Store::public_name`]: sandpiper_agent::store::Store::public_name
//!
//! The one place the page reads the agent: the templates get plain values from here.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sandpiper_agent::config::redact_url;
use sandpiper_agent::store::platform_names::Named;
use sandpiper_agent::store::prompt_templates::PromptTemplate;
use sandpiper_agent::store::services::STALE_AFTER;
use sandpiper_agent::store::status_view::{PendingApproval, WatchOverview, WorkstreamOverview};
use sandpiper_agent::store::{StoreError, now_ms};
use sandpiper_channels::membership::{Membership, may_decide_away};

use super::search::{Facets, Filter, Searched};
use super::snapshot::{FRESH_FOR, LiveEntry, LocalStatus, McpServerState, NodeStatus};

/// Most workstreams listed.
const LISTED: i64 = 200;

/// Who is looking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Viewer {
    /// The sandpiper user (none for the operator token).
    pub user_id: Option<String>,
    /// Their username, or `operator`.
    pub name: String,
    /// Whether they see everything.
    pub admin: bool,
    /// The session's token every form of the page carries (see `auth::csrf_token`).
    pub csrf: String,
}

impl Viewer {
    /// Whether they may see workstream `w`.
    pub(super) fn sees(&self, w: &WorkstreamOverview) -> bool {
        self.admin
            || self
                .user_id
                .as_ref()
                .is_some_and(|u| w.participants.contains(u))
    }
}

/// How long a page's event stream keeps an answer of [`may_decide_away`].
const ASKED_FOR: Duration = Duration::from_secs(30);

/// Which pending requests one viewer may decide, as last asked ([`may_decide_away`]), each
/// kept [`ASKED_FOR`]: an event stream renders again at every move of a turn, and an answer
/// may cost the platform a request (Discord's member roles, shared with the bot's own rate
/// limit). A page loaded asks afresh; a decision is judged again when it is made.
#[derive(Debug, Default)]
pub(super) struct Asked(Mutex<HashMap<String, (Instant, bool)>>);

impl Asked {
    fn get(&self, request: &str) -> Option<bool> {
        let asked = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        asked
            .get(request)
            .filter(|(at, _)| at.elapsed() < ASKED_FOR)
            .map(|(_, may)| *may)
    }

    /// Keeps `may` for `request`, and forgets requests no longer `pending`.
    fn put(&self, request: &str, may: bool, pending: &[PendingApproval]) {
        let mut asked = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        asked.retain(|id, _| pending.iter().any(|a| a.id == *id));
        asked.insert(request.to_owned(), (Instant::now(), may));
    }
}

/// Whether the page offers `viewer` approval `a`: an admin (the operator token too) sees every
/// one, deciding being the thread's rules' alone; a person those they may decide by the rules
/// of a click on its card, with the roles the thread's platform says they hold now
/// ([`may_decide_away`]; `asked` keeps the answers a while).
async fn offered(
    src: &Sources,
    viewer: &Viewer,
    a: &PendingApproval,
    pending: &[PendingApproval],
    asked: &Asked,
) -> bool {
    if viewer.admin {
        return true;
    }
    let Some(me) = viewer.user_id.as_deref() else {
        return false;
    };
    if let Some(may) = asked.get(&a.id) {
        return may;
    }
    let agent = src.local.agent();
    match may_decide_away(agent, &src.memberships, &a.workstream, &a.id, me).await {
        Ok(may) => {
            asked.put(&a.id, may, pending);
            may
        }
        Err(e) => {
            tracing::debug!(error = %e, request = %a.id, "status page: cannot tell now who may decide; not listed");
            false
        }
    }
}

/// MCP counts, summed over connected servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct McpTotals {
    /// Connected servers.
    pub servers: usize,
    /// Their resources.
    pub resources: usize,
    /// Their prompts.
    pub prompts: usize,
}

impl McpTotals {
    fn add(&mut self, servers: &[McpServerState]) {
        for s in servers.iter().filter(|s| s.state == "connected") {
            self.servers += 1;
            self.resources += s.resources;
            self.prompts += s.prompts;
        }
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeView {
    /// Registry id.
    pub id: String,
    /// `gateway` or `node`.
    pub role: String,
    /// Where other nodes reach it.
    pub url: String,
    /// Its version.
    pub version: String,
    /// Its last heartbeat (unix ms).
    pub heartbeat_at: i64,
    /// Whether the heartbeat is recent.
    pub healthy: bool,
    /// Whether this is the node serving the page.
    pub this_node: bool,
    /// What it last said about itself; `None` when it could not be reached.
    pub status: Option<NodeStatus>,
    /// When that was (unix ms).
    pub status_at: Option<i64>,
}

/// One workstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WorkstreamView {
    /// Key.
    pub key: String,
    /// What it is called: the start of its first message.
    pub title: String,
    /// Where it lives: `#C1 on Slack`.
    pub channel: String,
    /// Its channel's key ([`channel_of`]), for the channel filter.
    pub channel_key: String,
    /// Everyone who wrote in it (sandpiper user ids), for the person filter.
    pub participants: Vec<String>,
    /// `discord`, `slack`, `console`, ….
    pub platform: String,
    /// A link that opens the thread in its app.
    pub thread_url: Option<String>,
    /// The owner's username.
    pub owner: String,
    /// `idle`, `thinking`, `running a tool`, `waiting for approval`, `interrupted`, `closed`.
    pub state: String,
    /// The tool, while one runs or waits.
    pub tool: Option<String>,
    /// Newest message (unix ms).
    pub last_activity: i64,
    /// Tokens used (prompt + completion).
    pub tokens: u64,
}

impl Searched for WorkstreamView {
    fn key(&self) -> &str {
        &self.key
    }
    fn channel_key(&self) -> &str {
        &self.channel_key
    }
    fn participants(&self) -> &[String] {
        &self.participants
    }
    fn state(&self) -> &str {
        &self.state
    }
}

/// What the filters offer for `visible`: its channels and the people who wrote in it.
async fn facets_of(visible: &[WorkstreamView], names: &mut Names, src: &Sources) -> Facets {
    let mut channels: Vec<(String, String)> = visible
        .iter()
        .map(|w| (w.channel_key.clone(), w.channel.clone()))
        .collect();
    channels.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    channels.dedup();
    let ids: HashSet<&String> = visible.iter().flat_map(|w| &w.participants).collect();
    let mut people = Vec::with_capacity(ids.len());
    for id in ids {
        people.push((id.clone(), names.of(src, Some(id.as_str())).await));
    }
    people.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    Facets { channels, people }
}

/// One pending approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ApprovalView {
    /// Request id (what the page's buttons name).
    pub id: String,
    /// A review (Accept, Reject, Annotate) rather than a tool call.
    pub review: bool,
    /// The tool.
    pub tool: String,
    /// One line naming the call.
    pub header: String,
    /// What it does.
    pub preview: String,
    /// Who started the turn.
    pub requester: String,
    /// Who may decide.
    pub deciders: String,
    /// When it was asked (unix ms).
    pub created_at: i64,
    /// Its workstream.
    pub workstream: String,
    /// Its workstream's title and channel, as the page names it.
    pub thread: String,
    /// Where the card is.
    pub thread_url: Option<String>,
}

/// The whole page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClusterView {
    /// Every registered node.
    pub nodes: Vec<NodeView>,
    /// Workstreams held in memory over all nodes.
    pub live_workstreams: usize,
    /// Workstreams in the database.
    pub stored_workstreams: usize,
    /// Messages people sent in the last hour.
    pub turns_last_hour: i64,
    /// MCP totals over every reachable node.
    pub mcp: McpTotals,
    /// Workstreams the viewer may see, most recently active first.
    pub workstreams: Vec<WorkstreamView>,
    /// Approvals the viewer may decide, oldest first.
    pub approvals: Vec<ApprovalView>,
    /// Watches of the viewer's workstreams.
    pub watches: Vec<WatchOverview>,
    /// Prompt templates under governance, by name, with their origin.
    pub templates: Vec<PromptTemplate>,
    /// The title of each workstream the viewer may see, by key (watches and running turns
    /// name theirs by it).
    pub titles: HashMap<String, String>,
    /// The search and filters the workstreams were cut to.
    pub filter: Filter,
    /// What the filters offer (from every workstream the viewer may see).
    pub facets: Facets,
    /// Why the search text was not used, when it was not.
    pub search_problem: Option<String>,
    /// When this was read (unix ms).
    pub at: i64,
}

/// What the page needs to know besides the store.
#[derive(Clone)]
pub(super) struct Sources {
    /// This node's own status.
    pub local: LocalStatus,
    /// This node's registry id.
    pub node_id: String,
    /// The Discord server threads live in, for thread links.
    pub discord_guild: Option<u64>,
    /// The chat platforms, asked which roles a person holds (who may decide what).
    pub memberships: Vec<Arc<dyn Membership>>,
}

/// What `viewer` may see of `node`: an admin all of it, its URL and errors redacted; a person
/// no URL, no error (the state stays), and only their own workstreams among its turns.
fn cut_node(viewer: &Viewer, node: &mut NodeView, visible: &[&str]) {
    let shown = |text: &str| viewer.admin.then(|| redacted_text(text));
    node.url = shown(&node.url).unwrap_or_default();
    let Some(status) = node.status.as_mut() else {
        return;
    };
    for server in &mut status.mcp {
        server.error = server.error.as_deref().and_then(shown);
    }
    status.model.error = status.model.error.as_deref().and_then(shown);
    if !viewer.admin {
        status
            .live
            .retain(|e| visible.contains(&e.workstream.as_str()));
    }
}

/// `text` (an error) with every URL in it redacted as the configuration redacts one
/// ([`redact_url`]).
fn redacted_text(text: &str) -> String {
    text.split_inclusive(char::is_whitespace)
        .map(redacted_word)
        .collect()
}

/// One word of an error with its URL, if it has one, redacted; the punctuation around the
/// URL stays.
fn redacted_word(word: &str) -> String {
    let Some(at) = word.find("://") else {
        return word.to_owned();
    };
    let in_scheme = |c: char| c.is_ascii_alphanumeric() || "+-.".contains(c);
    let start = word[..at].trim_end_matches(in_scheme).len();
    let after = |c: char| c.is_whitespace() || "\"')>,;.".contains(c);
    let end = word.trim_end_matches(after).len();
    format!(
        "{}{}{}",
        &word[..start],
        redact_url(&word[start..end]),
        &word[end..]
    )
}

/// Reads the page for `viewer`, its workstreams cut to `filter`; `asked` keeps which
/// approvals they may decide between readings of one stream.
pub(super) async fn cluster(
    src: &Sources,
    viewer: &Viewer,
    filter: &Filter,
    asked: &Asked,
) -> Result<ClusterView, StoreError> {
    let store = src.local.agent().store();
    let now = now_ms();
    let here = src.local.now();
    let stored = store.node_statuses().await?;
    let mut nodes: Vec<NodeView> = store
        .all_services()
        .await?
        .into_iter()
        .map(|s| {
            let this_node = s.id == src.node_id;
            let (status, status_at) = match this_node {
                true => (Some(here.clone()), Some(now)),
                false => stored
                    .iter()
                    .find(|r| r.node == s.id)
                    .filter(|r| now - r.updated_at <= FRESH_FOR.as_millis() as i64)
                    .and_then(|r| {
                        let status = serde_json::from_str::<NodeStatus>(&r.status).ok()?;
                        Some((Some(status), Some(r.updated_at)))
                    })
                    .unwrap_or((None, None)),
            };
            NodeView {
                healthy: now - s.heartbeat_at <= STALE_AFTER.as_millis() as i64,
                role: s.role.to_string(),
                id: s.id,
                url: s.url,
                version: s.version,
                heartbeat_at: s.heartbeat_at,
                this_node,
                status,
                status_at,
            }
        })
        .collect();
    if !nodes.iter().any(|n| n.this_node) {
        // Not registered yet (the first seconds of a node): it still shows itself.
        nodes.insert(
            0,
            NodeView {
                id: src.node_id.clone(),
                role: "node".into(),
                url: String::new(),
                version: crate::registry::VERSION.into(),
                heartbeat_at: now,
                healthy: true,
                this_node: true,
                status: Some(here),
                status_at: Some(now),
            },
        );
    }
    let mut mcp = McpTotals::default();
    let mut live: HashMap<String, LiveEntry> = HashMap::new();
    let mut held = 0;
    for status in nodes.iter().filter_map(|n| n.status.as_ref()) {
        mcp.add(&status.mcp);
        held += status.held;
        for entry in &status.live {
            live.insert(entry.workstream.clone(), entry.clone());
        }
    }
    // A search looks past the most recent: an old thread is what one searches for.
    let listed = if filter.is_empty() { LISTED } else { i64::MAX };
    let all = store.workstream_overview(listed).await?;
    let stored_workstreams = store.stored_counts().await?.workstreams;
    let pending = store.pending_approvals().await?;
    let channel_names = store.names(Named::Channel).await?;
    let role_names = store.names(Named::Role).await?;
    let mut names = Names::default();
    let mut workstreams = Vec::new();
    for w in all.iter().filter(|w| viewer.sees(w)) {
        let waiting = pending.iter().find(|a| a.workstream == w.key);
        let running = live.get(&w.key);
        let (state, tool) = match (w.closed_at, waiting, running) {
            (Some(_), ..) => ("closed".to_owned(), None),
            (None, Some(a), _) => ("waiting for approval".to_owned(), Some(a.tool.clone())),
            (None, None, Some(r)) if r.state == "waiting for approval" => {
                ("running a tool".to_owned(), r.tool.clone())
            }
            (None, None, Some(r)) => (r.state.clone(), r.tool.clone()),
            (None, None, None) if w.interrupted => ("interrupted".to_owned(), None),
            (None, None, None) => ("idle".to_owned(), None),
        };
        workstreams.push(WorkstreamView {
            title: title_of(w),
            channel: channel_label(w, &channel_names),
            channel_key: channel_of(w),
            participants: w.participants.clone(),
            platform: platform_of(&w.key).to_owned(),
            thread_url: thread_url(&w.key, src.discord_guild),
            owner: names.of(src, w.owner.as_deref()).await,
            key: w.key.clone(),
            state,
            tool,
            last_activity: w.last_activity,
            tokens: w.tokens_in.saturating_add(w.tokens_out),
        });
    }
    let titles: HashMap<String, String> = workstreams
        .iter()
        .map(|w| (w.key.clone(), w.title.clone()))
        .collect();
    let facets = facets_of(&workstreams, &mut names, src).await;
    let (workstreams, search_problem) = filter.apply(store, workstreams).await?;
    let mut approvals = Vec::new();
    for a in &pending {
        let owner = all
            .iter()
            .find(|w| w.key == a.workstream)
            .and_then(|w| w.owner.clone());
        if !offered(src, viewer, a, &pending, asked).await {
            continue;
        }
        let deciders = match &a.approvers {
            Some(allowed) => {
                let mut who = vec![names.of(src, allowed.owner.as_deref()).await];
                if !allowed.roles.is_empty() {
                    who.push(roles_named(
                        platform_of(&a.workstream),
                        &allowed.roles,
                        &role_names,
                    ));
                }
                who.join(" or ")
            }
            None => names.of(src, owner.as_deref()).await,
        };
        approvals.push(ApprovalView {
            id: a.id.clone(),
            review: a.kind == sandpiper_agent::protocol::ApprovalKind::Review,
            tool: a.tool.clone(),
            header: a.header.clone(),
            preview: a.preview.clone(),
            requester: names.of(src, a.requested_by.as_deref()).await,
            deciders,
            created_at: a.created_at,
            thread_url: thread_url(&a.workstream, src.discord_guild),
            thread: all.iter().find(|w| w.key == a.workstream).map_or_else(
                || a.workstream.clone(),
                |w| format!("{} · {}", title_of(w), channel_label(w, &channel_names)),
            ),
            workstream: a.workstream.clone(),
        });
    }
    let visible: Vec<&str> = all
        .iter()
        .filter(|w| viewer.sees(w))
        .map(|w| w.key.as_str())
        .collect();
    let watches = store
        .watch_overview()
        .await?
        .into_iter()
        .filter(|w| viewer.admin || visible.contains(&w.workstream.as_str()))
        .collect();
    for node in &mut nodes {
        cut_node(viewer, node, &visible);
    }
    Ok(ClusterView {
        nodes,
        live_workstreams: held,
        stored_workstreams: usize::try_from(stored_workstreams).unwrap_or(0),
        turns_last_hour: store.turns_since(now - 60 * 60 * 1000).await?,
        mcp,
        workstreams,
        approvals,
        watches,
        templates: store.prompt_templates().await?,
        titles,
        filter: filter.clone(),
        facets,
        search_problem,
        at: now,
    })
}

/// People's public names ([`Store::public_name`]) by user id, looked up once per page.
///
/// [`Store::public_name`]: sandpiper_agent::store::Store::public_name
#[derive(Default)]
pub(super) struct Names(HashMap<String, String>);

impl Names {
    pub(super) async fn of(&mut self, src: &Sources, id: Option<&str>) -> String {
        let Some(id) = id else {
            return "nobody".into();
        };
        if let Some(name) = self.0.get(id) {
            return name.clone();
        }
        let name = match src.local.agent().store().public_name(id).await {
            Ok(Some(name)) => name,
            _ => id.to_owned(),
        };
        self.0.insert(id.to_owned(), name.clone());
        name
    }
}

/// Most characters of a title.
const TITLE_CHARS: usize = 60;

/// What the page calls workstream `w`: the start of its first message, on one line, without
/// the mentions that started it; its key when nobody wrote in it yet.
pub(super) fn title_of(w: &WorkstreamOverview) -> String {
    let words: Vec<&str> = w
        .first_message
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .filter(|word| !(word.starts_with("<@") && word.ends_with('>')))
        .collect();
    let line = words.join(" ");
    if line.is_empty() {
        return w.key.clone();
    }
    match line.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => format!("{}…", line[..cut].trim_end()),
        None => line,
    }
}

/// Where workstream `w` lives, as people say it: `#general on Slack` (`channels`: recorded
/// channel names by channel key), `#C1 on Slack` while its name is not known, `a direct
/// message on Slack`, `the console`. The channel recorded when it was opened, else what its
/// key says.
pub(super) fn channel_label(w: &WorkstreamOverview, channels: &HashMap<String, String>) -> String {
    let channel = channel_of(w);
    let platform = channel.split(':').next().unwrap_or_default();
    let id = channel.rsplit_once(':').map(|(_, id)| id);
    let on = match platform {
        "discord" => "Discord",
        "slack" => "Slack",
        "console" => return "the console".into(),
        "web" => return "the page".into(),
        other => other,
    };
    match (channels.get(&channel), id) {
        (Some(name), _) => format!("#{name} on {on}"),
        (None, Some(id)) if platform == "slack" && id.starts_with('D') => {
            format!("a direct message on {on}")
        }
        (None, Some(id)) => format!("#{id} on {on}"),
        (None, None) => format!("a thread on {on}"),
    }
}

/// Approver roles as people read them: `roles deployers, sre` on Discord, `user groups
/// @oncall` on Slack (`names`: recorded names by id; an id whose name is not known is shown
/// as it is).
fn roles_named(platform: &str, ids: &[String], names: &HashMap<String, String>) -> String {
    let (kind, at) = match platform {
        "slack" => ("user groups", "@"),
        _ => ("roles", ""),
    };
    let named: Vec<String> = ids
        .iter()
        .map(|id| format!("{at}{}", names.get(id).unwrap_or(id)))
        .collect();
    format!("{kind} {}", named.join(", "))
}

/// The channel key of workstream `w` (`slack:T1:C1`, `discord:10`, `console`): what the
/// channel filter matches.
pub(super) fn channel_of(w: &WorkstreamOverview) -> String {
    if let Some(channel) = &w.channel {
        return channel.clone();
    }
    let parts: Vec<&str> = w.key.split(':').collect();
    match parts.as_slice() {
        ["slack", team, channel, _] => format!("slack:{team}:{channel}"),
        [platform, ..] => (*platform).to_owned(),
        [] => String::new(),
    }
}

/// The platform a workstream key names.
pub(super) fn platform_of(key: &str) -> &str {
    key.split_once(':').map_or(key, |(p, _)| p)
}

/// A link that opens workstream `key`'s thread in Discord or Slack.
pub(super) fn thread_url(key: &str, discord_guild: Option<u64>) -> Option<String> {
    let mut parts = key.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("discord"), Some(thread), None, None) if thread.parse::<u64>().is_ok() => {
            let guild = discord_guild.map_or_else(|| "@me".to_owned(), |g| g.to_string());
            Some(format!("https://discord.com/channels/{guild}/{thread}"))
        }
        (Some("slack"), Some(team), Some(channel), Some(ts)) => Some(format!(
            "https://app.slack.com/client/{team}/{channel}/thread/{channel}-{ts}"
        )),
        _ => None,
    }
}

/// What a person sees of one workstream: `None` when they may not see it (or it does not
/// exist: the two look the same).
pub(super) async fn workstream(
    src: &Sources,
    viewer: &Viewer,
    key: &str,
) -> Result<Option<WorkstreamDetail>, StoreError> {
    let store = src.local.agent().store();
    let Some(info) = src.local.agent().workstream(key).await? else {
        return Ok(None);
    };
    let overview = store
        .workstream_overview(i64::MAX)
        .await?
        .into_iter()
        .find(|w| w.key == key);
    let Some(overview) = overview.filter(|w| viewer.sees(w)) else {
        return Ok(None);
    };
    let messages = store.load_messages(key).await?;
    let mut names = Names::default();
    let mut authors = Vec::with_capacity(messages.len());
    for author in store.message_authors(key).await? {
        authors.push(match author {
            Some(id) => Some(names.of(src, Some(&id)).await),
            None => None,
        });
    }
    let live = src.local.agent().activity().live().remove(key);
    Ok(Some(WorkstreamDetail {
        key: key.to_owned(),
        title: title_of(&overview),
        channel: channel_label(&overview, &store.names(Named::Channel).await?),
        authors,
        owner: names.of(src, info.owner.as_deref()).await,
        thread_url: thread_url(key, src.discord_guild),
        closed: info.closed,
        tokens: overview.tokens_in.saturating_add(overview.tokens_out),
        messages,
        live,
    }))
}

/// One workstream's conversation.
#[derive(Debug, Clone)]
pub(super) struct WorkstreamDetail {
    /// Key.
    pub key: String,
    /// What it is called ([`title_of`]).
    pub title: String,
    /// Where it lives ([`channel_label`]).
    pub channel: String,
    /// Who wrote each message (public names), in the order of `messages`; `None` for the
    /// agent's and tools' messages, or when not known.
    pub authors: Vec<Option<String>>,
    /// The owner's username.
    pub owner: String,
    /// A link to the thread.
    pub thread_url: Option<String>,
    /// Whether it was closed.
    pub closed: bool,
    /// Tokens used.
    pub tokens: u64,
    /// Its stored history.
    pub messages: Vec<sandpiper_agent::model::Message>,
    /// The turn running now on this node, with what it said and did so far.
    pub live: Option<sandpiper_agent::activity::LiveTurn>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn thread_links_open_the_platforms() {
        assert_eq!(
            thread_url("discord:42", Some(7)),
            Some("https://discord.com/channels/7/42".into())
        );
        assert_eq!(
            thread_url("slack:T1:C2:1700.01", None),
            Some("https://app.slack.com/client/T1/C2/thread/C2-1700.01".into())
        );
        assert_eq!(thread_url("console:default", None), None);
        assert_eq!(thread_url("discord:<script>", None), None);
        assert_eq!(platform_of("slack:T1:C2:1"), "slack");
    }

    fn overview(owner: &str, participants: &[&str]) -> WorkstreamOverview {
        WorkstreamOverview {
            key: "discord:1".into(),
            owner: Some(owner.into()),
            participants: participants.iter().map(|p| p.to_string()).collect(),
            tokens_in: 0,
            tokens_out: 0,
            closed_at: None,
            last_activity: 0,
            interrupted: false,
            channel: None,
            first_message: None,
        }
    }

    fn viewer(user: &str, admin: bool) -> Viewer {
        Viewer {
            user_id: Some(user.into()),
            name: user.into(),
            admin,
            csrf: String::new(),
        }
    }

    #[test]
    fn urls_in_errors_are_redacted_as_the_configuration_redacts_them() {
        assert_eq!(
            redacted_text(
                "cannot reach (https://u:p@h.example/x?key=k1), retrying\nthen http://h2/?t=2."
            ),
            "cannot reach (https://<redacted>@h.example/x?key=<redacted>), retrying\nthen http://h2/?t=<redacted>."
        );
    }

    #[test]
    fn threads_are_named_by_their_first_message_and_their_channel() {
        let mut w = overview("owner", &["owner"]);
        w.key = "slack:T1:C1:1796412752.507005".into();
        assert_eq!(
            title_of(&w),
            "slack:T1:C1:1796412752.507005",
            "nothing said yet"
        );
        let mut names = HashMap::new();
        assert_eq!(
            channel_label(&w, &names),
            "#C1 on Slack",
            "its name not known yet"
        );
        names.insert("slack:T1:C1".to_owned(), "general".to_owned());
        assert_eq!(channel_label(&w, &names), "#general on Slack");
        w.key = "slack:T1:D7:1796412752.507005".into();
        assert_eq!(channel_label(&w, &names), "a direct message on Slack");
        w.key = "slack:T1:C1:1796412752.507005".into();
        w.first_message = Some("<@U0BOT>  deploy\nthe   web tier to staging, then run the smoke tests and tell me what broke".into());
        assert_eq!(
            title_of(&w),
            "deploy the web tier to staging, then run the smoke tests and…"
        );
        w.key = "discord:42".into();
        assert_eq!(channel_label(&w, &names), "a thread on Discord");
        w.channel = Some("discord:10".into());
        assert_eq!(
            (channel_label(&w, &names), channel_of(&w)),
            ("#10 on Discord".into(), "discord:10".into())
        );
        names.insert("discord:10".to_owned(), "ops".to_owned());
        assert_eq!(channel_label(&w, &names), "#ops on Discord");
        w.channel = None;
        w.key = "console:app-1f2e".into();
        assert_eq!(channel_label(&w, &names), "the console");
    }

    #[test]
    fn approver_roles_are_named_as_their_platform_names_them() {
        let ids = ["42".to_owned(), "43".to_owned()];
        let names = HashMap::from([("42".to_owned(), "deployers".to_owned())]);
        assert_eq!(roles_named("discord", &ids, &names), "roles deployers, 43");
        let ids = ["S0ONCALL".to_owned()];
        let names = HashMap::from([("S0ONCALL".to_owned(), "oncall".to_owned())]);
        assert_eq!(roles_named("slack", &ids, &names), "user groups @oncall");
    }

    #[test]
    fn only_an_admin_sees_node_urls_and_errors_and_those_redacted() {
        use super::super::snapshot::{McpServerState, ModelReach};
        let node = || NodeView {
            id: "n1".into(),
            role: "gateway".into(),
            url: "http://ops:pw@gw-1:8090/?token=t".into(),
            version: "1".into(),
            heartbeat_at: 0,
            healthy: true,
            this_node: true,
            status: Some(NodeStatus {
                mcp: vec![McpServerState {
                    name: "db".into(),
                    state: "failed".into(),
                    tools: 0,
                    resources: 0,
                    prompts: 0,
                    error: Some("connect https://a:dbpass@db.example/?password=x failed".into()),
                }],
                model: ModelReach {
                    endpoint: "model:443".into(),
                    reachable: Some(false),
                    error: Some("cannot reach http://svc:pass@model/v1?api-key=k".into()),
                },
                ..NodeStatus::default()
            }),
            status_at: None,
        };
        let mut seen = node();
        cut_node(&viewer("root", true), &mut seen, &[]);
        let status = seen.status.as_ref().unwrap();
        assert_eq!(seen.url, "http://<redacted>@gw-1:8090/?token=<redacted>");
        assert_eq!(
            status.mcp[0].error.as_deref(),
            Some("connect https://<redacted>@db.example/?password=<redacted> failed")
        );
        assert_eq!(
            status.model.error.as_deref(),
            Some("cannot reach http://<redacted>@model/v1?api-key=<redacted>")
        );
        let mut seen = node();
        cut_node(&viewer("alice", false), &mut seen, &[]);
        let status = seen.status.as_ref().unwrap();
        assert_eq!(seen.url, "");
        assert_eq!(status.mcp[0].error, None);
        assert_eq!(status.mcp[0].state, "failed", "the state stays");
        assert_eq!(status.model.error, None);
    }

    #[test]
    fn owner_participant_and_admin_see_a_workstream_and_a_stranger_does_not() {
        let w = overview("owner", &["owner", "participant"]);
        assert!(viewer("owner", false).sees(&w));
        assert!(viewer("participant", false).sees(&w));
        assert!(viewer("approver", true).sees(&w));
        assert!(!viewer("stranger", false).sees(&w));
    }

    #[test]
    fn a_stream_keeps_who_may_decide_only_for_pending_requests() {
        let pending = |id: &str| PendingApproval {
            id: id.into(),
            workstream: "discord:1".into(),
            tool: "bash".into(),
            header: String::new(),
            preview: String::new(),
            requested_by: None,
            approvers: None,
            created_at: 0,
            kind: sandpiper_agent::protocol::ApprovalKind::ToolCall,
        };
        let asked = Asked::default();
        assert_eq!(asked.get("a"), None, "not asked yet");
        asked.put("a", true, &[pending("a")]);
        asked.put("b", false, &[pending("a"), pending("b")]);
        assert_eq!((asked.get("a"), asked.get("b")), (Some(true), Some(false)));
        asked.put("c", true, &[pending("b"), pending("c")]);
        assert_eq!(asked.get("a"), None, "decided: forgotten");
        assert_eq!(asked.get("b"), Some(false));
    }
}
