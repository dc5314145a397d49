//! Who may decide an approval, as a chain of small pure rules (one per concern). Chat channels (Discord, Slack) check every
//! click against the *stored* request with [`rule_on_click`]; nothing carried in a button is
//! trusted beyond the request id it names. Who may decide is the one stored with the request
//! when it was asked ([`AllowedApprovers`]), so every node judges a click alike whatever its
//! own configuration; rows from before that was stored fall back to the configuration.
//! [`rule_on_resume`] judges the **Resume** button of a turn that stopped running.
//!
//! Every refusal is a [`Refusal`], whose `Display` is the one wording the clicker sees, on
//! every platform and on the status page.

use crate::protocol::ApprovalStatus;
use crate::protocol::{ApprovalKind, Verdict};
use crate::store::approvals::{AllowedApprovers, ApprovalRecord};

/// What a button does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClickAction {
    /// Run it.
    Approve,
    /// Do not run it.
    Deny,
    /// Run it and stop asking for this tool in this workstream.
    AlwaysAllow,
    /// Run it and stop asking for commands that start like this one (its program and
    /// subcommand, [`offered_pattern`]) in this workstream.
    AlwaysAllowPattern,
    /// (An MCP tool) run it and stop asking for every tool of its server in this workstream.
    AlwaysAllowServer,
    /// Run it, with a note for the model (asked in a modal).
    ApproveWithNote,
    /// Do not run it, with a note for the model (asked in a modal).
    DenyWithNote,
    /// (A review) it stands as it is.
    Accept,
    /// (A review) it does not stand.
    Reject,
    /// (A review) it stands with a note the model must take into account (asked in a modal).
    Annotate,
}

impl ClickAction {
    const ALL: [ClickAction; 10] = [
        ClickAction::Approve,
        ClickAction::Deny,
        ClickAction::AlwaysAllow,
        ClickAction::AlwaysAllowPattern,
        ClickAction::AlwaysAllowServer,
        ClickAction::ApproveWithNote,
        ClickAction::DenyWithNote,
        ClickAction::Accept,
        ClickAction::Reject,
        ClickAction::Annotate,
    ];

    /// A short stable code for the action (channels write it into button ids).
    pub fn code(self) -> &'static str {
        match self {
            ClickAction::Approve => "a",
            ClickAction::Deny => "d",
            ClickAction::AlwaysAllow => "aa",
            ClickAction::AlwaysAllowPattern => "ap",
            ClickAction::AlwaysAllowServer => "as",
            ClickAction::ApproveWithNote => "an",
            ClickAction::DenyWithNote => "dn",
            ClickAction::Accept => "ok",
            ClickAction::Reject => "rj",
            ClickAction::Annotate => "nt",
        }
    }

    /// The action a [`ClickAction::code`] names.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.code() == code)
    }

    /// The kind of request this button belongs to.
    pub fn kind(self) -> ApprovalKind {
        match self {
            ClickAction::Accept | ClickAction::Reject | ClickAction::Annotate => {
                ApprovalKind::Review
            }
            _ => ApprovalKind::ToolCall,
        }
    }

    /// The buttons of a card row asking about `kind`, in the order they are shown.
    pub fn for_kind(kind: ApprovalKind) -> &'static [ClickAction] {
        match kind {
            ApprovalKind::ToolCall => &[
                ClickAction::Approve,
                ClickAction::Deny,
                ClickAction::AlwaysAllow,
                ClickAction::ApproveWithNote,
                ClickAction::DenyWithNote,
            ],
            ApprovalKind::Review => &[
                ClickAction::Accept,
                ClickAction::Reject,
                ClickAction::Annotate,
            ],
        }
    }

    /// Whether the action asks for a note first (a dialog).
    pub fn needs_note(self) -> bool {
        matches!(
            self,
            ClickAction::ApproveWithNote | ClickAction::DenyWithNote | ClickAction::Annotate
        )
    }

    /// What the click decides.
    pub fn verdict(self) -> Verdict {
        match self {
            ClickAction::Approve | ClickAction::ApproveWithNote | ClickAction::Accept => {
                Verdict::Approve
            }
            ClickAction::Deny | ClickAction::DenyWithNote | ClickAction::Reject => Verdict::Deny,
            ClickAction::AlwaysAllow
            | ClickAction::AlwaysAllowPattern
            | ClickAction::AlwaysAllowServer => Verdict::AlwaysAllow,
            ClickAction::Annotate => Verdict::Annotate,
        }
    }

    /// The label of its button.
    pub fn label(self) -> &'static str {
        match self {
            ClickAction::Approve => "Approve",
            ClickAction::Deny => "Deny",
            ClickAction::AlwaysAllow => "Always allow",
            ClickAction::AlwaysAllowPattern => "Always allow this command",
            ClickAction::AlwaysAllowServer => "Always allow this MCP server",
            ClickAction::ApproveWithNote => "Approve with note",
            ClickAction::DenyWithNote => "Deny with note",
            ClickAction::Accept => "Accept",
            ClickAction::Reject => "Reject",
            ClickAction::Annotate => "Annotate",
        }
    }
}

