//! The gateway websocket: HELLO, IDENTIFY → READY + GUILD_CREATE, heartbeats, RESUME with
//! replay. Sharded like Discord: IDENTIFY names `shard: [id, total]`, each shard is a session
//! of its own, and a guild's events go only to shard `(guild_id >> 22) % total` (events
//! outside a guild, DMs, to shard 0). Dispatches made while their shard has no connected
//! session wait in that shard's queue and go out, with increasing sequence numbers, once it
//! resumes or identifies again.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use axum::extract::State as AxumState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::objects;
use super::state::{State, id_of};
use super::{APP_ID, Shared};

/// How often serenity must heartbeat. Small, so tests exercise heartbeats.
const HEARTBEAT_INTERVAL_MS: u64 = 2000;

/// What a connection's writer task sends next.
#[derive(Debug)]
pub(super) enum Outbound {
    Text(String),
    Close(u16),
}

/// The authenticated connection a shard's dispatches go to.
#[derive(Debug)]
struct Live {
    connection: u64,
    tx: mpsc::UnboundedSender<Outbound>,
}

/// One shard's session and its sequence numbers.
#[derive(Debug, Default)]
struct Session {
    live: Option<Live>,
    /// Which session (counted across shards) this is; 0 before the first IDENTIFY.
    number: u64,
    seq: u64,
    /// Dispatches of this session, by sequence number, for replay on RESUME.
    sent: Vec<(u64, String)>,
    /// Dispatches made while no connection was live.
    queued: VecDeque<(String, Value)>,
}

impl Session {
    fn id(&self) -> String {
        format!("fake-session-{}", self.number)
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
}

/// The shards' sessions.
#[derive(Debug)]
pub(super) struct Gateway {
    url: String,
    connections: u64,
    sessions_started: u64,
    /// The shard count the bot last identified with (1 until it says).
    total: u32,
    shards: BTreeMap<u32, Session>,
    pub identify_count: usize,
    pub resume_count: usize,
    /// The `shard` of every IDENTIFY, in order.
    pub identified: Vec<(u32, u32)>,
    /// READY and GUILD_CREATE have been sent at least once.
    pub ready: bool,
}

/// The shard Discord sends `guild`'s events to: `(guild_id >> 22) % total`.
pub fn shard_of(guild: u64, total: u32) -> u32 {
    let shard = (guild >> 22) % u64::from(total.max(1));
    u32::try_from(shard).unwrap_or(0)
}

/// The shard an event goes to: its guild's, or 0 when it has none (DMs).
fn shard_of_event(d: &Value, total: u32) -> u32 {
    id_of(&d["guild_id"]).map_or(0, |guild| shard_of(guild, total))
}

impl Gateway {
    pub(super) fn new(url: String) -> Self {
        Self {
            url,
            connections: 0,
            sessions_started: 0,
            total: 1,
            shards: BTreeMap::new(),
            identify_count: 0,
            resume_count: 0,
            identified: Vec::new(),
            ready: false,
        }
    }

    /// Sends `t` on its shard (its `guild_id`'s) now if that shard is connected, else queues
    /// it for the shard's next RESUME/IDENTIFY.
    pub(super) fn dispatch(&mut self, t: &str, d: Value) {
        let guild = id_of(&d["guild_id"]);
        self.dispatch_in(guild, t, d);
    }

    /// [`Gateway::dispatch`] for an event about `guild` that does not name it in `guild_id`
    /// (GUILD_CREATE names it in `id`).
    pub(super) fn dispatch_in(&mut self, guild: Option<u64>, t: &str, d: Value) {
        let shard = guild.map_or(0, |g| shard_of(g, self.total));
        let session = self.shards.entry(shard).or_default();
        if session.live.is_some() {
            session.send(t, d);
        } else {
            session.queued.push_back((t.to_owned(), d));
        }
    }

    /// Closes every live connection with `code`; later dispatches queue up.
    pub(super) fn close(&mut self, code: u16) {
        for session in self.shards.values_mut() {
            if let Some(live) = session.live.take() {
                // The writer may already be gone; then the connection is closed anyway.
                let _ = live.tx.send(Outbound::Close(code));
            }
        }
    }

    fn connection_ended(&mut self, connection: u64) {
        for session in self.shards.values_mut() {
            if session
                .live
                .as_ref()
                .is_some_and(|l| l.connection == connection)
            {
                session.live = None;
            }
        }
    }

