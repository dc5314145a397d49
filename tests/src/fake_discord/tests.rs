//! Every object the fake sends must parse as serenity's model types: serenity silently drops a
//! gateway event it cannot deserialize, so a missing field would look like a bot that ignores
//! users. These tests parse the frames directly; `tests/tests/suite/fake_discord.rs` runs a real
//! client against the fake.

use serde_json::{Value, json};
use serenity::model::application::{Command, Interaction};
use serenity::model::channel::{Channel, GuildChannel, Message};
use serenity::model::event::{Event, GatewayEvent};
use serenity::model::guild::{Member, Role};
use serenity::model::prelude::CurrentApplicationInfo;
use tokio::sync::mpsc;

use super::gateway::{Outbound, handle_op};
use super::messages::NewMessage;
use super::*;

/// Identifies on a fake connection and returns every frame sent, parsed by serenity.
fn identify_and_collect(discord: &FakeDiscord) -> Vec<(String, GatewayEvent)> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    handle_op(&mut discord.lock(), 1, &tx, r#"{"op":2,"d":{"token":"t"}}"#);
    let mut frames = Vec::new();
    while let Ok(Outbound::Text(text)) = rx.try_recv() {
        let event: GatewayEvent =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("serenity refused {text}: {e}"));
        frames.push((text, event));
    }
    frames
}

#[tokio::test]
async fn every_dispatched_event_parses_as_serenity_expects() {
    let discord = FakeDiscord::start().await;
    let alice = FakeUser::new(42, "alice").with_roles(&[7]);
    let said = discord
        .user_message(CHANNEL_ID, &alice, &format!("{} hi", discord.mention()))
        .await;
    discord
        .click(CHANNEL_ID, said, &alice, "ap:1:approve")
        .await;
    discord
        .slash(
            CHANNEL_ID,
            &alice,
            "ask",
            json!([{"name": "prompt", "type": 3, "value": "hi"}]),
        )
        .await;
    discord
        .modal_submit(
            CHANNEL_ID,
            Some(said),
            &alice,
            "modal",
            &[("reason", "because")],
        )
        .await;
    discord
        .lock()
        .create_thread(CHANNEL_ID, Some(said), &json!({"name": "t"}))
        .expect("thread");

    let frames = identify_and_collect(&discord);
    let kinds: Vec<&str> = frames
        .iter()
        .map(|(_, e)| match e {
            GatewayEvent::Dispatch(_, Event::Ready(_)) => "READY",
            GatewayEvent::Dispatch(_, Event::GuildCreate(_)) => "GUILD_CREATE",
            GatewayEvent::Dispatch(_, Event::MessageCreate(m)) => {
                assert_eq!(
                    m.message
                        .mentions
                        .iter()
                        .map(|u| u.id.get())
                        .collect::<Vec<_>>(),
                    vec![BOT_ID]
                );
                "MESSAGE_CREATE"
            }
            GatewayEvent::Dispatch(_, Event::InteractionCreate(i)) => match &i.interaction {
                Interaction::Component(c) => {
                    assert_eq!(c.user.id.get(), 42);
                    assert_eq!(c.message.id.get(), said);
                    "component"
                }
                Interaction::Command(c) => {
                    assert_eq!(c.data.options[0].value.as_str(), Some("hi"));
                    "command"
                }
                Interaction::Modal(m) => {
                    assert_eq!(m.data.components.len(), 1);
                    "modal"
                }
                other => panic!("unexpected interaction {other:?}"),
            },
            GatewayEvent::Dispatch(_, Event::ThreadCreate(t)) => {
                assert_eq!(t.thread.id.get(), said);
                "THREAD_CREATE"
            }
            other => panic!("unexpected frame {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "READY",
            "GUILD_CREATE",
            "MESSAGE_CREATE",
            "component",
            "command",
            "modal",
            "THREAD_CREATE"
        ]
    );
    let seqs: Vec<u64> = frames
        .iter()
        .map(|(text, _)| {
            serde_json::from_str::<Value>(text).expect("json")["s"]
                .as_u64()
                .expect("s")
        })
        .collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<u64>>());
    if let GatewayEvent::Dispatch(_, Event::GuildCreate(g)) = &frames[1].1 {
        assert!(
            g.guild
                .members
                .contains_key(&serenity::model::id::UserId::new(BOT_ID))
        );
        assert_eq!(g.guild.roles.len(), 2, "@everyone and role 7");
    }
}

