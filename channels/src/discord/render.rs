//! How sandpiper looks on Discord: stream [`Post`]s and [`ApprovalCard`]s as message bodies
//! (content, embeds, buttons). Nothing the bot posts can ping anyone: allowed mentions are
//! empty on every body.

use sandpiper_agent::approvals::ClickAction;
use sandpiper_agent::protocol::ApprovalStatus;

use sandpiper_agent::workstream::WorkstreamKey;

use crate::button::CardButton;
use serenity::all::{
    ActionRowComponent, ButtonStyle, CreateActionRow, CreateAllowedMentions, CreateButton,
    CreateEmbed, CreateInteractionResponseMessage, CreateMessage, EditInteractionResponse,
    EditMessage, Message,
};

use crate::card::{ApprovalCard, RESUME_LABEL, header, outcome_line, preview};
use crate::stream::{Post, ToolLine, ToolState};

/// Discord's message content limit.
pub const LIMIT: usize = 2000;

/// A message body, convertible into each serenity builder.
#[derive(Debug, Clone, Default)]
pub struct Body {
    /// Text content.
    pub content: String,
    /// Embeds.
    pub embeds: Vec<CreateEmbed>,
    /// Rows of buttons (an empty list removes the buttons on edit).
    pub components: Vec<CreateActionRow>,
}

impl Body {
    fn text(content: String) -> Self {
        Self {
            content: clip(&content, LIMIT),
            ..Self::default()
        }
    }

    /// For `POST /channels/{c}/messages`.
    pub fn create(&self) -> CreateMessage {
        CreateMessage::new()
            .content(&self.content)
            .embeds(self.embeds.clone())
            .components(self.components.clone())
            .allowed_mentions(CreateAllowedMentions::new())
    }

    /// For `PATCH /channels/{c}/messages/{m}`.
    pub fn edit(&self) -> EditMessage {
        EditMessage::new()
            .content(&self.content)
            .embeds(self.embeds.clone())
            .components(self.components.clone())
            .allowed_mentions(CreateAllowedMentions::new())
    }

    /// For an interaction response that replaces the clicked message.
    pub fn response(&self) -> CreateInteractionResponseMessage {
        CreateInteractionResponseMessage::new()
            .content(&self.content)
            .embeds(self.embeds.clone())
            .components(self.components.clone())
            .allowed_mentions(CreateAllowedMentions::new())
    }

    /// For editing a deferred interaction's message.
    pub fn edit_response(&self) -> EditInteractionResponse {
        EditInteractionResponse::new()
            .content(&self.content)
            .embeds(self.embeds.clone())
            .components(self.components.clone())
            .allowed_mentions(CreateAllowedMentions::new())
    }
}

/// An ephemeral reply (only the clicker sees it).
pub fn ephemeral(text: &str) -> CreateInteractionResponseMessage {
    CreateInteractionResponseMessage::new()
        .content(clip(text, LIMIT))
        .ephemeral(true)
        .allowed_mentions(CreateAllowedMentions::new())
}

/// The request ids named by a card's buttons, in order.
pub fn card_requests(message: &Message) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for row in &message.components {
        for c in &row.components {
            if let ActionRowComponent::Button(b) = c
                && let serenity::all::ButtonKind::NonLink { custom_id, .. } = &b.data
                && let Ok(CardButton::Decide { request, .. }) = custom_id.parse()
                && !ids.contains(&request)
            {
                ids.push(request);
            }
        }
    }
    ids
}

/// Approve all (`approve`) or Deny all on a card whose first request is `first`.
fn all_id(first: &str, approve: bool) -> CardButton {
    CardButton::DecideAll {
        first: first.to_owned(),
        approve,
    }
}

/// A stream post. The turn's live message (its answer while it streams, a tool call while it
/// runs or waits for approval) carries **Stop**, so Stop is there for the whole turn.
pub fn post(post: &Post, channel: u64) -> Body {
    let (mut body, live) = match post {
        Post::Answer { text, live } => (Body::text(text.clone()), *live),
        Post::Tool(line) => (Body::text(tool_line(line)), line.is_live()),
        Post::Notice(text) => (Body::text(format!("ℹ️ {text}")), false),
        Post::Waiting(text) => (Body::text(format!("⏳ {text}")), false),
        Post::Progress { text, live } => (Body::text(text.clone()), *live),
        Post::Error(text) => (Body::text(format!("⚠️ {text}")), false),
    };
    if live {
        let stop = CardButton::Stop {
            workstream: WorkstreamKey::Discord { channel }.to_string(),
        };
        body.components = vec![CreateActionRow::Buttons(vec![
            CreateButton::new(stop.to_string())
                .label("Stop")
                .style(ButtonStyle::Secondary),
        ])];
    }
    body
}

fn tool_line(line: &ToolLine) -> String {
    let (mark, state) = match line.state {
        ToolState::AwaitingApproval => ("⏳", "waiting for approval"),
        ToolState::Running => ("⚙️", "running"),
        ToolState::Done => ("✅", "done"),
        ToolState::Failed => ("❌", "error"),
    };
    let mut out = format!(
        "{mark} **{}** `{}` — {state}",
        line.name,
        inline(&line.header)
    );
    if !line.output.is_empty() {
        let budget = LIMIT - out.len().min(LIMIT) - 40;
        out.push_str(&format!(
            "\n```\n{}\n```",
            fence_safe(&clip_tail(&line.output, budget))
        ));
    }
    if line.attached {
        out.push_str("\n*(full output attached)*");
    }
    out
}

