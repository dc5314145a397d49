//! Hiding the secrets a database URL can carry, for `config check`, logs and error messages:
//! the password of the userinfo (`postgres://bob:hunter2@db/x`) and password-like query
//! parameters (`?password=…`, `&sslpassword=…`), which libpq and sqlx both accept.

/// Query parameters whose values are secrets: database passwords, and the tokens and keys MCP
/// and other HTTP endpoints take in their URL.
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

/// `url` with its password and password-like query parameters replaced by `<redacted>`.
/// Anything that does not look like a URL is returned as it is.
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

/// The secret values `url` carries (password, password-like query values), raw and
/// percent-decoded, to scrub from texts that may quote them.
pub fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let before_fragment = url.split('#').next().unwrap_or_default();
    let (head, query) = match before_fragment.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (before_fragment, None),
    };
    if let Some((_, rest)) = head.split_once("://") {
        let authority = rest.split('/').next().unwrap_or_default();
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
        {
            secrets.push(password.to_owned());
        }
    }
    for param in query.into_iter().flat_map(|q| q.split('&')) {
        if let Some((key, value)) = param.split_once('=')
            && SECRET_PARAMS.contains(&key.to_ascii_lowercase().as_str())
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

/// `scheme://user:secret@host/path` → `scheme://user:<redacted>@host/path`.
fn redact_userinfo(head: &str) -> String {
    let Some(scheme_end) = head.find("://") else {
        return head.to_owned();
    };
    let authority_start = scheme_end + 3;
    let authority_end = head[authority_start..]
        .find('/')
        .map_or(head.len(), |i| authority_start + i);
    let authority = &head[authority_start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return head.to_owned();
    };
    let userinfo = &authority[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:{REDACTED}{}",
            &head[..authority_start],
            &userinfo[..colon],
            &head[authority_start + at..]
        ),
        None => head.to_owned(),
    }
}

fn redact_param(param: &str) -> String {
    match param.split_once('=') {
        Some((key, _)) if SECRET_PARAMS.contains(&key.to_ascii_lowercase().as_str()) => {
            format!("{key}={REDACTED}")
        }
        _ => param.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn passwords_are_hidden_wherever_the_url_carries_them() {
        let cases = [
            (
                "postgres://bob:hunter2@db/x",
                "postgres://bob:<redacted>@db/x",
            ),
            ("postgres://bob@db/x", "postgres://bob@db/x"),
            ("sqlite://a.db", "sqlite://a.db"),
            ("sqlite://a.db?mode=rwc", "sqlite://a.db?mode=rwc"),
            (
                "postgres://db/x?user=bob&password=hunter2",
                "postgres://db/x?user=bob&password=<redacted>",
            ),
            (
                "postgresql://bob:p%40ss@db:5432/x?sslmode=require&sslpassword=k&PASSWORD=z",
                "postgresql://bob:<redacted>@db:5432/x?sslmode=require&sslpassword=<redacted>&PASSWORD=<redacted>",
            ),
            (
                // An `@` in the query is not the userinfo's.
                "postgres://db/x?application_name=a@b&password=s",
                "postgres://db/x?application_name=a@b&password=<redacted>",
            ),
            (
                "postgres://u:p@h/x#frag",
                "postgres://u:<redacted>@h/x#frag",
            ),
            ("not a url", "not a url"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("hunter2"));
        }
    }
}
