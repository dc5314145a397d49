//! Who may stop, steer, close and talk in a workstream (in its thread, or from the status
//! page), what a closed thread and an empty mention answer, and the one wording of a refusal:
//! pure rules every platform (Discord, Slack, the console) asks, so the platforms cannot drift
//! apart. A platform only looks up the facts
//! ([`Standing`]); the rule decides, and the text the person sees is the error's.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Mutex;

use crate::config::ThreadAccess;

/// Where a person stands in one workstream, as the platform knows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    /// They started the thread (its stored owner).
    pub owner: bool,
    /// They hold an approver role or user group here (`approver_roles`,
    /// `approver_usergroups`).
    pub approver: bool,
    /// They administer the bot here (Discord: Administrator, Manage Threads or an
    /// `admin_roles` role; Slack: an `admin_usergroups` member).
    pub admin: bool,
}

/// Why the bot does not do what was asked; the text is for the person, the same on every
/// platform (privately where the platform can).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Stop pressed (or `stop` typed) by someone who may not stop this thread's turn.
    #[error("🚫 Only the person who started this thread, or an approver, can stop its turn.")]
    Stop,
    /// `compact` or `model NAME` typed by someone who may not steer this thread.
    #[error("🚫 Only the person who started this thread, or an approver, can {0}.")]
    Steer(Steering),
    /// `close` typed by someone who may not close this thread.
    #[error("🚫 Only the person who started this thread, or an admin, can close it.")]
    Close,
    /// A message in an owner-only thread from someone else.
    #[error(
        "🚫 Only {owner} can talk to me in this thread. Mention me in a channel to start your own."
    )]
    NotYourThread {
        /// The owner's shown name.
        owner: String,
    },
    /// A message written on the status page into a workstream the person takes no part in.
    #[error(
        "🚫 Only the people in this thread can write to it from the status page. Write in the \
         thread itself to join it."
    )]
    NotInThread,
    /// A message in a thread whose workstream was closed.
    #[error("🔒 This thread is closed. Mention me in a channel to start a new one.")]
    ThreadClosed,
    /// A mention with nothing after it.
    #[error("Yes? Ask me something after the mention.")]
    EmptyMention,
    /// An approval rule said no (the reason comes from the agent's rules).
    #[error("🚫 {0}")]
    Click(String),
    /// A button naming a request the store does not have.
    #[error("🚫 I have no record of this approval request; nothing changed.")]
    UnknownRequest,
    /// A button id that is not one of ours (forged, truncated, from an older version).
    #[error("🚫 That button is not one I know; nothing changed.")]
    UnknownButton,
}

/// Who may stop a thread's turn: its owner, an approver, and, in a thread open to everyone,
/// anyone who may talk there.
pub fn may_stop(access: ThreadAccess, who: Standing) -> Result<(), Refusal> {
    if who.owner || who.approver || access == ThreadAccess::Anyone {
        Ok(())
    } else {
        Err(Refusal::Stop)
    }
}

/// What steering a thread changes for everyone in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// `compact`: its older part is summarised.
    Compact,
    /// `model NAME`: another model answers it.
    Model,
}

impl Steering {
    /// The command that steers so.
    pub fn command(self) -> &'static str {
        match self {
            Steering::Compact => "compact",
            Steering::Model => "model",
        }
    }
}

impl std::fmt::Display for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Steering::Compact => "compact it",
            Steering::Model => "switch its model",
        })
    }
}

/// Who may steer a thread (compact it, switch its model): its owner, an approver or an
/// admin.
pub fn may_steer(what: Steering, who: Standing) -> Result<(), Refusal> {
    if who.owner || who.approver || who.admin {
        Ok(())
    } else {
        Err(Refusal::Steer(what))
    }
}

/// Who may close a thread: its owner or an admin (not merely an approver: closing ends the
/// workstream for everyone in it).
pub fn may_close(who: Standing) -> Result<(), Refusal> {
    if who.owner || who.admin {
        Ok(())
    } else {
        Err(Refusal::Close)
    }
}

