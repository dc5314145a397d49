//! Sign-in links to the status page (issue 28): `/console` in chat and `sandpiper
//! console-link` on the terminal give a person a link that signs their browser in as them,
//! once, within 10 minutes ([`crate::store::web_access`] keeps the links).

use crate::Agent;
use crate::config::ServerConfig;
use crate::store::web_access::LINK_LIFETIME_MS;
/// Who a sign-in link signs in, re-exported for the channel that asks for one.
pub use crate::store::web_access::WebIdentity;
use crate::store::{Store, StoreError};

/// The path a sign-in link opens, before its token.
pub const SIGN_IN_PATH: &str = "/sign-in/";

/// A link to give a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInLink {
    /// The whole URL, token included (show it to that person only).
    pub url: String,
    /// How many minutes it works.
    pub minutes: i64,
}

impl SignInLink {
    /// What chat and the terminal say with it.
    pub fn message(&self) -> String {
        format!(
            "Your sign-in link to the status page (works once, for {} minutes; do not share it):\n{}",
            self.minutes, self.url
        )
    }
}

impl Agent {
    /// A one-time link that signs a browser in as `who`.
    pub async fn sign_in_link(&self, who: &WebIdentity) -> Result<SignInLink, StoreError> {
        make_link(self.store(), &self.config().server, who).await
    }
}

/// A one-time link that signs a browser in as `who`, to the page at `server`'s
/// [`page_url`](ServerConfig::page_url) (the terminal makes one without an agent).
pub async fn make_link(
    store: &Store,
    server: &ServerConfig,
    who: &WebIdentity,
) -> Result<SignInLink, StoreError> {
    let token = store.create_sign_in_link(who).await?;
    tracing::info!(
        user = who.user_id.as_deref().unwrap_or("-"),
        admin = who.admin,
        "status page sign-in link made"
    );
    Ok(SignInLink {
        url: format!("{}{SIGN_IN_PATH}{token}", server.page_url()),
        minutes: LINK_LIFETIME_MS / 60_000,
    })
}