/// The command pattern a card offers to always allow for a request about `tool` previewing
/// `preview`: for `bash`, the command's program and subcommand (`git status`); `None` for
/// other tools and for commands no pattern could ever match. The card's button and the click
/// both ask this, so the pattern granted is the one shown.
pub fn offered_pattern(tool: &str, preview: &str) -> Option<String> {
    (tool == "bash")
        .then(|| super::pattern::suggested(preview))
        .flatten()
}

/// What a card offers to always allow besides the whole tool, for a request about `tool`
/// previewing `preview`: a command pattern for `bash` ([`offered_pattern`]), the whole MCP
/// server for an MCP tool (`mcp__<server>__<tool>`). The card's button and the click both ask
/// this, so what is granted is what was shown.
pub fn offered_grant(tool: &str, preview: &str) -> Option<(ClickAction, super::Grant)> {
    if let Some(prefix) = offered_pattern(tool, preview) {
        let grant = super::Grant::Pattern {
            tool: tool.to_owned(),
            prefix,
        };
        return Some((ClickAction::AlwaysAllowPattern, grant));
    }
    let server = crate::connectors::server_of(tool)?;
    Some((
        ClickAction::AlwaysAllowServer,
        super::Grant::Server(server.to_owned()),
    ))
}

/// What a click grants when it decides `request`: for the narrower Always allows, what the
/// card offered ([`offered_grant`]), refused when it offered no such thing (a forged or stale
/// button); for any other action, `asked` (`None`: an Always allow grants the whole tool).
pub fn chosen_grant(
    request: &ApprovalRecord,
    action: ClickAction,
    asked: Option<super::Grant>,
) -> Result<Option<super::Grant>, Refusal> {
    match action {
        ClickAction::AlwaysAllowPattern | ClickAction::AlwaysAllowServer => {
            match offered_grant(&request.tool, &request.preview) {
                Some((offered, grant)) if offered == action => Ok(Some(grant)),
                _ => Err(Refusal::NotOffered),
            }
        }
        _ => Ok(asked),
    }
}

/// The person who clicked, as the platform they clicked on knows them: the same for a
/// decision, Approve all / Deny all and Resume.
#[derive(Debug, Clone, Copy)]
pub struct Clicker<'a> {
    /// Their sandpiper user id: the rules' test of who they are, and how records name them
    /// ([`Store::public_name`](crate::store::Store::public_name)).
    pub user_id: &'a str,
    /// Their platform roles (Discord role ids, Slack user group ids).
    pub roles: &'a [String],
    /// Roles whose members may decide any request (`approver_roles`, `approver_usergroups`),
    /// as the platform they clicked on is configured on this node; they count only for
    /// requests stored without their [`AllowedApprovers`].
    pub approver_roles: &'a [String],
}

