//! The `notify` tool: reaches a person (a DM on each platform they linked) or a channel
//! outside the thread. Auto-approved: notifications are time-sensitive.
//!
//! The agent does not post itself: it asks the `services` table for healthy gateway nodes and
//! POSTs the notification to one of them with a service JWT (see [`deliver`]). At most
//! [`MAX_PER_TURN`] notifications succeed per turn ([`NotifyBudget`]); failures do not count.
//!
//! A username resolves only to the user with exactly that handle (an unknown or ambiguous
//! name is an error the model sees, never a guess), and the request carries that user's id
//! and who asked, so the gateway delivers to that person's own accounts and says who asked
//! and from which thread. Sub-agents keep the tool; their notifications carry the parent's
//! thread and person, since their context is the parent's.

mod deliver;

use std::sync::{Arc, Mutex};

use serde::Deserialize;

use super::{OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};
use crate::notify::{NotifyRequest, Target, TargetStatus};

pub use deliver::{GatewayClient, RETRY_DELAYS};

/// Most successful notifications in one turn.
pub const MAX_PER_TURN: usize = 5;

/// The `notify` tool.
#[derive(Debug, Default)]
pub(super) struct Notify;

/// The arguments of `tools/notify.json`.
#[derive(Debug, Deserialize)]
pub(super) struct Args {
    message: String,
    username: Option<String>,
    channel_type: Option<String>,
    channel_id: Option<String>,
    title: Option<String>,
}

impl Args {
    fn request(&self, workstream: &str) -> NotifyRequest {
        NotifyRequest {
            message: self.message.clone(),
            title: self
                .title
                .as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
            username: self.username.clone(),
            channel_type: self.channel_type.clone(),
            channel_id: self.channel_id.clone(),
            workstream: Some(workstream.to_owned()),
            user_id: None,
            requested_by: None,
            charged_to: None,
        }
    }
}

/// A notification as `prepare` checked it: the request, and the target it names.
#[derive(Debug)]
pub(super) struct Checked {
    request: NotifyRequest,
    target: Target,
}

/// A turn's count of notifications: sent ones and ones on their way (calls of one batch run
/// in parallel, so a slot is reserved before sending and released if nothing was sent).
#[derive(Debug, Clone, Default)]
pub struct NotifyBudget(Arc<Mutex<Slots>>);

#[derive(Debug, Default)]
struct Slots {
    sent: usize,
    in_flight: usize,
}

impl NotifyBudget {
    /// Reserves a slot; false when [`MAX_PER_TURN`] are sent or on their way.
    fn reserve(&self) -> bool {
        let mut slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slots.sent + slots.in_flight >= MAX_PER_TURN {
            return false;
        }
        slots.in_flight += 1;
        true
    }

    /// Ends a reservation: counted when something was `sent`.
    fn settle(&self, sent: bool) {
        let mut slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slots.in_flight = slots.in_flight.saturating_sub(1);
        if sent {
            slots.sent += 1;
        }
    }

    /// Notifications sent so far in the turn.
    pub fn sent(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).sent
    }
}

/// Releases a reservation that was not settled (the call was cancelled).
struct Reservation<'a> {
    budget: &'a NotifyBudget,
    settled: bool,
}

impl Reservation<'_> {
    fn settle(mut self, sent: bool) {
        self.settled = true;
        self.budget.settle(sent);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.budget.settle(false);
        }
    }
}

#[async_trait::async_trait]
impl Tool for Notify {
    type Args = Args;
    type Call = Checked;
    const USAGE: &'static str = "send {\"message\": \"<text>\", \"username\": \"<user>\"} or \
         {\"message\": \"<text>\", \"channel_type\": \"discord|slack\", \"channel_id\": \"<id>\"}";

    fn name(&self) -> &'static str {
        "notify"
    }

    fn prepare(&self, args: Args, ctx: &ToolContext) -> Result<(Prepared, Checked), ToolError> {
        let request = args.request(&ctx.workstream);
        let target = request
            .target()
            .map_err(|e| ToolError::model(e.to_string()))?;
        let prepared = Prepared {
            header: format!("notify: {target}"),
            preview: match &request.title {
                Some(title) => format!("{title}\n{}", request.message),
                None => request.message.clone(),
            },
            ask: false,
        };
        Ok((prepared, Checked { request, target }))
    }

    async fn execute(
        &self,
        call: &Checked,
        _prepared: &Prepared,
        ctx: &ToolContext,
        _sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        let Checked { request, target } = call;
        let mut request = request.clone();
        let store = ctx.store()?;
        let key = ctx.services.service_key.as_ref().ok_or_else(|| {
            ToolError::model(
                "notifications are not set up on this server (no service token secret: \
                 SANDPIPER_JWT_SECRET or [auth] jwt_secret_env); tell the user",
            )
        })?;
        let resolved = deliver::resolve(store, target).await?;
        let platforms = resolved.platforms;
        request.user_id = resolved.user_id;
        request.requested_by = requester(store, ctx.user_id.as_deref()).await?;
        request.charged_to = ctx.charged_to.clone();
        if !ctx.notify_budget.reserve() {
            return Err(ToolError::model(format!(
                "not sent: at most {MAX_PER_TURN} notifications per turn, and this turn has \
                 sent them; combine what is left into one message or wait for the next turn"
            )));
        }
        let reservation = Reservation {
            budget: &ctx.notify_budget,
            settled: false,
        };
        let delivery = deliver::Delivery {
            store,
            key,
            client: &ctx.services.gateways,
            request: &request,
            platforms: &platforms,
            cancel: &ctx.cancel,
        };
        let results = delivery.run().await?;
        let sent = results.iter().any(TargetStatus::is_sent);
        reservation.settle(sent);
        tracing::info!(
            workstream = %ctx.workstream,
            target = %target,
            sent = results.iter().filter(|r| r.is_sent()).count(),
            failed = results.iter().filter(|r| !r.is_sent()).count(),
            "notification"
        );
        Ok(ToolOutput {
            text: render(target, &results),
            images: Vec::new(),
            is_error: !sent,
        })
    }
}

/// The username of the person whose turn this is (a sub-agent's is its parent's), for the
/// notification's attribution line.
async fn requester(
    store: &crate::store::Store,
    user_id: Option<&str>,
) -> Result<Option<String>, ToolError> {
    let Some(id) = user_id else {
        return Ok(None);
    };
    store
        .public_name(id)
        .await
        .map_err(|e| ToolError::store("cannot look up who asked", e))
}

/// One line per target.
fn render(target: &Target, results: &[TargetStatus]) -> String {
    let mut text = format!("notification to {target}:");
    for r in results {
        text.push_str(&format!("\n- {}: {}", r.target, r.status));
    }
    text
}

#[cfg(test)]
mod tests;
