//! Delivery of one notification through a gateway node: read the healthy gateways from the
//! `services` table (those connected to every platform the notification needs first), POST
//! to the first and on failure to the next; when none succeeds, try again after 1 s and 3 s
//! ([`RETRY_DELAYS`]), reading the registry afresh each time.
//!
//! The URLs come from our own registry, never from the model, so the web tools' SSRF guard
//! does not apply: gateways on loopback or a private network are the point. Requests ignore
//! any environment proxy and are bounded by [`REQUEST_TIMEOUT`].

use std::sync::OnceLock;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::notify::{ChannelType, NotifyRequest, NotifyResponse, Target, TargetStatus};
use crate::people::{NamedPerson, People, describe_named};
use crate::service_jwt::{CHANNEL_AUDIENCE, ServiceKey};
use crate::store::Store;
use crate::store::services::{ServiceRecord, ServiceRole};
use crate::tools::ToolError;

/// Pauses before the second and third rounds over the gateways.
pub const RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];
/// Longest one POST to a gateway may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a minted token lives (well under the 5 minutes the gateway accepts).
const TOKEN_LIFETIME: Duration = Duration::from_secs(60);
/// The subject of the tokens notify mints.
const SUBJECT: &str = "notify";

/// The HTTP client for gateways, built on first use (so building an agent, or a test
/// context, never needs a TLS provider). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct GatewayClient(OnceLock<reqwest::Client>);

impl GatewayClient {
    fn get(&self) -> Result<&reqwest::Client, String> {
        if let Some(client) = self.0.get() {
            return Ok(client);
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(3))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(self.0.get_or_init(|| client))
    }
}

/// Where a notification to a target goes, once resolved.
#[derive(Debug)]
pub(super) struct Resolved {
    /// The channel's platform, or every platform the user linked.
    pub(super) platforms: Vec<ChannelType>,
    /// The user a username named (sent on, so the gateway delivers to that user's own
    /// accounts, whatever the name means by then).
    pub(super) user_id: Option<String>,
}

/// Resolves `target`: a username only to the user who has exactly that handle, never to
/// someone who merely shows the name. Errors (no such user, nothing linked) go to the model,
/// naming the people who show that name so the one who asked can say which is meant.
pub(super) async fn resolve(store: &Store, target: &Target) -> Result<Resolved, ToolError> {
    let name = match target {
        Target::Channel { platform, .. } => {
            return Ok(Resolved {
                platforms: vec![*platform],
                user_id: None,
            });
        }
        Target::User(name) => name,
    };
    let fail = |e| ToolError::store(&format!("cannot look up `{name}`"), e);
    let named = People::new(store.clone()).named(name).await.map_err(fail)?;
    let user = match named.as_slice() {
        [] => {
            let showing = store.users_showing_name(name).await.map_err(fail)?;
            return Err(ToolError::model(unknown_user(name, &showing)));
        }
        [one] => one.user.clone(),
        several => return Err(ToolError::model(ambiguous_handle(name, several))),
    };
    let identities = store.identities_of(&user.id).await.map_err(fail)?;
    let platforms: Vec<ChannelType> = ChannelType::ALL
        .into_iter()
        .filter(|p| identities.iter().any(|i| i.platform == p.as_str()))
        .collect();
    if platforms.is_empty() {
        return Err(ToolError::model(format!(
            "`{name}` has no linked Discord or Slack identity to notify"
        )));
    }
    Ok(Resolved {
        platforms,
        user_id: Some(user.id),
    })
}

/// What the model hears when a name is two people's: which, and that it must ask.
fn ambiguous_handle(name: &str, several: &[NamedPerson]) -> String {
    format!(
        "not sent: `{name}` is ambiguous: it is {}. These are different people, so I do not \
         pick one: ask the person who wants it sent which one is meant, and name them by their \
         sandpiper username.",
        describe_named(several)
    )
}

/// What the model hears about a username nobody has: never a guess at who was meant.
fn unknown_user(name: &str, showing: &[crate::store::users::User]) -> String {
    let how = "a person is named by their Discord username, their Slack handle, or their \
               sandpiper username (`discord-<id>`, `slack-<id>` or `console-<name>` until its \
               owner picks one with `rename`; everyone sees theirs with /whoami)";
    if showing.is_empty() {
        return format!(
            "not sent: there is no user `{name}`; {how}. Ask the person who wants it sent for \
             the exact username."
        );
    }
    let handles: Vec<String> = showing
        .iter()
        .map(|u| format!("`{}`", u.username))
        .collect();
    format!(
        "not sent: there is no user `{name}`, and `{name}` is ambiguous: it is the display name \
         of {} ({}). Anyone can show any display name, so I do not pick one: ask the person who \
         wants it sent which username is meant; {how}.",
        if showing.len() == 1 {
            "one account".to_owned()
        } else {
            format!("{} accounts", showing.len())
        },
        handles.join(", ")
    )
}

