//! Fitting every model call in the context window (see [`crate::turn::context`]): the output limit
//! each request sends, compaction before a request would not fit, and one retry after
//! compacting when the server says the context is full or refuses the history.
//!
//! What is sent is the workstream's checkpoint (the note opening the history) and its history from
//! `ws.context.start` on; compaction moves that start forward and writes a new checkpoint.
//! The messages themselves stay in the store, where `recall` finds them.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use super::models::ModelChoice;
use super::{Agent, AgentError, TurnRequest};
use crate::model::{AssembledResponse, CacheKey, ChatRequest, Message, ModelEvent, ToolSchema};
use crate::protocol::{Compacting, TurnEvent, TurnSink};
use crate::store::checkpoints::Checkpoint;
use crate::store::usage::ModelCall;
use crate::turn::context::compact::{self, SUMMARY_INSTRUCTIONS};
use crate::turn::context::estimate::{self, Observed};
use crate::turn::context::overflow::{self, Refusal};
use crate::turn::context::{Budget, ContextWindow, MIN_WINDOW, WindowSource, window};
use crate::turn::nudge::NudgeKind;
use crate::workstream::Workstream;
use tokio_util::sync::CancellationToken;

/// How a compaction chooses what to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Depth {
    /// Shorten old tool outputs; summarise older turns only if that is not enough.
    Needed,
    /// Summarise older turns even if shortening would do (the server said it is full, or a
    /// person asked).
    Summarise,
    /// Keep only the last turn's end verbatim: the server refused something in the history.
    Everything,
    /// A person asked (`/compact`): summarise all but the last turn.
    Requested,
}

/// What one compaction did, for the thread and `/compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Compaction {
    /// Messages now summarised in the checkpoint that were sent verbatim before.
    pub summarised: usize,
    /// Old tool outputs shortened to their head and tail.
    pub shortened: usize,
    /// Estimated prompt tokens before.
    pub before: u64,
    /// Estimated prompt tokens after.
    pub after: u64,
}

impl Compaction {
    /// Whether anything changed.
    pub fn changed(&self) -> bool {
        self.summarised > 0 || self.shortened > 0
    }

    /// The one line the thread is told.
    pub fn describe(&self, window: u64) -> String {
        let mut what = Vec::new();
        if self.summarised > 0 {
            what.push(format!(
                "{} older message{} summarised",
                self.summarised,
                if self.summarised == 1 { "" } else { "s" }
            ));
        }
        if self.shortened > 0 {
            what.push(format!(
                "{} old tool output{} shortened",
                self.shortened,
                if self.shortened == 1 { "" } else { "s" }
            ));
        }
        format!(
            "🗜 Compacted this conversation to fit the model's context window: {} (about {} → {} tokens of {window}). The full history stays; recall finds it.",
            what.join(", "),
            self.before,
            self.after
        )
    }
}

/// Where a compaction reports and what stops it.
#[derive(Clone, Copy)]
struct Reach<'a> {
    sink: &'a dyn TurnSink,
    cancel: &'a CancellationToken,
    /// Whether a turn compacts (its summary's tokens are charged to whom the turn is, see
    /// `Workstream::charged_to`); not for `/compact`.
    in_turn: bool,
}

impl<'a> From<&'a TurnRequest<'_>> for Reach<'a> {
    fn from(req: &'a TurnRequest<'_>) -> Self {
        Self {
            sink: req.sink,
            cancel: &req.cancel,
            in_turn: true,
        }
    }
}

/// A request's parts that do not change while it is fitted.
struct Parts<'a> {
    /// The system message (the same from one call to the next).
    system: &'a str,
    offered: &'a [ToolSchema],
    tools_bytes: u64,
}

impl Agent {
    /// The configured model's context window (see [`Agent::window_of`]).
    pub async fn context_window(&self) -> ContextWindow {
        self.window_of(self.inner.models.default()).await
    }

