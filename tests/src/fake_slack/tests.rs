//! The payload builders against slack-morphism's models: every payload the fake sends must
//! deserialize into the variant the real client dispatches on. (slack-morphism's
//! `SlackSocketModeEvent` cannot be named from outside the crate: its `socket_mode` module is
//! shadowed. The envelopes themselves are covered by `tests/tests/suite/fake_slack.rs`.)

use serde_json::{Value, json};
use slack_morphism::SlackSigningSecret;
use slack_morphism::blocks::SlackStatefulView;
use slack_morphism::events::{
    SlackCommandEvent, SlackEventCallbackBody, SlackInteractionEvent, SlackPushEvent,
    SlackPushEventCallback,
};
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;

use super::state::StoredMessage;
use super::*;

/// The payload of an envelope of `kind`, parsed as `T`.
fn payload<T: serde::de::DeserializeOwned>(kind: &str, payload: Value) -> T {
    let envelope = events::envelope("e1", kind, payload, 0);
    assert_eq!(envelope["type"], kind);
    assert_eq!(envelope["accepts_response_payload"], kind != "events_api");
    serde_json::from_value(envelope["payload"].clone()).expect("a payload slack-morphism parses")
}

fn alice() -> SlackUser {
    SlackUser {
        id: "U0ALICE".to_owned(),
        name: "alice".to_owned(),
    }
}

fn push_event(event: Value) -> SlackPushEventCallback {
    payload("events_api", event_callback_json(event, "Ev1"))
}

#[test]
fn message_events_parse_as_their_variants() {
    let mention = events::app_mention(
        CHANNEL_ID,
        "U0ALICE",
        "<@U0BOT> hi",
        "1700000000.000100",
        None,
    );
    match push_event(mention).event {
        SlackEventCallbackBody::AppMention(e) => {
            assert_eq!(e.content.text.as_deref(), Some("<@U0BOT> hi"));
            assert_eq!(e.origin.ts.0, "1700000000.000100");
        }
        other => panic!("not app_mention: {other:?}"),
    }
    let reply = events::user_message(
        "D0000001",
        "U0ALICE",
        "hey",
        "1700000000.000300",
        Some("1700000000.000100"),
    );
    match push_event(reply).event {
        SlackEventCallbackBody::Message(e) => {
            assert_eq!(
                e.origin.thread_ts.map(|t| t.0).as_deref(),
                Some("1700000000.000100")
            );
            assert_eq!(e.origin.channel_type.map(|t| t.0).as_deref(), Some("im"));
        }
        other => panic!("not message: {other:?}"),
    }
    let http: SlackPushEvent =
        serde_json::from_value(event_callback_json(json!({"type": "app_mention", "user": "U1", "channel": "C1", "text": "x", "ts": "1.2", "event_ts": "1.2"}), "Ev2"))
            .expect("an event_callback body");
    assert!(matches!(http, SlackPushEvent::EventCallback(_)));
}

#[test]
fn interactions_and_commands_parse() {
    let message = StoredMessage {
        ts: "1700000000.000200".to_owned(),
        thread_ts: None,
        user: BOT_USER_ID.to_owned(),
        text: "approve?".to_owned(),
        blocks: json!([{"type": "actions", "block_id": "b1", "elements": [
            {"type": "button", "action_id": "ap:1:yes", "text": {"type": "plain_text", "text": "Yes"}, "value": "yes"}
        ]}]),
        edits: 0,
        ephemeral_for: None,
        reactions: vec![],
    };
    let click = events::block_actions(&events::Click {
        channel: CHANNEL_ID,
        message: &message,
        user: &alice(),
        action_id: "ap:1:yes",
        value: "yes",
        trigger_id: "1.T0FAKE.x",
        response_url: "http://127.0.0.1:1/response/1",
        action_ts: "1700000000.000300",
    });
    assert_eq!(click["actions"][0]["block_id"], "b1");
    match payload("interactive", click) {
        SlackInteractionEvent::BlockActions(a) => {
            assert_eq!(
                a.message
                    .expect("the message")
                    .content
                    .blocks
                    .map(|b| b.len()),
                Some(1)
            );
        }
        other => panic!("not block_actions: {other:?}"),
    }

    let view = json!({"type": "modal", "id": "V1", "team_id": TEAM_ID, "hash": "1.h", "title": {"type": "plain_text", "text": "T"}, "blocks": []});
    let submission = events::view_submission(&alice(), &view, &[("b", "a", "v")], "2.T0FAKE.y");
    assert_eq!(
        submission["view"]["state"]["values"]["b"]["a"]["value"],
        "v"
    );
    assert!(matches!(
        payload("interactive", submission),
        SlackInteractionEvent::ViewSubmission(_)
    ));

    let command = events::slash_command(&events::Command {
        channel: CHANNEL_ID,
        user: &alice(),
        command: "/sandpiper",
        text: "status",
        trigger_id: "3.T0FAKE.z",
        response_url: "http://127.0.0.1:1/response/2",
    });
    let command: SlackCommandEvent = payload("slash_commands", command);
    assert_eq!(command.text.as_deref(), Some("status"));
}

#[test]
fn opened_views_parse_as_stateful_views() {
    let mut ledger = state::Ledger::default();
    let trigger = ledger.next_trigger();
    let args = json!({"trigger_id": trigger, "view": {"type": "modal", "title": {"type": "plain_text", "text": "T"}, "blocks": []}});
    let answer = methods::answer(&mut ledger, "http://127.0.0.1:1", "views.open", &args)
        .expect("views.open");
    let _: SlackStatefulView =
        serde_json::from_value(answer["view"].clone()).expect("a stateful view");
    let again = methods::answer(&mut ledger, "http://127.0.0.1:1", "views.open", &args);
    assert_eq!(
        again,
        Err("invalid_trigger_id"),
        "a trigger id opens one view"
    );
}

#[test]
fn signatures_verify_with_slack_morphism() {
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64;
    let body = r#"{"type":"event_callback"}"#;
    let signature = sign(secret, now, body);
    SlackEventSignatureVerifier::new(&SlackSigningSecret::new(secret.to_owned()))
        .verify(&signature, body, &now.to_string())
        .expect("slack-morphism accepts the signature");
}
