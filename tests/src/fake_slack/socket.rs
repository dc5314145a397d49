//! Socket Mode: the websocket behind the URL `apps.connections.open` announces. Each connection is
//! sent `hello`, then envelopes; acks are read back. An envelope goes to one connection only (the
//! oldest open one, so tests are deterministic; with spread, a seeded pick among them), or with
//! fan-out to every open one; with none open it waits for the next. With spread, an event whose
//! connection closed before acknowledging it is sent again to another, as Slack retries an
//! unacknowledged event.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use axum::extract::{State, WebSocketUpgrade};
use axum::response::Response;
use serde_json::Value;
use tokio::sync::mpsc;

use super::events;
use super::state::{Connection, Outbound, Shared};

/// How long a connection told to disconnect waits for the client to close it (and for acks
/// still in flight) before closing it itself.
const DISCONNECT_GRACE: Duration = Duration::from_secs(2);

/// `GET /socket?ticket=N`.
pub(super) async fn upgrade(State(shared): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve(socket, shared))
}

/// Sends `envelope` on one open connection (on every one with fan-out), or queues it for
/// the next connection.
pub(super) fn deliver(shared: &Shared, envelope: Value) {
    let mut ledger = shared.ledger();
    ledger.connections.retain(|c| !c.outbound.is_closed());
    if ledger.fan_out && ledger.connections.len() > 1 {
        let id = envelope["envelope_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let copies: Vec<Value> = (0..ledger.connections.len())
            .map(|n| {
                let mut copy = envelope.clone();
                if n > 0 {
                    copy["envelope_id"] = Value::String(format!("{id}-copy{n}"));
                }
                copy
            })
            .collect();
        for (connection, copy) in ledger.connections.iter().zip(&copies) {
            let _ = connection.outbound.send(Outbound::Frame(copy.to_string()));
        }
        ledger.envelopes.extend(copies);
        return;
    }
    let frame = envelope.to_string();
    ledger.envelopes.push(envelope.clone());
    while !ledger.connections.is_empty() {
        let at = ledger.pick_connection();
        let connection = &ledger.connections[at];
        if connection
            .outbound
            .send(Outbound::Frame(frame.clone()))
            .is_ok()
        {
            let (id, spread) = (connection.id, ledger.spread.is_some());
            if spread && envelope["type"] == "events_api" {
                let envelope_id = envelope["envelope_id"].as_str().unwrap_or_default();
                ledger
                    .in_flight
                    .insert(envelope_id.to_owned(), (id, envelope));
            }
            return;
        }
        ledger.connections.remove(at);
    }
    ledger.pending.push_back(frame);
}

/// Connection `id` is gone: every event it was sent and did not acknowledge goes out again
/// (a new envelope id, `retry_attempt` one more, `retry_reason` `timeout`), as Slack retries.
fn redeliver_unacknowledged(shared: &Shared, id: usize) {
    let lost: Vec<Value> = {
        let mut ledger = shared.ledger();
        let ids: Vec<String> = ledger
            .in_flight
            .iter()
            .filter(|(_, (on, _))| *on == id)
            .map(|(envelope_id, _)| envelope_id.clone())
            .collect();
        ids.iter()
            .filter_map(|envelope_id| ledger.in_flight.remove(envelope_id))
            .map(|(_, envelope)| envelope)
            .collect()
    };
    for old in lost {
        let retry = old["retry_attempt"].as_u64().unwrap_or(0) + 1;
        let envelope_id = format!(
            "{}-retry{retry}",
            old["envelope_id"].as_str().unwrap_or_default()
        );
        let envelope = events::envelope(
            &envelope_id,
            "events_api",
            old["payload"].clone(),
            u32::try_from(retry).unwrap_or(u32::MAX),
        );
        deliver(shared, envelope);
    }
}

/// Tells every open connection to disconnect; later envelopes wait for a new connection.
pub(super) fn disconnect_all(shared: &Shared) {
    let connections = std::mem::take(&mut shared.ledger().connections);
    for connection in connections {
        let _ = connection.outbound.send(Outbound::Disconnect);
    }
}

async fn serve(mut socket: WebSocket, shared: Arc<Shared>) {
    let id = {
        let mut ledger = shared.ledger();
        ledger.connection_count += 1;
        ledger.connection_count
    };
    if send(&mut socket, &events::hello()).await.is_err() {
        return;
    }
    let (outbound, mut queue) = mpsc::unbounded_channel();
    {
        let mut ledger = shared.ledger();
        let pending: Vec<String> = ledger.pending.drain(..).collect();
        for frame in pending {
            if ledger.spread.is_some() {
                let envelope: Value = serde_json::from_str(&frame).unwrap_or_default();
                if envelope["type"] == "events_api" {
                    let envelope_id = envelope["envelope_id"].as_str().unwrap_or_default();
                    ledger
                        .in_flight
                        .insert(envelope_id.to_owned(), (id, envelope));
                }
            }
            let _ = outbound.send(Outbound::Frame(frame));
        }
        ledger.connections.push(Connection { id, outbound });
        ledger.hello_count += 1;
    }
    loop {
        tokio::select! {
            () = shared.stop.cancelled() => break,
            next = queue.recv() => match next {
                Some(Outbound::Frame(frame)) => {
                    if socket.send(Message::Text(frame.into())).await.is_err() {
                        break;
                    }
                }
                Some(Outbound::Disconnect) => {
                    if send(&mut socket, &events::disconnect()).await.is_ok() {
                        let _ = tokio::time::timeout(DISCONNECT_GRACE, read_until_closed(&mut socket, &shared)).await;
                        let _ = socket.send(Message::Close(None)).await;
                    }
                    break;
                }
                None => break,
            },
            inbound = socket.recv() => match inbound {
                Some(Ok(Message::Text(text))) => record_ack(&shared, text.as_str()),
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    shared.ledger().connections.retain(|c| c.id != id);
    redeliver_unacknowledged(&shared, id);
}

/// Reads acks until the client closes the connection.
async fn read_until_closed(socket: &mut WebSocket, shared: &Shared) {
    while let Some(Ok(message)) = socket.recv().await {
        match message {
            Message::Text(text) => record_ack(shared, text.as_str()),
            Message::Close(_) => return,
            _ => {}
        }
    }
}

async fn send(socket: &mut WebSocket, json: &Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(json.to_string().into())).await
}

/// Records `{"envelope_id": …, "payload"?: …}`; anything else is reported and ignored.
fn record_ack(shared: &Shared, text: &str) {
    let parsed = serde_json::from_str::<Value>(text).ok();
    match parsed.as_ref().and_then(|v| v["envelope_id"].as_str()) {
        Some(envelope_id) => {
            let payload = parsed
                .as_ref()
                .and_then(|v| v.get("payload"))
                .filter(|p| !p.is_null())
                .cloned();
            let mut ledger = shared.ledger();
            ledger.in_flight.remove(envelope_id);
            ledger.acks.push((envelope_id.to_owned(), payload));
        }
        None => eprintln!("fake slack: unexpected Socket Mode frame from the client: {text}"),
    }
}