#[tokio::test]
async fn rest_objects_parse_as_serenity_expects() {
    let discord = FakeDiscord::start().await;
    let mut state = discord.lock();
    let files = [("a.txt".to_owned(), b"hello".to_vec())];
    let body = json!({"content": "hi", "embeds": [{"title": "t"}], "components": [{"type": 1, "components": [{"type": 2, "style": 1, "label": "ok", "custom_id": "x"}]}], "message_reference": {"message_id": "5"}});
    let new = NewMessage {
        channel_id: CHANNEL_ID,
        author_id: BOT_ID,
        body: &body,
        files: &files,
        kind: 0,
        interaction_id: Some(9),
        deferred: false,
    };
    let message: Message =
        serde_json::from_value(state.create_message(new).expect("created")).expect("Message");
    assert_eq!(
        (
            message.attachments[0].filename.as_str(),
            message.attachments[0].size
        ),
        ("a.txt", 5)
    );
    let thread: GuildChannel = serde_json::from_value(
        state
            .create_thread(CHANNEL_ID, Some(message.id.get()), &json!({"name": "n"}))
            .expect("thread"),
    )
    .expect("GuildChannel");
    assert_eq!(thread.thread_metadata.map(|m| m.archived), Some(false));
    let _: Channel =
        serde_json::from_value(state.channel_json(CHANNEL_ID).expect("channel")).expect("Channel");
    let _: Channel = serde_json::from_value(state.channel_json(thread.id.get()).expect("thread"))
        .expect("Channel");
    let _: Member = serde_json::from_value(objects::member(
        &FakeUser::new(3, "c").with_roles(&[4]),
        &state.joined_at,
        true,
    ))
    .expect("Member");
    let _: Vec<Role> =
        serde_json::from_value(Value::Array(state.roles_in(GUILD_ID))).expect("roles");
    let _: CurrentApplicationInfo =
        serde_json::from_value(objects::application()).expect("application");
    let _: serenity::model::user::CurrentUser =
        serde_json::from_value(objects::current_user()).expect("user");
    let sent = serde_json::to_value(
        serenity::builder::CreateCommand::new("ask")
            .description("Ask")
            .add_option(
                serenity::builder::CreateCommandOption::new(
                    serenity::all::CommandOptionType::String,
                    "prompt",
                    "What",
                )
                .required(true),
            ),
    )
    .expect("serialize");
    let _: Command = serde_json::from_value(objects::command(&sent, 11, None)).expect("Command");
}

#[test]
fn timestamps_are_iso_8601() {
    assert_eq!(objects::timestamp(0), "1970-01-01T00:00:00.000000+00:00");
    assert_eq!(
        objects::timestamp(1_709_251_199_123),
        "2024-02-29T23:59:59.123000+00:00"
    );
}

