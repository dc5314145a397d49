//! The fake Slack against the real slack-morphism client: Socket Mode events, interactions and
//! slash commands reach plain-`fn` callbacks, which answer through the Web API; acks, reconnects,
//! rate-limit retries and file uploads behave as on Slack.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use sandpiper_tests::fake_slack::{
    BOT_USER_ID, CHANNEL_ID, FakeSlack, FakeSlackMessage, SlackUser,
};
use serde_json::{Value, json};
use slack_morphism::prelude::*;

use super::WAIT;

type Connector = SlackClientHyperHttpsConnector;
type Client = SlackClient<Connector>;

/// What the callbacks need: they are plain `fn`s, so it travels as listener user state.
struct Bot {
    token: SlackApiToken,
}

fn token(value: &str) -> SlackApiToken {
    SlackApiToken::new(SlackApiTokenValue::new(value.to_owned()))
}

/// The real client pointed at the fake, optionally with rate control (which retries 429s).
fn client(slack: &FakeSlack, rate_control: bool) -> Arc<Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .expect("native roots")
        .https_or_http()
        .enable_http1()
        .build();
    let mut connector = SlackClientHyperConnector::with_connector(https)
        .with_slack_api_url(&format!("{}/api", slack.base_url()));
    if rate_control {
        connector =
            connector.with_rate_control(SlackApiRateControlConfig::new().with_max_retries(3));
    }
    Arc::new(SlackClient::new(connector))
}

/// A Socket Mode listener with the callbacks below, connected to the fake.
async fn listen(
    slack: &FakeSlack,
    config: SlackClientSocketModeConfig,
) -> SlackClientSocketModeListener<Connector> {
    let client = client(slack, false);
    let callbacks = SlackSocketModeListenerCallbacks::new()
        .with_push_events(on_push)
        .with_interaction_events(on_interaction)
        .with_command_events(on_command);
    let environment = Arc::new(
        SlackClientEventsListenerEnvironment::new(client)
            .with_error_handler(on_error)
            .with_user_state(Bot {
                token: token("xoxb-fake"),
            }),
    );
    let listener = SlackClientSocketModeListener::new(&config, environment, callbacks);
    listener
        .listen_for(&token("xapp-fake"))
        .await
        .expect("listen_for");
    listener.start().await;
    slack.wait_connected(WAIT).await;
    listener
}

async fn bot_token(states: &SlackClientEventsUserState) -> SlackApiToken {
    let states = states.read().await;
    states
        .get_user_state::<Bot>()
        .expect("Bot state")
        .token
        .clone()
}

fn blocks(json: Value) -> Vec<SlackBlock> {
    serde_json::from_value(json).expect("blocks")
}

/// A mention gets a threaded reply with an Approve button.
async fn on_push(
    event: SlackPushEventCallback,
    client: Arc<Client>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    if let SlackEventCallbackBody::AppMention(mention) = event.event {
        let token = bot_token(&states).await;
        let content = SlackMessageContent::new()
            .with_text(format!("echo: {}", mention.content.text.unwrap_or_default()))
            .with_blocks(blocks(json!([
                {"type": "section", "block_id": "s", "text": {"type": "mrkdwn", "text": "Approve?"}},
                {"type": "actions", "block_id": "a", "elements": [
                    {"type": "button", "action_id": "ap:1:approve", "text": {"type": "plain_text", "text": "Approve"}, "value": "yes"}
                ]}
            ])));
        let request = SlackApiChatPostMessageRequest::new(mention.channel, content)
            .with_thread_ts(mention.origin.ts);
        client
            .open_session(&token)
            .chat_post_message(&request)
            .await?;
    }
    Ok(())
}

