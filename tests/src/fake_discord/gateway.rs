//! The gateway websocket: HELLO, IDENTIFY → READY + GUILD_CREATE, heartbeats, RESUME with
//! replay. Dispatches made while no session is connected wait in a queue and go out, with
//! increasing sequence numbers, once the bot resumes or identifies again.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::extract::State as AxumState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::objects;
use super::state::State;
use super::{APP_ID, CHANNEL_ID, GUILD_ID, Shared};

/// How often serenity must heartbeat. Small, so tests exercise heartbeats.
const HEARTBEAT_INTERVAL_MS: u64 = 2000;

/// What a connection's writer task sends next.
#[derive(Debug)]
pub(super) enum Outbound {
    Text(String),
    Close(u16),
}

/// The authenticated connection dispatches go to.
#[derive(Debug)]
struct Live {
    connection: u64,
    tx: mpsc::UnboundedSender<Outbound>,
}

/// The session and its sequence numbers.
#[derive(Debug)]
pub(super) struct Gateway {
    url: String,
    live: Option<Live>,
    connections: u64,
    session: u64,
    seq: u64,
    /// Dispatches of this session, by sequence number, for replay on RESUME.
    sent: Vec<(u64, String)>,
    /// Dispatches made while no session was connected.
    queued: VecDeque<(String, Value)>,
    pub identify_count: usize,
    pub resume_count: usize,
    /// READY and GUILD_CREATE have been sent at least once.
    pub ready: bool,
}

impl Gateway {
    pub(super) fn new(url: String) -> Self {
        Self {
            url,
            live: None,
            connections: 0,
            session: 0,
            seq: 0,
            sent: Vec::new(),
            queued: VecDeque::new(),
            identify_count: 0,
            resume_count: 0,
            ready: false,
        }
    }

    fn session_id(&self) -> String {
        format!("fake-session-{}", self.session)
    }

    /// Sends `t` now if a session is connected, else queues it for the next RESUME/IDENTIFY.
    pub(super) fn dispatch(&mut self, t: &str, d: Value) {
        if self.live.is_some() {
            self.send(t, d);
        } else {
            self.queued.push_back((t.to_owned(), d));
        }
    }

    fn send(&mut self, t: &str, d: Value) {
        self.seq += 1;
        let frame = json!({ "op": 0, "t": t, "s": self.seq, "d": d }).to_string();
        self.sent.push((self.seq, frame.clone()));
        self.send_raw(frame);
    }

    fn send_raw(&mut self, frame: String) {
        if let Some(live) = &self.live
            && live.tx.send(Outbound::Text(frame)).is_err()
        {
            self.live = None;
        }
    }

    fn flush_queue(&mut self) {
        while let Some((t, d)) = self.queued.pop_front() {
            self.send(&t, d);
        }
    }

    /// Closes the live connection with `code`; later dispatches queue up.
    pub(super) fn close(&mut self, code: u16) {
        if let Some(live) = self.live.take() {
            // The writer may already be gone; then the connection is closed anyway.
            let _ = live.tx.send(Outbound::Close(code));
        }
    }

    fn connection_ended(&mut self, connection: u64) {
        if self
            .live
            .as_ref()
            .is_some_and(|l| l.connection == connection)
        {
            self.live = None;
        }
    }
}

/// `GET /gateway`: upgrades to the websocket.
pub(super) async fn endpoint(
    AxumState(shared): AxumState<Arc<Shared>>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.on_upgrade(move |socket| run_connection(shared, socket))
}

