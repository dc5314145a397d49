//! What the two providers share on the wire: one streaming endpoint. A request body is
//! encoded once, POSTed as JSON asking for an event stream (with the provider's fixed
//! headers and its secret header), retried by the [`RetryPolicy`], and its events decoded by
//! the provider's [`Decoder`](super::sse::Decoder) under one deadline.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use tokio::time::Instant;

use super::retry::{self, RetryPolicy};
use super::sse::{self, Decoder};
use super::{ModelError, ModelStream};
use crate::config::{ModelConfig, redact_url};

/// A provider's streaming endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) client: reqwest::Client,
    /// Where requests go.
    pub(crate) url: String,
    /// [`Self::url`] as errors and logs name it: userinfo and query values redacted.
    pub(crate) shown_url: String,
    /// The header carrying the key (`authorization: Bearer …`, `x-api-key: …`), marked
    /// sensitive; `None` for a local server without a key.
    pub(crate) secret: Option<(HeaderName, HeaderValue)>,
    /// Fixed headers every request carries (an API version).
    headers: &'static [(&'static str, &'static str)],
    timeout: Duration,
    pub(crate) retry: RetryPolicy,
}

impl Endpoint {
    /// The endpoint at `{base_url}{path}`; `secret` makes the key header from the configured
    /// key (the header's name and its value).
    pub(crate) fn new(
        config: &ModelConfig,
        path: &str,
        headers: &'static [(&'static str, &'static str)],
        secret: impl FnOnce(&str) -> (HeaderName, String),
    ) -> Result<Self, ModelError> {
        let client = retry::http_client(config)?;
        let url = config.url_of(path);
        let shown_url = redact_url(&url);
        let secret = config
            .api_key
            .as_ref()
            .map(|key| {
                let (name, value) = secret(key.expose());
                retry::secret_header(&value, &shown_url).map(|v| (name, v))
            })
            .transpose()?;
        Ok(Self {
            client,
            url,
            shown_url,
            secret,
            headers,
            timeout: config.timeout,
            retry: RetryPolicy::from_config(config),
        })
    }

    /// POSTs `body` and streams what `decoder` makes of the answer's events, the whole
    /// exchange (retries included) bounded by the configured timeout.
    pub(crate) async fn stream<D: Decoder>(
        &self,
        body: &impl serde::Serialize,
        decoder: D,
    ) -> Result<ModelStream, ModelError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| ModelError::Protocol(format!("cannot encode the request: {e}")))?;
        let deadline = Instant::now() + self.timeout;
        let response = retry::send(&self.retry, &self.shown_url, deadline, self.timeout, || {
            let mut builder = self
                .client
                .post(&self.url)
                .header(CONTENT_TYPE, "application/json")
                .header(ACCEPT, "text/event-stream");
            for (name, value) in self.headers {
                builder = builder.header(*name, *value);
            }
            if let Some((name, value)) = &self.secret {
                builder = builder.header(name, value.clone());
            }
            builder.body(body.clone())
        })
        .await?;
        let events = sse::decode(sse::json_events(response, &self.shown_url), decoder);
        Ok(retry::with_deadline(events, deadline, self.timeout))
    }
}