/// What a click is checked against: the stored request and the workstream's rules.
#[derive(Debug, Clone, Copy)]
pub struct ClickContext<'a> {
    /// The stored request the button names. Its stored [`AllowedApprovers`], when it has
    /// them, decide who may click; `owner` below and the clicker's `approver_roles` only
    /// stand in for rows stored without them.
    pub request: &'a ApprovalRecord,
    /// The workstream's owner (the person who started the thread), as the store says now. The
    /// person whose message caused the call (`request.requested_by`) is deliberately *not*
    /// consulted: in a shared thread that is anyone who talked, and approval is the security
    /// boundary.
    pub owner: Option<&'a str>,
    /// Tools that even the owner may not approve without an approver role
    /// (`[approval] require_approver_for`).
    pub require_approver_for: &'a [String],
}

/// A rule's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ruling {
    /// This rule has no objection.
    Allow,
    /// Refused, with the reason shown only to the clicker.
    Deny(Refusal),
}

/// Why a click decides nothing. Shown only to the clicker (privately where the platform can,
/// as the status page's answer); its `Display` is the one wording, the same everywhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A review's button on a tool call, or the other way round (a forged id).
    #[error("{} is not an answer to this request", .0.label())]
    NotAnAnswer(ClickAction),
    /// The request was decided (or timed out, or was cancelled) before this click.
    #[error("this request was already decided ({0})")]
    AlreadyDecided(ApprovalStatus),
    /// Someone who is neither the thread's owner nor an approver.
    #[error("only the person who started this thread, or an approver, can decide this")]
    NotOwnerOrApprover,
    /// An Always allow by someone other than the thread's owner.
    #[error("only the person who started this thread can choose Always allow")]
    AlwaysAllowIsTheOwners,
    /// A tool in `require_approver_for`, let run by someone without an approver role.
    #[error(
        "`{0}` needs an approver here: only a member of an approver role can let it run \
         (you can still deny it)"
    )]
    NeedsAnApprover(String),
    /// An Always allow narrower than the tool that the card did not offer for this call.
    #[error("this call offers no such Always allow; use Always allow for the tool")]
    NotOffered,
    /// Another click (or the timeout) decided the request between this click's check and its
    /// write; the first write wins.
    #[error("this request was already decided")]
    DecidedMeanwhile,
    /// Resume pressed by someone who is neither the thread's owner nor an approver.
    #[error("only the person who started this thread, or an approver, can resume its turn")]
    NotOwnerOrApproverToResume,
    /// Resume pressed while a request of the interrupted turn still waits.
    #[error("some requests of this turn still wait for a decision; decide them first")]
    TurnStillAsks,
}

type Rule = fn(&ClickContext<'_>, &Clicker<'_>, ClickAction) -> Ruling;

/// The rules, in order; the first refusal wins.
const RULES: [Rule; 6] = [
    fits_the_request,
    still_pending,
    owner_or_approver,
    always_allow_is_the_owners,
    approver_required_for_tool,
    offers_that_always_allow,
];

/// Checks a click against every rule.
pub fn rule_on_click(ctx: &ClickContext<'_>, who: &Clicker<'_>, action: ClickAction) -> Ruling {
    RULES
        .iter()
        .map(|rule| rule(ctx, who, action))
        .find(|r| matches!(r, Ruling::Deny(_)))
        .unwrap_or(Ruling::Allow)
}

/// Whether `action` lets the call run (or the reviewed work stand): everything but the
/// denials and Reject.
pub fn approves(action: ClickAction) -> bool {
    action.verdict().runs()
}

/// Checks a press of Resume on a card whose turn stopped running: the owner or an approver
/// (as stored with the request it names) may continue the turn; the request need not be
/// pending (every request of the turn is decided by then).
pub fn rule_on_resume(ctx: &ClickContext<'_>, who: &Clicker<'_>) -> Ruling {
    if is_owner(ctx, who) || is_approver(ctx, who) {
        Ruling::Allow
    } else {
        Ruling::Deny(Refusal::NotOwnerOrApproverToResume)
    }
}

