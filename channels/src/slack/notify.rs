//! Slack's part of notifications ([`crate::notify`]): opening a DM (`conversations.open`),
//! posting with the text escaped (so `<!channel>`, `<!here>` and group mentions stay text),
//! and a reply in a notification's thread continuing the workstream that sent it.

use std::sync::Arc;

use sandpiper_agent::notify::ChannelType;

use super::Ctx;
use super::client::Content;
use super::mrkdwn::escape;
use crate::notify::{NotifyPlatform, PostError, Reply, ReplyOutcome};

/// Slack as a [`NotifyPlatform`].
pub(super) struct SlackNotify(pub(super) Arc<Ctx>);

/// The notification's mrkdwn: the title in bold, then the message; both escaped, so no
/// control sequence (`<!channel>`, `<!subteam^…>`, `<@U…>`) survives.
pub(crate) fn render(title: Option<&str>, message: &str) -> String {
    match title {
        Some(title) => format!("*{}*\n{}", escape(title).replace('*', "∗"), escape(message)),
        None => escape(message),
    }
}

#[async_trait::async_trait]
impl NotifyPlatform for SlackNotify {
    fn platform(&self) -> ChannelType {
        ChannelType::Slack
    }

    fn listens_in(&self, channel: &str) -> bool {
        self.0.admits(channel).is_ok()
    }

    async fn open_dm(&self, user: &str) -> Result<String, PostError> {
        self.0
            .api
            .open_dm(user)
            .await
            .map_err(|e| PostError(format!("cannot open a DM: {e}")))
    }

    async fn post(
        &self,
        channel: &str,
        title: Option<&str>,
        message: &str,
    ) -> Result<String, PostError> {
        self.0
            .api
            .post(channel, None, &Content::text(render(title, message)))
            .await
            .map_err(|e| PostError(e.to_string()))
    }
}

/// A DM message in the thread of `thread_ts`: continued in the workstream that sent it when
/// the thread's root is a notification. `None` when it is not (the DM rules apply).
pub(super) async fn reply_to_notification(
    ctx: &Arc<Ctx>,
    channel: &str,
    thread_ts: &str,
    slack_user: &str,
    text: &str,
) -> Option<ReplyOutcome> {
    let starters = ctx.starters.get()?;
    let ledger = ctx.agent.notifications();
    match ledger
        .find(ChannelType::Slack.as_str(), channel, thread_ts)
        .await
    {
        Ok(Some(_)) => {}
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "cannot look up notifications; the DM follows the DM rules");
            return None;
        }
    }
    let user = ctx.person(slack_user).await?;
    let text = super::mrkdwn::unescape(text);
    let reply = Reply {
        platform: ChannelType::Slack,
        channel,
        replied_to: thread_ts,
        account: slack_user,
        username: &user.username,
        text: &text,
    };
    match crate::notify::continue_from_reply(&ledger, starters, reply).await {
        Ok(outcome) => Some(outcome),
        Err(e) => Some(ReplyOutcome::Refused(format!(
            "my database did not answer ({e})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn nothing_in_a_notification_can_ping() {
        assert_eq!(
            render(Some("CI <!here>"), "<!channel> <!subteam^S1> <@U1> a & b"),
            "*CI &lt;!here&gt;*\n&lt;!channel&gt; &lt;!subteam^S1&gt; &lt;@U1&gt; a &amp; b"
        );
    }
}
