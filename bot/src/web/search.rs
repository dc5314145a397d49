//! Finding workstreams on the page: text searched in the recall index
//! ([`Store::search_workstreams`], the index the `recall` tool reads), and filters by
//! channel, person and state. The search runs over everyone's messages, but only ever cuts
//! down the list the viewer may already see ([`Viewer::sees`]): a stranger finds nothing of
//! a thread they are not in, whatever they type.
//!
//! The filters are the page's query string (`/?q=deploy&state=waiting`), so a search is a
//! link, and the page's event stream carries the same query to keep the cut list current.
//!
//! [`Store::search_workstreams`]: sandpiper_agent::store::Store::search_workstreams
//! [`Viewer::sees`]: super::read_model::Viewer::sees

use std::collections::HashSet;

use sandpiper_agent::store::{Store, StoreError};

/// Most workstreams one search finds before the viewer's are kept.
const FOUND: i64 = 5000;
/// Longest search text accepted, in characters.
pub(super) const MAX_QUERY: usize = 200;

/// A workstream's state, as the state filter groups them.
pub(super) const STATES: &[(&str, &str)] = &[
    ("running", "running"),
    ("waiting", "waiting for approval"),
    ("idle", "idle"),
    ("closed", "closed"),
];

/// The page's search and filters; an empty field filters nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub(super) struct Filter {
    /// Text to search for.
    #[serde(default)]
    pub q: String,
    /// A channel key ([`super::read_model::channel_of`]).
    #[serde(default)]
    pub channel: String,
    /// A sandpiper user id who wrote in the workstream.
    #[serde(default)]
    pub person: String,
    /// One of [`STATES`]' codes.
    #[serde(default)]
    pub state: String,
}

/// What the filters offer: the channels and people of the workstreams the viewer may see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Facets {
    /// Channel keys and how the page names them, by name.
    pub channels: Vec<(String, String)>,
    /// User ids and their public names, by name.
    pub people: Vec<(String, String)>,
}

/// A workstream as the filters and the search read it.
pub(super) trait Searched {
    /// Its key.
    fn key(&self) -> &str;
    /// Its channel key.
    fn channel_key(&self) -> &str;
    /// The user ids who wrote in it.
    fn participants(&self) -> &[String];
    /// Its state, as the page says it.
    fn state(&self) -> &str;
}

impl Filter {
    /// Whether it filters nothing.
    pub(super) fn is_empty(&self) -> bool {
        [&self.q, &self.channel, &self.person, &self.state]
            .iter()
            .all(|f| f.trim().is_empty())
    }

    /// The query string that asks for it again (`q=…&state=…`), empty fields left out.
    pub(super) fn query_string(&self) -> String {
        let mut out = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("q", &self.q),
            ("channel", &self.channel),
            ("person", &self.person),
            ("state", &self.state),
        ] {
            if !value.trim().is_empty() {
                out.append_pair(name, value.trim());
            }
        }
        out.finish()
    }

    /// Whether `w` passes the channel, person and state filters.
    fn keeps(&self, w: &impl Searched) -> bool {
        let channel = self.channel.trim();
        let person = self.person.trim();
        (channel.is_empty() || w.channel_key() == channel)
            && (person.is_empty() || w.participants().iter().any(|p| p == person))
            && state_matches(self.state.trim(), w.state())
    }

    /// `visible` cut to the filters and the search, and why the search text was not used
    /// when it was not (too long, or nothing to search for).
    pub(super) async fn apply<W: Searched>(
        &self,
        store: &Store,
        visible: Vec<W>,
    ) -> Result<(Vec<W>, Option<String>), StoreError> {
        let mut kept: Vec<W> = visible.into_iter().filter(|w| self.keeps(w)).collect();
        let q = self.q.trim();
        if q.is_empty() {
            return Ok((kept, None));
        }
        if q.chars().count() > MAX_QUERY {
            return Ok((
                kept,
                Some(format!("A search is at most {MAX_QUERY} characters.")),
            ));
        }
        let found: HashSet<String> = match store.search_workstreams(q, FOUND).await {
            Ok(keys) => keys.into_iter().collect(),
            Err(StoreError::EmptyQuery(_)) => {
                return Ok((
                    kept,
                    Some("Search for words: letters or digits.".to_owned()),
                ));
            }
            Err(e) => return Err(e),
        };
        kept.retain(|w| found.contains(w.key()));
        Ok((kept, None))
    }
}

/// Whether a workstream in `state` is in the group `code` (any, when empty).
fn state_matches(code: &str, state: &str) -> bool {
    match code {
        "" => true,
        "running" => matches!(state, "thinking" | "running a tool"),
        "waiting" => state == "waiting for approval",
        "idle" => matches!(state, "idle" | "interrupted"),
        "closed" => state == "closed",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn states_group_as_the_filter_offers_them() {
        assert!(state_matches("running", "thinking"));
        assert!(state_matches("running", "running a tool"));
        assert!(state_matches("waiting", "waiting for approval"));
        assert!(state_matches("idle", "interrupted"));
        assert!(!state_matches("closed", "idle"));
        assert!(!state_matches("nonsense", "idle"));
        assert!(state_matches("", "closed"));
    }

    #[test]
    fn a_filter_is_its_query_string() {
        let f = Filter {
            q: " deploy & co ".into(),
            state: "waiting".into(),
            ..Filter::default()
        };
        assert_eq!(f.query_string(), "q=deploy+%26+co&state=waiting");
        assert!(!f.is_empty());
        assert!(Filter::default().is_empty());
        assert_eq!(Filter::default().query_string(), "");
    }
}
