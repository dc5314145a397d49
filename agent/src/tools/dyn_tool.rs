//! The object-safe side of [`Tool`]: the registry and the pipeline hold `Arc<dyn DynTool>`,
//! whatever a tool's `Args` type is.
//!
//! [`DynTool`] is implemented for every [`Tool`]. It deserializes the (already repaired and
//! schema-validated) JSON arguments into `T::Args` once, lets the tool prepare the call, and
//! keeps the [`Tool::Call`] `prepare` made in the returned [`ReadyCall`] so `execute` runs it as
//! it was prepared, without parsing anything again.

use std::sync::Arc;

use serde_json::Value;

use super::{InTurn, OutputSink, Prepared, Tool, ToolContext, ToolError, ToolOutput};

/// A tool as the registry and the pipeline see it: a name, and JSON in, a prepared call out.
pub trait DynTool: Send + Sync {
    /// The tool's name, equal to its JSON file's `name` ([`Tool::name`]).
    fn tool_name(&self) -> &'static str;

    /// Deserializes `args` into the tool's typed arguments and prepares the call. An error
    /// (arguments of the wrong shape, or the tool's own refusal) goes to the model and the call
    /// does not run.
    fn prepare_value(
        self: Arc<Self>,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ReadyCall, ToolError>;

    /// Whether `args` deserialize into the tool's `Args`, without preparing anything: how the
    /// registry's tests check that a JSON schema and its `Args` agree.
    fn accepts(&self, args: Value) -> Result<(), ToolError>;

    /// Which calls ask although the JSON says `auto_approve: true` ([`Tool::ASKS_FOR`]).
    fn asks_for(&self) -> Option<&'static str>;
}

impl<T: Tool> DynTool for T {
    fn tool_name(&self) -> &'static str {
        Tool::name(self)
    }

    fn prepare_value(
        self: Arc<Self>,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ReadyCall, ToolError> {
        let args: T::Args = deserialize_args(Tool::name(&*self), T::USAGE, args)?;
        let (prepared, call) = Tool::prepare(&*self, args, ctx)?;
        Ok(ReadyCall {
            prepared,
            run: Box::new(Typed { tool: self, call }),
            in_turn: T::IN_TURN,
        })
    }

    fn accepts(&self, args: Value) -> Result<(), ToolError> {
        deserialize_args::<T::Args>(Tool::name(self), T::USAGE, args).map(drop)
    }

    fn asks_for(&self) -> Option<&'static str> {
        T::ASKS_FOR
    }
}

/// Deserializes JSON arguments into a tool's `Args`; the error names the tool and the field
/// (and adds the tool's usage hint) so the model can send them again correctly.
pub fn deserialize_args<A: serde::de::DeserializeOwned>(
    tool: &str,
    usage: &str,
    args: Value,
) -> Result<A, ToolError> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let at = match path.as_str() {
            "." | "" => String::new(),
            field => format!("`{field}`: "),
        };
        let hint = match usage {
            "" => String::new(),
            usage => format!("; {usage}"),
        };
        ToolError::model(format!("invalid arguments for {tool} ({at}{inner}){hint}"))
    })
}

/// A call that was prepared: what to show, and the tool's [`Tool::Call`] kept for `execute`.
pub struct ReadyCall {
    /// The header, preview and whether this call asks ([`Prepared`]).
    pub prepared: Prepared,
    run: Box<dyn RunCall>,
    in_turn: bool,
}

impl std::fmt::Debug for ReadyCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyCall")
            .field("prepared", &self.prepared)
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for ReadyCall {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.prepared
    }
}

impl ReadyCall {
    /// Runs the call with the arguments it was prepared with. Streamed output goes to `sink`.
    pub async fn execute(
        &self,
        ctx: &ToolContext,
        sink: &dyn OutputSink,
    ) -> Result<ToolOutput, ToolError> {
        self.run.run(&self.prepared, ctx, sink, None).await
    }

    /// Whether the tool acts in the turn ([`Tool::IN_TURN`]).
    pub fn in_turn(&self) -> bool {
        self.in_turn
    }

    /// Runs the call with the turn it belongs to ([`Tool::execute_in_turn`]).
    pub async fn execute_in_turn(
        &self,
        ctx: &ToolContext,
        sink: &dyn OutputSink,
        turn: &InTurn<'_>,
    ) -> Result<ToolOutput, ToolError> {
        self.run.run(&self.prepared, ctx, sink, Some(turn)).await
    }
}

/// The typed half of a [`ReadyCall`], erased.
#[async_trait::async_trait]
trait RunCall: Send + Sync {
    async fn run(
        &self,
        prepared: &Prepared,
        ctx: &ToolContext,
        sink: &dyn OutputSink,
        turn: Option<&InTurn<'_>>,
    ) -> Result<ToolOutput, ToolError>;
}

struct Typed<T: Tool> {
    tool: Arc<T>,
    call: T::Call,
}

#[async_trait::async_trait]
impl<T: Tool> RunCall for Typed<T> {
    async fn run(
        &self,
        prepared: &Prepared,
        ctx: &ToolContext,
        sink: &dyn OutputSink,
        turn: Option<&InTurn<'_>>,
    ) -> Result<ToolOutput, ToolError> {
        match turn {
            Some(turn) => {
                self.tool
                    .execute_in_turn(&self.call, prepared, ctx, sink, turn)
                    .await
            }
            None => self.tool.execute(&self.call, prepared, ctx, sink).await,
        }
    }
}