/// A click replaces the buttons with who clicked; a form submission is echoed to the channel.
async fn on_interaction(
    event: SlackInteractionEvent,
    client: Arc<Client>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let token = bot_token(&states).await;
    let session = client.open_session(&token);
    match event {
        SlackInteractionEvent::BlockActions(click) => {
            let SlackInteractionActionContainer::Message(container) = click.container else {
                return Ok(());
            };
            let user = click.user.map(|u| u.id.0).unwrap_or_default();
            let action = click.actions.unwrap_or_default().remove(0).action_id.0;
            let content = SlackMessageContent::new()
                .with_text(format!("{action} by {user}"))
                .with_blocks(vec![]);
            let channel = container.channel_id.expect("channel_id");
            session
                .chat_update(&SlackApiChatUpdateRequest::new(
                    channel,
                    content,
                    container.message_ts,
                ))
                .await?;
        }
        SlackInteractionEvent::ViewSubmission(submission) => {
            let state = submission.view.state_params.state.expect("state");
            let value = state.values[&SlackBlockId::new("reason".to_owned())]
                [&SlackActionId::new("reason_input".to_owned())]
                .value
                .clone()
                .unwrap_or_default();
            let content = SlackMessageContent::new().with_text(format!("submitted: {value}"));
            session
                .chat_post_message(&SlackApiChatPostMessageRequest::new(
                    CHANNEL_ID.into(),
                    content,
                ))
                .await?;
        }
        _ => {}
    }
    Ok(())
}

