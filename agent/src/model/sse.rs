//! Server-sent events shared by the providers: a streaming HTTP response becomes a stream of
//! JSON payloads ([`json_events`]), and a provider's [`Decoder`] turns those into
//! [`ModelEvent`]s ([`decode`]).
//!
//! Every failure (transport, bad UTF-8, bad framing, invalid JSON) becomes a [`ModelError`];
//! nothing here panics on what a server sends.

use std::collections::VecDeque;
use std::pin::Pin;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::Value;

use super::{ModelError, ModelEvent, ModelStream};

#[cfg(test)]
pub(crate) mod testing;

/// How many characters of a bad payload are quoted in an error.
const EXCERPT_CHARS: usize = 120;

/// The data of one server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SsePayload {
    /// A JSON payload and the SSE event name (`message` when the server set none).
    Json {
        /// The `event:` field.
        event: String,
        /// The parsed `data:` field.
        data: Value,
    },
    /// OpenAI's `data: [DONE]` sentinel.
    Done,
}

/// A boxed stream of SSE payloads.
pub(crate) type PayloadStream = Pin<Box<dyn Stream<Item = Result<SsePayload, ModelError>> + Send>>;

/// Reads `response` as an event stream of JSON payloads. `url` (redacted) is what transport
/// errors name.
///
/// A `200` answer with a JSON body instead of an event stream (some compatible servers do that
/// for errors) is read whole: an `error` object becomes [`ModelError::Provider`], anything else
/// a [`ModelError::Protocol`].
pub(crate) fn json_events(response: reqwest::Response, url: &str) -> PayloadStream {
    let url = url.to_owned();
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if is_json {
        return Box::pin(futures::stream::once(json_body_error(response, url)));
    }
    let events = response
        .bytes_stream()
        .eventsource()
        .map(move |item| match item {
            Ok(event) => parse_data(event.event, &event.data),
            Err(EventStreamError::Transport(e)) => Err(ModelError::Connect {
                url: url.clone(),
                message: format!(
                    "connection lost while streaming: {}",
                    error_chain(&e.without_url())
                ),
            }),
            Err(EventStreamError::Utf8(e)) => Err(ModelError::Protocol(format!(
                "the event stream is not valid UTF-8: {e}"
            ))),
            Err(EventStreamError::Parser(e)) => Err(ModelError::Protocol(format!(
                "invalid event stream near `{}`",
                excerpt(&e.input)
            ))),
        });
    Box::pin(events)
}

/// Parses the data of one event.
fn parse_data(event: String, data: &str) -> Result<SsePayload, ModelError> {
    let trimmed = data.trim();
    if trimmed == "[DONE]" {
        return Ok(SsePayload::Done);
    }
    match serde_json::from_str(trimmed) {
        Ok(data) => Ok(SsePayload::Json { event, data }),
        Err(e) => Err(ModelError::Protocol(format!(
            "invalid JSON in event data ({e}): `{}`",
            excerpt(trimmed)
        ))),
    }
}

/// Reads a JSON body that came where an event stream was expected, and explains it.
async fn json_body_error(
    response: reqwest::Response,
    url: String,
) -> Result<SsePayload, ModelError> {
    let body = response.text().await.map_err(|e| ModelError::Connect {
        url,
        message: format!(
            "connection lost while reading the answer: {}",
            error_chain(&e.without_url())
        ),
    })?;
    let message = serde_json::from_str::<Value>(&body)
        .ok()
        .as_ref()
        .and_then(|v| v.get("error"))
        .map(error_message);
    Err(match message {
        Some(message) => ModelError::Provider(message),
        None => ModelError::Protocol(format!(
            "expected an event stream, got JSON: `{}`",
            excerpt(&body)
        )),
    })
}

/// The human-readable message of a provider's `error` value (an object with `message`, or a
/// string), with its `type` when there is one.
pub(crate) fn error_message(error: &Value) -> String {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| excerpt(&error.to_string()));
    match error.get("type").and_then(Value::as_str) {
        Some(kind) if !kind.is_empty() && !message.contains(kind) => format!("{message} ({kind})"),
        _ => message,
    }
}

/// The first characters of `text`, on a character boundary, with `…` when cut.
pub(crate) fn excerpt(text: &str) -> String {
    truncate_chars(text, EXCERPT_CHARS)
}

/// `text` cut to at most `max` characters, with `…` appended when cut.
pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// An error and its sources, joined with `: ` (reqwest's own message is terse).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    message
}

/// A provider's translation of SSE payloads into model events.
pub(crate) trait Decoder: Send + 'static {
    /// Handles one payload, pushing any events to `out`. After an event
    /// [`ModelEvent::Done`] the stream ends.
    fn payload(&mut self, payload: SsePayload, out: &mut Vec<ModelEvent>)
    -> Result<(), ModelError>;

    /// The event stream ended without a `Done`: push a final `Done` or fail.
    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ModelError>;
}

struct DecodeState<D> {
    payloads: PayloadStream,
    decoder: D,
    queue: VecDeque<Result<ModelEvent, ModelError>>,
    finished: bool,
}