    /// The context window of `model`: `[model] context_window` for the configured model,
    /// else what the server says (asked once), else the known default for the model family;
    /// lowered when a server's context error showed it smaller.
    pub(super) async fn window_of(&self, model: &ModelChoice) -> ContextWindow {
        let config = &self.inner.config.model;
        let configured = config
            .context_window
            .filter(|_| model.name() == config.model);
        let found = model
            .window
            .get_or_init(|| async {
                let window = match configured {
                    Some(tokens) => ContextWindow {
                        tokens,
                        source: WindowSource::Config,
                    },
                    None => match model.client.server_context_window().await {
                        Some((tokens, what)) => ContextWindow {
                            tokens: tokens.max(MIN_WINDOW),
                            source: WindowSource::Server(what),
                        },
                        None => window::known_default(config.provider, model.name()),
                    },
                };
                tracing::info!(model = model.name(), tokens = window.tokens, source = %window.source, "context window");
                window
            })
            .await;
        match model.learned() {
            Some(learned) if learned < found.tokens || found.is_guess() => ContextWindow {
                tokens: learned,
                source: WindowSource::Learned,
            },
            _ => found.clone(),
        }
    }

    /// The model `ws` answers with (see [`Workstream::model`]).
    pub(super) fn model_for(&self, ws: &Workstream) -> Arc<ModelChoice> {
        self.inner.models.of(ws.model.as_deref())
    }

    /// `/compact`: summarises all but the last turn of `workstream` now. `None` when a turn
    /// is running there (it would change under it) — try again when it ends.
    pub async fn compact_now(
        &self,
        workstream: &str,
        sink: &dyn TurnSink,
    ) -> Result<Option<(Compaction, ContextWindow)>, AgentError> {
        let handle = self.inner.workstreams.get(workstream, None).await?;
        let Ok(mut ws) = handle.try_lock() else {
            return Ok(None);
        };
        let window = self.window_of(&self.model_for(&ws)).await;
        let budget = self.budget(&window);
        let parts = Parts {
            system: "",
            offered: &[],
            tools_bytes: ws.context.fixed_bytes,
        };
        let cancel = CancellationToken::new();
        let reach = Reach {
            sink,
            cancel: &cancel,
            in_turn: false,
        };
        // Its token is never cancelled, so the compaction always ends.
        let done = self
            .compact(&mut ws, reach, &parts, &window, &budget, Depth::Requested)
            .await?
            .unwrap_or_default();
        Ok(Some((done, window)))
    }

    fn budget(&self, window: &ContextWindow) -> Budget {
        let config = &self.inner.config;
        Budget::new(
            window,
            config.model.output_cap(window.tokens),
            config.agent.compact_threshold,
        )
    }