/// `/sandpiper form` opens a modal; anything else is answered with an ephemeral message and an
/// ack payload.
async fn on_command(
    event: SlackCommandEvent,
    client: Arc<Client>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<SlackCommandEventResponse> {
    let token = bot_token(&states).await;
    let session = client.open_session(&token);
    let text = event.text.unwrap_or_default();
    if text == "form" {
        let view: SlackView = serde_json::from_value(json!({
            "type": "modal",
            "callback_id": "why",
            "title": {"type": "plain_text", "text": "Why?"},
            "submit": {"type": "plain_text", "text": "Send"},
            "blocks": [{"type": "input", "block_id": "reason", "label": {"type": "plain_text", "text": "Reason"},
                        "element": {"type": "plain_text_input", "action_id": "reason_input"}}]
        }))?;
        session
            .views_open(&SlackApiViewsOpenRequest::new(event.trigger_id, view))
            .await?;
    } else {
        let content =
            SlackMessageContent::new().with_text(format!("ran {} {text}", event.command.0));
        session
            .chat_post_ephemeral(&SlackApiChatPostEphemeralRequest::new(
                event.channel_id,
                event.user_id,
                content,
            ))
            .await?;
    }
    Ok(SlackCommandEventResponse::new(
        SlackMessageContent::new().with_text("on it".to_owned()),
    ))
}

fn on_error(
    err: Box<dyn std::error::Error + Send + Sync>,
    _: Arc<Client>,
    _: SlackClientEventsUserState,
) -> HttpStatusCode {
    eprintln!("slack listener error: {err}");
    HttpStatusCode::OK
}

fn alice(slack: &FakeSlack) -> SlackUser {
    slack.user("U0ALICE", "alice")
}

fn bot_message(
    ts: &str,
    thread_ts: Option<&str>,
    text: &str,
    blocks: Value,
    edits: usize,
) -> FakeSlackMessage {
    FakeSlackMessage {
        ts: ts.to_owned(),
        thread_ts: thread_ts.map(str::to_owned),
        user: BOT_USER_ID.to_owned(),
        text: text.to_owned(),
        blocks,
        edits,
        ephemeral_for: None,
        reactions: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mention_click_command_and_form_round_trip() {
    let slack = FakeSlack::start().await;
    let _listener = listen(&slack, SlackClientSocketModeConfig::new()).await;
    let alice = alice(&slack);

    let root = slack.app_mention(CHANNEL_ID, &alice, "hello").await;
    let reply = slack
        .wait_until(WAIT, "the threaded reply", |s| {
            s.messages(CHANNEL_ID)
                .into_iter()
                .find(|m| m.user == BOT_USER_ID)
        })
        .await;
    let posted = &slack.calls("chat.postMessage")[0];
    assert_eq!(posted["thread_ts"], root.as_str());
    assert_eq!(
        reply,
        bot_message(
            &reply.ts,
            Some(&root),
            "echo: <@U0BOT> hello",
            posted["blocks"].clone(),
            0
        )
    );

    slack
        .click(CHANNEL_ID, &reply.ts, &alice, "ap:1:approve", "yes")
        .await;
    let clicked = slack
        .wait_until(WAIT, "the updated reply", |s| {
            s.messages(CHANNEL_ID).into_iter().find(|m| m.edits == 1)
        })
        .await;
    assert_eq!(
        clicked,
        bot_message(
            &reply.ts,
            Some(&root),
            "ap:1:approve by U0ALICE",
            json!([]),
            1
        )
    );

    slack
        .slash_command(CHANNEL_ID, &alice, "/sandpiper", "status")
        .await;
    let ephemeral = slack
        .wait_until(WAIT, "the ephemeral answer", |s| {
            s.messages(CHANNEL_ID)
                .into_iter()
                .find(|m| m.ephemeral_for.is_some())
        })
        .await;
    assert_eq!(ephemeral.text, "ran /sandpiper status");
    assert_eq!(ephemeral.ephemeral_for.as_deref(), Some("U0ALICE"));

    slack
        .slash_command(CHANNEL_ID, &alice, "/sandpiper", "form")
        .await;
    let view = slack
        .wait_until(WAIT, "the modal", |s| s.opened_views().into_iter().next())
        .await;
    assert_eq!(view["callback_id"], "why");
    let view_id = view["id"].as_str().expect("view id").to_owned();
    let updated: SlackView = serde_json::from_value(json!({
        "type": "modal", "callback_id": "why", "title": {"type": "plain_text", "text": "Why, really?"}, "blocks": view["blocks"]
    }))
    .expect("modal");
    let session_client = client(&slack, false);
    let bot = token("xoxb-fake");
    let update = SlackApiViewsUpdateRequest::new(updated)
        .with_view_id(view_id.clone().into())
        .with_hash(view["hash"].as_str().expect("hash").to_owned());
    let answer = session_client
        .open_session(&bot)
        .views_update(&update)
        .await
        .expect("views.update");
    assert_eq!(answer.view.state_params.id.0, view_id);
    let stale = session_client
        .open_session(&bot)
        .views_update(&update)
        .await;
    assert!(stale.is_err(), "an old hash conflicts: {stale:?}");
    assert_eq!(
        slack.view(&view_id).expect("view")["title"]["text"],
        "Why, really?"
    );
    slack
        .view_submission(&alice, view, &[("reason", "reason_input", "because")])
        .await;
    slack
        .wait_until(WAIT, "the submission echo", |s| {
            s.messages(CHANNEL_ID)
                .into_iter()
                .find(|m| m.text == "submitted: because")
        })
        .await;

    // Every envelope is acked once, after its callback; slash command acks carry the reply.
    let envelopes = slack.envelopes();
    let ids: Vec<String> = envelopes
        .iter()
        .map(|e| e["envelope_id"].as_str().expect("id").to_owned())
        .collect();
    let acks = slack
        .wait_until(WAIT, "all acks", |s| {
            Some(s.acks()).filter(|a| a.len() == ids.len())
        })
        .await;
    assert_eq!(acks, ids);
    let kinds: Vec<&str> = envelopes
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        kinds,
        [
            "events_api",
            "interactive",
            "slash_commands",
            "slash_commands",
            "interactive"
        ]
    );
    assert_eq!(slack.ack_payload(&ids[2]), Some(json!({"text": "on it"})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sent_while_reconnecting_arrive_on_the_new_connection() {
    let slack = FakeSlack::start().await;
    let config = SlackClientSocketModeConfig::new().with_max_connections_count(1);
    let _listener = listen(&slack, config).await;
    let alice = alice(&slack);
    assert_eq!(slack.connection_count(), 1);

    slack.disconnect().await;
    let root = slack
        .app_mention(CHANNEL_ID, &alice, "are you there?")
        .await;
    slack
        .wait_until(WAIT, "a reply after the reconnect", |s| {
            s.messages(CHANNEL_ID)
                .into_iter()
                .find(|m| m.thread_ts.as_deref() == Some(&root))
        })
        .await;
    assert_eq!(slack.connection_count(), 2);
    assert_eq!(slack.calls("apps.connections.open").len(), 2);

    // A redelivery keeps the event id and says why; the client acks it again.
    slack.redeliver_last_event().await;
    let envelopes = slack.envelopes();
    let (first, retry) = (&envelopes[0], &envelopes[1]);
    assert_eq!(retry["payload"]["event_id"], first["payload"]["event_id"]);
    assert_ne!(retry["envelope_id"], first["envelope_id"]);
    assert_eq!(
        (
            retry["retry_attempt"].clone(),
            retry["retry_reason"].clone()
        ),
        (json!(1), json!("timeout"))
    );
    slack
        .wait_until(WAIT, "two acks", |s| {
            Some(()).filter(|()| s.acks().len() == 2)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimited_post_is_retried_after_retry_after() {
    let slack = FakeSlack::start().await;
    let client = client(&slack, true);
    let token = token("xoxb-fake");
    let session = client.open_session(&token);
    slack.fail_next("chat.postMessage", 1, 1);

    let started = Instant::now();
    let content = SlackMessageContent::new().with_text("hi".to_owned());
    let posted = session
        .chat_post_message(&SlackApiChatPostMessageRequest::new(
            CHANNEL_ID.into(),
            content,
        ))
        .await
        .expect("posted after one retry");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "retried after {:?}",
        started.elapsed()
    );
    assert_eq!(
        slack.calls("chat.postMessage").len(),
        2,
        "one 429, one retry"
    );
    assert_eq!(
        slack.messages(CHANNEL_ID),
        [bot_message(&posted.ts.0, None, "hi", Value::Null, 0)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_api_answers_parse_in_the_real_client() {
    let slack = FakeSlack::start().await;
    slack.set_usergroup("S0ADMINS", &["U0ALICE"]);
    let alice = alice(&slack);
    let client = client(&slack, false);
    let token = token("xoxb-fake");
    let session = client.open_session(&token);

    let auth = session.auth_test().await.expect("auth.test");
    assert_eq!(auth.user_id.0, BOT_USER_ID);
    let user = session
        .users_info(&SlackApiUsersInfoRequest::new(alice.id.clone().into()))
        .await
        .expect("users.info");
    assert_eq!(user.user.name.as_deref(), Some("alice"));
    let group = session
        .usergroups_users_list(&SlackApiUserGroupsUsersListRequest::new("S0ADMINS".into()))
        .await
        .expect("usergroups.users.list");
    assert_eq!(group.users, [SlackUserId::new("U0ALICE".to_owned())]);
    let dm = session
        .conversations_open(
            &SlackApiConversationsOpenRequest::new().with_users(vec![alice.id.clone().into()]),
        )
        .await
        .expect("conversations.open");
    assert_eq!(dm.channel.id.0, slack.dm_channel(&alice.id));
    let info = session
        .conversations_info(&SlackApiConversationsInfoRequest::new(CHANNEL_ID.into()))
        .await
        .expect("conversations.info");
    assert_eq!(info.channel.name.as_deref(), Some("general"));

    let content = SlackMessageContent::new().with_text("working".to_owned());
    let posted = session
        .chat_post_message(&SlackApiChatPostMessageRequest::new(
            dm.channel.id.clone(),
            content,
        ))
        .await
        .expect("chat.postMessage");
    session
        .reactions_add(&SlackApiReactionsAddRequest::new(
            dm.channel.id.clone(),
            "eyes".into(),
            posted.ts.clone(),
        ))
        .await
        .expect("reactions.add");
    session
        .assistant_threads_set_status(&SlackApiAssistantThreadsSetStatusRequest::new(
            dm.channel.id.clone(),
            "thinking".to_owned(),
            posted.ts.clone(),
        ))
        .await
        .expect("assistant.threads.setStatus");
    assert_eq!(slack.messages(&dm.channel.id.0)[0].reactions, ["eyes"]);
    session
        .chat_delete(&SlackApiChatDeleteRequest::new(
            dm.channel.id.clone(),
            posted.ts.clone(),
        ))
        .await
        .expect("chat.delete");
    assert_eq!(slack.messages(&dm.channel.id.0), []);

    // Files: announce, upload the bytes, share into a thread.
    let bytes = b"col\n1\n".to_vec();
    let url = session
        .get_upload_url_external(&SlackApiFilesGetUploadUrlExternalRequest::new(
            "out.csv".to_owned(),
            bytes.len(),
        ))
        .await
        .expect("files.getUploadURLExternal");
    session
        .files_upload_via_url(&SlackApiFilesUploadViaUrlRequest::new(
            url.upload_url,
            bytes.clone(),
            "text/csv".to_owned(),
        ))
        .await
        .expect("upload");
    let done = session
        .files_complete_upload_external(
            &SlackApiFilesCompleteUploadExternalRequest::new(vec![SlackApiFilesComplete::new(
                url.file_id.clone(),
            )])
            .with_channel_id(CHANNEL_ID.into())
            .with_thread_ts("1700000000.000100".into()),
        )
        .await
        .expect("files.completeUploadExternal");
    assert_eq!(done.files[0].id, url.file_id);
    assert_eq!(
        slack.uploaded_files(),
        [(
            "out.csv".to_owned(),
            bytes,
            Some(CHANNEL_ID.to_owned()),
            Some("1700000000.000100".to_owned())
        )]
    );
}
