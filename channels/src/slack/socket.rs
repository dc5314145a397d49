//! Socket Mode: sandpiper opens websocket(s) to Slack with the app-level token. The callbacks
//! are plain `fn`s (slack-morphism refuses closures), so the shared [`Ctx`] travels as the
//! listener's user state. Each callback hands its work to a task and returns at once, so the
//! envelope is acknowledged within Slack's 3 seconds; a slash command first checks (briefly)
//! that no node took it before, since its acknowledgement may carry the answer. A stopping
//! node acknowledges nothing more, so Slack sends what comes later to another connection.

use std::sync::Arc;

use slack_morphism::prelude::*;

use super::client::{Client, Connector, token};
use super::delivery::{self, Delivery};
use super::{Ctx, SlackError, Stopping, commands, events, take_on};

/// The running listener.
pub(crate) type Listener = SlackClientSocketModeListener<Connector>;

/// Opens the Socket Mode connections.
pub(crate) async fn listen(
    ctx: Arc<Ctx>,
    client: Arc<Client>,
    app_token: &str,
) -> Result<Listener, SlackError> {
    let callbacks = SlackSocketModeListenerCallbacks::new()
        .with_push_events(on_push)
        .with_interaction_events(on_interaction)
        .with_command_events(on_command);
    let environment = Arc::new(
        SlackClientEventsListenerEnvironment::new(client)
            .with_error_handler(on_error)
            .with_user_state(ctx),
    );
    let listener = SlackClientSocketModeListener::new(
        &SlackClientSocketModeConfig::new(),
        environment,
        callbacks,
    );
    listener
        .listen_for(&token(app_token))
        .await
        .map_err(|e| SlackError::Connect(format!("Socket Mode: {e}")))?;
    listener.start().await;
    Ok(listener)
}

async fn ctx_of(states: &SlackClientEventsUserState) -> Option<Arc<Ctx>> {
    states.read().await.get_user_state::<Arc<Ctx>>().cloned()
}

async fn on_push(
    event: SlackPushEventCallback,
    _client: Arc<Client>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    if let Some(ctx) = ctx_of(&states).await {
        let job = ctx.clone();
        take_on(&ctx, events::handle(job, event))?;
    }
    Ok(())
}

async fn on_interaction(
    event: SlackInteractionEvent,
    _client: Arc<Client>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    if let Some(ctx) = ctx_of(&states).await {
        let job = ctx.clone();
        take_on(&ctx, delivery::handle_interaction(job, event))?;
    }
    Ok(())
}

async fn on_command(
    event: SlackCommandEvent,
    _client: Arc<Client>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<SlackCommandEventResponse> {
    let Some(ctx) = ctx_of(&states).await else {
        return Ok(command_response(None));
    };
    if ctx.tasks.shutdown().is_cancelled() {
        return Err(Stopping.into());
    }
    // A command delivered before was answered then: this copy is acknowledged empty.
    let first = delivery::first_delivery(&ctx, Delivery::Trigger(&event.trigger_id.0)).await;
    let reply = if first {
        commands::ack(&ctx, event)
    } else {
        None
    };
    Ok(command_response(reply))
}

/// The acknowledgement of a slash command: an ephemeral reply, or nothing.
pub(crate) fn command_response(reply: Option<String>) -> SlackCommandEventResponse {
    let content = match reply {
        Some(text) => SlackMessageContent::new().with_text(text),
        None => SlackMessageContent::new(),
    };
    SlackCommandEventResponse::new(content)
}

fn on_error(
    err: Box<dyn std::error::Error + Send + Sync>,
    _client: Arc<Client>,
    _states: SlackClientEventsUserState,
) -> HttpStatusCode {
    // Not a success: slack-morphism then sends no acknowledgement.
    if err.is::<Stopping>() {
        tracing::debug!("left a Socket Mode envelope unacknowledged: this node is stopping");
        return HttpStatusCode::SERVICE_UNAVAILABLE;
    }
    tracing::warn!(error = %err, "slack socket mode error");
    HttpStatusCode::OK
}
