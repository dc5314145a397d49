//! prepare → approve → execute for one batch of tool calls (the reference's "Execution
//! Pipeline").
//!
//! - **Prepare** every call: parse arguments (with repair and the primary-key fallback),
//!   validate them against the schema, deserialize them once into the tool's typed `Args`
//!   ([`DynTool`]), let the tool describe the call. An unknown tool or bad arguments become an
//!   error result for the model; the rest of the batch goes on.
//! - **Approve** the calls that need it in one round-trip to the channel, through the
//!   [approval engine](crate::approvals), which stores every outcome. A call asks when its
//!   tool's JSON says `auto_approve: false` or the tool raises it for this call
//!   ([`needs_approval`]); `auto_approve` sessions and always-allow grants never block. A
//!   call that runs unasked is recorded in the audit trail with why, and a call under a grant
//!   says so on its tool line. The grants are read fresh for every batch, so a revoke applies
//!   to the next call.
//! - **Execute** approved calls, at most `max_parallel` at once. Each result is committed at
//!   its position in the model's call order (`seq` reserved up front) and only then shown.
//!
//! Connector policy is checked first, for every call that reaches an MCP server (by its
//! `mcp__<server>__` name, or through `read_resource` / `use_prompt`): resolved fresh from the
//! store, a disallowed server's call becomes `Connector <server> is not enabled for this task`
//! without being prepared, asked about or run, and an unreadable policy refuses the call.
//! Calls that waited for approval are checked again just before they run.
//!
//! Tools that act in the turn (the sub-agents `task` and `plan`,
//! [`Tool::IN_TURN`](crate::tools::Tool::IN_TURN)) run with
//! the turn ([`TurnLink`]) and, when it is stopped, get [`IN_TURN_GRACE`] to wind down. A
//! sub-agent's own batches are [`Nested`]: results go to its history, approvals to the
//! parent's thread marked as its own, and only its tool set may be called.
//!
//! The client-side `tool_search` tool is answered here too (when [`Batch::tool_search`] is
//! set): it is prepared like any call, needs no approval and its result is committed in call
//! order, so a batch that mixes it with other calls keeps every result at its `seq`. The tools
//! it found come back in [`BatchOutcome::expanded`].

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::approvals::ledger::{self, Change, UnaskedCall};
use crate::approvals::{self, Answer, AskContext, GrantedBy, Grants, NewRequest};
use crate::connectors;
use crate::model::{Message, ToolCall};
use crate::protocol::{
    ApprovalKind, ApprovalOutcome, Approver, Decision, ToolCallView, TurnEvent, TurnSink, Verdict,
};
use crate::store::audit::AutoReason;
use crate::store::{Store, StoreError};
use crate::tools::{
    DynTool, InTurn, McpCall, OutputSink, ReadyCall, ToolContext, ToolError, ToolOutput,
    ToolRegistry, needs_approval, parse_arguments, truncate_output, validate_arguments,
};
use crate::turn::tool_search::{ClientToolSearch, TOOL_SEARCH, run_tool_search};
use serde_json::Value;

/// Everything one batch needs.
pub struct Batch<'a> {
    /// Built-in tools.
    pub registry: &'a ToolRegistry,
    /// Where results and approval requests are committed.
    pub store: &'a Store,
    /// What tools may use (workdir, files read, cancellation).
    pub tool_ctx: ToolContext,
    /// Workstream key.
    pub workstream: &'a str,
    /// `seq` of the first tool result; result `i` is stored at `first_seq + i`.
    pub first_seq: i64,
    /// Who started the turn.
    pub requested_by: Option<&'a str>,
    /// Approve everything (`--yes`, `[approval] auto_approve`).
    pub auto_approve: bool,
    /// How long to wait for a decision; zero waits forever.
    pub approval_timeout: Duration,
    /// Calls running at once.
    pub max_parallel: usize,
    /// Cap on a result's text.
    pub max_output_bytes: usize,
    /// Where events go.
    pub sink: &'a dyn TurnSink,
    /// Who decides approvals.
    pub approver: &'a dyn Approver,
    /// Client-side tool search, when it is active for this model.
    pub tool_search: Option<ClientToolSearch<'a>>,
    /// The turn, for tools that act in it (sub-agents); `None` gives them no turn, so they
    /// refuse to run (a sub-agent's own batches, benchmarks).
    pub turn: Option<TurnLink<'a>>,
    /// Set for a sub-agent's batch: whose thread asks and which tools it may call.
    pub nested: Option<Nested<'a>>,
}

