//! What the status page shows, read from the store, this node's running turns and the status
//! every node writes about itself, and cut to what the viewer may see: an admin sees
//! everything; a person the workstreams they own or wrote in, the approvals they may decide
//! and the watches of their workstreams. Nodes' URLs and the errors of their MCP servers and
//! model are an admin's alone, and shown redacted ([`shown_url`]): an error may quote a URL
//! with a password or a key in it.
//!
//! The one place the page reads the agent: the templates get plain values from here.

use std::collections::HashMap;

use sandpiper_agent::store::prompt_templates::PromptTemplate;
use sandpiper_agent::store::services::STALE_AFTER;
use sandpiper_agent::store::status_view::{PendingApproval, WatchOverview, WorkstreamOverview};
use sandpiper_agent::store::{StoreError, now_ms};

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

    /// Whether they may decide approval `a` (of a workstream owned by `owner`): what the page
    /// lists. Deciding is the engine's rule alone ([`Agent::decide_from_web`]).
    ///
    /// [`Agent::decide_from_web`]: sandpiper_agent::Agent::decide_from_web
    pub(super) fn decides(&self, a: &PendingApproval, owner: Option<&str>) -> bool {
        if self.admin {
            return true;
        }
        let Some(me) = self.user_id.as_deref() else {
            return false;
        };
        match &a.approvers {
            Some(allowed) => allowed.owner.as_deref() == Some(me),
            None => owner == Some(me),
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

/// What replaces what the page does not show of a URL.
const HIDDEN: &str = "…";

/// `raw` as the page shows a URL: without user info, every query value replaced by
/// [`HIDDEN`], no fragment; something that does not parse as a URL is not shown at all.
pub(super) fn shown_url(raw: &str) -> String {
    let Ok(mut url) = url::Url::parse(raw) else {
        return HIDDEN.to_owned();
    };
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_fragment(None);
    let keys: Vec<String> = url.query_pairs().map(|(k, _)| k.into_owned()).collect();
    if keys.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut()
            .clear()
            .extend_pairs(keys.iter().map(|k| (k.as_str(), HIDDEN)));
    }
    url.to_string()
}

/// `text` (an error) with every URL in it shown as [`shown_url`] shows it.
fn redacted_text(text: &str) -> String {
    text.split_inclusive(char::is_whitespace)
        .map(redacted_word)
        .collect()
}

/// One word of an error with its URL, if it has one, as [`shown_url`] shows it; the
/// punctuation around the URL stays.
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
        shown_url(&word[start..end]),
        &word[end..]
    )
}

/// Reads the page for `viewer`.
pub(super) async fn cluster(src: &Sources, viewer: &Viewer) -> Result<ClusterView, StoreError> {
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
    let all = store.workstream_overview(LISTED).await?;
    let stored_workstreams = store.stored_counts().await?.workstreams;
    let pending = store.pending_approvals().await?;
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
    let mut approvals = Vec::new();
    for a in &pending {
        let owner = all
            .iter()
            .find(|w| w.key == a.workstream)
            .and_then(|w| w.owner.clone());
        if !viewer.decides(a, owner.as_deref()) {
            continue;
        }
        let deciders = match &a.approvers {
            Some(allowed) => {
                let mut who = vec![names.of(src, allowed.owner.as_deref()).await];
                if !allowed.roles.is_empty() {
                    who.push(format!("roles {}", allowed.roles.join(", ")));
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
        at: now,
    })
}

/// People's public names ([`Store::public_name`]) by user id, looked up once per page.
#[derive(Default)]
struct Names(HashMap<String, String>);

impl Names {
    async fn of(&mut self, src: &Sources, id: Option<&str>) -> String {
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
    let live = src.local.agent().activity().live().remove(key);
    let mut names = Names::default();
    Ok(Some(WorkstreamDetail {
        key: key.to_owned(),
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
    fn urls_lose_user_info_and_query_values() {
        for (raw, shown) in [
            ("http://gw-1.internal:8090", "http://gw-1.internal:8090/"),
            (
                "https://svc:hunter2@mcp.example/v1?api-key=s3cret&mode=fast#frag",
                "https://mcp.example/v1?api-key=%E2%80%A6&mode=%E2%80%A6",
            ),
            ("https://token@mcp.example/", "https://mcp.example/"),
            ("not a url", "…"),
        ] {
            assert_eq!(shown_url(raw), shown, "{raw}");
        }
        assert_eq!(
            redacted_text(
                "cannot reach (https://u:p@h.example/x?key=k1), retrying\nthen http://h2/?t=2."
            ),
            "cannot reach (https://h.example/x?key=%E2%80%A6), retrying\nthen http://h2/?t=%E2%80%A6."
        );
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
        assert_eq!(seen.url, "http://gw-1:8090/?token=%E2%80%A6");
        assert_eq!(
            status.mcp[0].error.as_deref(),
            Some("connect https://db.example/?password=%E2%80%A6 failed")
        );
        assert_eq!(
            status.model.error.as_deref(),
            Some("cannot reach http://model/v1?api-key=%E2%80%A6")
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
        let approval = PendingApproval {
            id: "a".into(),
            workstream: "discord:1".into(),
            tool: "bash".into(),
            header: String::new(),
            preview: String::new(),
            requested_by: Some("participant".into()),
            approvers: Some(sandpiper_agent::store::approvals::AllowedApprovers {
                owner: Some("owner".into()),
                roles: vec![],
            }),
            created_at: 0,
            kind: sandpiper_agent::protocol::ApprovalKind::ToolCall,
        };
        assert!(viewer("owner", false).decides(&approval, Some("owner")));
        assert!(!viewer("participant", false).decides(&approval, Some("owner")));
        assert!(!viewer("stranger", false).decides(&approval, Some("owner")));
        assert!(viewer("approver", true).decides(&approval, Some("owner")));
    }
}