/// What a gateway answered.
enum Answer {
    /// 200: per-target results.
    Delivered(Vec<TargetStatus>),
    /// 400 or 404: the request itself is wrong; another gateway would say the same.
    Refused(String),
}

/// One notification on its way.
pub(super) struct Delivery<'a> {
    pub(super) store: &'a Store,
    pub(super) key: &'a ServiceKey,
    pub(super) client: &'a GatewayClient,
    pub(super) request: &'a NotifyRequest,
    pub(super) platforms: &'a [ChannelType],
    pub(super) cancel: &'a CancellationToken,
}

impl Delivery<'_> {
    /// Tries the gateways (three rounds at most); the per-target results, or every target
    /// failed with the last reason.
    pub(super) async fn run(&self) -> Result<Vec<TargetStatus>, ToolError> {
        let client = self.client.get().map_err(ToolError::Model)?;
        let mut last = String::from("no healthy gateway node is registered");
        let pauses = std::iter::once(Duration::ZERO).chain(RETRY_DELAYS);
        for (round, pause) in pauses.enumerate() {
            if round > 0 {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = self.cancel.cancelled() => return Err(ToolError::Cancelled),
                }
            }
            let gateways = match self.store.healthy_services(ServiceRole::Gateway).await {
                Ok(g) => self.ordered(g),
                Err(e) => {
                    last = format!("cannot read the services registry: {e}");
                    tracing::warn!(round, error = %e, "notify: registry unreadable");
                    continue;
                }
            };
            if gateways.is_empty() {
                last = String::from("no healthy gateway node is registered");
            }
            for gateway in gateways {
                let answer = tokio::select! {
                    a = self.post(client, &gateway) => a,
                    () = self.cancel.cancelled() => return Err(ToolError::Cancelled),
                };
                match answer {
                    Ok(Answer::Delivered(results)) => return Ok(results),
                    Ok(Answer::Refused(why)) => return Err(ToolError::Model(why)),
                    Err(why) => {
                        tracing::warn!(round, node = %gateway.id, url = %gateway.url, error = %why, "notify: gateway failed; trying the next");
                        last = format!("gateway {} failed: {why}", gateway.url);
                    }
                }
            }
        }
        Ok(self.all_failed(&last))
    }

    /// Gateways connected to every platform needed first, then the rest, each group in the
    /// registry's order.
    fn ordered(&self, gateways: Vec<ServiceRecord>) -> Vec<ServiceRecord> {
        let (mut able, rest): (Vec<_>, Vec<_>) = gateways
            .into_iter()
            .partition(|g| self.platforms.iter().all(|p| g.serves(p.as_str())));
        able.extend(rest);
        able
    }

    async fn post(
        &self,
        client: &reqwest::Client,
        gateway: &ServiceRecord,
    ) -> Result<Answer, String> {
        let token = self
            .key
            .sign(CHANNEL_AUDIENCE, SUBJECT, TOKEN_LIFETIME)
            .map_err(|e| e.to_string())?;
        let url = format!("{}/v1/api/notify", gateway.url.trim_end_matches('/'));
        let response = client
            .post(&url)
            .bearer_auth(token)
            .json(self.request)
            .send()
            .await
            .map_err(|e| without_url(&e))?;
        let status = response.status();
        let body = response.text().await.map_err(|e| without_url(&e))?;
        match status.as_u16() {
            200 => serde_json::from_str::<NotifyResponse>(&body)
                .map(|r| Answer::Delivered(r.results))
                .map_err(|e| format!("unreadable answer: {e}")),
            400 | 404 => Ok(Answer::Refused(error_text(&body))),
            code => Err(format!("HTTP {code}: {}", error_text(&body))),
        }
    }

    /// Every target failed with `reason`.
    fn all_failed(&self, reason: &str) -> Vec<TargetStatus> {
        let target = self.request.target();
        self.platforms
            .iter()
            .map(|p| {
                let name = match &target {
                    Ok(Target::User(u)) => format!("{p}:@{u}"),
                    Ok(Target::Channel { id, .. }) => format!("{p}:{id}"),
                    Err(_) => p.to_string(),
                };
                TargetStatus::failed(name, reason)
            })
            .collect()
    }
}

/// A reqwest error without its URL (which is ours, but keeps the text short).
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind} ({detail})")
    }
}

/// The `error` of a JSON error body, or the start of the body.
fn error_text(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.chars().take(200).collect())
}
