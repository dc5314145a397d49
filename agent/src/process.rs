//! Every child process: the environment it starts from, what it may see of the bot, how it
//! is started (directly through the launcher, or forked by the standing spawner), the tree of
//! everything one call started, and the signals that end and reap them.
//!
//! # Layout
//!
//! - [`env`]: the clean environment tools and MCP servers start from ([`env::ChildEnv`]).
//! - [`confine`]: Landlock, namespaces, capabilities and seccomp for tool processes; the
//!   launcher that applies them before exec, the standing spawner that forks calls already
//!   confined, and [`confine::tool_process::ToolCommand`], how a tool starts one.
//! - [`tree`]: everything one tool call started (cgroup v2, marker and subreaper, `/proc`), so
//!   a timeout or `/stop` ends all of it.
//! - [`signal`]: kill, reap and subreaper, used by the bot and by the spawner alike.
//! - [`cgroupfs`]: where the cgroup file systems are mounted and how a process joins a
//!   cgroup, for the tree (which makes each call's cgroup) and the confinement (which covers
//!   them all so no call can leave its own).
//!
//! Every `unsafe` block of the agent crate lives in this folder, each with its `SAFETY`
//! comment. `mcp` and `tools` start processes through here and never through each other.

pub(crate) mod cgroupfs;
pub mod confine;
pub mod env;
pub mod signal;
pub mod tree;
