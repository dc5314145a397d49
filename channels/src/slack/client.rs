//! The Web API as the Slack channel uses it: one slack-morphism client on an https-or-http
//! connector (so `[slack] api_base_url` can point at a test double), every call retried on
//! HTTP 429 after Slack's `Retry-After`, and small caches for display names and user groups.
//!
//! Pacing is ours, not slack-morphism's throttler: its `chat.postMessage` limit is one per
//! second for the whole process, while Slack's is per channel. The stream renderer already
//! spaces edits by `stream_interval`; when Slack still says 429 we wait as told and retry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;

use super::SlackError;

/// The connector type behind the client.
pub(crate) type Connector = SlackClientHyperHttpsConnector;
/// The slack-morphism client.
pub(crate) type Client = SlackClient<Connector>;

/// How often a call is retried after a 429.
const MAX_RETRIES: usize = 4;
/// Longest `Retry-After` we honour per attempt.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// How long user group memberships are trusted.
const GROUP_TTL: Duration = Duration::from_secs(60);
/// Most display names remembered.
const MAX_NAMES: usize = 4096;

/// A Web API call failed (after retries); callers log it and go on.
#[derive(Debug, Clone, thiserror::Error)]
#[error("slack {method}: {message}")]
pub(crate) struct ApiError {
    method: &'static str,
    message: String,
}

/// What went wrong, in words: a transport failure's causes, one after the other
/// (`cannot reach Slack: client error (Connect): tcp connect error: Connection refused`),
/// instead of slack-morphism's debug dump of them.
fn describe(e: &SlackClientError) -> String {
    let SlackClientError::HttpProtocolError(protocol) = e else {
        return e.to_string();
    };
    let Some(cause) = &protocol.cause else {
        return "cannot reach Slack".into();
    };
    let mut text = format!("cannot reach Slack: {cause}");
    let mut source = cause.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// A message's content: the fallback/notification `text` (mrkdwn) and optional blocks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Content {
    /// mrkdwn text.
    pub text: String,
    /// Block Kit blocks as JSON (`None`: text only).
    pub blocks: Option<Value>,
}

impl Content {
    /// Text only.
    pub(super) fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            blocks: None,
        }
    }

    fn to_slack(&self) -> SlackMessageContent {
        let mut content = SlackMessageContent::new().with_text(self.text.clone());
        if let Some(blocks) = &self.blocks {
            match serde_json::from_value::<Vec<SlackBlock>>(blocks.clone()) {
                Ok(blocks) => content = content.with_blocks(blocks),
                Err(e) => tracing::warn!(error = %e, "dropping blocks slack-morphism cannot model"),
            }
        }
        content
    }
}

/// The bot's Web API access.
pub(crate) struct Api {
    client: Arc<Client>,
    token: SlackApiToken,
    names: Mutex<HashMap<String, SlackNames>>,
    groups: Mutex<HashMap<String, (Instant, Vec<String>)>>,
    /// Counts retries for `/metrics`.
    metrics: sandpiper_agent::metrics::Metrics,
}

