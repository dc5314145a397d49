//! The fake Discord against a real, unmodified serenity client: if these pass, the fake speaks
//! enough of the protocol for the Discord channel's end-to-end tests.

use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;
use sandpiper_tests::fake_discord::{
    BOT_ID, CHANNEL_ID, Failure, FakeDiscord, FakeThread, FakeUser,
};
use serde_json::json;
use serenity::all::{
    ActionRowComponent, ChannelId, ClientBuilder, Command, CommandOptionType, Context,
    CreateAttachment, CreateButton, CreateCommand, CreateCommandOption, CreateInteractionResponse,
    CreateInteractionResponseFollowup, CreateInteractionResponseMessage, CreateMessage,
    CreateThread, EditInteractionResponse, EventHandler, GatewayIntents, Guild, Http, HttpBuilder,
    Interaction, Message, Ready, ResumedEvent,
};
use serenity::async_trait;

use super::WAIT;

/// A minimal bot: answers mentions with "pong" in a new thread's parent, buttons with an
/// update, `/ask` ephemerally, `/slow` deferred then edited, and logs what it saw.
struct Handler {
    log: Arc<Mutex<Vec<String>>>,
}

impl Handler {
    fn note(&self, entry: String) {
        self.log.lock().expect("handler log lock").push(entry);
    }
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        let ask = CreateCommand::new("ask").description("Ask").add_option(
            CreateCommandOption::new(CommandOptionType::String, "prompt", "What to ask")
                .required(true),
        );
        let slow = CreateCommand::new("slow").description("Think first");
        Command::set_global_commands(&ctx.http, vec![ask, slow])
            .await
            .expect("serenity call against the fake");
        self.note(format!("ready:{}", ready.user.name));
    }

    async fn guild_create(&self, _ctx: Context, guild: Guild, _is_new: Option<bool>) {
        self.note(format!("guild:{}:{}", guild.name, guild.channels.len()));
    }

    async fn resume(&self, _ctx: Context, _event: ResumedEvent) {
        self.note("resumed".to_owned());
    }

    async fn message(&self, ctx: Context, msg: Message) {
        if msg.author.bot || !msg.mentions_user_id(BOT_ID) {
            return;
        }
        self.note(format!("message:{}", msg.content));
        msg.channel_id
            .say(&ctx.http, "pong")
            .await
            .expect("serenity call against the fake");
        msg.channel_id
            .create_thread_from_message(&ctx.http, msg.id, CreateThread::new("pong thread"))
            .await
            .expect("serenity call against the fake");
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        match interaction {
            Interaction::Component(click) => {
                self.note(format!("click:{}", click.data.custom_id));
                let update = CreateInteractionResponseMessage::new()
                    .content("clicked")
                    .components(vec![]);
                click
                    .create_response(&ctx.http, CreateInteractionResponse::UpdateMessage(update))
                    .await
                    .expect("serenity call against the fake");
            }
            Interaction::Command(command) if command.data.name == "slow" => {
                command
                    .defer(&ctx.http)
                    .await
                    .expect("serenity call against the fake");
                command
                    .edit_response(&ctx.http, EditInteractionResponse::new().content("done"))
                    .await
                    .expect("serenity call against the fake");
                command
                    .create_followup(
                        &ctx.http,
                        CreateInteractionResponseFollowup::new().content("more"),
                    )
                    .await
                    .expect("serenity call against the fake");
                let original = command
                    .get_response(&ctx.http)
                    .await
                    .expect("serenity call against the fake");
                self.note(format!("original:{}", original.content));
            }
            Interaction::Command(command) => {
                let prompt = command.data.options[0]
                    .value
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let reply = CreateInteractionResponseMessage::new()
                    .content(format!("secret {prompt}"))
                    .ephemeral(true);
                command
                    .create_response(&ctx.http, CreateInteractionResponse::Message(reply))
                    .await
                    .expect("serenity call against the fake");
            }
            Interaction::Modal(modal) => {
                for row in &modal.data.components {
                    for component in &row.components {
                        if let ActionRowComponent::InputText(input) = component {
                            self.note(format!(
                                "modal:{}={}",
                                input.custom_id,
                                input.value.clone().unwrap_or_default()
                            ));
                        }
                    }
                }
                let reply = CreateInteractionResponseMessage::new().content("noted");
                modal
                    .create_response(&ctx.http, CreateInteractionResponse::Message(reply))
                    .await
                    .expect("serenity call against the fake");
            }
            _ => {}
        }
    }
}

