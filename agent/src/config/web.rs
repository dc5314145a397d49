//! `[web]` and `[math]`: the settings of the tools that reach the network (web_fetch,
//! web_search) and of the Python sandbox behind `math`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ConfigSource, Env, Secret, duration};

/// Tavily's public API.
pub const TAVILY_API_BASE: &str = "https://api.tavily.com";

/// `[web]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// Hosts or IP addresses web_fetch may reach even though they are private, loopback or
    /// link-local (an intranet wiki, a test server). Everything else private stays refused.
    /// Env `SANDPIPER_WEB_ALLOW_PRIVATE`, comma-separated, replaces the list.
    pub allow_private: Vec<String>,
    /// How long one web_fetch may take in all (every redirect, the whole body).
    #[serde(with = "duration")]
    pub fetch_timeout: Duration,
    /// Largest response body web_fetch reads, in bytes; the rest is not downloaded.
    pub max_fetch_bytes: usize,
    /// Characters of page text handed to the model that answers web_fetch's question; longer
    /// pages are cut (keep it well inside the model's context).
    pub max_page_chars: usize,
    /// Tavily API base URL (web_search); env `SANDPIPER_WEB_SEARCH_BASE_URL`.
    pub search_base_url: String,
    /// Environment variable holding the Tavily API key (default `TAVILY_API_KEY`).
    pub tavily_api_key_env: String,
    /// The Tavily key, read from `tavily_api_key_env`; web_search tells the model it is not
    /// configured without it.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub tavily_api_key: Option<Secret>,
    /// How long one web_search may take.
    #[serde(with = "duration")]
    pub search_timeout: Duration,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            allow_private: Vec::new(),
            fetch_timeout: Duration::from_secs(30),
            max_fetch_bytes: 2 * 1024 * 1024,
            max_page_chars: 60_000,
            search_base_url: TAVILY_API_BASE.into(),
            tavily_api_key_env: "TAVILY_API_KEY".into(),
            tavily_api_key: None,
            search_timeout: Duration::from_secs(30),
        }
    }
}

/// `[math]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MathConfig {
    /// The Python interpreter (default `python3` on the PATH).
    pub python: String,
    /// Wall-clock limit for one run; the whole sandbox is killed after it.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// CPU seconds one run may use.
    pub cpu_seconds: u64,
    /// Address space one run may use, in MiB.
    pub memory_mb: u64,
    /// Run without network isolation where the machine cannot create a network namespace.
    /// Off by default: math then refuses to run rather than run with network access.
    pub allow_unsandboxed: bool,
}

impl Default for MathConfig {
    fn default() -> Self {
        Self {
            python: "python3".into(),
            timeout: Duration::from_secs(60),
            cpu_seconds: 30,
            memory_mb: 1024,
            allow_unsandboxed: false,
        }
    }
}

/// Applies the environment overrides of `[web]`.
pub(super) fn apply_env(web: &mut WebConfig, env: &dyn Env) {
    if let Some(list) = env.var("SANDPIPER_WEB_ALLOW_PRIVATE") {
        web.allow_private = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
    }
    if let Some(base) = env.var("SANDPIPER_WEB_SEARCH_BASE_URL") {
        web.search_base_url = base;
    }
    web.tavily_api_key = env.var(&web.tavily_api_key_env).map(Secret::new);
}

/// Checks `[web]` and `[math]` values.
pub(super) fn validate(
    web: &WebConfig,
    math: &MathConfig,
    source: &ConfigSource,
) -> Result<(), ConfigError> {
    let invalid = |key: &str, message: String| ConfigError::Invalid {
        key: key.into(),
        source_name: source.to_string(),
        message,
    };
    let base = &web.search_base_url;
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(invalid(
            "web.search_base_url",
            format!("`{base}` is not an http(s) URL"),
        ));
    }
    if let Some(bad) = web.allow_private.iter().find(|h| {
        h.trim().is_empty() || h.contains(['/', ' ', ':']) && h.parse::<std::net::IpAddr>().is_err()
    }) {
        return Err(invalid(
            "web.allow_private",
            format!("`{bad}` is neither a host name nor an IP address"),
        ));
    }
    if web.max_fetch_bytes < 1024 {
        return Err(invalid(
            "web.max_fetch_bytes",
            "must be at least 1024".into(),
        ));
    }
    if web.max_page_chars < 1000 {
        return Err(invalid(
            "web.max_page_chars",
            "must be at least 1000".into(),
        ));
    }
    if math.cpu_seconds == 0 || math.memory_mb < 64 {
        return Err(invalid(
            "math",
            "cpu_seconds must be at least 1 and memory_mb at least 64".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_environment_sets_the_allowance_and_the_key() {
        let mut web = WebConfig::default();
        let env = [
            (
                "SANDPIPER_WEB_ALLOW_PRIVATE",
                " 127.0.0.2, wiki.internal ,,",
            ),
            ("TAVILY_API_KEY", "tvly-secret"),
        ];
        apply_env(&mut web, &env);
        assert_eq!(web.allow_private, ["127.0.0.2", "wiki.internal"]);
        assert_eq!(web.tavily_api_key, Some(Secret::new("tvly-secret")));
        assert!(!format!("{web:?}").contains("tvly-secret"));
    }

    #[test]
    fn bad_values_are_refused() {
        let source = ConfigSource::Defaults;
        let math = MathConfig::default();
        let ok = WebConfig::default();
        assert!(validate(&ok, &math, &source).is_ok());
        let bad_base = WebConfig {
            search_base_url: "ftp://x".into(),
            ..WebConfig::default()
        };
        assert!(validate(&bad_base, &math, &source).is_err());
        for bad in ["", "http://x/", "10.0.0.0/8"] {
            let web = WebConfig {
                allow_private: vec![bad.into()],
                ..WebConfig::default()
            };
            assert!(validate(&web, &math, &source).is_err(), "{bad:?}");
        }
        let v6 = WebConfig {
            allow_private: vec!["fd00::1".into()],
            ..WebConfig::default()
        };
        assert!(validate(&v6, &math, &source).is_ok());
        let tiny = MathConfig {
            memory_mb: 1,
            ..MathConfig::default()
        };
        assert!(validate(&ok, &tiny, &source).is_err());
    }
}