/// Builds the client for `api_base_url` (plain `http://` allowed for a local double).
pub(crate) fn client(api_base_url: &str) -> Result<Arc<Client>, SlackError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| SlackError::Connect(format!("TLS roots: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let base = api_base_url.trim_end_matches('/');
    let connector = SlackClientHyperConnector::with_connector(https).with_slack_api_url(base);
    Ok(Arc::new(SlackClient::new(connector)))
}

/// A token value as slack-morphism wants it.
pub(crate) fn token(value: &str) -> SlackApiToken {
    SlackApiToken::new(SlackApiTokenValue::new(value.to_owned()))
}

/// Runs `call` until it is not rate limited (or retries run out).
macro_rules! retrying {
    ($api:expr, $method:literal, $call:expr) => {{
        let mut attempt = 0;
        loop {
            match $call.await {
                Err(SlackClientError::RateLimitError(e)) if attempt < MAX_RETRIES => {
                    attempt += 1;
                    $api.metrics.api_retry("slack");
                    let wait = e
                        .retry_after
                        .unwrap_or(Duration::from_secs(1))
                        .min(MAX_RETRY_WAIT);
                    tracing::debug!(method = $method, ?wait, "rate limited; retrying");
                    tokio::time::sleep(wait).await;
                }
                other => {
                    break other.map_err(|e| ApiError {
                        method: $method,
                        message: describe(&e),
                    });
                }
            }
        }
    }};
}

impl Api {
    pub(super) fn new(client: Arc<Client>, bot_token: &str) -> Self {
        Self {
            client,
            token: token(bot_token),
            names: Mutex::default(),
            groups: Mutex::default(),
            metrics: Default::default(),
        }
    }

    /// Counts its retries in `metrics`.
    pub(super) fn counting(mut self, metrics: sandpiper_agent::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    fn session(&self) -> SlackClientSession<'_, Connector> {
        self.client.open_session(&self.token)
    }

    /// The bot's own user id and team (`auth.test`).
    pub(super) async fn whoami(&self) -> Result<(String, Option<String>), ApiError> {
        let me = retrying!(self, "auth.test", self.session().auth_test())?;
        Ok((me.user_id.0, Some(me.team_id.0)))
    }

    /// Posts into `channel` (in `thread_ts` when given); returns the message ts.
    pub(super) async fn post(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        content: &Content,
    ) -> Result<String, ApiError> {
        let mut req = SlackApiChatPostMessageRequest::new(channel.into(), content.to_slack())
            .with_unfurl_links(false)
            .with_unfurl_media(false);
        if let Some(ts) = thread_ts {
            req = req.with_thread_ts(ts.into());
        }
        let sent = retrying!(
            self,
            "chat.postMessage",
            self.session().chat_post_message(&req)
        )?;
        Ok(sent.ts.0)
    }

    /// The DM channel with `user` (`conversations.open`), opened if needed.
    pub(super) async fn open_dm(&self, user: &str) -> Result<String, ApiError> {
        let req = SlackApiConversationsOpenRequest::new().with_users(vec![user.into()]);
        let opened = retrying!(
            self,
            "conversations.open",
            self.session().conversations_open(&req)
        )?;
        Ok(opened.channel.id.0)
    }

    /// What channel `channel` is called (`conversations.info`); `None` for a DM, which has
    /// no name.
    pub(super) async fn channel_name(&self, channel: &str) -> Result<Option<String>, ApiError> {
        let req = SlackApiConversationsInfoRequest::new(channel.into());
        let info = retrying!(
            self,
            "conversations.info",
            self.session().conversations_info(&req)
        )?;
        Ok(info.channel.name)
    }

    /// The workspace's user groups as `(id, handle)` (`usergroups.list`): what approver
    /// groups are called where people read them.
    pub(super) async fn group_handles(&self) -> Result<Vec<(String, String)>, ApiError> {
        let req = SlackApiUserGroupsListRequest::new();
        let list = retrying!(
            self,
            "usergroups.list",
            self.session().usergroups_list(&req)
        )?;
        Ok(list
            .usergroups
            .into_iter()
            .map(|g| (g.id.0, g.handle))
            .collect())
    }

    /// Replaces a message's content.
    pub(super) async fn update(
        &self,
        channel: &str,
        ts: &str,
        content: &Content,
    ) -> Result<(), ApiError> {
        let req = SlackApiChatUpdateRequest::new(channel.into(), content.to_slack(), ts.into());
        retrying!(self, "chat.update", self.session().chat_update(&req))?;
        Ok(())
    }

    /// A message only `user` sees.
    pub(super) async fn ephemeral(
        &self,
        channel: &str,
        user: &str,
        thread_ts: Option<&str>,
        text: &str,
    ) -> Result<(), ApiError> {
        let mut req = SlackApiChatPostEphemeralRequest::new(
            channel.into(),
            user.into(),
            Content::text(text).to_slack(),
        );
        if let Some(ts) = thread_ts {
            req = req.with_thread_ts(ts.into());
        }
        retrying!(
            self,
            "chat.postEphemeral",
            self.session().chat_post_ephemeral(&req)
        )?;
        Ok(())
    }

    /// Puts the reaction `name` on a message (`on`) or takes it off again.
    pub(super) async fn react(
        &self,
        channel: &str,
        ts: &str,
        name: &str,
        on: bool,
    ) -> Result<(), ApiError> {
        if on {
            let req = SlackApiReactionsAddRequest::new(channel.into(), name.into(), ts.into());
            retrying!(self, "reactions.add", self.session().reactions_add(&req))?;
        } else {
            let req = SlackApiReactionsRemoveRequest::new(name.into())
                .with_channel(channel.into())
                .with_timestamp(ts.into());
            retrying!(
                self,
                "reactions.remove",
                self.session().reactions_remove(&req)
            )?;
        }
        Ok(())
    }

    /// Opens a modal (`view` as Block Kit JSON).
    pub(super) async fn open_view(&self, trigger_id: &str, view: Value) -> Result<(), ApiError> {
        let view: SlackView = serde_json::from_value(view).map_err(|e| ApiError {
            method: "views.open",
            message: e.to_string(),
        })?;
        let req = SlackApiViewsOpenRequest::new(trigger_id.into(), view);
        retrying!(self, "views.open", self.session().views_open(&req))?;
        Ok(())
    }

    /// Uploads a text file into a thread.
    pub(super) async fn upload(
        &self,
        channel: &str,
        thread_ts: &str,
        filename: &str,
        body: Vec<u8>,
        comment: &str,
    ) -> Result<(), ApiError> {
        let announce =
            SlackApiFilesGetUploadUrlExternalRequest::new(filename.to_owned(), body.len());
        let url = retrying!(
            self,
            "files.getUploadURLExternal",
            self.session().get_upload_url_external(&announce)
        )?;
        let upload =
            SlackApiFilesUploadViaUrlRequest::new(url.upload_url, body, "text/plain".to_owned());
        retrying!(
            self,
            "files.upload",
            self.session().files_upload_via_url(&upload)
        )?;
        let complete = SlackApiFilesCompleteUploadExternalRequest::new(vec![
            SlackApiFilesComplete::new(url.file_id).with_title(filename.to_owned()),
        ])
        .with_channel_id(channel.into())
        .with_thread_ts(thread_ts.into())
        .with_initial_comment(comment.to_owned());
        retrying!(
            self,
            "files.completeUploadExternal",
            self.session().files_complete_upload_external(&complete)
        )?;
        Ok(())
    }

    /// How Slack names `user`: the member's `name` (their handle, unique in the workspace)
    /// and the name shown (the profile's display name, else the handle). Cached; when
    /// `users.info` fails, the user id stands in for both and nothing is cached.
    pub(super) async fn names(&self, user: &str) -> SlackNames {
        if let Some(names) = self.lock_names().get(user) {
            return names.clone();
        }
        let req = SlackApiUsersInfoRequest::new(user.into());
        let info = match retrying!(self, "users.info", self.session().users_info(&req)) {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(error = %e, "users.info failed; using the user id");
                return SlackNames {
                    display: user.to_owned(),
                    handle: None,
                };
            }
        };
        let handle = info.user.name.filter(|n| !n.is_empty());
        let display = info
            .user
            .profile
            .as_ref()
            .and_then(|p| p.display_name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| handle.clone())
            .unwrap_or_else(|| user.to_owned());
        let names = SlackNames { display, handle };
        let mut cache = self.lock_names();
        if cache.len() >= MAX_NAMES {
            cache.clear();
        }
        cache.insert(user.to_owned(), names.clone());
        names
    }

    fn lock_names(&self) -> std::sync::MutexGuard<'_, HashMap<String, SlackNames>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The groups among `groups` that `user` belongs to (memberships cached briefly).
    pub(super) async fn groups_of(&self, user: &str, groups: &[String]) -> Vec<String> {
        let mut member_of = Vec::new();
        for group in groups {
            if self.group_members(group).await.iter().any(|m| m == user) {
                member_of.push(group.clone());
            }
        }
        member_of
    }

    async fn group_members(&self, group: &str) -> Vec<String> {
        let cached = {
            let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            groups
                .get(group)
                .filter(|(at, _)| at.elapsed() < GROUP_TTL)
                .map(|(_, m)| m.clone())
        };
        if let Some(members) = cached {
            return members;
        }
        let req = SlackApiUserGroupsUsersListRequest::new(group.into());
        let members: Vec<String> = match retrying!(
            self,
            "usergroups.users.list",
            self.session().usergroups_users_list(&req)
        ) {
            Ok(list) => list.users.into_iter().map(|u| u.0).collect(),
            Err(e) => {
                tracing::warn!(error = %e, group, "cannot read a user group's members");
                return Vec::new();
            }
        };
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups.insert(group.to_owned(), (Instant::now(), members.clone()));
        members
    }
}

/// How Slack names a member.
#[derive(Debug, Clone)]
pub(super) struct SlackNames {
    /// The name shown: for display only.
    pub display: String,
    /// The member's `name`, unique in its workspace.
    pub handle: Option<String>,
}

impl SlackNames {
    /// The identity of `user` with these names.
    pub(super) fn identity<'a>(&'a self, user: &'a str) -> sandpiper_agent::people::Identity<'a> {
        sandpiper_agent::people::Identity {
            platform: "slack",
            platform_user_id: user,
            display_name: &self.display,
            handle: self.handle.as_deref(),
        }
    }
}