/// What tools that act in the turn get from it besides the batch (see [`InTurn`]).
#[derive(Clone, Copy)]
pub struct TurnLink<'a> {
    /// The agent.
    pub agent: &'a crate::Agent,
    /// The turn's own approver (a resumed turn's batch asks stored decisions instead).
    pub approver: &'a dyn Approver,
}

/// A sub-agent's batch: its results go to its own history ([`Batch::workstream`]); its
/// approvals go to the parent's thread, marked as the sub-agent's, under the thread's rules,
/// grants and connector policy.
#[derive(Debug, Clone, Copy)]
pub struct Nested<'a> {
    /// The parent workstream: where cards go and whose grants and policy apply.
    pub thread: &'a str,
    /// Put before each header, e.g. `task: fix the tests`.
    pub label: &'a str,
    /// The parent's call that runs the sub-agent; a request's `call_id` is
    /// `<parent call>/<call>`, so it never passes for one of the parent's calls.
    pub parent_call: &'a str,
    /// The built-in tools it may call (MCP tools pass by connector policy).
    pub tools: &'a BTreeSet<String>,
}

/// What a batch produced.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// One tool result per call, in the model's call order (already committed).
    pub results: Vec<Message>,
    /// Whether a person denied a call (or let it time out).
    pub denied: bool,
    /// Tools found by `tool_search` calls, to make visible for good.
    pub expanded: Vec<String>,
}

/// A tool found by name: its implementation, argument schema, primary key and whether it
/// runs without asking by default.
struct Resolved<'a> {
    tool: Arc<dyn DynTool>,
    schema: Cow<'a, Value>,
    primary_key: Option<&'a str>,
    /// The JSON's `auto_approve` (an MCP server's `auto_approve` list for its tools).
    auto_approve: bool,
}

enum Stage {
    /// Will not run; the text is the result for the model.
    Done { text: String },
    /// Answered while preparing (`tool_search`): nothing to approve or run.
    Answered {
        header: String,
        text: String,
        is_error: bool,
        /// Tools it found.
        expand: Vec<String>,
    },
    /// Ready to run (after approval if needed).
    Ready {
        ready: ReadyCall,
        needs_approval: bool,
        note: Option<String>,
        /// Why it runs without asking (`None` when it asks).
        unasked: Option<Unasked>,
        /// A `bash` call's command, which a pattern grant may cover (only while it asks).
        command: Option<String>,
    },
}

/// Why a call runs without asking anyone, for the audit trail and its tool line.
#[derive(Debug, Clone)]
struct Unasked {
    reason: AutoReason,
    grant: Option<GrantedBy>,
}

struct Item<'c> {
    call: &'c ToolCall,
    stage: Stage,
    /// What became of its approval, once it asked.
    approval: Option<ApprovalOutcome>,
}