/// serenity's HTTP client pointed at the fake, as the Discord channel will build it.
fn http(discord: &FakeDiscord) -> Http {
    let _ = rustls::crypto::ring::default_provider().install_default();
    HttpBuilder::new("fake-token")
        .proxy(discord.base_url())
        .ratelimiter_disabled(true)
        .build()
}

/// A running serenity client with [`Handler`], and what the handler logged.
struct Bot {
    http: Arc<Http>,
    log: Arc<Mutex<Vec<String>>>,
    _client: tokio::task::JoinHandle<()>,
}

impl Bot {
    async fn start(discord: &FakeDiscord) -> Bot {
        let log = Arc::new(Mutex::new(Vec::new()));
        let intents = GatewayIntents::GUILDS
            | GatewayIntents::GUILD_MESSAGES
            | GatewayIntents::MESSAGE_CONTENT;
        let mut client = ClientBuilder::new_with_http(http(discord), intents)
            .event_handler(Handler { log: log.clone() })
            .await
            .expect("serenity call against the fake");
        let http = client.http.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = client.start().await {
                eprintln!("serenity client stopped: {e}");
            }
        });
        discord.wait_ready(WAIT).await;
        Bot {
            http,
            log,
            _client: task,
        }
    }

    fn logged(&self, entry: &str) -> bool {
        self.log
            .lock()
            .expect("handler log lock")
            .iter()
            .any(|e| e == entry)
    }
}

