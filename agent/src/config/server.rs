//! `[server]`: the HTTP endpoints of `sandpiper serve` and the limits that keep them answering
//! on a public port (Slack's Events API mode exposes it).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ConfigSource, Env, Secret, duration};

/// The variable the operations token is read from when `ops_token_env` is unset.
const DEFAULT_OPS_TOKEN_ENV: &str = "SANDPIPER_OPS_TOKEN";
/// The shortest operations token accepted: it guards `/ready`, `/metrics` and the status
/// page's view, so it must not be guessable within the sign-in rate limit.
pub(super) const MIN_OPS_TOKEN_CHARS: usize = 32;

/// `[server]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the HTTP endpoints (`/health`); env `SANDPIPER_LISTEN`.
    pub listen: SocketAddr,
    /// How long a client may take to send a request's headers before the connection is
    /// closed (slow-header clients hold connections open otherwise).
    #[serde(with = "duration")]
    pub header_read_timeout: Duration,
    /// How long a client may take to send a whole request body once its headers are in;
    /// later, the request gets 408 and the connection is closed (a client that announces a
    /// body and never sends it would hold its connection otherwise).
    #[serde(with = "duration")]
    pub body_read_timeout: Duration,
    /// Largest request body accepted, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// Most connections served at once; further ones wait in the kernel's backlog.
    pub max_connections: usize,
    /// Most connections served at once from one peer (an IPv4 address, an IPv6 /64); further
    /// ones are refused at once, so one host cannot take every slot. Behind a reverse proxy
    /// every connection comes from the proxy: raise it to `max_connections` there.
    pub max_connections_per_peer: usize,
    /// A second address that alone serves `/ready` and `/metrics` (the public one then does
    /// not); env `SANDPIPER_OPS_LISTEN`. Unset: they are on `listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_listen: Option<SocketAddr>,
    /// The environment variable holding a bearer token that `/ready` and `/metrics` require
    /// (`Authorization: Bearer <token>`); `SANDPIPER_OPS_TOKEN` when unset. No token set: they
    /// answer anyone who reaches their address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_token_env: Option<String>,
    /// The operations token, read from `ops_token_env` at load time. Never read from the file.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub ops_token: Option<Secret>,
    /// The URL other nodes reach this one at (the `services` registry; notify POSTs there);
    /// env `SANDPIPER_ADVERTISE_URL`. Unset: `http://` + the bound address (loopback for a
    /// wildcard bind), which only serves nodes on the same machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_url: Option<String>,
    /// The URL people open the status page at (behind a reverse proxy, its `https://`
    /// address); sign-in links start with it. Env `SANDPIPER_PUBLIC_URL`. Unset: the
    /// advertised URL, else `http://` + `listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Reverse proxies (addresses such as `10.0.0.5`, or networks such as `10.0.0.0/8`)
    /// whose `X-Forwarded-For` and `X-Forwarded-Proto` are believed: the status page counts
    /// failed sign-ins per client behind them. Empty: every client is its own TCP peer and
    /// those headers are ignored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8090)),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            max_body_bytes: 1024 * 1024,
            max_connections: 256,
            max_connections_per_peer: 32,
            ops_listen: None,
            ops_token_env: None,
            ops_token: None,
            advertise_url: None,
            public_url: None,
            trusted_proxies: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// The variable the operations token is read from.
    pub fn effective_ops_token_env(&self) -> &str {
        self.ops_token_env
            .as_deref()
            .unwrap_or(DEFAULT_OPS_TOKEN_ENV)
    }

    /// Where people open the status page: `public_url`, else `advertise_url`, else
    /// `http://` + `listen`; without a trailing slash.
    pub fn page_url(&self) -> String {
        let configured = [&self.public_url, &self.advertise_url]
            .into_iter()
            .flatten()
            .map(|u| u.trim().trim_end_matches('/'))
            .find(|u| !u.is_empty());
        match configured {
            Some(url) => url.to_owned(),
            None => format!("http://{}", self.listen),
        }
    }

    /// `trusted_proxies` as networks (a bare address is a network of one); entries that do
    /// not parse are refused when the configuration loads, so none are left off here.
    pub fn trusted_proxy_nets(&self) -> Vec<ipnet::IpNet> {
        self.trusted_proxies
            .iter()
            .filter_map(|p| proxy_net(p).ok())
            .collect()
    }
}