    /// One model call, fitted in the window: compacts first when the request would not fit,
    /// sends an output limit the window can hold, and after a context or history refusal
    /// compacts and tries once more. `None` when the turn was stopped.
    pub(super) async fn model_call(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        system: &str,
        offered: &[ToolSchema],
    ) -> Result<Option<AssembledResponse>, AgentError> {
        let parts = Parts {
            system,
            offered,
            tools_bytes: estimate::tools_bytes(offered),
        };
        let mut retried = false;
        let model = self.model_for(ws);
        loop {
            let window = self.window_of(&model).await;
            let budget = self.budget(&window);
            let Some(prompt) = self.fit(ws, req, &parts, &window, &budget).await? else {
                return Ok(None);
            };
            // A guessed window never refuses: the server's answer, or its refusal, tells.
            let limit = budget
                .output_limit(prompt)
                .or_else(|| window.is_guess().then_some(budget.output_cap));
            let Some(max_tokens) = limit else {
                return Err(self.too_large(ws, &parts, &window));
            };
            bake_nudge(ws);
            ws.store_notes(&self.inner.store).await?;
            let bytes = request_bytes(ws, &parts);
            ws.context.last_prompt_tokens = prompt;
            ws.context.fixed_bytes = estimate::request_bytes(parts.system, &[], parts.tools_bytes);
            let error = match self
                .stream(&model, ws, req, parts.system, offered, Some(max_tokens))
                .await
            {
                Ok(Some(response)) => {
                    let limit = (max_tokens, budget.output_cap);
                    return Ok(Some(self.answered(ws, req, response, bytes, limit)));
                }
                Ok(None) => return Ok(None),
                Err(AgentError::Model(e)) => e,
                Err(e) => return Err(e),
            };
            let Some(refusal) = overflow::classify(&error) else {
                return Err(error.into());
            };
            tracing::warn!(workstream = %ws.key, ?refusal, retried, "the model server refused the request");
            match (refusal, retried) {
                (
                    Refusal::ContextFull {
                        window: told,
                        prompt: counted,
                    },
                    false,
                ) => {
                    learn_window(&model, &window, told, prompt);
                    if let Some(tokens) = counted {
                        self.inner.gauge.observe(bytes, tokens);
                        ws.context.observed = Some(Observed { bytes, tokens });
                    }
                    let window = self.window_of(&model).await;
                    let budget = self.budget(&window);
                    let compacted = self
                        .compact(ws, req.into(), &parts, &window, &budget, Depth::Summarise)
                        .await?;
                    if compacted.is_none() {
                        return Ok(None);
                    }
                }
                (Refusal::History { .. }, false) => {
                    let compacted = self
                        .compact(ws, req.into(), &parts, &window, &budget, Depth::Everything)
                        .await?;
                    if compacted.is_none() {
                        return Ok(None);
                    }
                }
                (Refusal::ContextFull { .. }, true) => {
                    return Err(AgentError::ContextFull {
                        window,
                        server: error.to_string(),
                    });
                }
                (Refusal::History { message }, true) => {
                    return Err(AgentError::HistoryRefused { message });
                }
            }
            retried = true;
        }
    }

    /// Bookkeeping after an answer: calibrates the estimate by the prompt tokens the server
    /// counted, and ends an answer cut off at the output limit cleanly (a call cut off with
    /// it cannot run, so none is kept).
    fn answered(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        mut response: AssembledResponse,
        bytes: u64,
        (max_tokens, output_cap): (u32, u32),
    ) -> AssembledResponse {
        ws.context.nudge_pending = false;
        let counted = response.usage.input_tokens;
        if counted > 0 {
            self.inner.gauge.observe(bytes, counted);
            ws.context.observed = Some(Observed {
                bytes,
                tokens: counted,
            });
            ws.context.last_prompt_tokens = counted;
        }
        if matches!(
            response.finish_reason.as_deref(),
            Some("length" | "max_tokens")
        ) {
            let calls = std::mem::take(&mut response.tool_calls);
            tracing::info!(workstream = %ws.key, max_tokens, dropped_calls = calls.len(), "answer cut off at the output limit");
            let model = &self.inner.config.model;
            let cap = match model.max_tokens {
                Some(cap) => format!("[model] max_tokens is {cap}"),
                None => "[model] max_tokens sets it".to_owned(),
            };
            let why = if max_tokens < output_cap {
                format!("the {max_tokens} tokens the context window left for it ({cap})")
            } else {
                format!("{max_tokens} tokens ({cap})")
            };
            let dropped = if calls.is_empty() {
                String::new()
            } else {
                "; the tool call it was writing was not run".to_owned()
            };
            req.sink.event(TurnEvent::Notice(format!(
                "✂ The answer was cut off at the output limit of {why}{dropped}. Say \"continue\" for the rest."
            )));
        }
        response
    }

    /// Compacts when the next request would pass the budget; returns its estimated prompt
    /// tokens, `None` when the turn was stopped while compacting. Also fires the memory nudge
    /// as the conversation nears compaction.
    async fn fit(
        &self,
        ws: &mut Workstream,
        req: &TurnRequest<'_>,
        parts: &Parts<'_>,
        window: &ContextWindow,
        budget: &Budget,
    ) -> Result<Option<u64>, AgentError> {
        let prompt = self.estimate(ws, parts);
        if prompt <= budget.prompt_budget() {
            // Nearing compaction: the memory nudge, before anything is summarised away.
            if prompt > budget.prompt_budget() / 100 * 85
                && ws.nudges.fire(NudgeKind::Compaction, Instant::now())
            {
                ws.context.nudge_pending = true;
                return Ok(Some(self.estimate(ws, parts)));
            }
            return Ok(Some(prompt));
        }
        let compacted = self
            .compact(ws, req.into(), parts, window, budget, Depth::Needed)
            .await?;
        Ok(compacted.map(|_| self.estimate(ws, parts)))
    }

