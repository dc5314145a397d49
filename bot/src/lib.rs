//! The sandpiper binary's library half: configuration loading, wiring and the CLI commands,
//! shared by `main.rs` and the end-to-end tests (which drive the same wiring).
//!
//! # Layout
//!
//! - [`wiring`]: builds the model, the store and the [`Agent`](sandpiper_agent::Agent) from a
//!   [`Config`](sandpiper_agent::Config).
//! - [`commands`]: `sandpiper tools` and `mcp`, and the output of those and `config check`.
//! - [`chat`]: `sandpiper chat`, one workstream in the terminal.
//! - [`console_account`]: the person at the terminal as a sandpiper user: `link`,
//!   `console-link`, `whoami`, `rename`, `memory`.
//! - [`defaults`]: what follows the user when nothing is configured: the data directory, the
//!   database in it, the console's working directory and user name.
//! - [`node`]: one running `sandpiper serve` node: platforms, endpoints, registry, shutdown.
//! - [`serve`]: the HTTP endpoints of `sandpiper serve` (`/health`, `/ready`).
//! - [`metrics`]: `GET /metrics` in the Prometheus text format.
//! - [`ops_api`]: `/ready` and `/metrics` together, behind the operations token when one is
//!   set (served on `[server] ops_listen` when that is set).
//! - [`notify_api`]: `POST /v1/api/notify`: gateways deliver notifications, behind a service
//!   JWT.
//! - [`cluster`]: this node in a cluster: signals from other nodes, lease renewal, takeover of
//!   what dead nodes left.
//! - [`registry`]: this node in the `services` registry (register, heartbeat, leave).
//! - [`admin_api`]: `/v1/api/…`: connector policy of threads and channels, behind a service
//!   JWT.
//! - [`api_error`]: the error every HTTP API route answers with (status and JSON body).
//! - [`audit`]: `sandpiper audit` (table, JSON lines, CSV) and the daily retention pruner.
//! - [`single_node`]: the lock that keeps a second `serve` off a SQLite file.
//! - [`service_jwt`]: HS256 service tokens (issuer, audience, short expiry), checked per
//!   audience.
//! - [`http_server`]: the server under them, with header and body deadlines, connection limits
//!   (overall and per peer) and a body cap.
//! - [`web`]: the status page (`GET /`): cluster, workstreams, approvals, watches, live;
//!   sign-in with a one-time link from `/console`.
//! - [`log_format`]: log lines whose request-borne fields cannot forge another line.
//! - [`logging`]: the one log subscriber (`SANDPIPER_LOG` / `RUST_LOG`, text or JSON) and
//!   the start-up lines.
//! - [`model_check`]: whether the model endpoint answers (`/ready`, `doctor`).
//! - [`init`]: `sandpiper init`, a commented starter configuration.
//! - [`doctor`]: `sandpiper doctor`, one line per check of a deployment.

pub mod admin_api;
pub mod api_error;
pub mod audit;
pub mod chat;
pub mod cluster;
pub mod commands;
pub mod console_account;
pub mod defaults;
pub mod doctor;
pub mod http_server;
pub mod init;
pub mod log_format;
pub mod logging;
pub mod metrics;
pub mod model_check;
pub mod node;
pub mod notify_api;
pub mod ops_api;
pub mod registry;
pub mod serve;
pub mod service_jwt;
pub mod single_node;
pub mod tabular;
pub mod usage;
pub mod web;
pub mod wiring;
