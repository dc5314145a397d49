//! Hiding the secrets a URL can carry before it is shown or logged (`config check`, `doctor`,
//! logs, error messages): its whole userinfo (`postgres://bob:hunter2@db/x`, a token as the
//! user name in `https://TOKEN@host`) and the value of every query parameter (`?api-key=…`,
//! `&sslpassword=…`), since any of them may be a key. Host, port, path and parameter names
//! stay, so an operator can still tell which endpoint is meant.

/// Query parameters whose values are secrets: database passwords, and the tokens and keys MCP
/// and other HTTP endpoints take in their URL. [`url_secrets`] scrubs their values from texts
/// that may quote them; [`redact_url`] hides every value whatever its name.
const SECRET_PARAMS: &[&str] = &[
    "password",
    "sslpassword",
    "pass",
    "pwd",
    "passfile_secret",
    "token",
    "access_token",
    "api_key",
    "apikey",
    "key",
    "secret",
    "auth",
];

/// What replaces a secret.
const REDACTED: &str = "<redacted>";

/// `url` with its userinfo and every query value replaced by `<redacted>`. Anything that does
/// not look like a URL is returned as it is.
pub fn redact_url(url: &str) -> String {
    let (before_fragment, fragment) = match url.find('#') {
        Some(i) => url.split_at(i),
        None => (url, ""),
    };
    let (head, query) = match before_fragment.find('?') {
        Some(i) => (&before_fragment[..i], Some(&before_fragment[i + 1..])),
        None => (before_fragment, None),
    };
    let mut out = redact_userinfo(head);
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query.split('&').map(redact_param).collect();
        out.push_str(&params.join("&"));
    }
    out.push_str(fragment);
    out
}

/// The secret values `url` carries (password or a lone user name, password-like query values),
/// raw and percent-decoded, to scrub from texts that may quote them.
fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let before_fragment = url.split('#').next().unwrap_or_default();
    let (head, query) = match before_fragment.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (before_fragment, None),
    };
    if let Some((_, rest)) = head.split_once("://") {
        let authority = rest.split('/').next().unwrap_or_default();
        // The password, or a user name alone (a token: `https://TOKEN@host`).
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            let secret = userinfo
                .split_once(':')
                .map_or(userinfo, |(_, password)| password);
            secrets.push(secret.to_owned());
        }
    }
    for param in query.into_iter().flat_map(|q| q.split('&')) {
        if let Some((key, value)) = param.split_once('=')
            && is_secret_param(key)
        {
            secrets.push(value.to_owned());
        }
    }
    let decoded: Vec<String> = secrets
        .iter()
        .map(|s| percent_decode(s))
        .filter(|d| !secrets.contains(d))
        .collect();
    secrets.extend(decoded);
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// `text` with `url` redacted ([`redact_url`]) and every secret it carries ([`url_secrets`])
/// replaced: a driver's or client's error may quote the URL it was given, whole or in parts.
pub fn scrub_url(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact_url(url));
    for secret in url_secrets(url) {
        out = out.replace(&secret, REDACTED);
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the query parameter `key` names a secret (`api-key` and `api_key` alike).
fn is_secret_param(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('-', "_");
    SECRET_PARAMS.contains(&key.as_str())
}

/// `scheme://user:secret@host/path` → `scheme://<redacted>@host/path`.
fn redact_userinfo(head: &str) -> String {
    let Some(scheme_end) = head.find("://") else {
        return head.to_owned();
    };
    let authority_start = scheme_end + 3;
    let authority_end = head[authority_start..]
        .find('/')
        .map_or(head.len(), |i| authority_start + i);
    match head[authority_start..authority_end].rfind('@') {
        Some(at) => format!(
            "{}{REDACTED}{}",
            &head[..authority_start],
            &head[authority_start + at..]
        ),
        None => head.to_owned(),
    }
}

/// `key=value` → `key=<redacted>`; a bare `value` → `<redacted>`; an empty one stays.
fn redact_param(param: &str) -> String {
    match param.split_once('=') {
        Some((key, _)) => format!("{key}={REDACTED}"),
        None if param.is_empty() => String::new(),
        None => REDACTED.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn userinfo_and_query_values_are_hidden_wherever_the_url_carries_them() {
        let cases = [
            ("postgres://bob:hunter2@db/x", "postgres://<redacted>@db/x"),
            // A token as the user name is hidden too.
            (
                "https://hunter2@git.example/r",
                "https://<redacted>@git.example/r",
            ),
            ("sqlite://a.db", "sqlite://a.db"),
            ("sqlite://a.db?mode=rwc", "sqlite://a.db?mode=<redacted>"),
            (
                "postgres://db/x?user=bob&password=hunter2",
                "postgres://db/x?user=<redacted>&password=<redacted>",
            ),
            (
                "postgresql://bob:p%40ss@db:5432/x?sslmode=require&sslpassword=hunter2&PASSWORD=z",
                "postgresql://<redacted>@db:5432/x?sslmode=<redacted>&sslpassword=<redacted>&PASSWORD=<redacted>",
            ),
            (
                // An `@` in the query is not the userinfo's.
                "postgres://db/x?application_name=a@b&password=hunter2",
                "postgres://db/x?application_name=<redacted>&password=<redacted>",
            ),
            (
                "http://svc:hunter2@10.0.0.5:8000/v1?api-key=hunter2&hunter2",
                "http://<redacted>@10.0.0.5:8000/v1?api-key=<redacted>&<redacted>",
            ),
            (
                "postgres://u:hunter2@h/x#frag",
                "postgres://<redacted>@h/x#frag",
            ),
            ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
            ("not a url", "not a url"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("hunter2"));
        }
    }

    #[test]
    fn secrets_named_with_a_hyphen_or_standing_as_the_user_are_scrubbed_too() {
        assert_eq!(
            url_secrets("http://svc:pw@h/v1?api-key=k%2B1&mode=rwc"),
            vec!["pw".to_owned(), "k%2B1".to_owned(), "k+1".to_owned()]
        );
        let url = "https://ghp-t0ken@h/mcp";
        assert_eq!(
            scrub_url(
                "error sending request for url (https://ghp-t0ken@h/mcp/)",
                url
            ),
            "error sending request for url (https://<redacted>@h/mcp/)"
        );
    }
}