/// Who may decide: what is stored with the request, else the configuration.
fn stored<'a>(ctx: &ClickContext<'a>) -> Option<&'a AllowedApprovers> {
    ctx.request.approvers.as_ref()
}

fn is_owner(ctx: &ClickContext<'_>, who: &Clicker<'_>) -> bool {
    let owner = match stored(ctx) {
        Some(a) => a.owner.as_deref(),
        None => ctx.owner,
    };
    owner.is_some_and(|owner| owner == who.user_id)
}

fn is_approver(ctx: &ClickContext<'_>, who: &Clicker<'_>) -> bool {
    let roles = match stored(ctx) {
        Some(a) => a.roles.as_slice(),
        None => who.approver_roles,
    };
    who.roles.iter().any(|r| roles.contains(r))
}

/// A review's buttons do not decide a tool call, nor the other way round (a forged id).
fn fits_the_request(ctx: &ClickContext<'_>, _who: &Clicker<'_>, action: ClickAction) -> Ruling {
    if action.kind() == ctx.request.kind {
        Ruling::Allow
    } else {
        Ruling::Deny(Refusal::NotAnAnswer(action))
    }
}

/// A decided request cannot be decided again.
fn still_pending(ctx: &ClickContext<'_>, _who: &Clicker<'_>, _a: ClickAction) -> Ruling {
    if ctx.request.status.is_pending() {
        Ruling::Allow
    } else {
        Ruling::Deny(Refusal::AlreadyDecided(ctx.request.status))
    }
}

/// Only the owner, or a member of an approver role, may decide.
fn owner_or_approver(ctx: &ClickContext<'_>, who: &Clicker<'_>, _a: ClickAction) -> Ruling {
    if is_owner(ctx, who) || is_approver(ctx, who) {
        Ruling::Allow
    } else {
        Ruling::Deny(Refusal::NotOwnerOrApprover)
    }
}

/// "Always allow" changes the workstream's rules: only its owner may choose it.
fn always_allow_is_the_owners(
    ctx: &ClickContext<'_>,
    who: &Clicker<'_>,
    action: ClickAction,
) -> Ruling {
    let always = matches!(
        action,
        ClickAction::AlwaysAllow | ClickAction::AlwaysAllowPattern | ClickAction::AlwaysAllowServer
    );
    if !always || is_owner(ctx, who) {
        Ruling::Allow
    } else {
        Ruling::Deny(Refusal::AlwaysAllowIsTheOwners)
    }
}

/// Tools in `require_approver_for` run only when an approver says so, whoever owns the thread
/// (servers where anyone may open one). Denying stays open to the owner.
fn approver_required_for_tool(
    ctx: &ClickContext<'_>,
    who: &Clicker<'_>,
    action: ClickAction,
) -> Ruling {
    let guarded = ctx.require_approver_for.contains(&ctx.request.tool);
    if !guarded || !approves(action) || is_approver(ctx, who) {
        Ruling::Allow
    } else {
        Ruling::Deny(Refusal::NeedsAnApprover(ctx.request.tool.clone()))
    }
}