/// Runs `decoder` over `payloads`. The stream ends after `Done` or after the first error;
/// events produced before an error are delivered first.
pub(crate) fn decode<D: Decoder>(payloads: PayloadStream, decoder: D) -> ModelStream {
    let state = DecodeState {
        payloads,
        decoder,
        queue: VecDeque::new(),
        finished: false,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.finished {
                return None;
            }
            let mut out = Vec::new();
            let result = match st.payloads.next().await {
                Some(Ok(payload)) => st.decoder.payload(payload, &mut out),
                Some(Err(e)) => Err(e),
                None => {
                    st.finished = true;
                    st.decoder.end(&mut out)
                }
            };
            if let Some(pos) = out
                .iter()
                .position(|e| matches!(e, ModelEvent::Done { .. }))
            {
                out.truncate(pos + 1);
                st.finished = true;
            }
            st.queue.extend(out.into_iter().map(Ok));
            if let Err(e) = result {
                st.queue.push_back(Err(e));
                st.finished = true;
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::testing::{collect, serve_raw};
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    async fn payloads(body: &'static str) -> Vec<Result<SsePayload, ModelError>> {
        let base = serve_raw("text/event-stream", body).await;
        let response = reqwest::get(format!("{base}/x")).await.expect("request");
        json_events(response, "http://test").collect().await
    }

    #[tokio::test]
    async fn parses_events_names_comments_and_done() {
        let items = payloads(
            ": keep-alive\n\ndata: {\"a\":1}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\ndata: [DONE]\n\n",
        )
        .await;
        let items: Vec<SsePayload> = items.into_iter().map(|i| i.expect("ok")).collect();
        assert_eq!(
            items,
            vec![
                SsePayload::Json {
                    event: "message".into(),
                    data: json!({"a": 1})
                },
                SsePayload::Json {
                    event: "ping".into(),
                    data: json!({"type": "ping"})
                },
                SsePayload::Done,
            ]
        );
    }

    #[tokio::test]
    async fn invalid_json_is_a_protocol_error_with_excerpt() {
        let items = payloads("data: {\"a\":1}\n\ndata: this is not json\n\n").await;
        assert!(items[0].is_ok());
        match &items[1] {
            Err(ModelError::Protocol(m)) => assert!(m.contains("this is not json"), "{m}"),
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn json_body_instead_of_stream_is_explained() {
        let base = serve_raw(
            "application/json",
            "{\"error\":{\"message\":\"model not loaded\"}}",
        )
        .await;
        let response = reqwest::get(format!("{base}/x")).await.expect("request");
        let items: Vec<_> = json_events(response, "u").collect().await;
        assert!(
            matches!(&items[..], [Err(ModelError::Provider(m))] if m == "model not loaded"),
            "{items:?}"
        );
        let base = serve_raw("application/json", "{\"choices\":[]}").await;
        let response = reqwest::get(format!("{base}/x")).await.expect("request");
        let items: Vec<_> = json_events(response, "u").collect().await;
        assert!(
            matches!(&items[..], [Err(ModelError::Protocol(m))] if m.contains("choices")),
            "{items:?}"
        );
    }

    struct Echo;

    impl Decoder for Echo {
        fn payload(&mut self, p: SsePayload, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
            match p {
                SsePayload::Done => out.push(ModelEvent::Done {
                    finish_reason: None,
                }),
                SsePayload::Json { data, .. } => {
                    out.push(ModelEvent::TextDelta(data.to_string()));
                    if data.get("fail").is_some() {
                        return Err(ModelError::Provider("failed".into()));
                    }
                }
            }
            Ok(())
        }

        fn end(&mut self, _out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
            Err(ModelError::Protocol("stream ended early".into()))
        }
    }

    #[tokio::test]
    async fn decode_stops_after_done_and_after_errors() {
        let items = vec![
            Ok(SsePayload::Json {
                event: "message".into(),
                data: json!(1),
            }),
            Ok(SsePayload::Done),
            Ok(SsePayload::Json {
                event: "message".into(),
                data: json!(2),
            }),
        ];
        let (events, err) = collect(decode(Box::pin(futures::stream::iter(items)), Echo)).await;
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("1".into()),
                ModelEvent::Done {
                    finish_reason: None
                }
            ]
        );
        assert!(err.is_none());

        let items = vec![Ok(SsePayload::Json {
            event: "message".into(),
            data: json!({"fail": true}),
        })];
        let (events, err) = collect(decode(Box::pin(futures::stream::iter(items)), Echo)).await;
        assert_eq!(events.len(), 1);
        assert!(matches!(err, Some(ModelError::Provider(_))));

        let (events, err) = collect(decode(Box::pin(futures::stream::iter(vec![])), Echo)).await;
        assert!(events.is_empty());
        assert!(matches!(err, Some(ModelError::Protocol(m)) if m == "stream ended early"));
    }

    #[test]
    fn helpers_cut_on_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hi", 2), "hi");
        assert_eq!(
            error_message(&json!({"message": "Overloaded", "type": "overloaded_error"})),
            "Overloaded (overloaded_error)"
        );
        assert_eq!(error_message(&json!("plain")), "plain");
    }
}