    /// The estimated prompt tokens of the request as it would be sent now, counted without
    /// building it.
    fn estimate(&self, ws: &Workstream, parts: &Parts<'_>) -> u64 {
        let mut bytes = request_bytes(ws, parts);
        if ws.context.nudge_pending {
            bytes += crate::turn::nudge::render(&[NudgeKind::Compaction]).len() as u64;
        }
        estimate::estimate(bytes, &self.inner.gauge, ws.context.observed)
    }

    /// Estimated tokens of the request's fixed part: the system message and the tools.
    fn fixed_tokens(&self, parts: &Parts<'_>) -> u64 {
        estimate::estimate(
            estimate::request_bytes(parts.system, &[], parts.tools_bytes),
            &self.inner.gauge,
            None,
        )
    }

    /// Compacts what is sent of `ws` (see [`Depth`]) and says so in the thread. `None` when
    /// the turn was stopped while the model summarised: then what is sent, the checkpoint and
    /// the thread are as they were, and nothing is said.
    async fn compact(
        &self,
        ws: &mut Workstream,
        req: Reach<'_>,
        parts: &Parts<'_>,
        window: &ContextWindow,
        budget: &Budget,
        depth: Depth,
    ) -> Result<Option<Compaction>, AgentError> {
        let before = self.estimate(ws, parts);
        let mut done = Compaction {
            before,
            after: before,
            ..Compaction::default()
        };
        // The memory nudge, with the first request after it (the model can act on it then).
        if ws.nudges.fire(NudgeKind::Compaction, Instant::now()) {
            ws.context.nudge_pending = true;
        }
        let start = ws.context.start;
        // The old outputs as they were, put back when the turn is stopped before the summary
        // comes: a stopped compaction changes nothing.
        let mut long_outputs: Vec<(usize, String)> = Vec::new();
        if depth != Depth::Everything {
            let recent = compact::recent_turns_start(ws.sent(), 2);
            let end = start + recent;
            long_outputs = (start..end)
                .filter(|&i| {
                    let m = &ws.history[i];
                    m.role == crate::model::Role::Tool
                        && m.content.len() > compact::OLD_OUTPUT_BYTES
                })
                .map(|i| (i, ws.history[i].content.clone()))
                .collect();
            if compact::shorten_old_outputs(&mut ws.history[start..end], recent) > 0 {
                done.shortened = long_outputs.len();
            }
            done.after = self.estimate(ws, parts);
        }
        let fits = done.after <= budget.prompt_budget();
        if depth == Depth::Needed && fits {
            self.announce(ws, req, &done, window);
            return Ok(Some(done));
        }
        // What stays verbatim: half of what the budget leaves beside the fixed part and the
        // checkpoint, so the conversation can grow a while before the next compaction.
        let per_token = self.inner.gauge.bytes_per_token();
        let fixed = self.fixed_tokens(parts);
        let summary_cap = summary_tokens(window);
        if fixed + summary_cap >= budget.prompt_budget() && depth != Depth::Requested {
            // Nothing the conversation gives up would make room: the caller says so.
            self.announce(ws, req, &done, window);
            return Ok(Some(done));
        }
        let room = budget
            .prompt_budget()
            .saturating_sub(fixed + summary_cap + 64);
        let split = match depth {
            Depth::Everything => compact::split_point(ws.sent(), 0),
            Depth::Requested => {
                Some(compact::recent_turns_start(ws.sent(), 1)).filter(|at| *at > 0)
            }
            Depth::Needed | Depth::Summarise => {
                compact::split_point(ws.sent(), (room as f64 * 0.5 * per_token) as u64)
            }
        };
        let Some(split) = split else {
            self.announce(ws, req, &done, window);
            return Ok(Some(done));
        };
        let older = ws.history[start..start + split].to_vec();
        let Some(summary) = self.summarise(ws, &older, window, req).await else {
            for (i, content) in long_outputs {
                ws.history[i].content = content;
            }
            tracing::info!(workstream = %ws.key, "compaction stopped with its turn");
            return Ok(None);
        };
        let upto = start + split;
        ws.context.start = upto;
        ws.context.summary = Some(summary);
        ws.context.compactions += 1;
        // The previous count anchored a request of another shape; the ratio alone is the
        // safer estimate until the server counts the compacted one.
        ws.context.observed = None;
        done.summarised = split;
        done.after = self.estimate(ws, parts);
        let checkpoint = Checkpoint {
            upto_seq: i64::try_from(upto).unwrap_or(i64::MAX),
            summary: ws.context.summary.clone().unwrap_or_default(),
            tokens_before: before,
            tokens_after: done.after,
        };
        self.inner
            .store
            .save_checkpoint(&ws.key, &checkpoint)
            .await?;
        self.announce(ws, req, &done, window);
        Ok(Some(done))
    }

