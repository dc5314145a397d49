//! Fetching a URL under the SSRF policy.
//!
//! Every hop (the first request and each redirect, at most [`MAX_REDIRECTS`]) is checked the
//! same way: the URL is parsed as a browser would (so `http://2130706433/`, `http://0177.0.0.1/`
//! and `http://0x7f.1/` are all 127.0.0.1), an IP literal is checked as it is, a host name is
//! resolved once and every address is checked. The request then goes out on a client that
//! knows only those checked addresses for that name (`resolve_to_addrs`) and whose resolver
//! refuses every other lookup, so a DNS server that answers differently the second time
//! (rebinding) is never asked a second time. No proxy is used: a proxy would resolve the name
//! itself, out of reach of the checks.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{CONTENT_TYPE, LOCATION};
use url::{Host, Url};

use super::ssrf::{Refusal, SsrfPolicy};

/// Most redirects followed for one fetch.
pub(super) const MAX_REDIRECTS: usize = 5;
/// How long connecting to one address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a fetch failed; every variant is for the model (it can try another URL).
#[derive(Debug, thiserror::Error)]
pub(super) enum FetchError {
    /// Not an http(s) URL, or not a URL at all.
    #[error("`{url}` is not a usable URL: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The target is not a public internet address.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The host name did not resolve.
    #[error("cannot resolve {host}: {message}")]
    Resolve {
        /// The host.
        host: String,
        /// The resolver's message.
        message: String,
    },
    /// More than [`MAX_REDIRECTS`] redirects.
    #[error("too many redirects (more than {MAX_REDIRECTS}); the last one went to {0}")]
    TooManyRedirects(String),
    /// Connecting or reading failed.
    #[error("fetching {url} failed: {message}")]
    Http {
        /// The URL of the hop that failed.
        url: String,
        /// What went wrong.
        message: String,
    },
}

/// A fetched response body, possibly cut at the size cap.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Fetched {
    /// The URL that answered (after redirects).
    pub final_url: Url,
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type` header, lower-cased, when present.
    pub content_type: Option<String>,
    /// The body bytes (at most the cap).
    pub body: Vec<u8>,
    /// Whether the body was cut at the cap.
    pub truncated: bool,
}

/// Limits of one fetch.
#[derive(Debug, Clone, Copy)]
pub(super) struct FetchLimits {
    /// Largest body read.
    pub max_bytes: usize,
}

/// Parses a URL argument: http or https only, with a host.
pub(super) fn parse_url(text: &str) -> Result<Url, FetchError> {
    let bad = |reason: &str| FetchError::BadUrl {
        url: text.to_owned(),
        reason: reason.to_owned(),
    };
    let url = Url::parse(text.trim()).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("only http:// and https:// URLs can be fetched"));
    }
    if url.host().is_none() {
        return Err(bad("it has no host"));
    }
    Ok(url)
}

/// The checked addresses a hop may connect to.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CheckedTarget {
    /// The domain to pin (`None` for an IP literal, which reqwest never resolves).
    pub domain: Option<String>,
    /// Addresses that passed the policy.
    pub addrs: Vec<SocketAddr>,
}

/// Resolves `url`'s host (once) and keeps the addresses the policy allows; refuses when
/// none is left.
pub(super) async fn check_target(
    url: &Url,
    policy: &SsrfPolicy,
) -> Result<CheckedTarget, FetchError> {
    let port = url.port_or_known_default().unwrap_or(80);
    match url.host() {
        Some(Host::Ipv4(ip)) => check_literal(url, IpAddr::V4(ip), port, policy),
        Some(Host::Ipv6(ip)) => check_literal(url, IpAddr::V6(ip), port, policy),
        Some(Host::Domain(domain)) => {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((domain, port))
                .await
                .map_err(|e| FetchError::Resolve {
                    host: domain.to_owned(),
                    message: e.to_string(),
                })?
                .collect();
            let mut first_refusal = None;
            let mut addrs = Vec::new();
            for addr in resolved {
                match policy.check(domain, addr.ip()) {
                    Ok(()) => addrs.push(addr),
                    Err(refusal) => {
                        tracing::info!(host = domain, address = %addr.ip(), "web_fetch refused a resolved address");
                        first_refusal.get_or_insert(refusal);
                    }
                }
            }
            match (addrs.is_empty(), first_refusal) {
                (false, _) => Ok(CheckedTarget {
                    domain: Some(domain.to_owned()),
                    addrs,
                }),
                (true, Some(refusal)) => Err(refusal.into()),
                (true, None) => Err(FetchError::Resolve {
                    host: domain.to_owned(),
                    message: "no addresses".into(),
                }),
            }
        }
        None => Err(FetchError::BadUrl {
            url: url.to_string(),
            reason: "it has no host".into(),
        }),
    }
}

fn check_literal(
    url: &Url,
    ip: IpAddr,
    port: u16,
    policy: &SsrfPolicy,
) -> Result<CheckedTarget, FetchError> {
    let host = url.host_str().unwrap_or_default();
    policy.check(host, ip)?;
    Ok(CheckedTarget {
        domain: None,
        addrs: vec![SocketAddr::new(ip, port)],
    })
}

/// A resolver that resolves nothing: every name the client may reach is pinned with
/// `resolve_to_addrs`, so any other lookup is a bug and must not reach DNS.
#[derive(Debug)]
struct NoLookups;

impl Resolve for NoLookups {
    fn resolve(&self, name: Name) -> Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let err: Box<dyn std::error::Error + Send + Sync> =
                format!("web_fetch resolves {name} only through its SSRF checks").into();
            Err::<Addrs, _>(err)
        })
    }
}

/// A client for one hop: no proxy, no automatic redirects, only `target`'s addresses.
fn hop_client(target: &CheckedTarget) -> Result<reqwest::Client, reqwest::Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!(
            "sandpiper/",
            env!("CARGO_PKG_VERSION"),
            " (web_fetch)"
        ))
        .dns_resolver(Arc::new(NoLookups));
    if let Some(domain) = &target.domain {
        builder = builder.resolve_to_addrs(domain, &target.addrs);
    }
    builder.build()
}

/// Fetches `url`, following at most [`MAX_REDIRECTS`] redirects, each checked again.
/// The caller bounds the time (the whole fetch runs under one timeout).
pub(super) async fn fetch(
    url: Url,
    policy: &SsrfPolicy,
    limits: FetchLimits,
) -> Result<Fetched, FetchError> {
    let mut url = url;
    let mut redirects = 0;
    loop {
        let target = check_target(&url, policy).await?;
        let http = |e: reqwest::Error| FetchError::Http {
            url: url.to_string(),
            message: error_chain(&e),
        };
        let client = hop_client(&target).map_err(http)?;
        let mut response = client.get(url.clone()).send().await.map_err(http)?;
        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response.headers().get(LOCATION)
        {
            let location = location.to_str().unwrap_or_default();
            let next = url.join(location).map_err(|e| FetchError::BadUrl {
                url: location.to_owned(),
                reason: format!("the redirect target is not a URL ({e})"),
            })?;
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                return Err(FetchError::TooManyRedirects(next.to_string()));
            }
            tracing::debug!(from = %url, to = %next, "web_fetch follows a redirect");
            url = parse_url(next.as_str())?;
            continue;
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(http)? {
            let room = limits.max_bytes - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        return Ok(Fetched {
            final_url: url,
            status: status.as_u16(),
            content_type,
            body,
            truncated,
        });
    }
}

/// An error and its sources, joined, for messages.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let message = s.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = s.source();
    }
    text
}
