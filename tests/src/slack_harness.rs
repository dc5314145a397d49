//! The real Slack channel ([`SlackChannel`]) against a [`FakeSlack`] and a scripted model:
//! start it the way `sandpiper serve` does, drive it as people would, and read what it posted.

use std::time::Duration;

use sandpiper_agent::Agent;
use sandpiper_agent::config::Secret;
use sandpiper_channels::config::SlackMode;
use sandpiper_channels::slack::SlackChannel;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::fake_slack::{BOT_USER_ID, FakeSlack, FakeSlackMessage};
use crate::harness::{self, TestConfig};

/// Generous bound for things that should take milliseconds.
pub const WAIT: Duration = Duration::from_secs(20);
/// The signing secret of Events API tests.
pub const SIGNING_SECRET: &str = "fake-signing-secret";

/// Points `config` at `slack` with tokens set, fast streaming, and the given mode.
pub fn configure(config: &mut TestConfig, slack: &FakeSlack, mode: SlackMode) {
    config.slack.bot_token = Some(Secret::new("xoxb-fake"));
    config.slack.app_token = Some(Secret::new("xapp-fake"));
    config.slack.signing_secret = Some(Secret::new(SIGNING_SECRET));
    config.slack.api_base_url = format!("{}/api", slack.base_url());
    config.slack.stream_interval = Duration::from_millis(50);
    config.slack.mode = mode;
}

/// A running Slack channel and its agent.
pub struct SlackRun {
    /// The fake workspace.
    pub slack: FakeSlack,
    /// The agent behind the channel.
    pub agent: Agent,
    /// Events API routes (events mode only).
    pub router: Option<axum::Router>,
    /// The running channel (its turn starter, its threads).
    pub channel: std::sync::Arc<SlackChannel>,
    shutdown: CancellationToken,
    join: tokio::task::JoinHandle<sandpiper_channels::tasks::Drained>,
}

impl SlackRun {
    /// Builds the agent from `config` (see [`configure`]) and starts the channel.
    pub async fn start(config: TestConfig, slack: FakeSlack) -> Self {
        let socket = config.slack.mode == SlackMode::Socket;
        let slack_config = config.slack.clone();
        let agent = harness::agent(config).await;
        let shutdown = CancellationToken::new();
        let channel = SlackChannel::start(agent.clone(), slack_config, shutdown.clone())
            .await
            .expect("slack channel starts")
            .expect("slack is configured");
        let router = channel.router();
        if socket {
            slack.wait_connected(WAIT).await;
        }
        let channel = std::sync::Arc::new(channel);
        let joined = channel.clone();
        let join = tokio::spawn(async move { joined.join(WAIT).await });
        Self {
            slack,
            agent,
            router,
            channel,
            shutdown,
            join,
        }
    }

    /// Stops the channel and closes the database, as a process exit would; returns the fake.
    pub async fn stop(self) -> FakeSlack {
        self.shutdown.cancel();
        let drained = tokio::time::timeout(WAIT * 2, self.join)
            .await
            .expect("slack channel stops")
            .expect("no panic");
        assert_eq!(drained.left, 0, "every Slack task ended at shutdown");
        self.agent.store().close().await;
        self.slack
    }

    /// The bot's visible (not ephemeral) messages in the thread rooted at `root`, in order.
    pub fn thread(&self, channel: &str, root: &str) -> Vec<FakeSlackMessage> {
        self.slack
            .messages(channel)
            .into_iter()
            .filter(|m| m.user == BOT_USER_ID && m.ephemeral_for.is_none())
            .filter(|m| m.thread_ts.as_deref() == Some(root))
            .collect()
    }

    /// Waits for a bot message in the thread that satisfies `pred`.
    pub async fn wait_message(
        &self,
        channel: &str,
        root: &str,
        what: &str,
        pred: impl Fn(&FakeSlackMessage) -> bool,
    ) -> FakeSlackMessage {
        self.slack
            .wait_until(WAIT, what, |_| {
                self.thread(channel, root).into_iter().find(|m| pred(m))
            })
            .await
    }

    /// Waits for an approval card in the thread (the `n`th, from 0).
    pub async fn card(&self, channel: &str, root: &str, n: usize) -> FakeSlackMessage {
        self.slack
            .wait_until(WAIT, "an approval card", |_| {
                self.thread(channel, root)
                    .into_iter()
                    .filter(is_card)
                    .nth(n)
            })
            .await
    }

    /// Waits for an ephemeral message to `user` containing `needle`.
    pub async fn ephemeral(&self, channel: &str, user: &str, needle: &str) -> FakeSlackMessage {
        self.slack
            .wait_until(WAIT, &format!("an ephemeral {needle:?}"), |s| {
                s.messages(channel)
                    .into_iter()
                    .find(|m| m.ephemeral_for.as_deref() == Some(user) && m.text.contains(needle))
            })
            .await
    }
}

/// Whether a message is an approval card.
pub fn is_card(m: &FakeSlackMessage) -> bool {
    m.blocks.to_string().contains("ap_row:")
}

/// The action ids of a message's buttons, in order.
pub fn action_ids(m: &FakeSlackMessage) -> Vec<String> {
    let mut out = Vec::new();
    for block in m.blocks.as_array().into_iter().flatten() {
        for element in block["elements"].as_array().into_iter().flatten() {
            if let Some(id) = element["action_id"].as_str() {
                out.push(id.to_owned());
            }
        }
    }
    out
}

/// The button whose label is `label`: its action id and value.
pub fn button(m: &FakeSlackMessage, label: &str) -> (String, String) {
    for block in m.blocks.as_array().into_iter().flatten() {
        for element in block["elements"].as_array().into_iter().flatten() {
            if element["text"]["text"] == label {
                return (
                    element["action_id"].as_str().unwrap_or_default().to_owned(),
                    element["value"].as_str().unwrap_or_default().to_owned(),
                );
            }
        }
    }
    panic!("no button {label:?} in {}", m.blocks);
}

/// `value` as pretty JSON with request ids (`ap_<32 hex>`) and clock times (`at 14:03 UTC`)
/// replaced, for snapshots.
pub fn redacted(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut ids: Vec<String> = Vec::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(pos) = rest.find("ap_") {
        out.push_str(&rest[..pos]);
        let candidate = &rest[pos + 3..];
        let hex: String = candidate
            .chars()
            .take_while(|c| c.is_ascii_hexdigit())
            .collect();
        if hex.len() == 32 {
            let n = match ids.iter().position(|i| *i == hex) {
                Some(n) => n,
                None => {
                    ids.push(hex.clone());
                    ids.len() - 1
                }
            };
            out.push_str(&format!("ap_<request {}>", n + 1));
            rest = &candidate[32..];
        } else {
            out.push_str("ap_");
            rest = candidate;
        }
    }
    out.push_str(rest);
    redact_times(&out)
}

fn redact_times(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find(" at ") {
        let after = &rest[pos + 4..];
        let clock = after.get(..9).unwrap_or_default();
        let b = clock.as_bytes();
        let is_time = b.len() == 9
            && b[2] == b':'
            && clock.ends_with(" UTC")
            && b[..2].iter().chain(&b[3..5]).all(u8::is_ascii_digit);
        out.push_str(&rest[..pos]);
        if is_time {
            out.push_str(" at <time> UTC");
            rest = &after[9..];
        } else {
            out.push_str(" at ");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
