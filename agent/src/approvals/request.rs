//! Building a request: the one place an [`ApprovalRecord`] is made before it is asked, so the
//! fields a new request starts with (pending, undecided, a fresh id, its fingerprint) are
//! written once rather than in every caller.

use crate::protocol::{ApprovalKind, ApprovalStatus};
use crate::store::approvals::{AllowedApprovers, ApprovalRecord};

/// A request about to be asked: what it is about; everything else starts empty.
#[derive(Debug, Clone)]
pub struct NewRequest<'a> {
    /// A tool call or a review gate.
    pub kind: ApprovalKind,
    /// The workstream whose people decide (a sub-agent's parent thread).
    pub workstream: &'a str,
    /// The call it is about (`<parent call>/<call>` for a sub-agent's).
    pub call_id: String,
    /// Tool name.
    pub tool: &'a str,
    /// One line naming the call.
    pub header: String,
    /// Preview shown to the approver.
    pub preview: String,
    /// Who started the turn (a sandpiper user id).
    pub requested_by: Option<&'a str>,
    /// What the decision is tied to: the tool's name and arguments
    /// ([`fingerprint_raw`](super::fingerprint_raw)), or the reviewed text.
    pub fingerprint: String,
    /// Who may decide, as of now.
    pub approvers: AllowedApprovers,
}

impl NewRequest<'_> {
    /// The pending record, with a new request id.
    pub fn build(self) -> ApprovalRecord {
        self.build_as(super::new_request_id())
    }

    /// The pending record under `id`, for a caller that must know the id beforehand (a test
    /// that names the requests its pages and buttons refer to).
    pub fn build_as(self, id: String) -> ApprovalRecord {
        ApprovalRecord {
            id,
            kind: self.kind,
            workstream: self.workstream.to_owned(),
            call_id: self.call_id,
            tool: self.tool.to_owned(),
            header: self.header,
            preview: self.preview,
            requested_by: self.requested_by.map(str::to_owned),
            charged_to: self.requested_by.map(str::to_owned),
            status: ApprovalStatus::Pending,
            decided_by: None,
            feedback: None,
            decided_at: None,
            created_at: 0,
            fingerprint: Some(self.fingerprint),
            approvers: Some(self.approvers),
            decided_via: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_new_request_is_pending_undecided_and_named_afresh() {
        let new = || NewRequest {
            kind: ApprovalKind::ToolCall,
            workstream: "discord:1",
            call_id: "c1".into(),
            tool: "bash",
            header: "bash: ls".into(),
            preview: "ls".into(),
            requested_by: Some("u1"),
            fingerprint: "ab".into(),
            approvers: AllowedApprovers {
                owner: Some("u1".into()),
                roles: vec!["ops".into()],
            },
        };
        let a = new().build();
        let b = new().build();
        assert_ne!(a.id, b.id);
        assert!(a.id.starts_with("ap_"));
        assert_eq!(
            a,
            ApprovalRecord {
                id: a.id.clone(),
                kind: ApprovalKind::ToolCall,
                workstream: "discord:1".into(),
                call_id: "c1".into(),
                tool: "bash".into(),
                header: "bash: ls".into(),
                preview: "ls".into(),
                requested_by: Some("u1".into()),
                charged_to: Some("u1".into()),
                status: ApprovalStatus::Pending,
                decided_by: None,
                feedback: None,
                decided_at: None,
                created_at: 0,
                fingerprint: Some("ab".into()),
                approvers: Some(AllowedApprovers {
                    owner: Some("u1".into()),
                    roles: vec!["ops".into()],
                }),
                decided_via: None,
            }
        );
    }
}
