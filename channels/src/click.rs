//! One router for every click on every platform: the id is parsed once ([`CardButton`]), the
//! agent decides ([`Agent::decide`], [`Agent::decide_all`], [`Agent::resume_click`]) or the
//! rule of [`crate::permissions`] says who may stop, and each outcome becomes a call on the
//! platform's [`ClickPlace`]: tell the clicker privately, redraw the card, open the note
//! dialog. A platform's `interactions.rs` only translates its payload into a [`ClickPlace`].
//!
//! A forged or unknown id is refused privately and changes nothing; so is a Stop button that
//! names another workstream than the one it was pressed in.

use sandpiper_agent::Agent;
use sandpiper_agent::approvals::{self, ClickAction};
use sandpiper_agent::approvals::{BatchClick, Click, ClickOutcome, ResumeClick, ResumeOutcome};
use sandpiper_agent::protocol::DecisionPath;

use crate::button::CardButton;
use crate::card::{ApprovalCard, TurnNote};
use crate::config::ThreadAccess;
use crate::permissions::{Refusal, Standing, may_stop};

/// The person who clicked, as the agent's rules need them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clicker {
    /// Their sandpiper user id (records name them by it).
    pub user_id: String,
    /// Their platform roles or user groups that may matter for these requests.
    pub roles: Vec<String>,
}

impl Clicker {
    /// Who clicked, as the agent's rules judge them on `place`: the same for every kind of
    /// click.
    fn on<'a>(&'a self, place: &'a dyn ClickPlace) -> approvals::Clicker<'a> {
        approvals::Clicker {
            user_id: &self.user_id,
            roles: &self.roles,
            approver_roles: place.approver_roles(),
        }
    }
}

/// What happened on the platform, and what the router can do there.
#[async_trait::async_trait]
pub trait ClickPlace: Send + Sync {
    /// The workstream of the thread the click happened in.
    fn workstream(&self) -> Option<String>;
    /// The request ids on the clicked card, in order (empty when it is not a card).
    fn card(&self) -> Vec<String>;
    /// `approver_roles` / `approver_usergroups` as this node is configured.
    fn approver_roles(&self) -> &[String];
    /// `thread_access` here.
    fn thread_access(&self) -> ThreadAccess;
    /// Who clicked, with their roles for `requests`; `Err` (shown) when it cannot be told.
    async fn clicker(&self, requests: &[String]) -> Result<Clicker, String>;
    /// Where the clicker stands in `workstream` (for Stop).
    async fn standing(&self, workstream: &str) -> Result<Standing, String>;
    /// Stops the turn running in `workstream` here or on its node; whether one ran.
    async fn stop(&self, workstream: &str) -> bool;
    /// Queues the resumed turn of `workstream` in its lane.
    fn resume(&self, workstream: &str, author: Option<String>);
    /// A request's header as the platform quotes it in a refusal.
    fn quote(&self, header: &str) -> String;
    /// Tells only the clicker.
    async fn tell(&self, text: &str);
    /// Replaces the clicked card with `card`.
    async fn redraw(&self, card: &ApprovalCard);
    /// Opens the note dialog that comes back as `button`; `Err` (told) when it cannot.
    async fn open_note(&self, button: &CardButton, header: &str) -> Result<(), String>;
}

/// Handles a click on the button `id` (with the note of a submitted dialog).
pub async fn on_click(agent: &Agent, place: &dyn ClickPlace, id: &str, note: Option<String>) {
    let button: CardButton = match id.parse() {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(button = id, error = %e, "unknown or forged button");
            return place.tell(&Refusal::UnknownButton.to_string()).await;
        }
    };
    if let Err(e) = route(agent, place, button, note).await {
        tracing::warn!(button = id, error = %e, "handling a click failed");
        let text = format!("⚠️ That did not go through ({e}). Please try again in a moment.");
        place.tell(&text).await;
    }
}

/// A click handled, or why it could not be (told to the clicker).
type Handled = Result<(), String>;

async fn route(
    agent: &Agent,
    place: &dyn ClickPlace,
    button: CardButton,
    note: Option<String>,
) -> Handled {
    match button {
        CardButton::Stop { workstream } => stop(place, &workstream).await,
        CardButton::Decide { request, action } => {
            decide(agent, place, &request, action, note, DecisionPath::Button).await
        }
        CardButton::Note { request, action } => {
            decide(
                agent,
                place,
                &request,
                action,
                note,
                DecisionPath::NoteDialog,
            )
            .await
        }
        CardButton::DecideAll { first, approve } => decide_all(agent, place, &first, approve).await,
        CardButton::Resume { request } => resume(agent, place, &request).await,
    }
}

/// The requests a click redraws: the card's, else the one it names.
fn card_or(place: &dyn ClickPlace, request: &str) -> Vec<String> {
    let card = place.card();
    if card.is_empty() {
        vec![request.to_owned()]
    } else {
        card
    }
}

