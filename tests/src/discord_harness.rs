//! The Discord channel as `sandpiper serve` runs it (the real serenity client inside
//! [`DiscordChannel`]), pointed at a [`FakeDiscord`] through `[discord] api_base_url`.

use std::time::Duration;

use sandpiper_agent::Agent;
use sandpiper_agent::config::Secret;
use sandpiper_channels::discord::DiscordChannel;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::fake_discord::{BOT_ID, CHANNEL_ID, FakeDiscord, FakeMessage, FakeUser};
use crate::harness::{self, TestConfig};

/// Generous bound for things that take milliseconds (CI machines are slow).
pub const WAIT: Duration = Duration::from_secs(20);

/// A running Discord channel against a fake Discord.
pub struct DiscordRig {
    /// The fake Discord.
    pub fake: FakeDiscord,
    /// The agent behind the channel.
    pub agent: Agent,
    config: TestConfig,
    channel: Option<DiscordChannel>,
    shutdown: CancellationToken,
}

impl DiscordRig {
    /// Starts the channel with `config` (database, model and work dir already set) and waits
    /// until it is connected.
    pub async fn start(fake: FakeDiscord, mut config: TestConfig) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        config.discord.token = Some(Secret::new("fake-bot-token"));
        config.discord.api_base_url = fake.base_url();
        config.discord.stream_interval = Duration::from_millis(100);
        config.discord.requests_per_second = 500;
        let identified = fake.identify_count();
        let registrations = command_registrations(&fake);
        let agent = harness::agent(config.clone()).await;
        let shutdown = CancellationToken::new();
        let channel =
            DiscordChannel::start(agent.clone(), config.discord.clone(), shutdown.clone())
                .await
                .expect("the Discord channel starts")
                .expect("a token is configured");
        fake.wait_until(WAIT, "the bot to identify", |f| {
            (f.identify_count() > identified).then_some(())
        })
        .await;
        fake.wait_ready(WAIT).await;
        // READY is handled (the bot knows its id) once the commands are registered: counted,
        // so a second node on the same fake waits for its own. The fake records a request
        // before its handler stores the commands, so wait for those too.
        fake.wait_until(WAIT, "slash commands registered", |f| {
            (command_registrations(f) > registrations && !f.registered_commands().is_empty())
                .then_some(())
        })
        .await;
        Self {
            fake,
            agent,
            config,
            channel: Some(channel),
            shutdown,
        }
    }

    /// Stops the channel (as a process exit would) and starts a new one on the same
    /// database, as after a restart of sandpiper.
    pub async fn restart(mut self) -> Self {
        self.stop().await;
        let fake = self.fake.clone();
        let config = self.config.clone();
        Self::start(fake, config).await
    }

    /// The running channel (its turn starter, its threads).
    pub fn channel(&self) -> &DiscordChannel {
        self.channel
            .as_ref()
            .expect("the channel runs until stopped")
    }

    /// Shuts the channel down.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(channel) = self.channel.take() {
            let drained = channel.join(WAIT).await;
            assert_eq!(drained.left, 0, "every Discord task ended at shutdown");
        }
    }

    /// `user` mentions the bot in the listened channel; returns the thread it opens.
    pub async fn mention(&self, user: &FakeUser, text: &str) -> u64 {
        let content = format!("{} {text}", self.fake.mention());
        let msg = self.fake.user_message(CHANNEL_ID, user, &content).await;
        self.fake
            .wait_until(WAIT, "a thread for the mention", |f| {
                f.threads()
                    .into_iter()
                    .find(|t| t.starter_message_id == Some(msg))
                    .map(|t| t.id)
            })
            .await
    }

    /// Messages the bot posted in `channel`, oldest first (ephemeral ones excluded).
    pub fn bot_messages(&self, channel: u64) -> Vec<FakeMessage> {
        self.fake
            .messages(channel)
            .into_iter()
            .filter(|m| m.author_id == BOT_ID && !m.is_ephemeral())
            .collect()
    }

    /// Waits for a bot message in `channel` whose content contains `needle`.
    pub async fn wait_text(&self, channel: u64, needle: &str) -> FakeMessage {
        self.fake
            .wait_until(
                WAIT,
                &format!("a bot message containing {needle:?}"),
                |_| {
                    self.bot_messages(channel)
                        .into_iter()
                        .find(|m| m.content.contains(needle))
                },
            )
            .await
    }

    /// Waits until the message `id` in `channel` says `needle`. A card is redrawn by the click's
    /// answer while the turn it released goes on, so the two race: read a card after a decision
    /// with this, never once.
    pub async fn wait_message(&self, channel: u64, id: u64, needle: &str) -> FakeMessage {
        self.fake
            .wait_until(WAIT, &format!("message {id} to say {needle:?}"), |f| {
                f.messages(channel)
                    .into_iter()
                    .find(|m| m.id == id && card_text(m).contains(needle))
            })
            .await
    }

    /// Waits for an approval card in `channel` with at least one enabled button, newest first.
    pub async fn card(&self, channel: u64) -> FakeMessage {
        self.fake
            .wait_until(WAIT, "an approval card with open buttons", |_| {
                self.bot_messages(channel)
                    .into_iter()
                    .rev()
                    .find(|m| !open_buttons(m).is_empty())
            })
            .await
    }
}

impl Drop for DiscordRig {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// How many times a bot registered its slash commands on `fake` (each READY does).
fn command_registrations(fake: &FakeDiscord) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/commands"))
        .count()
}

/// Every button on a message: (custom id, label, disabled).
pub fn buttons(message: &FakeMessage) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for row in message.components.as_array().into_iter().flatten() {
        for b in row["components"].as_array().into_iter().flatten() {
            out.push((
                b["custom_id"].as_str().unwrap_or_default().to_owned(),
                b["label"].as_str().unwrap_or_default().to_owned(),
                b["disabled"].as_bool().unwrap_or(false),
            ));
        }
    }
    out
}

/// The enabled buttons' ids.
pub fn open_buttons(message: &FakeMessage) -> Vec<String> {
    buttons(message)
        .into_iter()
        .filter(|(id, _, disabled)| !disabled && id.starts_with("ap"))
        .map(|(id, ..)| id)
        .collect()
}

/// The id of the button labelled `label` (exactly, or ending with `. label` on a batch card,
/// e.g. `2. Approve`), in call order `row` (0-based).
pub fn button(message: &FakeMessage, label: &str, row: usize) -> String {
    let numbered = format!("{}. {label}", row + 1);
    buttons(message)
        .into_iter()
        .find(|(_, l, _)| (*l == label && row == 0) || *l == numbered)
        .map(|(id, ..)| id)
        .unwrap_or_else(|| panic!("no button {label:?} (row {row}) on {:?}", buttons(message)))
}

/// The embeds' descriptions of a card, joined (what the card says about each call).
pub fn card_text(message: &FakeMessage) -> String {
    let mut out = message.content.clone();
    for e in message.embeds.as_array().into_iter().flatten() {
        out.push('\n');
        out.push_str(e["title"].as_str().unwrap_or_default());
        out.push('\n');
        out.push_str(e["description"].as_str().unwrap_or_default());
    }
    out
}

/// The text of the last interaction response that carries content.
pub fn response_text(responses: &[Value]) -> String {
    responses
        .iter()
        .rev()
        .find_map(|r| r["data"]["content"].as_str().map(str::to_owned))
        .unwrap_or_default()
}