#[tokio::test]
async fn dms_and_admins_parse_as_serenity_expects() {
    let discord = FakeDiscord::start().await;
    let carol = FakeUser::new(43, "carol").as_admin();
    let (dm, _) = discord.dm(&carol, "hello in private").await;
    discord.slash(dm, &carol, "ask", json!([])).await;
    discord.slash(CHANNEL_ID, &carol, "memory", json!([])).await;
    let frames = identify_and_collect(&discord);
    let mut seen = Vec::new();
    for (_, frame) in &frames {
        match frame {
            GatewayEvent::Dispatch(_, Event::MessageCreate(m)) => {
                assert_eq!((m.message.guild_id, m.message.channel_id.get()), (None, dm));
                seen.push("dm message");
            }
            GatewayEvent::Dispatch(_, Event::InteractionCreate(i)) => {
                let Interaction::Command(c) = &i.interaction else {
                    panic!("a command");
                };
                assert_eq!(c.user.id.get(), 43);
                if c.channel_id.get() == dm {
                    assert!(c.guild_id.is_none() && c.member.is_none());
                    seen.push("dm command");
                } else {
                    let perms = c.member.as_ref().and_then(|m| m.permissions);
                    assert!(perms.is_some_and(|p| p.administrator()), "{perms:?}");
                    seen.push("admin command");
                }
            }
            _ => {}
        }
    }
    assert_eq!(seen, ["dm message", "dm command", "admin command"]);
    let channel: Channel =
        serde_json::from_value(discord.lock().channel_json(dm).expect("the dm")).expect("parses");
    assert!(matches!(channel, Channel::Private(p) if p.recipient.id.get() == 43));
}

/// Identifies as `shard` of `total` on connection `connection`; returns the connection's frames.
fn identify_shard(
    discord: &FakeDiscord,
    connection: u64,
    shard: u32,
    total: u32,
) -> mpsc::UnboundedReceiver<Outbound> {
    let (tx, rx) = mpsc::unbounded_channel();
    let frame = json!({"op": 2, "d": {"token": "t", "shard": [shard, total]}}).to_string();
    handle_op(&mut discord.lock(), connection, &tx, &frame);
    rx
}

/// The dispatches waiting on a connection: (event name, its guild id or "").
fn drain(rx: &mut mpsc::UnboundedReceiver<Outbound>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Ok(frame) = rx.try_recv() {
        match frame {
            Outbound::Text(text) => {
                let v: Value = serde_json::from_str(&text).expect("json frame");
                let t = v["t"].as_str().unwrap_or_default().to_owned();
                let guild = if t == "GUILD_CREATE" {
                    "id"
                } else {
                    "guild_id"
                };
                let at = v["d"][guild].as_str().unwrap_or_default().to_owned();
                out.push((t, at));
            }
            Outbound::Close(code) => out.push(("close".into(), code.to_string())),
        }
    }
    out
}

#[tokio::test]
async fn each_shard_gets_only_its_guilds_events_and_dms_go_to_shard_zero() {
    const OTHER_GUILD: u64 = 810_000_000_020_000_300;
    const OTHER_CHANNEL: u64 = 810_000_000_020_000_400;
    assert_eq!((shard_of(GUILD_ID, 2), shard_of(OTHER_GUILD, 2)), (0, 1));
    let discord = FakeDiscord::start().await;
    discord.add_guild(OTHER_GUILD, OTHER_CHANNEL);
    let mut zero = identify_shard(&discord, 1, 0, 2);
    let mut one = identify_shard(&discord, 2, 1, 2);
    let (first, other) = (GUILD_ID.to_string(), OTHER_GUILD.to_string());
    assert_eq!(
        drain(&mut zero),
        [
            ("READY".into(), String::new()),
            ("GUILD_CREATE".into(), first.clone())
        ]
    );
    assert_eq!(
        drain(&mut one),
        [
            ("READY".into(), String::new()),
            ("GUILD_CREATE".into(), other.clone())
        ]
    );
    let alice = FakeUser::new(42, "alice");
    discord
        .user_message(CHANNEL_ID, &alice, "in the first")
        .await;
    discord
        .user_message(OTHER_CHANNEL, &alice, "in the other")
        .await;
    discord.dm(&alice, "privately").await;
    assert_eq!(
        drain(&mut zero),
        [
            ("MESSAGE_CREATE".into(), first),
            ("MESSAGE_CREATE".into(), String::new())
        ]
    );
    assert_eq!(drain(&mut one), [("MESSAGE_CREATE".into(), other)]);
    assert_eq!(discord.identified_shards(), [(0, 2), (1, 2)]);
    // A shard outside the total is refused as Discord does (4010 Invalid shard).
    let mut bad = identify_shard(&discord, 3, 2, 2);
    assert_eq!(drain(&mut bad), [("close".into(), "4010".into())]);
}