/// An approval card.
pub fn card(card: &ApprovalCard, timeout: &str) -> Body {
    let pending = card.rows.iter().filter(|r| r.status.is_pending()).count();
    let content = match (card.rows.len(), pending) {
        (1, 1) if card.is_review() => "📝 **Review needed**".to_owned(),
        (1, 0) if card.is_review() => "📝 Review: decided".to_owned(),
        (1, 1) => "🔐 **Approval needed**".to_owned(),
        (n, 0) => format!(
            "🔐 Approval: {n} call{} decided",
            if n == 1 { "" } else { "s" }
        ),
        (n, p) => format!("🔐 **Approval needed** — {p} of {n} calls waiting"),
    };
    let numbered = card.is_batch();
    let mut embeds = Vec::new();
    let mut components = Vec::new();
    for (i, row) in card.rows.iter().enumerate() {
        let label = |text: &str| {
            if numbered {
                format!("{}. {text}", i + 1)
            } else {
                text.to_owned()
            }
        };
        let mut description = format!("`{}`", inline(&row.item.header));
        if !row.item.preview.trim().is_empty() && row.item.preview.trim() != row.item.header.trim()
        {
            description.push_str(&format!(
                "\n```\n{}\n```",
                preview(row.item.preview.trim_end())
            ));
        }
        let colour = match row.status {
            ApprovalStatus::Pending => 0xF1C40F,
            ApprovalStatus::Approved
            | ApprovalStatus::AlwaysAllowed
            | ApprovalStatus::Annotated => 0x2ECC71,
            ApprovalStatus::Denied | ApprovalStatus::TimedOut => 0xE74C3C,
            ApprovalStatus::Cancelled => 0x95A5A6,
        };
        if let Some(outcome) = outcome_line(row, timeout) {
            description.push_str(&format!("\n{outcome}"));
        }
        embeds.push(
            CreateEmbed::new()
                .title(label(&row.item.name))
                .description(description)
                .colour(colour),
        );
        let done = !row.status.is_pending();
        let buttons = ClickAction::for_kind(row.item.kind)
            .iter()
            .map(|&action| {
                let id = CardButton::Decide {
                    request: row.item.request_id.clone(),
                    action,
                };
                CreateButton::new(id.to_string())
                    .label(label(action.label()))
                    .style(style(action))
                    .disabled(done)
            })
            .collect();
        components.push(CreateActionRow::Buttons(buttons));
        // Its own row (a row holds five buttons): only on a card of one request, so a batch
        // of four stays within Discord's five rows.
        if !done
            && card.rows.len() == 1
            && let Some((pattern, text)) = CardButton::always_allow_pattern(
                &row.item.request_id,
                &row.item.name,
                &row.item.preview,
            )
        {
            components.push(CreateActionRow::Buttons(vec![
                CreateButton::new(pattern.to_string())
                    .label(label(&text))
                    .style(ButtonStyle::Primary),
            ]));
        }
    }
    let mut last_row = Vec::new();
    if card.offers_all()
        && let Some(first) = card.rows.first()
    {
        last_row.push(
            CreateButton::new(all_id(&first.item.request_id, true).to_string())
                .label("Approve all")
                .style(ButtonStyle::Success)
                .disabled(pending == 0),
        );
        last_row.push(
            CreateButton::new(all_id(&first.item.request_id, false).to_string())
                .label("Deny all")
                .style(ButtonStyle::Danger)
                .disabled(pending == 0),
        );
    }
    let mut content = content;
    if let Some(note) = &card.turn {
        content.push_str(&format!("\n{}", note.text()));
        // Beside Approve all / Deny all, so a card of four rows stays within five rows.
        if note.offers_resume()
            && let Some(first) = card.rows.first()
        {
            last_row.push(
                CreateButton::new(
                    CardButton::Resume {
                        request: first.item.request_id.clone(),
                    }
                    .to_string(),
                )
                .label(RESUME_LABEL)
                .style(ButtonStyle::Primary),
            );
        }
    }
    if !last_row.is_empty() {
        components.push(CreateActionRow::Buttons(last_row));
    }
    Body {
        content,
        embeds,
        components,
    }
}

/// How a button looks: the yes green, the no red, Always allow blue, the rest grey.
fn style(action: ClickAction) -> ButtonStyle {
    match action {
        ClickAction::Approve | ClickAction::Accept => ButtonStyle::Success,
        ClickAction::Deny | ClickAction::Reject => ButtonStyle::Danger,
        ClickAction::AlwaysAllow
        | ClickAction::AlwaysAllowPattern
        | ClickAction::AlwaysAllowServer => ButtonStyle::Primary,
        ClickAction::ApproveWithNote | ClickAction::DenyWithNote | ClickAction::Annotate => {
            ButtonStyle::Secondary
        }
    }
}

/// A model-written header for inline code: one line, escapes spelled out, no backticks.
fn inline(text: &str) -> String {
    let one_line = header(text).replace('`', "ˋ");
    clip(&one_line, 200)
}

fn fence_safe(text: &str) -> String {
    text.replace("```", "`\u{200b}``")
}

/// At most `max` characters, cut with an ellipsis.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The last `max` characters.
fn clip_tail(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let mut out = String::from("…");
    out.extend(text.chars().skip(n - max + 1));
    out
}

#[cfg(test)]
mod tests;