    /// The bot now shards by `total`: what waits in a queue moves to the shard it belongs
    /// to under that count.
    fn reshard(&mut self, total: u32) {
        if total == self.total {
            return;
        }
        self.total = total;
        let mut waiting: Vec<(String, Value)> = Vec::new();
        for session in self.shards.values_mut() {
            waiting.extend(session.queued.drain(..));
        }
        for (t, d) in waiting {
            let shard = shard_of_event(&d, total);
            self.shards
                .entry(shard)
                .or_default()
                .queued
                .push_back((t, d));
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
        Some(2) => identify(state, connection, tx, &frame["d"]),
        Some(6) => resume(state, connection, tx, &frame["d"]),
        Some(3 | 4 | 8) => {} // presence, voice state, member requests: nothing to answer
        op => eprintln!("fake discord: unhandled gateway op {op:?}: {text}"),
    }
}

/// IDENTIFY's `shard: [id, total]`; `(0, 1)` when absent, as Discord takes it.
fn identified_shard(d: &Value) -> Option<(u32, u32)> {
    let Some(pair) = d["shard"].as_array() else {
        return Some((0, 1));
    };
    let number = |i: usize| {
        pair.get(i)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    let (id, total) = (number(0)?, number(1)?);
    (pair.len() == 2 && total >= 1 && id < total).then_some((id, total))
}

/// A new session for the shard IDENTIFY names: READY and GUILD_CREATE for its guilds, then
/// whatever was queued for it. A bad `shard` closes with 4010, as Discord does.
fn identify(state: &mut State, connection: u64, tx: &mpsc::UnboundedSender<Outbound>, d: &Value) {
    let Some((shard, total)) = identified_shard(d) else {
        eprintln!(
            "fake discord: IDENTIFY with an invalid shard: {}",
            d["shard"]
        );
        let _ = tx.send(Outbound::Close(4010));
        return;
    };
    let guilds: Vec<u64> = state
        .guilds
        .keys()
        .copied()
        .filter(|g| shard_of(*g, total) == shard)
        .collect();
    let creates: Vec<Value> = guilds.iter().map(|g| guild_create(state, *g)).collect();
    let g = &mut state.gateway;
    g.identify_count += 1;
    g.identified.push((shard, total));
    g.reshard(total);
    g.sessions_started += 1;
    let number = g.sessions_started;
    let url = g.url.clone();
    let session = g.shards.entry(shard).or_default();
    session.number = number;
    session.seq = 0;
    session.sent.clear();
    session.live = Some(Live {
        connection,
        tx: tx.clone(),
    });
    let unavailable: Vec<Value> = guilds
        .iter()
        .map(|id| json!({ "id": id.to_string(), "unavailable": true }))
        .collect();
    let ready = json!({
        "v": 10,
        "user": objects::current_user(),
        "guilds": unavailable,
        "session_id": session.id(),
        "resume_gateway_url": url,
        "shard": [shard, total],
        "application": { "id": APP_ID.to_string(), "flags": 0 },
        "private_channels": [],
        "relationships": [],
        "presences": [],
        "geo_ordered_rtc_regions": [],
        "user_settings": {},
        "_trace": ["fake-discord"],
    });
    session.send("READY", ready);
    for guild in creates {
        session.send("GUILD_CREATE", guild);
    }
    session.flush_queue();
    g.ready = true;
}

/// Replays what the shard missed since `seq`, then its queue, then RESUMED.
fn resume(state: &mut State, connection: u64, tx: &mpsc::UnboundedSender<Outbound>, d: &Value) {
    let g = &mut state.gateway;
    let wanted = d["session_id"].as_str();
    let Some(session) = g
        .shards
        .values_mut()
        .find(|s| s.number > 0 && Some(s.id().as_str()) == wanted)
    else {
        // Not resumable: op 9 with d=false makes the bot identify again.
        let _ = tx.send(Outbound::Text(
            json!({ "op": 9, "s": null, "t": null, "d": false }).to_string(),
        ));
        return;
    };
    g.resume_count += 1;
    session.live = Some(Live {
        connection,
        tx: tx.clone(),
    });
    let seen = d["seq"].as_u64().unwrap_or(0);
    let missed: Vec<String> = session
        .sent
        .iter()
        .filter(|(s, _)| *s > seen)
        .map(|(_, f)| f.clone())
        .collect();
    for frame in missed {
        session.send_raw(frame);
    }
    session.flush_queue();
    session.send("RESUMED", json!({ "_trace": ["fake-discord"] }));
}

/// The whole guild `id`, as GUILD_CREATE carries it.
pub(super) fn guild_create(state: &State, id: u64) -> Value {
    let channel = state.guilds.get(&id).copied().unwrap_or_default();
    let channels = vec![objects::text_channel(channel, id)];
    let threads: Vec<Value> = state
        .threads
        .iter()
        .filter(|t| t.guild_id == id)
        .map(objects::thread)
        .collect();
    let members: Vec<Value> = state
        .users
        .values()
        .map(|u| objects::member(u, &state.joined_at, false))
        .collect();
    let mut guild = json!({
        "id": id.to_string(),
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
        "roles": state.roles_in(id),
        "emojis": [],
        "features": [],
        "mfa_level": 0,
        "application_id": null,
        "system_channel_id": channel.to_string(),
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