/// A narrower Always allow (a command pattern, an MCP server) grants only what the card
/// offered for this very call ([`chosen_grant`]).
fn offers_that_always_allow(
    ctx: &ClickContext<'_>,
    _who: &Clicker<'_>,
    action: ClickAction,
) -> Ruling {
    match chosen_grant(ctx.request, action, None) {
        Ok(_) => Ruling::Allow,
        Err(refusal) => Ruling::Deny(refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Grant;
    use super::*;
    use crate::protocol::ApprovalStatus;
    use pretty_assertions::assert_eq;

    /// `user_id` holding `roles`, clicking where `approver_roles` are
    /// the configured approver roles.
    fn person<'a>(
        user_id: &'a str,
        roles: &'a [String],
        approver_roles: &'a [String],
    ) -> Clicker<'a> {
        Clicker {
            user_id,
            roles,
            approver_roles,
        }
    }

    fn record(status: ApprovalStatus) -> ApprovalRecord {
        ApprovalRecord {
            id: "ap_1f2e".into(),
            kind: ApprovalKind::ToolCall,
            workstream: "discord:1".into(),
            call_id: "c1".into(),
            tool: "bash".into(),
            header: "bash: ls".into(),
            preview: "ls".into(),
            requested_by: Some("alice".into()),
            charged_to: Some("alice".into()),
            status,
            decided_by: None,
            feedback: None,
            decided_at: None,
            created_at: 0,
            fingerprint: None,
            approvers: None,
            decided_via: None,
        }
    }

    /// Who may do what, as one table: each person against each action, for a request that
    /// bob's message caused in alice's thread, where `ops` is the approver role.
    fn table(require_approver_for: &[String]) -> Vec<(&'static str, ClickAction, bool)> {
        table_with(require_approver_for, Asked::Unstored)
    }

    /// Where the rules learn who may decide.
    #[derive(Clone, Copy)]
    enum Asked {
        /// A row from before approvers were stored: this node's configuration says.
        Unstored,
        /// The row says (alice, `ops`); this node is configured differently (no owner known,
        /// the stranger's `dev` as approver role) and must not matter.
        Stored,
    }

    fn table_with(
        require_approver_for: &[String],
        asked: Asked,
    ) -> Vec<(&'static str, ClickAction, bool)> {
        let mut rec = record(ApprovalStatus::Pending);
        rec.requested_by = Some("bob".into());
        let approver_roles = vec!["ops".to_owned()];
        let other_config = vec!["dev".to_owned()];
        let (owner, config_roles) = match asked {
            Asked::Unstored => (Some("alice"), &approver_roles),
            Asked::Stored => {
                rec.approvers = Some(AllowedApprovers {
                    owner: Some("alice".into()),
                    roles: approver_roles.clone(),
                });
                (None, &other_config)
            }
        };
        let ctx = ClickContext {
            request: &rec,
            owner,
            require_approver_for,
        };
        let none: Vec<String> = vec![];
        let other_role = vec!["dev".to_owned()];
        let people = [
            ("owner", "alice", &none),
            ("approver", "carol", &approver_roles),
            ("participant", "bob", &none),
            ("stranger", "mallory", &other_role),
        ];
        let actions = [
            ClickAction::Approve,
            ClickAction::Deny,
            ClickAction::AlwaysAllow,
            ClickAction::ApproveWithNote,
            ClickAction::DenyWithNote,
        ];
        let mut out = Vec::new();
        for (label, user_id, roles) in people {
            let who = person(user_id, roles, config_roles);
            for action in actions {
                let allowed = rule_on_click(&ctx, &who, action) == Ruling::Allow;
                out.push((label, action, allowed));
            }
        }
        out
    }

    #[test]
    fn the_approvers_stored_with_a_request_decide_whatever_this_node_is_configured_with() {
        assert_eq!(table_with(&[], Asked::Stored), table(&[]));
        let guarded = ["bash".to_owned()];
        assert_eq!(
            table_with(&guarded, Asked::Stored),
            table(&guarded),
            "require_approver_for still applies"
        );
        // The row's approvers are empty: only its owner decides, even holders of a role this
        // node configures.
        let mut rec = record(ApprovalStatus::Pending);
        rec.approvers = Some(AllowedApprovers {
            owner: Some("alice".into()),
            roles: vec![],
        });
        let config_roles = vec!["ops".to_owned()];
        let ctx = ClickContext {
            request: &rec,
            owner: Some("carol"),
            require_approver_for: &[],
        };
        let carol = person("carol", &config_roles, &config_roles);
        let alice = person("alice", &[], &config_roles);
        assert!(matches!(
            rule_on_click(&ctx, &carol, ClickAction::Approve),
            Ruling::Deny(_)
        ));
        assert_eq!(
            rule_on_click(&ctx, &alice, ClickAction::Approve),
            Ruling::Allow
        );
    }

    #[test]
    fn resume_is_for_the_owner_and_approvers_of_a_decided_turn() {
        for asked in [Asked::Unstored, Asked::Stored] {
            let mut rec = record(ApprovalStatus::Approved);
            let approver_roles = vec!["ops".to_owned()];
            let other_config = vec!["dev".to_owned()];
            let (owner, config_roles) = match asked {
                Asked::Unstored => (Some("alice"), &approver_roles),
                Asked::Stored => {
                    rec.approvers = Some(AllowedApprovers {
                        owner: Some("alice".into()),
                        roles: approver_roles.clone(),
                    });
                    (None, &other_config)
                }
            };
            let ctx = ClickContext {
                request: &rec,
                owner,
                require_approver_for: &["bash".to_owned()],
            };
            let none: Vec<String> = vec![];
            let people = [
                ("owner", "alice", &none),
                ("approver", "carol", &approver_roles),
                ("participant", "bob", &none),
                ("stranger", "mallory", &other_config),
            ];
            let got: Vec<(&str, Ruling)> = people
                .into_iter()
                .map(|(label, user_id, roles)| {
                    let who = person(user_id, roles, config_roles);
                    (label, rule_on_resume(&ctx, &who))
                })
                .collect();
            let refused = Ruling::Deny(Refusal::NotOwnerOrApproverToResume);
            assert_eq!(
                got,
                vec![
                    ("owner", Ruling::Allow),
                    ("approver", Ruling::Allow),
                    ("participant", refused.clone()),
                    ("stranger", refused),
                ]
            );
        }
    }

    #[test]
    fn the_owner_and_approvers_decide_and_the_participant_who_caused_the_call_does_not() {
        use ClickAction::*;
        let expected = vec![
            ("owner", Approve, true),
            ("owner", Deny, true),
            ("owner", AlwaysAllow, true),
            ("owner", ApproveWithNote, true),
            ("owner", DenyWithNote, true),
            ("approver", Approve, true),
            ("approver", Deny, true),
            ("approver", AlwaysAllow, false),
            ("approver", ApproveWithNote, true),
            ("approver", DenyWithNote, true),
            ("participant", Approve, false),
            ("participant", Deny, false),
            ("participant", AlwaysAllow, false),
            ("participant", ApproveWithNote, false),
            ("participant", DenyWithNote, false),
            ("stranger", Approve, false),
            ("stranger", Deny, false),
            ("stranger", AlwaysAllow, false),
            ("stranger", ApproveWithNote, false),
            ("stranger", DenyWithNote, false),
        ];
        assert_eq!(table(&[]), expected);
    }

    #[test]
    fn require_approver_for_leaves_the_owner_only_the_denials() {
        use ClickAction::*;
        let expected = vec![
            ("owner", Approve, false),
            ("owner", Deny, true),
            ("owner", AlwaysAllow, false),
            ("owner", ApproveWithNote, false),
            ("owner", DenyWithNote, true),
            ("approver", Approve, true),
            ("approver", Deny, true),
            ("approver", AlwaysAllow, false),
            ("approver", ApproveWithNote, true),
            ("approver", DenyWithNote, true),
            ("participant", Approve, false),
            ("participant", Deny, false),
            ("participant", AlwaysAllow, false),
            ("participant", ApproveWithNote, false),
            ("participant", DenyWithNote, false),
            ("stranger", Approve, false),
            ("stranger", Deny, false),
            ("stranger", AlwaysAllow, false),
            ("stranger", ApproveWithNote, false),
            ("stranger", DenyWithNote, false),
        ];
        assert_eq!(table(&["bash".to_owned()]), expected);
        // Another tool is not affected.
        assert_eq!(table(&["write_file".to_owned()]), table(&[]));
    }

    #[test]
    fn each_refusal_says_why() {
        let rec = record(ApprovalStatus::Pending);
        let roles = vec!["ops".to_owned()];
        let guarded = vec!["bash".to_owned()];
        let ctx = ClickContext {
            request: &rec,
            owner: Some("alice"),
            require_approver_for: &guarded,
        };
        let alice = person("alice", &[], &roles);
        let carol = person("carol", &roles, &roles);
        let mallory = person("mallory", &[], &roles);
        assert_eq!(
            rule_on_click(&ctx, &mallory, ClickAction::Deny),
            Ruling::Deny(Refusal::NotOwnerOrApprover)
        );
        assert_eq!(
            rule_on_click(&ctx, &carol, ClickAction::AlwaysAllow),
            Ruling::Deny(Refusal::AlwaysAllowIsTheOwners)
        );
        assert_eq!(
            rule_on_click(&ctx, &alice, ClickAction::Approve),
            Ruling::Deny(Refusal::NeedsAnApprover("bash".into()))
        );
    }

    /// The one wording of every refusal, as the clicker reads it (tests in `tests/` and the
    /// platforms' snapshots quote these).
    #[test]
    fn every_refusal_has_one_wording() {
        let wordings = [
            (
                Refusal::NotAnAnswer(ClickAction::Accept),
                "Accept is not an answer to this request",
            ),
            (
                Refusal::AlreadyDecided(ApprovalStatus::Approved),
                "this request was already decided (approved)",
            ),
            (
                Refusal::NotOwnerOrApprover,
                "only the person who started this thread, or an approver, can decide this",
            ),
            (
                Refusal::AlwaysAllowIsTheOwners,
                "only the person who started this thread can choose Always allow",
            ),
            (
                Refusal::NeedsAnApprover("bash".into()),
                "`bash` needs an approver here: only a member of an approver role can let it \
                 run (you can still deny it)",
            ),
            (
                Refusal::NotOffered,
                "this call offers no such Always allow; use Always allow for the tool",
            ),
            (
                Refusal::DecidedMeanwhile,
                "this request was already decided",
            ),
            (
                Refusal::NotOwnerOrApproverToResume,
                "only the person who started this thread, or an approver, can resume its turn",
            ),
            (
                Refusal::TurnStillAsks,
                "some requests of this turn still wait for a decision; decide them first",
            ),
        ];
        for (refusal, wording) in wordings {
            assert_eq!(refusal.to_string(), wording);
        }
    }

    #[test]
    fn a_narrower_always_allow_grants_only_what_the_card_offered() {
        let mut git = record(ApprovalStatus::Pending);
        git.preview = "git status --short".into();
        let mut mcp = record(ApprovalStatus::Pending);
        mcp.tool = "mcp__github__create_issue".into();
        mcp.preview = "{}".into();
        let mut write = record(ApprovalStatus::Pending);
        write.tool = "write_file".into();
        let pattern = Grant::Pattern {
            tool: "bash".into(),
            prefix: "git status".into(),
        };
        let server = Grant::Server("github".into());
        let asked = Some(Grant::Tool("bash".into()));
        use ClickAction::*;
        let cases = [
            (&git, AlwaysAllowPattern, Ok(Some(pattern.clone()))),
            (&git, AlwaysAllowServer, Err(Refusal::NotOffered)),
            (&mcp, AlwaysAllowServer, Ok(Some(server))),
            (&mcp, AlwaysAllowPattern, Err(Refusal::NotOffered)),
            (&write, AlwaysAllowPattern, Err(Refusal::NotOffered)),
            (&write, AlwaysAllowServer, Err(Refusal::NotOffered)),
            // Any other action keeps what the click asked for (the whole tool by default).
            (&git, AlwaysAllow, Ok(asked.clone())),
            (&write, Approve, Ok(asked.clone())),
        ];
        for (request, action, want) in cases {
            assert_eq!(
                chosen_grant(request, action, asked.clone()),
                want,
                "{} {action:?}",
                request.tool
            );
        }
        // The rule chain refuses the same click, after every rule about who may decide.
        let ctx = ClickContext {
            request: &write,
            owner: Some("alice"),
            require_approver_for: &[],
        };
        assert_eq!(
            rule_on_click(&ctx, &person("alice", &[], &[]), AlwaysAllowPattern),
            Ruling::Deny(Refusal::NotOffered)
        );
        assert_eq!(
            rule_on_click(&ctx, &person("bob", &[], &[]), AlwaysAllowPattern),
            Ruling::Deny(Refusal::NotOwnerOrApprover)
        );
        let ctx = ClickContext {
            request: &git,
            ..ctx
        };
        assert_eq!(
            rule_on_click(&ctx, &person("alice", &[], &[]), AlwaysAllowPattern),
            Ruling::Allow
        );
    }

    #[test]
    fn a_workstream_without_an_owner_is_decided_by_approvers_only() {
        let rec = record(ApprovalStatus::Pending);
        let roles = vec!["ops".to_owned()];
        let ctx = ClickContext {
            request: &rec,
            owner: None,
            require_approver_for: &[],
        };
        let requester = person("alice", &[], &roles);
        let carol = person("carol", &roles, &roles);
        assert!(matches!(
            rule_on_click(&ctx, &requester, ClickAction::Approve),
            Ruling::Deny(_)
        ));
        assert_eq!(
            rule_on_click(&ctx, &carol, ClickAction::Approve),
            Ruling::Allow
        );
    }

    #[test]
    fn a_review_is_answered_by_its_own_buttons_under_the_same_who_decides_rules() {
        let mut rec = record(ApprovalStatus::Pending);
        rec.kind = ApprovalKind::Review;
        rec.tool = "plan".into();
        let approver_roles = vec!["ops".to_owned()];
        let ctx = ClickContext {
            request: &rec,
            owner: Some("alice"),
            require_approver_for: &[],
        };
        let none: Vec<String> = vec![];
        let people = [
            ("owner", "alice", &none, true),
            ("approver", "carol", &approver_roles, true),
            ("participant", "bob", &none, false),
            ("stranger", "mallory", &none, false),
        ];
        for (label, user_id, roles, may) in people {
            let who = person(user_id, roles, &approver_roles);
            for &action in ClickAction::for_kind(ApprovalKind::Review) {
                assert_eq!(
                    rule_on_click(&ctx, &who, action) == Ruling::Allow,
                    may,
                    "{label} {action:?}"
                );
            }
            // A tool-call button (a forged id) never decides a review, nor the reverse.
            for &action in ClickAction::for_kind(ApprovalKind::ToolCall) {
                assert!(matches!(rule_on_click(&ctx, &who, action), Ruling::Deny(_)));
            }
        }
        let tool_call = record(ApprovalStatus::Pending);
        let ctx = ClickContext {
            request: &tool_call,
            ..ctx
        };
        assert_eq!(
            rule_on_click(&ctx, &person("alice", &[], &[]), ClickAction::Accept),
            Ruling::Deny(Refusal::NotAnAnswer(ClickAction::Accept))
        );
        assert_eq!(ClickAction::Annotate.verdict(), Verdict::Annotate);
        assert!(ClickAction::Annotate.needs_note() && !ClickAction::Reject.needs_note());
        for action in ClickAction::ALL {
            assert_eq!(ClickAction::from_code(action.code()), Some(action));
        }
    }

    #[test]
    fn a_decided_request_stays_decided() {
        let rec = record(ApprovalStatus::Approved);
        let ctx = ClickContext {
            request: &rec,
            owner: Some("alice"),
            require_approver_for: &[],
        };
        assert_eq!(
            rule_on_click(&ctx, &person("alice", &[], &[]), ClickAction::Deny),
            Ruling::Deny(Refusal::AlreadyDecided(ApprovalStatus::Approved))
        );
    }
}
