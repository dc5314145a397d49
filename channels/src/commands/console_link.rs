//! `/console`: a one-time link that signs the person's browser in to the status page as
//! them (admins of the bot as admins), answered privately (an ephemeral reply).

use sandpiper_agent::Agent;
use sandpiper_agent::sign_in::WebIdentity;

use crate::commands::account::{self, Person};

/// The answer to `/console` for `who`; `admin` as the platform decided it (Discord
/// Administrator or `admin_roles`, Slack `admin_usergroups`).
pub async fn answer(agent: &Agent, who: Person<'_>, admin: bool) -> String {
    let user_id = match account::user_id(&agent.people(), who).await {
        Ok(id) => id,
        Err(e) => return format!("console: {e}"),
    };
    let identity = WebIdentity {
        user_id: Some(user_id),
        admin,
    };
    match agent.sign_in_link(&identity).await {
        Ok(link) => link.message(),
        Err(e) => format!("console: cannot make a sign-in link now ({e}); try again"),
    }
}
