//! People, as a channel sees them: who a platform identity is, the identities a person has
//! linked, their name, and the memories they can see. A channel's account commands (`link`,
//! `whoami`, `rename`, `memory`) and the notifier use these and never the store itself.
//!
//! Finding a person by the name someone typed is [`People::named`]: a sandpiper username or a
//! platform handle, never a display name. The notify tool, `/budget` and the status page's
//! budget form all find people through it, so a name that works in one works in all.
//!
//! [`People`] is a cheap handle: [`Agent::people`](crate::Agent::people) gives one, and a
//! command-line tool that has a store but no agent makes one with [`People::new`].

use crate::notify::ChannelType;
/// What a person is and sees, re-exported so a channel names them here, not in the store.
pub use crate::store::memories::{Memory, Scope, Visibility};
pub use crate::store::users::{IdentityError, LinkedIdentity, User};
use crate::store::{Store, StoreError, now_ms};

/// How a typed name named a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedBy {
    /// Their sandpiper username.
    Username,
    /// Their handle on a platform: a Discord username, a Slack member's name.
    Handle(ChannelType),
}

impl NamedBy {
    /// How an answer says what the name was: `the Slack handle`.
    pub fn what(self) -> &'static str {
        match self {
            NamedBy::Username => "the sandpiper username",
            NamedBy::Handle(ChannelType::Discord) => "the Discord username",
            NamedBy::Handle(ChannelType::Slack) => "the Slack handle",
        }
    }
}

/// A person a typed name names, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPerson {
    /// How the name named them.
    pub by: NamedBy,
    /// Who they are.
    pub user: User,
}

/// The people a name names, for an answer: `the Discord username of `discord-2002` and the
/// Slack handle of `slack-u0dana``.
pub fn describe_named(people: &[NamedPerson]) -> String {
    let whose: Vec<String> = people
        .iter()
        .map(|p| format!("{} of `{}`", p.by.what(), p.user.username))
        .collect();
    whose.join(" and ")
}

/// Why a name does not name exactly one person; its `Display` is the answer's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOnePerson {
    /// Nobody has that username or handle.
    Nobody(String),
    /// It is several people's (one's username, another's handle): none is picked.
    Several(String, Vec<NamedPerson>),
}

impl std::fmt::Display for NotOnePerson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOnePerson::Nobody(name) => write!(
                f,
                "nobody is called `{name}`: name a person by their Discord username, their \
                 Slack handle or their sandpiper username (/whoami shows it)"
            ),
            NotOnePerson::Several(name, people) => write!(
                f,
                "`{name}` names different people: it is {}; name one by their sandpiper username",
                describe_named(people)
            ),
        }
    }
}

/// A platform identity: who typed a command or wrote a message.
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    /// `console`, `discord`, `slack`.
    pub platform: &'a str,
    /// The platform's user id.
    pub platform_user_id: &'a str,
    /// The name the platform shows: for display only, never to find anyone.
    pub display_name: &'a str,
    /// The handle the platform keeps unique, when it has one: a Discord username (legacy
    /// accounts `name#1234`), a Slack member's `name` in its workspace. People name each
    /// other by it (`notify(username=alice)`); `None` on the console.
    pub handle: Option<&'a str>,
}

/// People and what is theirs. Cheap to clone.
#[derive(Clone)]
pub struct People {
    store: Store,
}

impl std::fmt::Debug for People {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("People").finish_non_exhaustive()
    }
}

impl People {
    /// People as `store` records them.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// The sandpiper user behind `who`, made on first sight.
    pub async fn person(&self, who: Identity<'_>) -> Result<User, StoreError> {
        let Identity {
            platform,
            platform_user_id,
            display_name,
            handle,
        } = who;
        self.store
            .user_for_identity_at(platform, platform_user_id, display_name, handle, now_ms())
            .await
    }

    /// How records name `user` to others: `Alice (@alice)` ([`User::public_name`] with the
    /// handle [`Store::public_name`] picks).
    pub async fn public_name(&self, user: &User) -> Result<String, StoreError> {
        self.store.public_name_of(user).await
    }