async fn redraw(agent: &Agent, place: &dyn ClickPlace, ids: &[String], note: Option<TurnNote>) {
    if let Some(card) = ApprovalCard::load(agent, ids).await {
        place.redraw(&card.with_turn(note)).await;
    }
}

/// Stop on a live answer: whoever [`may_stop`] here.
async fn stop(place: &dyn ClickPlace, workstream: &str) -> Handled {
    if place.workstream().as_deref() != Some(workstream) {
        tracing::warn!(workstream, "a Stop button for another thread");
        place.tell(&Refusal::UnknownButton.to_string()).await;
        return Ok(());
    }
    let who = place.standing(workstream).await?;
    if let Err(refusal) = may_stop(place.thread_access(), who) {
        place.tell(&refusal.to_string()).await;
        return Ok(());
    }
    let text = if place.stop(workstream).await {
        "⏹️ Stopping."
    } else {
        "Nothing is running here."
    };
    place.tell(text).await;
    Ok(())
}

/// One answer to one request; a with-note answer without its note opens the dialog.
async fn decide(
    agent: &Agent,
    place: &dyn ClickPlace,
    request: &str,
    action: ClickAction,
    note: Option<String>,
    path: DecisionPath,
) -> Handled {
    let who = place.clicker(&[request.to_owned()]).await?;
    let has_note = note.is_some();
    let outcome = agent
        .decide(Click {
            request_id: request,
            action,
            clicker: who.on(place),
            note,
            path,
            grant: None,
        })
        .await
        .map_err(|e| e.to_string())?;
    let ids = card_or(place, request);
    match outcome {
        ClickOutcome::Unknown => place.tell(&Refusal::UnknownRequest.to_string()).await,
        ClickOutcome::Refused(reason) => place.tell(&Refusal::Click(reason).to_string()).await,
        ClickOutcome::NeedsNote if has_note => place.tell("A note is needed.").await,
        ClickOutcome::NeedsNote => {
            let header = ApprovalCard::load(agent, &[request.to_owned()])
                .await
                .and_then(|c| c.rows.into_iter().next())
                .map(|r| r.item.header)
                .unwrap_or_default();
            let dialog = CardButton::Note {
                request: request.to_owned(),
                action,
            };
            if let Err(e) = place.open_note(&dialog, &header).await {
                let text = format!("Could not open the note dialog ({e}); please click again.");
                place.tell(&text).await;
            }
        }
        ClickOutcome::Decided { turn, .. } => {
            redraw(agent, place, &ids, TurnNote::after(turn)).await;
        }
        ClickOutcome::Gone(_) => redraw(agent, place, &ids, None).await,
    }
    Ok(())
}

/// Approve all / Deny all: each pending request on the card, each checked on its own; the
/// card is redrawn when anything was decided and the clicker is told privately which requests
/// they could not decide, and why.
async fn decide_all(agent: &Agent, place: &dyn ClickPlace, first: &str, approve: bool) -> Handled {
    let ids = card_or(place, first);
    if !ids.iter().any(|id| id == first) {
        tracing::warn!(first, "an Approve all button for another card");
        place.tell(&Refusal::UnknownButton.to_string()).await;
        return Ok(());
    }
    let who = place.clicker(&ids).await?;
    let action = if approve {
        ClickAction::Approve
    } else {
        ClickAction::Deny
    };
    let outcome = agent
        .decide_all(BatchClick {
            request_ids: &ids,
            action,
            clicker: who.on(place),
            path: DecisionPath::Button,
        })
        .await;
    let refusal = outcome.refusal_text(|h| place.quote(h));
    if outcome.changed || refusal.is_none() {
        redraw(agent, place, &ids, outcome.turn.and_then(TurnNote::after)).await;
    }
    if let Some(text) = refusal {
        place.tell(&text).await;
    }
    Ok(())
}

/// Resume on a card whose turn stopped running: the owner or an approver queues the turn in
/// its thread's lane and the card says who resumed it; anyone else is told privately why not.
async fn resume(agent: &Agent, place: &dyn ClickPlace, request: &str) -> Handled {
    let who = place.clicker(&[request.to_owned()]).await?;
    let outcome = agent
        .resume_click(ResumeClick {
            request_id: request,
            clicker: who.on(place),
        })
        .await
        .map_err(|e| e.to_string())?;
    match outcome {
        ResumeOutcome::Unknown => place.tell(&Refusal::UnknownRequest.to_string()).await,
        ResumeOutcome::Refused(reason) => place.tell(&Refusal::Click(reason).to_string()).await,
        ResumeOutcome::NothingToResume => {
            let text = "There is nothing left to resume: that turn was resumed already or the \
                        thread moved on.";
            place.tell(text).await;
        }
        ResumeOutcome::Resume {
            workstream,
            author,
            by,
        } => {
            tracing::info!(%workstream, "resuming an interrupted turn");
            place.resume(&workstream, author);
            let note = TurnNote::Resumed { by };
            redraw(agent, place, &card_or(place, request), Some(note)).await;
        }
    }
    Ok(())
}