    fn announce(&self, ws: &Workstream, req: Reach<'_>, done: &Compaction, window: &ContextWindow) {
        if !done.changed() {
            return;
        }
        tracing::info!(
            workstream = %ws.key,
            summarised = done.summarised,
            shortened = done.shortened,
            before = done.before,
            after = done.after,
            window = window.tokens,
            "compacted"
        );
        self.inner.metrics.compaction();
        req.sink
            .event(TurnEvent::Notice(done.describe(window.tokens)));
    }

    /// A checkpoint of `older` (and the `previous` one) written by the model, or a plain list
    /// of what was asked when the model fails or answers nothing; `None` when the turn was
    /// stopped first. The thread shows that it compacts meanwhile ([`Compacting`]).
    async fn summarise(
        &self,
        ws: &Workstream,
        older: &[Message],
        window: &ContextWindow,
        req: Reach<'_>,
    ) -> Option<String> {
        let model = self.model_for(ws);
        let workstream = ws.key.as_str();
        let previous = ws.context.summary.as_deref();
        let charged_to = ws.charged_to.as_deref().filter(|_| req.in_turn);
        let per_token = self.inner.gauge.bytes_per_token();
        let cap = summary_tokens(window);
        let fixed = SUMMARY_INSTRUCTIONS.len() as u64 + 64;
        let transcript_tokens = window.tokens.saturating_sub(cap + 64) * 3 / 4;
        let max_bytes = ((transcript_tokens as f64 * per_token) as u64).saturating_sub(fixed);
        let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let transcript = compact::transcript(previous, older, max_bytes);
        let messages = [Message::user(transcript)];
        let request = ChatRequest {
            system: SUMMARY_INSTRUCTIONS,
            messages: &messages,
            tools: &[],
            max_tokens: Some(u32::try_from(cap).unwrap_or(u32::MAX)),
            // Off the conversation's cache: its prompt shares nothing with the conversation's.
            cache_key: Some(CacheKey::Aside(workstream)),
        };
        let started = Instant::now();
        let shown = CompactingShown::start(req.sink);
        let written = tokio::select! {
            text = collect_text(model.client.as_ref(), request) => Some(text),
            () = req.cancel.cancelled() => None,
        };
        self.inner.metrics.model_call_ended(
            model.name(),
            written.as_ref().map(Result::is_ok),
            started.elapsed(),
        );
        let written = written?;
        shown.finish();
        if let Ok((_, usage)) = &written {
            let call = ModelCall::new(workstream, charged_to, model.name(), *usage);
            self.count_call(call).await;
        }
        Some(match written.map(|(text, _)| text) {
            Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
            Ok(_) => compact::mechanical_summary(previous, older, max_bytes.min(4000)),
            Err(e) => {
                tracing::warn!(error = %e, "the model could not write a checkpoint; keeping a plain one");
                compact::mechanical_summary(previous, older, max_bytes.min(4000))
            }
        })
    }