fn alice() -> FakeUser {
    FakeUser::new(4242, "alice").with_roles(&[77])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_gets_a_pong_and_a_thread_from_the_message() {
    let discord = FakeDiscord::start().await;
    let bot = Bot::start(&discord).await;
    discord
        .wait_until(WAIT, "guild_create", |_| {
            bot.logged("guild:fake guild:1").then_some(())
        })
        .await;

    let said = discord
        .user_message(CHANNEL_ID, &alice(), &format!("{} ping", discord.mention()))
        .await;
    let thread = discord
        .wait_until(WAIT, "a thread", |d| d.threads().pop())
        .await;

    assert_eq!(
        thread,
        FakeThread {
            id: said,
            parent_id: CHANNEL_ID,
            name: "pong thread".to_owned(),
            starter_message_id: Some(said),
            archived: false,
            locked: false,
            kind: 11,
            owner_id: BOT_ID,
            bot_joined: true,
        }
    );
    let contents: Vec<(u64, String)> = discord
        .messages(CHANNEL_ID)
        .into_iter()
        .map(|m| (m.author_id, m.content))
        .collect();
    assert_eq!(
        contents,
        vec![
            (4242, format!("<@{BOT_ID}> ping")),
            (BOT_ID, "pong".to_owned())
        ]
    );
    assert!(bot.logged(&format!("message:<@{BOT_ID}> ping")));
    assert!(bot.logged("ready:sandpiper"));
    let names: Vec<_> = discord
        .registered_commands()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("ask"), json!("slow")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buttons_slash_commands_and_modals_get_their_responses() {
    let discord = FakeDiscord::start().await;
    let bot = Bot::start(&discord).await;
    discord
        .wait_until(WAIT, "commands", |d| {
            (d.registered_commands().len() == 2).then_some(())
        })
        .await;
    let card = CreateMessage::new()
        .content("approve?")
        .button(CreateButton::new("ap:1:approve").label("Approve"));
    let card = ChannelId::new(CHANNEL_ID)
        .send_message(&bot.http, card)
        .await
        .expect("serenity call against the fake");

    let click = discord
        .click(CHANNEL_ID, card.id.get(), &alice(), "ap:1:approve")
        .await;
    let updated = discord
        .wait_until(WAIT, "the card updated", |d| {
            d.messages(CHANNEL_ID).into_iter().find(|m| m.edits == 1)
        })
        .await;
    assert_eq!(
        (updated.content.as_str(), updated.components.clone()),
        ("clicked", json!([]))
    );
    assert_eq!(discord.interaction_responses(click)[0]["type"], 7);

    let ask = discord
        .slash(
            CHANNEL_ID,
            &alice(),
            "ask",
            json!([{"name": "prompt", "type": 3, "value": "hi"}]),
        )
        .await;
    let secret = discord
        .wait_until(WAIT, "the ephemeral answer", |d| {
            d.messages(CHANNEL_ID)
                .into_iter()
                .find(|m| m.interaction_id == Some(ask))
        })
        .await;
    assert!(secret.is_ephemeral(), "{secret:?}");
    assert_eq!(secret.content, "secret hi");

    let slow = discord.slash(CHANNEL_ID, &alice(), "slow", json!([])).await;
    discord
        .wait_until(WAIT, "the original response", |_| {
            bot.logged("original:done").then_some(())
        })
        .await;
    let answers: Vec<(String, u64, usize)> = discord
        .messages(CHANNEL_ID)
        .into_iter()
        .filter(|m| m.interaction_id == Some(slow))
        .map(|m| (m.content, m.flags, m.edits))
        .collect();
    assert_eq!(
        answers,
        vec![("done".to_owned(), 0, 1), ("more".to_owned(), 0, 0)]
    );
    let kinds: Vec<_> = discord
        .interaction_responses(slow)
        .iter()
        .map(|r| r["type"].clone())
        .collect();
    assert_eq!(
        kinds,
        vec![json!(5), json!(null)],
        "a deferral, then a follow-up body"
    );

    discord
        .modal_submit(CHANNEL_ID, None, &alice(), "why", &[("reason", "because")])
        .await;
    discord
        .wait_until(WAIT, "the modal value", |_| {
            bot.logged("modal:reason=because").then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sent_while_disconnected_arrive_after_the_resume() {
    let discord = FakeDiscord::start().await;
    let bot = Bot::start(&discord).await;

    discord.disconnect().await;
    discord
        .user_message(
            CHANNEL_ID,
            &alice(),
            &format!("{} still there?", discord.mention()),
        )
        .await;

    discord
        .wait_until(WAIT, "pong after the resume", |d| {
            d.messages(CHANNEL_ID)
                .into_iter()
                .find(|m| m.author_id == BOT_ID)
        })
        .await;
    discord
        .wait_until(WAIT, "RESUMED", |_| bot.logged("resumed").then_some(()))
        .await;
    assert_eq!((discord.identify_count(), discord.resume_count()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_failures_reach_the_caller_and_the_next_call_succeeds() {
    let discord = FakeDiscord::start().await;
    let http = http(&discord);
    let channel = ChannelId::new(CHANNEL_ID);
    let path = format!("/channels/{CHANNEL_ID}/messages");
    discord.fail_next(
        "POST",
        &path,
        Failure::RateLimited {
            retry_after: 0.25,
            global: false,
        },
        1,
    );
    discord.fail_next("POST", &path, Failure::Status(502), 1);

    let limited = channel.say(&http, "one").await.unwrap_err();
    let serenity::Error::Http(serenity::http::HttpError::UnsuccessfulRequest(limited)) = limited
    else {
        panic!("not an HTTP error: {limited:?}");
    };
    assert_eq!(
        (limited.status_code.as_u16(), limited.error.code),
        (429, 0),
        "{limited:?}"
    );
    assert!(channel.say(&http, "two").await.is_err());
    channel
        .say(&http, "three")
        .await
        .expect("serenity call against the fake");

    let statuses: Vec<u16> = discord.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![429, 502, 200]);
    let contents: Vec<String> = discord
        .messages(CHANNEL_ID)
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(contents, vec!["three".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_recorded_with_filename_and_bytes() {
    let discord = FakeDiscord::start().await;
    let http = http(&discord);
    let message = CreateMessage::new()
        .content("see attached")
        .add_file(CreateAttachment::bytes(
            b"hello\x00bytes".to_vec(),
            "notes.txt",
        ));

    let sent = ChannelId::new(CHANNEL_ID)
        .send_message(&http, message)
        .await
        .expect("serenity call against the fake");

    assert_eq!(sent.attachments[0].filename, "notes.txt");
    let request = discord
        .requests()
        .pop()
        .expect("serenity call against the fake");
    assert_eq!(request.body["content"], "see attached");
    assert_eq!(
        request.files,
        vec![("notes.txt".to_owned(), b"hello\x00bytes".to_vec())]
    );
    assert_eq!(discord.messages(CHANNEL_ID)[0].attachments, request.files);
}