    /// [`People::public_name`] of user `id`, or the id when it names nobody.
    pub async fn public_name_of(&self, id: &str) -> String {
        self.store.public_name_or_id(id).await
    }

    /// The sandpiper user `id`.
    pub async fn user(&self, id: &str) -> Result<Option<User>, StoreError> {
        self.store.user(id).await
    }

    /// The user called `username` (a leading `@` and case do not matter).
    pub async fn by_username(&self, username: &str) -> Result<Option<User>, StoreError> {
        self.store.user_by_username(username).await
    }

    /// The people `name` names, each once: the user with that username and the people with
    /// that handle on a platform (a Discord username, a Slack member's name), as people type
    /// them (a leading `@` and case do not matter). Display names never count. Linked
    /// identities are one person.
    pub async fn named(&self, name: &str) -> Result<Vec<NamedPerson>, StoreError> {
        let mut named: Vec<NamedPerson> = Vec::new();
        if let Some(user) = self.store.user_by_username(name).await? {
            named.push(NamedPerson {
                by: NamedBy::Username,
                user,
            });
        }
        for (platform, user) in self.store.users_with_handle(name).await? {
            let Some(platform) = ChannelType::parse(&platform) else {
                continue;
            };
            if !named.iter().any(|known| known.user.id == user.id) {
                named.push(NamedPerson {
                    by: NamedBy::Handle(platform),
                    user,
                });
            }
        }
        Ok(named)
    }

    /// The one person `name` names ([`People::named`]), or why it is not one: for what acts
    /// on a single person (`/budget`, the page's budget form).
    pub async fn one_named(&self, name: &str) -> Result<Result<User, NotOnePerson>, StoreError> {
        let mut named = self.named(name).await?;
        Ok(match named.len() {
            0 => Err(NotOnePerson::Nobody(name.to_owned())),
            1 => Ok(named.remove(0).user),
            _ => Err(NotOnePerson::Several(name.to_owned(), named)),
        })
    }

    /// Every identity linked to user `id`, sorted by platform and id.
    pub async fn identities(&self, id: &str) -> Result<Vec<LinkedIdentity>, StoreError> {
        self.store.identities_of(id).await
    }

    /// A one-time code that links another identity to user `id`.
    pub async fn new_link_code(&self, id: &str) -> Result<String, StoreError> {
        self.store.create_link_code(id).await
    }

    /// Joins `who` to the user that made `code`.
    pub async fn redeem_link_code(
        &self,
        who: Identity<'_>,
        code: &str,
    ) -> Result<User, IdentityError> {
        self.store
            .redeem_link_code(who.platform, who.platform_user_id, who.display_name, code)
            .await
    }

    /// Makes `who` a user of its own again.
    pub async fn unlink(&self, who: Identity<'_>) -> Result<User, IdentityError> {
        self.store.unlink(who.platform, who.platform_user_id).await
    }

    /// Renames user `id`.
    pub async fn rename(&self, id: &str, username: &str) -> Result<User, IdentityError> {
        self.store.rename_user(id, username).await
    }

    /// What a turn with this visibility could see, at most `limit`.
    pub async fn visible_memories(
        &self,
        vis: &Visibility,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        self.store.visible_memories(vis, limit).await
    }

    /// The visible memories called `name` (of `scope`, when given).
    pub async fn named_memories(
        &self,
        vis: &Visibility,
        name: &str,
        scope: Option<Scope>,
    ) -> Result<Vec<Memory>, StoreError> {
        self.store.named_memories(vis, name, scope).await
    }

    /// Deletes the visible memory called `name` when exactly one matches; returns what
    /// matched (deleted when it was one).
    pub async fn delete_memory(
        &self,
        vis: &Visibility,
        name: &str,
        scope: Option<Scope>,
    ) -> Result<Vec<Memory>, StoreError> {
        self.store.delete_memory(vis, name, scope).await
    }
}