/// Who may talk in a thread: anyone in an open one; only the owner in an owner-only one
/// (`owner` is the owner's shown name, for the refusal). A thread without a stored owner is
/// open.
pub fn may_talk(access: ThreadAccess, who: Standing, owner: Option<&str>) -> Result<(), Refusal> {
    match (access, owner) {
        (ThreadAccess::Owner, Some(owner)) if !who.owner => Err(Refusal::NotYourThread {
            owner: owner.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Who may write into a workstream from away from its thread (the status page): whoever may
/// talk in the thread ([`may_talk`]) and takes part in it already (`takes_part`: its owner,
/// or someone who wrote there). Away from the thread nobody can tell who sees its channel, so
/// taking part stands in for being there; an approver role decides approvals, it does not
/// make its holder part of a conversation.
pub fn may_talk_away(
    access: ThreadAccess,
    who: Standing,
    takes_part: bool,
    owner: Option<&str>,
) -> Result<(), Refusal> {
    may_talk(access, who, owner)?;
    if who.owner || takes_part {
        Ok(())
    } else {
        Err(Refusal::NotInThread)
    }
}

/// What a message says once the bot's mention is taken out: `Ok(None)` when there is nothing
/// to do (an empty message nobody addressed to the bot), the hint when the bot was mentioned
/// (or written to directly) with nothing after it.
pub fn heard(text: &str, addressed: bool) -> Result<Option<&str>, Refusal> {
    let text = text.trim();
    match (text.is_empty(), addressed) {
        (false, _) => Ok(Some(text)),
        (true, true) => Err(Refusal::EmptyMention),
        (true, false) => Ok(None),
    }
}

/// The most (thread, person) pairs [`TellOnce`] remembers; forgetting only means someone may
/// be told twice.
const MAX_TOLD: usize = 10_000;

/// Notices said once per thread and person (a closed thread, an owner-only thread): a second
/// message gets no second notice.
#[derive(Debug)]
pub struct TellOnce<K> {
    told: Mutex<HashSet<K>>,
}

impl<K> Default for TellOnce<K> {
    fn default() -> Self {
        Self {
            told: Mutex::new(HashSet::new()),
        }
    }
}

impl<K: Hash + Eq> TellOnce<K> {
    /// Whether `key` (a thread and a person) has not been told yet; remembers it.
    pub fn first(&self, key: K) -> bool {
        let mut told = self.told.lock().unwrap_or_else(|e| e.into_inner());
        if told.len() >= MAX_TOLD {
            told.clear();
        }
        told.insert(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// The four people of every permission test, in their standing in alice's thread.
    fn four() -> [(&'static str, Standing); 4] {
        [
            (
                "owner",
                Standing {
                    owner: true,
                    ..Standing::default()
                },
            ),
            (
                "approver",
                Standing {
                    approver: true,
                    ..Standing::default()
                },
            ),
            ("participant", Standing::default()),
            ("stranger", Standing::default()),
        ]
    }

    fn table<F: Fn(Standing) -> Result<(), Refusal>>(rule: F) -> Vec<(&'static str, bool)> {
        four()
            .into_iter()
            .map(|(who, s)| (who, rule(s).is_ok()))
            .collect()
    }

    #[test]
    fn the_owner_and_approvers_stop_and_in_an_open_thread_anyone() {
        let open = table(|s| may_stop(ThreadAccess::Anyone, s));
        let owners = table(|s| may_stop(ThreadAccess::Owner, s));
        assert_eq!(
            open,
            vec![
                ("owner", true),
                ("approver", true),
                ("participant", true),
                ("stranger", true)
            ]
        );
        assert_eq!(
            owners,
            vec![
                ("owner", true),
                ("approver", true),
                ("participant", false),
                ("stranger", false)
            ]
        );
        assert_eq!(
            may_stop(ThreadAccess::Owner, Standing::default()),
            Err(Refusal::Stop)
        );
    }

    #[test]
    fn the_owner_an_approver_or_an_admin_steers() {
        assert_eq!(
            table(|s| may_steer(Steering::Model, s)),
            vec![
                ("owner", true),
                ("approver", true),
                ("participant", false),
                ("stranger", false)
            ]
        );
        let admin = Standing {
            admin: true,
            ..Standing::default()
        };
        assert_eq!(may_steer(Steering::Compact, admin), Ok(()));
        assert_eq!(
            may_steer(Steering::Compact, Standing::default())
                .unwrap_err()
                .to_string(),
            "🚫 Only the person who started this thread, or an approver, can compact it."
        );
    }

    #[test]
    fn the_owner_or_an_admin_closes_not_an_approver() {
        assert_eq!(
            table(may_close),
            vec![
                ("owner", true),
                ("approver", false),
                ("participant", false),
                ("stranger", false)
            ]
        );
        let admin = Standing {
            admin: true,
            ..Standing::default()
        };
        assert_eq!(may_close(admin), Ok(()));
        assert_eq!(may_close(Standing::default()), Err(Refusal::Close));
    }

    #[test]
    fn an_owner_only_thread_is_the_owners_and_an_open_one_everyones() {
        let owners = table(|s| may_talk(ThreadAccess::Owner, s, Some("alice")));
        assert_eq!(
            owners,
            vec![
                ("owner", true),
                ("approver", false),
                ("participant", false),
                ("stranger", false)
            ]
        );
        assert!(
            table(|s| may_talk(ThreadAccess::Anyone, s, Some("alice")))
                .iter()
                .all(|(_, ok)| *ok)
        );
        assert_eq!(
            may_talk(ThreadAccess::Owner, Standing::default(), None),
            Ok(())
        );
        assert_eq!(
            may_talk(ThreadAccess::Owner, Standing::default(), Some("alice"))
                .map_err(|e| e.to_string()),
            Err(
                "🚫 Only alice can talk to me in this thread. Mention me in a channel to start \
                 your own."
                    .into()
            )
        );
    }

    #[test]
    fn from_the_page_the_owner_and_participants_write_and_nobody_else() {
        // Who takes part in alice's thread: alice and the participant.
        let away = |access| {
            four()
                .into_iter()
                .map(|(who, s)| {
                    let takes_part = matches!(who, "owner" | "participant");
                    (who, may_talk_away(access, s, takes_part, Some("alice")))
                })
                .collect::<Vec<_>>()
        };
        let not_yours = || {
            Err(Refusal::NotYourThread {
                owner: "alice".into(),
            })
        };
        assert_eq!(
            away(ThreadAccess::Anyone),
            vec![
                ("owner", Ok(())),
                ("approver", Err(Refusal::NotInThread)),
                ("participant", Ok(())),
                ("stranger", Err(Refusal::NotInThread)),
            ]
        );
        assert_eq!(
            away(ThreadAccess::Owner),
            vec![
                ("owner", Ok(())),
                ("approver", not_yours()),
                ("participant", not_yours()),
                ("stranger", not_yours()),
            ]
        );
    }

    #[test]
    fn an_empty_mention_gets_the_hint_and_an_empty_message_nothing() {
        let cases = [
            ("  why is CI red? ", true, Ok(Some("why is CI red?"))),
            ("why", false, Ok(Some("why"))),
            ("   ", true, Err(Refusal::EmptyMention)),
            ("", false, Ok(None)),
        ];
        for (text, addressed, want) in cases {
            assert_eq!(
                heard(text, addressed),
                want,
                "{text:?} addressed={addressed}"
            );
        }
        assert_eq!(
            Refusal::EmptyMention.to_string(),
            "Yes? Ask me something after the mention."
        );
    }

    #[test]
    fn a_closed_thread_is_told_once_per_person() {
        let told = TellOnce::default();
        let said: Vec<bool> = [
            ("t1", "alice"),
            ("t1", "alice"),
            ("t1", "bob"),
            ("t2", "alice"),
            ("t1", "bob"),
        ]
        .into_iter()
        .map(|k| told.first(k))
        .collect();
        assert_eq!(said, vec![true, false, true, true, false]);
    }

    #[test]
    fn every_refusal_reads_alike() {
        let texts: Vec<String> = [
            Refusal::Stop,
            Refusal::Close,
            Refusal::Click("this request was already decided (approved)".into()),
            Refusal::UnknownRequest,
            Refusal::UnknownButton,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert!(texts.iter().all(|t| t.starts_with("🚫 ")), "{texts:?}");
        assert_eq!(
            Refusal::UnknownRequest.to_string(),
            "🚫 I have no record of this approval request; nothing changed."
        );
    }
}