/// One `trusted_proxies` entry: `10.0.0.0/8`, `fd00::/8`, or one address.
fn proxy_net(entry: &str) -> Result<ipnet::IpNet, String> {
    let entry = entry.trim();
    entry
        .parse::<ipnet::IpNet>()
        .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{entry}` is not an address or a network such as 10.0.0.0/8"))
}

fn address(value: &str, key: &str, var: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|e| ConfigError::Invalid {
        key: key.into(),
        source_name: var.into(),
        message: format!("`{value}` is not host:port such as 127.0.0.1:8090 ({e})"),
    })
}

/// `SANDPIPER_LISTEN`, `SANDPIPER_OPS_LISTEN`, `SANDPIPER_ADVERTISE_URL` and the token.
pub(super) fn apply_env(server: &mut ServerConfig, env: &dyn Env) -> Result<(), ConfigError> {
    if let Some(listen) = env.var("SANDPIPER_LISTEN") {
        server.listen = address(&listen, "server.listen", "SANDPIPER_LISTEN")?;
    }
    if let Some(listen) = env.var("SANDPIPER_OPS_LISTEN").filter(|l| !l.is_empty()) {
        server.ops_listen = Some(address(
            &listen,
            "server.ops_listen",
            "SANDPIPER_OPS_LISTEN",
        )?);
    }
    if let Some(url) = env.var("SANDPIPER_ADVERTISE_URL").filter(|u| !u.is_empty()) {
        server.advertise_url = Some(url);
    }
    if let Some(url) = env.var("SANDPIPER_PUBLIC_URL").filter(|u| !u.is_empty()) {
        server.public_url = Some(url);
    }
    server.ops_token = env
        .var(server.effective_ops_token_env())
        .filter(|t| !t.trim().is_empty())
        .map(|t| Secret::new(t.trim()));
    Ok(())
}

/// Checks `[server]` values.
pub(super) fn validate(server: &ServerConfig, source: &ConfigSource) -> Result<(), ConfigError> {
    let invalid = |key: &str, message: &str| ConfigError::Invalid {
        key: key.into(),
        source_name: source.to_string(),
        message: message.into(),
    };
    if server.max_connections == 0 {
        return Err(invalid("server.max_connections", "must be at least 1"));
    }
    if server.max_connections_per_peer == 0 {
        return Err(invalid(
            "server.max_connections_per_peer",
            "must be at least 1 (set it to max_connections for no per-peer cap)",
        ));
    }
    if server.body_read_timeout.is_zero() {
        return Err(invalid("server.body_read_timeout", "must be more than 0"));
    }
    if let Some(token) = &server.ops_token
        && token.expose().chars().count() < MIN_OPS_TOKEN_CHARS
    {
        return Err(ConfigError::Invalid {
            key: "server.ops_token".into(),
            source_name: server.effective_ops_token_env().into(),
            message: format!(
                "the operations token must be at least {MIN_OPS_TOKEN_CHARS} characters \
                 (make one with `openssl rand -hex 32`)"
            ),
        });
    }
    if let Some(bad) = server
        .trusted_proxies
        .iter()
        .find_map(|p| proxy_net(p).err())
    {
        return Err(invalid("server.trusted_proxies", &bad));
    }
    if server.ops_listen == Some(server.listen) && server.listen.port() != 0 {
        return Err(invalid(
            "server.ops_listen",
            "must differ from server.listen (leave it unset to serve /ready and /metrics there)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_sets_the_ops_address_and_token() {
        let mut server = ServerConfig::default();
        let env = [
            ("SANDPIPER_OPS_LISTEN", "127.0.0.1:9100"),
            (
                "SANDPIPER_OPS_TOKEN",
                " scrape-me-with-a-token-of-32-chars ",
            ),
        ];
        apply_env(&mut server, &env).unwrap();
        assert_eq!(server.ops_listen, Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(
            server.ops_token,
            Some(Secret::new("scrape-me-with-a-token-of-32-chars"))
        );
        // A token named by ops_token_env replaces the default variable.
        let mut named = ServerConfig {
            ops_token_env: Some("METRICS_TOKEN".into()),
            ..ServerConfig::default()
        };
        apply_env(&mut named, &[("SANDPIPER_OPS_TOKEN", "ignored")]).unwrap();
        assert_eq!(named.ops_token, None);
        let bad = apply_env(&mut server, &[("SANDPIPER_OPS_LISTEN", "nowhere")]);
        assert!(
            matches!(&bad, Err(ConfigError::Invalid { key, .. }) if key == "server.ops_listen"),
            "{bad:?}"
        );
    }

    #[test]
    fn sign_in_links_start_at_the_public_url_else_the_advertised_one_else_listen() {
        let mut server = ServerConfig::default();
        assert_eq!(server.page_url(), "http://127.0.0.1:8090");
        server.advertise_url = Some("http://gw-1.internal:8090/".into());
        assert_eq!(server.page_url(), "http://gw-1.internal:8090");
        apply_env(
            &mut server,
            &[("SANDPIPER_PUBLIC_URL", "https://status.example.com/")],
        )
        .unwrap();
        assert_eq!(server.page_url(), "https://status.example.com");
    }

    #[test]
    fn limits_of_zero_and_a_shared_ops_address_are_refused() {
        let source = ConfigSource::Defaults;
        let listen: SocketAddr = "0.0.0.0:8090".parse().unwrap();
        for (key, server) in [
            (
                "server.max_connections_per_peer",
                ServerConfig {
                    max_connections_per_peer: 0,
                    ..ServerConfig::default()
                },
            ),
            (
                "server.body_read_timeout",
                ServerConfig {
                    body_read_timeout: Duration::ZERO,
                    ..ServerConfig::default()
                },
            ),
            (
                "server.ops_listen",
                ServerConfig {
                    listen,
                    ops_listen: Some(listen),
                    ..ServerConfig::default()
                },
            ),
            (
                "server.ops_token",
                ServerConfig {
                    ops_token: Some(Secret::new("a-short-guessable-token")),
                    ..ServerConfig::default()
                },
            ),
            (
                "server.trusted_proxies",
                ServerConfig {
                    trusted_proxies: vec!["10.0.0.0/8".into(), "proxy.internal".into()],
                    ..ServerConfig::default()
                },
            ),
        ] {
            let result = validate(&server, &source);
            assert!(
                matches!(&result, Err(ConfigError::Invalid { key: k, .. }) if k == key),
                "{key}: {result:?}"
            );
        }
        assert!(validate(&ServerConfig::default(), &source).is_ok());
    }

    #[test]
    fn trusted_proxies_are_addresses_or_networks() {
        let server = ServerConfig {
            trusted_proxies: vec!["10.0.0.0/8".into(), " 192.0.2.7 ".into(), "fd00::/8".into()],
            ops_token: Some(Secret::new("0123456789abcdef0123456789abcdef")),
            ..ServerConfig::default()
        };
        assert!(validate(&server, &ConfigSource::Defaults).is_ok());
        let nets = server.trusted_proxy_nets();
        let trusted = |ip: &str| {
            nets.iter()
                .any(|n| n.contains(&ip.parse::<std::net::IpAddr>().unwrap()))
        };
        assert_eq!(
            ["10.1.2.3", "192.0.2.7", "192.0.2.8", "fd12::1", "127.0.0.1"].map(trusted),
            [true, true, false, true, false]
        );
    }
}