    /// What to say when even a compacted request leaves no room for an answer.
    fn too_large(
        &self,
        ws: &mut Workstream,
        parts: &Parts<'_>,
        window: &ContextWindow,
    ) -> AgentError {
        let fixed = self.fixed_tokens(parts);
        let first = !std::mem::replace(&mut ws.context.told_too_large, true);
        AgentError::ContextTooSmall {
            window: window.clone(),
            fixed,
            tools: parts.offered.len(),
            first,
        }
    }
}

/// Lowers `model`'s window after a context error: to the size the server named, else below
/// the request that did not fit.
fn learn_window(model: &ModelChoice, window: &ContextWindow, told: Option<u64>, prompt: u64) {
    let learned = told.unwrap_or_else(|| prompt.saturating_mul(9) / 10);
    let learned = learned.max(MIN_WINDOW);
    if learned < window.tokens || told.is_some() {
        tracing::warn!(
            model = model.name(),
            was = window.tokens,
            now = learned,
            "context window learned from the server's error"
        );
        model.learn(learned);
    }
}

/// The thread's [`Compacting`] line while the model summarises. Ending it on drop means a
/// turn stopped or dropped mid-summary still takes the line down, as stopped.
struct CompactingShown<'a> {
    sink: &'a dyn TurnSink,
    stopped: bool,
}

impl<'a> CompactingShown<'a> {
    fn start(sink: &'a dyn TurnSink) -> Self {
        sink.event(TurnEvent::Compacting(Compacting::Started));
        Self {
            sink,
            stopped: true,
        }
    }

    /// The summary came (or the model failed and a plain one is kept): compacted.
    fn finish(mut self) {
        self.stopped = false;
    }
}

impl Drop for CompactingShown<'_> {
    fn drop(&mut self) {
        let stopped = self.stopped;
        self.sink
            .event(TurnEvent::Compacting(Compacting::Ended { stopped }));
    }
}

/// The most tokens a checkpoint may take.
fn summary_tokens(window: &ContextWindow) -> u64 {
    (window.tokens / 8).clamp(128, 800)
}

/// The text of a model call without tools, not shown to anyone, and its token usage.
async fn collect_text(
    model: &dyn crate::model::ChatModel,
    request: ChatRequest<'_>,
) -> Result<(String, crate::model::Usage), crate::model::ModelError> {
    let mut stream = model.stream(request).await?;
    let mut text = String::new();
    let mut usage = crate::model::Usage::default();
    while let Some(event) = stream.next().await {
        match event? {
            ModelEvent::TextDelta(t) => text.push_str(&t),
            ModelEvent::Usage(u) => usage = u,
            ModelEvent::ToolCallDelta { .. } | ModelEvent::Done { .. } => {}
        }
    }
    Ok((text, usage))
}

/// The bytes of the request as it would be sent now: the system message, the tools, and the
/// history from the checkpoint on with its notes.
fn request_bytes(ws: &Workstream, parts: &Parts<'_>) -> u64 {
    let notes = ws.notes.bytes(ws.context.start)
        + ws.context
            .summary
            .as_deref()
            .map_or(0, crate::turn::request::checkpoint_note_len);
    estimate::request_bytes(parts.system, ws.sent(), parts.tools_bytes) + notes as u64
}

/// A compaction nudge that became due goes with this request, in the newest message's note.
fn bake_nudge(ws: &mut Workstream) {
    if !std::mem::take(&mut ws.context.nudge_pending) {
        return;
    }
    let newest = ws.history.len().saturating_sub(1);
    let nudge = crate::turn::nudge::render(&[NudgeKind::Compaction]);
    if let Some(note) = crate::turn::prompt::context_note(None, "", &nudge) {
        ws.notes.append(newest, &note);
    }
}