impl Batch<'_> {
    /// Runs the batch. A store error is fatal for the turn; everything else becomes a result.
    pub async fn run(&self, calls: &[ToolCall]) -> Result<BatchOutcome, StoreError> {
        let mut items: Vec<Item<'_>> = Vec::with_capacity(calls.len());
        for call in calls {
            self.await_starting_server(call).await;
            let stage = match self.connector_refusal(call).await {
                Some(text) => Stage::Done { text },
                None => self.prepare(call),
            };
            items.push(Item {
                call,
                stage,
                approval: None,
            });
        }
        let grants = self.apply_grants(&mut items).await?;
        self.record_unasked(&items).await?;
        for item in &items {
            self.sink.event(TurnEvent::ToolPending(view(item)));
        }
        let mut expanded = Vec::new();
        for item in &mut items {
            if let Stage::Answered { expand, .. } = &mut item.stage {
                expanded.append(expand);
            }
        }
        let (always, denied) = self.approve(&mut items).await?;
        if let (true, Some(grants)) = (always, &grants) {
            self.confirm_new_grants(grants).await?;
        }
        let results = self.execute(items).await?;
        Ok(BatchOutcome {
            results,
            denied,
            expanded,
        })
    }

    /// The thread's grants, read fresh (so a revoke applies to the next call) but only when a
    /// call of the batch would ask: a call a grant covers runs unasked, and says by whose
    /// grant. `None` when no call asks.
    async fn apply_grants(&self, items: &mut [Item<'_>]) -> Result<Option<Grants>, StoreError> {
        let asks = |item: &Item<'_>| {
            matches!(
                item.stage,
                Stage::Ready {
                    needs_approval: true,
                    ..
                }
            )
        };
        if !items.iter().any(asks) {
            return Ok(None);
        }
        let grants = Grants::load(self.store, self.thread()).await?;
        for item in items.iter_mut() {
            let Stage::Ready {
                needs_approval: needs_approval @ true,
                unasked,
                command,
                ..
            } = &mut item.stage
            else {
                continue;
            };
            if let Some(g) = grants.covering(&item.call.name, command.as_deref()) {
                *needs_approval = false;
                *unasked = Some(Unasked {
                    reason: AutoReason::Grant,
                    grant: Some(g.clone()),
                });
                self.tool_ctx.metrics.approval_unasked(true, false);
            }
        }
        Ok(Some(grants))
    }

    /// The calls that run unasked go in the audit trail, with why: one write for the batch.
    async fn record_unasked(&self, items: &[Item<'_>]) -> Result<(), StoreError> {
        let unasked: Vec<(&Item<'_>, &Unasked, Option<String>)> = items
            .iter()
            .filter_map(|item| match &item.stage {
                Stage::Ready {
                    unasked: Some(u), ..
                } => Some((item, u, u.grant.as_ref().map(|g| g.grant.to_string()))),
                _ => None,
            })
            .collect();
        let calls: Vec<UnaskedCall<'_>> = unasked
            .iter()
            .map(|(item, u, grant)| UnaskedCall {
                call_id: &item.call.id,
                tool: &item.call.name,
                reason: u.reason,
                grant: grant
                    .as_deref()
                    .map(|g| (g, u.grant.as_ref().and_then(|by| by.by.as_deref()))),
            })
            .collect();
        let change = Change::Unasked {
            workstream: self.thread(),
            requested_by: self.requested_by,
            calls: &calls,
        };
        ledger::record(self.store, change).await?;
        Ok(())
    }

    /// Says in the thread what an Always allow of this batch granted, and who granted it.
    async fn confirm_new_grants(&self, before: &Grants) -> Result<(), StoreError> {
        let after = Grants::load(self.store, self.thread()).await?;
        for new in after
            .iter()
            .filter(|g| !before.iter().any(|b| b.grant == g.grant))
        {
            let who = new.by.as_deref().unwrap_or("someone");
            self.sink.event(TurnEvent::Notice(format!(
                "🔓 {} is always allowed in this thread, granted by {who}. `/grants` lists \
                 grants; `/grants revoke` takes them back.",
                new.grant.describe()
            )));
        }
        Ok(())
    }

    /// The implementation, argument schema and primary key of a built-in or MCP tool.
    /// Built-ins borrow their schema from the registry; an MCP tool's is copied out of the
    /// catalog snapshot.
    fn resolve(&self, name: &str) -> Option<Resolved<'_>> {
        if let Some(registered) = self.registry.get(name) {
            if !self.may_call(name) {
                return None;
            }
            let spec = &registered.spec;
            return Some(Resolved {
                tool: registered.tool.clone(),
                schema: Cow::Borrowed(&spec.parameters),
                primary_key: spec.primary_key.as_deref(),
                auto_approve: spec.auto_approve,
            });
        }
        let mcp = self.tool_ctx.mcp.as_ref()?;
        let catalog = mcp.catalog();
        let tool = catalog.tool(name)?.clone();
        let auto = mcp
            .server_config(&tool.server)
            .is_some_and(|c| c.auto_approve().contains(&tool.name));
        let schema = Cow::Owned(tool.input_schema.clone());
        Some(Resolved {
            tool: Arc::new(McpCall::new(mcp.clone(), tool)),
            schema,
            primary_key: None,
            auto_approve: auto,
        })
    }

    /// Whether the built-in `name` may be called here: always at the top level, only from
    /// its set in a sub-agent's batch.
    fn may_call(&self, name: &str) -> bool {
        self.nested.is_none_or(|n| n.tools.contains(name))
    }

    /// A call to a tool of an MCP server still making its first connection waits for it
    /// (within the start-up time) instead of failing as unknown.
    async fn await_starting_server(&self, call: &ToolCall) {
        let (Some(mcp), Some(server)) = (&self.tool_ctx.mcp, connectors::server_of(&call.name))
        else {
            return;
        };
        if mcp.catalog().tool(&call.name).is_none() {
            mcp.await_server(server).await;
        }
    }

    /// The workstream whose people decide, whose grants and connector policy apply: the
    /// parent's for a sub-agent's batch.
    fn thread(&self) -> &str {
        self.nested.map_or(self.workstream, |n| n.thread)
    }

    /// The MCP server a call reaches: its `mcp__<server>__` prefix, or the server holding the
    /// resource or prompt `read_resource` / `use_prompt` names. `None` for everything else.
    fn addressed_server(&self, call: &ToolCall) -> Option<String> {
        if let Some(server) = connectors::server_of(&call.name) {
            return Some(server.to_owned());
        }
        let field = match call.name.as_str() {
            "read_resource" => "uri",
            "use_prompt" => "name",
            _ => return None,
        };
        let primary_key = self.registry.get(&call.name)?.spec.primary_key.as_deref();
        let args = parse_arguments(&call.arguments, primary_key).ok()?;
        let value = args.get(field)?.as_str()?.trim().to_owned();
        let catalog = self.tool_ctx.mcp.as_ref()?.catalog();
        let server = if field == "uri" {
            catalog.resource_server(&value)
        } else {
            catalog.prompt_server(&value)
        };
        server.map(str::to_owned)
    }

    /// Connector policy for one call, resolved fresh from the store (a change made mid-turn
    /// applies to the next call): the refusal text, or `None` when the call may go on. A
    /// store error refuses the call; an MCP call never runs unrestricted by accident.
    async fn connector_refusal(&self, call: &ToolCall) -> Option<String> {
        let server = self.addressed_server(call)?;
        let policy = match self
            .tool_ctx
            .connectors
            .effective(self.store, self.thread())
            .await
        {
            Ok(policy) => policy,
            Err(e) => {
                tracing::warn!(workstream = self.thread(), tool = %call.name, %server, error = %e, "connector policy unreadable: MCP call refused");
                return Some(format!(
                    "error: the connector policy of this thread could not be read ({e}); the call \
                     to MCP server {server} was refused and did not run. Try again later."
                ));
            }
        };
        if policy.allows_server(&server) {
            return None;
        }
        tracing::warn!(
            workstream = self.thread(),
            tool = %call.name,
            %server,
            source = %policy.source,
            allowed = %policy.describe(),
            "connector not enabled: call refused"
        );
        Some(connectors::refusal(&server))
    }

    fn prepare(&self, call: &ToolCall) -> Stage {
        if let Some(search) = self.tool_search.filter(|_| call.name == TOOL_SEARCH) {
            let found = run_tool_search(search.index, &call.arguments, search.max_results);
            return Stage::Answered {
                header: format!("{TOOL_SEARCH}: {}", found.query),
                text: found.text,
                is_error: found.is_error,
                expand: found.expand,
            };
        }
        let Some(Resolved {
            tool,
            schema,
            primary_key,
            auto_approve,
        }) = self.resolve(&call.name)
        else {
            let known: Vec<&str> = self
                .registry
                .iter()
                .map(|t| t.spec.name.as_str())
                .filter(|n| self.may_call(n))
                .collect();
            return Stage::Done {
                text: format!(
                    "error: unknown tool `{}`; available tools: {}",
                    call.name,
                    known.join(", ")
                ),
            };
        };
        let args = parse_arguments(&call.arguments, primary_key)
            .and_then(|args| validate_arguments(&schema, args));
        let args = match args {
            Ok(args) => args,
            Err(e) => {
                return Stage::Done {
                    text: format!("error: {}: {e}", call.name),
                };
            }
        };
        let command = args
            .get("command")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match tool.prepare_value(args, &self.tool_ctx) {
            Ok(ready) => {
                let asks = needs_approval(auto_approve, &ready.prepared);
                // Whether a grant covers a call that asks is `apply_grants`'s, once per batch.
                let unasked = match asks {
                    false => Some(Unasked {
                        reason: if reads_in_workdir(&call.name) {
                            AutoReason::ReadInWorkdir
                        } else {
                            AutoReason::ToolAutoApprove
                        },
                        grant: None,
                    }),
                    true if self.auto_approve => Some(Unasked {
                        reason: AutoReason::AutoApproveSession,
                        grant: None,
                    }),
                    true => None,
                };
                let needs_approval = unasked.is_none();
                self.tool_ctx
                    .metrics
                    .approval_unasked(asks && self.auto_approve, true);
                Stage::Ready {
                    ready,
                    needs_approval,
                    note: None,
                    unasked,
                    command: command.filter(|_| needs_approval),
                }
            }
            Err(e) => Stage::Done {
                text: format!("error: {}: {e}", call.name),
            },
        }
    }

    /// Asks about the calls that need it (through the approval engine, which stores every
    /// outcome and any grant an Always allow makes); returns whether an Always allow was
    /// among the answers and whether anything was denied.
    async fn approve(&self, items: &mut [Item<'_>]) -> Result<(bool, bool), StoreError> {
        let asked: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|(_, item)| {
                matches!(
                    item.stage,
                    Stage::Ready {
                        needs_approval: true,
                        ..
                    }
                )
            })
            .map(|(i, _)| i)
            .collect();
        if asked.is_empty() {
            return Ok((false, false));
        }
        // Who may decide, as of now: stored with each request, so any node judges a click alike.
        let approvers =
            approvals::allowed_approvers(self.store, self.approver, self.thread()).await?;
        let mut requests = Vec::with_capacity(asked.len());
        for &i in &asked {
            let item = &items[i];
            let Stage::Ready {
                ready: ReadyCall { prepared, .. },
                ..
            } = &item.stage
            else {
                continue;
            };
            let (call_id, header) = match self.nested {
                Some(n) => (
                    format!("{}/{}", n.parent_call, item.call.id),
                    format!("{} › {}", n.label, prepared.header),
                ),
                None => (item.call.id.clone(), prepared.header.clone()),
            };
            let mut request = NewRequest {
                kind: ApprovalKind::ToolCall,
                workstream: self.thread(),
                call_id,
                tool: &item.call.name,
                header,
                preview: prepared.preview.clone(),
                requested_by: self.requested_by,
                fingerprint: approvals::fingerprint_raw(&item.call.name, &item.call.arguments),
                approvers: approvers.clone(),
            }
            .build();
            // A turn resumed after a restart is charged to whoever this one is.
            request.charged_to = self.tool_ctx.charged_to.clone();
            requests.push(request);
        }
        let cx = AskContext {
            store: self.store,
            approver: self.approver,
            timeout: self.approval_timeout,
            cancel: &self.tool_ctx.cancel,
        };
        let answers = approvals::ask(cx, &requests).await?;
        let mut always = false;
        let mut denied = false;
        for (i, answer) in asked.into_iter().zip(answers) {
            let item = &mut items[i];
            self.tool_ctx
                .metrics
                .approval("asked", crate::metrics::approval_outcome(&answer));
            let decision = match answer {
                Answer::Cancelled => {
                    item.approval = Some(ApprovalOutcome::Cancelled);
                    item.stage = Stage::Done {
                        text: "cancelled: the turn was stopped before this call was approved"
                            .into(),
                    };
                    continue;
                }
                Answer::TimedOut => {
                    denied = true;
                    item.approval = Some(ApprovalOutcome::TimedOut);
                    item.stage = Stage::Done {
                        text: format!(
                            "denied: no decision within {}; the call did not run",
                            human(self.approval_timeout)
                        ),
                    };
                    continue;
                }
                Answer::Decided(d) => d,
            };
            item.approval = Some(ApprovalOutcome::of(decision.verdict));
            always |= decision.verdict == Verdict::AlwaysAllow;
            if decision.verdict == Verdict::Deny {
                denied = true;
                item.stage = Stage::Done {
                    text: denial_text(&decision),
                };
            } else if let Stage::Ready { note, .. } = &mut item.stage {
                *note = decision.feedback.as_ref().map(|f| {
                    let who = decision.decided_by.as_deref().unwrap_or("the user");
                    format!("[approved by {who} with a note: {f}]\n")
                });
            }
        }
        Ok((always, denied))
    }

    async fn execute(&self, items: Vec<Item<'_>>) -> Result<Vec<Message>, StoreError> {
        let mut results: Vec<Option<Message>> = vec![None; items.len()];
        let approvals: Vec<Option<ApprovalOutcome>> = items.iter().map(|i| i.approval).collect();
        let commit = |i: usize| Committed {
            index: i,
            approval: approvals[i],
        };
        let mut running = FuturesUnordered::new();
        let mut queue = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            match item.stage {
                Stage::Done { text } => {
                    let msg = Message::tool_result(&item.call.id, &item.call.name, text);
                    self.commit(commit(i), msg, true, &mut results).await?;
                }
                Stage::Answered { text, is_error, .. } => {
                    let msg = Message::tool_result(&item.call.id, &item.call.name, text);
                    self.commit(commit(i), msg, is_error, &mut results).await?;
                }
                Stage::Ready {
                    ready,
                    note,
                    needs_approval,
                    ..
                } => {
                    // A wait for approval can be long: the policy is asked again before running.
                    if needs_approval && let Some(text) = self.connector_refusal(item.call).await {
                        let msg = Message::tool_result(&item.call.id, &item.call.name, text);
                        self.commit(commit(i), msg, true, &mut results).await?;
                        continue;
                    }
                    queue.push((i, item.call, ready, note));
                }
            }
        }
        let mut queue = queue.into_iter();
        loop {
            while running.len() < self.max_parallel.max(1) {
                let Some((i, call, ready, note)) = queue.next() else {
                    break;
                };
                running.push(self.run_one(i, call, ready, note));
            }
            let Some(ran) = running.next().await else {
                break;
            };
            let (i, msg, is_error) = ran?;
            self.commit(commit(i), msg, is_error, &mut results).await?;
        }
        Ok(results.into_iter().flatten().collect())
    }

    async fn run_one(
        &self,
        index: usize,
        call: &ToolCall,
        ready: ReadyCall,
        note: Option<String>,
    ) -> Result<(usize, Message, bool), StoreError> {
        let chunks = ChunkSink {
            call_id: &call.id,
            sink: self.sink,
        };
        let cancel = self.tool_ctx.cancel.clone();
        let outcome = if cancel.is_cancelled() {
            Err(ToolError::Cancelled)
        } else if ready.in_turn() {
            self.run_in_turn(call, &ready, &chunks).await
        } else {
            tokio::select! {
                r = ready.execute(&self.tool_ctx, &chunks) => r,
                () = cancel.cancelled() => Err(ToolError::Cancelled),
            }
        };
        let (output, is_error) = match outcome {
            Ok(out) => {
                let e = out.is_error;
                (out, e)
            }
            Err(ToolError::Cancelled) => (
                ToolOutput::text("cancelled: the turn was stopped while this call was running"),
                true,
            ),
            Err(ToolError::Model(m)) => (ToolOutput::text(format!("error: {m}")), true),
            Err(ToolError::Fatal(why)) => {
                tracing::warn!(tool = %call.name, error = %why, "a tool met a fatal error; the turn ends");
                return Err(StoreError::DuringTool(why));
            }
        };
        let mut text = truncate_output(&output.text, self.max_output_bytes);
        if let Some(note) = note {
            text.insert_str(0, &note);
        }
        let mut msg = Message::tool_result(&call.id, &call.name, text);
        msg.images = output.images;
        Ok((index, msg, is_error))
    }

    /// Runs a tool that acts in the turn (a sub-agent). Stopped, it winds itself down: its
    /// pending approvals are closed (so their cards say so) and its tools stopped; that gets
    /// [`IN_TURN_GRACE`] before the call is abandoned. Without a turn it does not run.
    async fn run_in_turn(
        &self,
        call: &ToolCall,
        ready: &ReadyCall,
        chunks: &ChunkSink<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let Some(link) = self.turn else {
            return Err(ToolError::model(format!(
                "{} is only available to the top-level conversation, not to sub-agents",
                call.name
            )));
        };
        let turn = InTurn {
            agent: link.agent,
            call_id: &call.id,
            sink: self.sink,
            approver: link.approver,
            requested_by: self.requested_by,
        };
        let cancel = &self.tool_ctx.cancel;
        let run = ready.execute_in_turn(&self.tool_ctx, chunks, &turn);
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => r,
            () = cancel.cancelled() => {
                match tokio::time::timeout(IN_TURN_GRACE, &mut run).await {
                    Ok(Err(ToolError::Model(m))) => Err(ToolError::Model(m)),
                    Ok(_) | Err(_) => Err(ToolError::Cancelled),
                }
            }
        }
    }

    async fn commit(
        &self,
        at: Committed,
        msg: Message,
        is_error: bool,
        results: &mut [Option<Message>],
    ) -> Result<(), StoreError> {
        let Committed { index, approval } = at;
        let seq = self.first_seq + i64::try_from(index).unwrap_or(i64::MAX);
        self.store
            .append_message(self.workstream, seq, &msg, None)
            .await?;
        let outcome = match is_error {
            true => crate::metrics::ToolOutcome::Error,
            false => crate::metrics::ToolOutcome::Ok,
        };
        self.tool_ctx
            .metrics
            .tool_call(msg.name.as_deref().unwrap_or_default(), outcome);
        self.sink.event(TurnEvent::ToolResult {
            call_id: msg.tool_call_id.clone().unwrap_or_default(),
            name: msg.name.clone().unwrap_or_default(),
            output: msg.content.clone(),
            is_error,
            approval,
        });
        results[index] = Some(msg);
        Ok(())
    }
}