async fn run_connection(shared: Arc<Shared>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let connection = {
        let mut state = shared.lock();
        state.gateway.connections += 1;
        state.gateway.connections
    };
    let hello = json!({ "op": 10, "s": null, "t": null, "d": { "heartbeat_interval": HEARTBEAT_INTERVAL_MS } });
    if sink
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(Outbound::Text(text)) => {
                    if sink.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Some(Outbound::Close(code)) => {
                    let frame = CloseFrame { code, reason: "fake discord: disconnect".into() };
                    let _ = sink.send(Message::Close(Some(frame))).await;
                    break;
                }
                None => break,
            },
            incoming = stream.next() => match incoming {
                Some(Ok(Message::Text(text))) => {
                    handle_op(&mut shared.lock(), connection, &tx, text.as_str());
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    shared.lock().gateway.connection_ended(connection);
}

/// One frame from the bot.
pub(super) fn handle_op(
    state: &mut State,
    connection: u64,
    tx: &mpsc::UnboundedSender<Outbound>,
    text: &str,
) {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        eprintln!("fake discord: gateway frame is not JSON: {text}");
        return;
    };
    match frame["op"].as_u64() {
        Some(1) => {
            let _ = tx.send(Outbound::Text(
                json!({ "op": 11, "s": null, "t": null, "d": null }).to_string(),
            ));
        }
        Some(2) => identify(state, connection, tx),
        Some(6) => resume(state, connection, tx, &frame["d"]),
        Some(3 | 4 | 8) => {} // presence, voice state, member requests: nothing to answer
        op => eprintln!("fake discord: unhandled gateway op {op:?}: {text}"),
    }
}

/// A new session: READY, GUILD_CREATE, then whatever was queued.
fn identify(state: &mut State, connection: u64, tx: &mpsc::UnboundedSender<Outbound>) {
    let g = &mut state.gateway;
    g.identify_count += 1;
    g.session += 1;
    g.seq = 0;
    g.sent.clear();
    g.live = Some(Live {
        connection,
        tx: tx.clone(),
    });
    let ready = json!({
        "v": 10,
        "user": objects::current_user(),
        "guilds": [{ "id": GUILD_ID.to_string(), "unavailable": true }],
        "session_id": g.session_id(),
        "resume_gateway_url": g.url,
        "shard": [0, 1],
        "application": { "id": APP_ID.to_string(), "flags": 0 },
        "private_channels": [],
        "relationships": [],
        "presences": [],
        "geo_ordered_rtc_regions": [],
        "user_settings": {},
        "_trace": ["fake-discord"],
    });
    g.send("READY", ready);
    let guild = guild_create(state);
    let g = &mut state.gateway;
    g.send("GUILD_CREATE", guild);
    g.ready = true;
    g.flush_queue();
}

/// Replays what the bot missed since `seq`, then the queue, then RESUMED.
fn resume(state: &mut State, connection: u64, tx: &mpsc::UnboundedSender<Outbound>, d: &Value) {
    let g = &mut state.gateway;
    if d["session_id"].as_str() != Some(g.session_id().as_str()) {
        // Not resumable: op 9 with d=false makes the bot identify again.
        let _ = tx.send(Outbound::Text(
            json!({ "op": 9, "s": null, "t": null, "d": false }).to_string(),
        ));
        return;
    }
    g.resume_count += 1;
    g.live = Some(Live {
        connection,
        tx: tx.clone(),
    });
    let seen = d["seq"].as_u64().unwrap_or(0);
    let missed: Vec<String> = g
        .sent
        .iter()
        .filter(|(s, _)| *s > seen)
        .map(|(_, f)| f.clone())
        .collect();
    for frame in missed {
        g.send_raw(frame);
    }
    g.flush_queue();
    g.send("RESUMED", json!({ "_trace": ["fake-discord"] }));
}

/// The whole guild, as GUILD_CREATE carries it.
fn guild_create(state: &State) -> Value {
    let channels = vec![objects::text_channel()];
    let threads: Vec<Value> = state.threads.iter().map(objects::thread).collect();
    let members: Vec<Value> = state
        .users
        .values()
        .map(|u| objects::member(u, &state.joined_at, false))
        .collect();
    let mut guild = json!({
        "id": GUILD_ID.to_string(),
        "name": "fake guild",
        "icon": null,
        "icon_hash": null,
        "splash": null,
        "discovery_splash": null,
        "owner_id": "1",
        "afk_timeout": 300,
        "afk_channel_id": null,
        "widget_enabled": false,
        "widget_channel_id": null,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "roles": state.roles(),
        "emojis": [],
        "features": [],
        "mfa_level": 0,
        "application_id": null,
        "system_channel_id": CHANNEL_ID.to_string(),
        "system_channel_flags": 0,
        "rules_channel_id": null,
        "max_presences": null,
        "max_members": 500_000,
        "vanity_url_code": null,
        "description": null,
        "banner": null,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "preferred_locale": "en-US",
        "public_updates_channel_id": null,
        "max_video_channel_users": 25,
        "max_stage_video_channel_users": 50,
        "nsfw_level": 0,
        "stickers": [],
        "premium_progress_bar_enabled": false,
        "safety_alerts_channel_id": null,
        "incidents_data": null,
    });
    // Two literals: one would exceed `json!`'s recursion limit.
    let gateway_only = json!({
        "joined_at": state.joined_at,
        "large": false,
        "unavailable": false,
        "member_count": members.len(),
        "voice_states": [],
        "members": members,
        "channels": channels,
        "threads": threads,
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
        "embedded_activities": [],
        "lazy": true,
    });
    if let (Some(guild), Value::Object(rest)) = (guild.as_object_mut(), gateway_only) {
        guild.extend(rest);
    }
    guild
}
