//! Discord's part of deciding away from the thread ([`crate::membership`]): the member's roles
//! now, read from Discord (`GET /guilds/{guild}/members/{user}`, the thread's guild from
//! `GET /channels/{thread}` unless `[discord] guild` names it), never from a cache.

use std::sync::Arc;

use sandpiper_agent::workstream::{KeyPlatform, WorkstreamKey};
use serenity::all::{Channel, ChannelId, GuildId, UserId};

use super::Bot;
use crate::membership::Membership;

/// Discord as a [`Membership`].
pub(super) struct DiscordMembership(pub(super) Arc<Bot>);

/// A non-zero Discord id.
fn snowflake(id: &str) -> Result<u64, String> {
    id.parse::<u64>()
        .ok()
        .filter(|n| *n != 0)
        .ok_or_else(|| format!("`{id}` is not a Discord id"))
}

impl DiscordMembership {
    /// The guild `channel` (a thread) is in.
    async fn guild_of(&self, channel: u64) -> Result<GuildId, String> {
        if let Some(guild) = self.0.config.guild {
            return Ok(GuildId::new(guild.get()));
        }
        let id = std::num::NonZeroU64::new(channel)
            .map(ChannelId::from)
            .ok_or("that is not a Discord thread")?;
        match self.0.http().get_channel(id).await {
            Ok(Channel::Guild(c)) => Ok(c.guild_id),
            Ok(_) => Err("that thread is not in a Discord server".into()),
            Err(e) => Err(format!("Discord did not say where the thread is ({e})")),
        }
    }
}

#[async_trait::async_trait]
impl Membership for DiscordMembership {
    fn platform(&self) -> KeyPlatform {
        KeyPlatform::Discord
    }

    fn approver_roles(&self) -> &[String] {
        &self.0.config.approver_roles
    }

    fn thread_access(&self) -> crate::config::ThreadAccess {
        self.0.config.thread_access
    }

    async fn roles_of(
        &self,
        user: &str,
        workstream: &WorkstreamKey,
        _candidates: &[String],
    ) -> Result<Vec<String>, String> {
        let WorkstreamKey::Discord { channel } = workstream.root() else {
            return Ok(Vec::new());
        };
        let guild = self.guild_of(*channel).await?;
        let user = UserId::new(snowflake(user)?);
        match self.0.http().get_member(guild, user).await {
            Ok(member) => Ok(super::interactions::roles(Some(&member))),
            Err(e) => Err(format!("Discord did not say which roles you hold ({e})")),
        }
    }
}