/// Which result is committed, and what became of its approval.
#[derive(Debug, Clone, Copy)]
struct Committed {
    index: usize,
    approval: Option<ApprovalOutcome>,
}

/// How long a stopped tool that acts in the turn may take to wind down (see
/// [`Tool::IN_TURN`](crate::tools::Tool::IN_TURN)).
pub const IN_TURN_GRACE: Duration = Duration::from_secs(5);

struct ChunkSink<'a> {
    call_id: &'a str,
    sink: &'a dyn TurnSink,
}

impl OutputSink for ChunkSink<'_> {
    fn chunk(&self, text: &str) {
        self.sink.event(TurnEvent::ToolOutputChunk {
            call_id: self.call_id.to_owned(),
            chunk: text.to_owned(),
        });
    }
}

fn view(item: &Item<'_>) -> ToolCallView {
    let (header, preview, needs_approval, error) = match &item.stage {
        Stage::Done { text } => (
            item.call.name.clone(),
            String::new(),
            false,
            Some(text.clone()),
        ),
        Stage::Answered {
            header,
            text,
            is_error,
            ..
        } => (
            header.clone(),
            String::new(),
            false,
            is_error.then(|| text.clone()),
        ),
        Stage::Ready {
            ready: ReadyCall { prepared, .. },
            needs_approval,
            unasked,
            ..
        } => {
            let header = match unasked.as_ref().and_then(|u| u.grant.as_ref()) {
                Some(g) => format!(
                    "{} — always allowed by {}",
                    prepared.header,
                    g.by.as_deref().unwrap_or("a grant")
                ),
                None => prepared.header.clone(),
            };
            (header, prepared.preview.clone(), *needs_approval, None)
        }
    };
    ToolCallView {
        call_id: item.call.id.clone(),
        name: item.call.name.clone(),
        header,
        preview,
        needs_approval,
        error,
    }
}

/// Tools whose JSON `auto_approve` holds only for reads inside the workstream's directory
/// (they ask for anything outside it): their unasked calls are recorded as such.
fn reads_in_workdir(tool: &str) -> bool {
    matches!(tool, "read_file" | "search")
}

/// `denied by alice: use the staging db`, `denied by alice`, `denied: reason`, or
/// `denied by the user`.
fn denial_text(d: &Decision) -> String {
    let who = d.decided_by.as_deref();
    let feedback = d
        .feedback
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    match (who, feedback) {
        (Some(w), Some(f)) => format!("denied by {w}: {f}"),
        (Some(w), None) => format!("denied by {w}; the call did not run"),
        (None, Some(f)) => format!("denied: {f}"),
        (None, None) => "denied by the user; the call did not run".into(),
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else if s >= 1 {
        format!("{s} s")
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests;
