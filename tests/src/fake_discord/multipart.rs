//! Request bodies: JSON, or `multipart/form-data` with a `payload_json` part and `files[N]`
//! parts, which is how serenity uploads attachments.

use serde_json::Value;

/// A request body as the handlers see it.
#[derive(Debug, Clone, Default)]
pub(super) struct Payload {
    /// The JSON body, or the parsed `payload_json` part; `Null` when there is neither.
    pub json: Value,
    /// `(filename, bytes)` of each `files[N]` part, in order.
    pub files: Vec<(String, Vec<u8>)>,
}

impl Payload {
    /// Parses `body` according to its `Content-Type`.
    pub(super) fn parse(content_type: &str, body: &[u8]) -> Self {
        if let Some(boundary) = boundary(content_type) {
            let mut payload = Self::default();
            for part in parts(body, boundary.as_bytes()) {
                if part.name == "payload_json" {
                    payload.json = serde_json::from_slice(&part.data).unwrap_or(Value::Null);
                } else if part.name.starts_with("files[") {
                    let filename = part.filename.unwrap_or_else(|| part.name.clone());
                    payload.files.push((filename, part.data));
                }
            }
            return payload;
        }
        let json = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
        };
        Self {
            json,
            files: Vec::new(),
        }
    }
}

/// One form-data part.
struct Part {
    name: String,
    filename: Option<String>,
    data: Vec<u8>,
}

fn boundary(content_type: &str) -> Option<String> {
    if !content_type.starts_with("multipart/") {
        return None;
    }
    content_type.split(';').find_map(|p| {
        p.trim()
            .strip_prefix("boundary=")
            .map(|b| b.trim_matches('"').to_owned())
    })
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

fn parts(body: &[u8], boundary: &[u8]) -> Vec<Part> {
    let delimiter = [b"--", boundary].concat();
    let mut parts = Vec::new();
    let Some(mut at) = find(body, &delimiter, 0) else {
        return parts;
    };
    loop {
        let start = at + delimiter.len();
        if body.get(start..start + 2) == Some(b"--") {
            break; // closing delimiter
        }
        let Some(headers_end) = find(body, b"\r\n\r\n", start) else {
            break;
        };
        let Some(next) = find(body, &[b"\r\n", delimiter.as_slice()].concat(), headers_end) else {
            break;
        };
        let headers = String::from_utf8_lossy(&body[start..headers_end]);
        parts.push(Part {
            name: disposition_param(&headers, "name").unwrap_or_default(),
            filename: disposition_param(&headers, "filename"),
            data: body[headers_end + 4..next].to_vec(),
        });
        at = next + 2;
    }
    parts
}

/// `name` or `filename` from a `Content-Disposition: form-data; name="..."` header.
fn disposition_param(headers: &str, param: &str) -> Option<String> {
    let line = headers
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))?;
    line.split(';').find_map(|p| {
        let (key, value) = p.trim().split_once('=')?;
        (key == param).then(|| value.trim_matches('"').to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_payload_json_and_files() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"files[0]\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\nworld\r\n--XyZ\r\nContent-Disposition: form-data; name=\"payload_json\"\r\n\r\n{\"content\":\"hi\"}\r\n--XyZ--\r\n";
        let payload = Payload::parse("multipart/form-data; boundary=XyZ", body);
        assert_eq!(payload.json, serde_json::json!({"content": "hi"}));
        assert_eq!(
            payload.files,
            vec![("a.txt".to_owned(), b"hello\r\nworld".to_vec())]
        );
    }
}
