//! Connecting, re-listing and publishing: how a server's listing gets into the catalog.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceError;

use super::connection::{self, Client, StderrSink};
use super::slot::{Slot, classify, millis};
use super::{McpCatalog, McpError, McpManager, RefreshReport, ServerState, UnavailableServer};

/// How long a failed start waits for the server's last stderr lines.
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// Marks a slot as connecting while alive; cleared however the attempt ends (cancelled too).
struct Connecting<'a>(&'a Slot);

impl<'a> Connecting<'a> {
    fn start(slot: &'a Slot) -> Self {
        slot.state().connecting = true;
        Self(slot)
    }
}

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        self.0.state().connecting = false;
    }
}

impl McpManager {
    /// Connects and lists, bounded by `connect_timeout`. The caller holds `connect_lock`.
    pub(crate) async fn connect_slot(&self, slot: &Slot) -> Result<Arc<Client>, McpError> {
        let _connecting = Connecting::start(slot);
        let started = Instant::now();
        let (done, stderr_closed) = tokio::sync::oneshot::channel();
        let sink = StderrSink {
            tail: slot.stderr.clone(),
            done,
        };
        let attempt = async {
            let client = connection::connect(
                &slot.name,
                &slot.config,
                &self.options.child_env,
                slot.signal.clone(),
                sink,
            )
            .await?;
            let listing =
                connection::list(&slot.name, &client)
                    .await
                    .map_err(|e| McpError::Connect {
                        server: slot.name.clone(),
                        message: format!("listing failed: {e}"),
                    })?;
            Ok::<_, McpError>((client, listing))
        };
        let result = tokio::time::timeout(self.options.connect_timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(McpError::Connect {
                    server: slot.name.clone(),
                    message: format!(
                        "no answer within {} ms",
                        millis(self.options.connect_timeout)
                    ),
                })
            });
        let elapsed_ms = millis(started.elapsed());
        match result {
            Ok((client, listing)) => {
                let client = Arc::new(client);
                tracing::info!(server = %slot.name, tools = listing.tools.len(), resources = listing.resources.len(),
                    prompts = listing.prompts.len(), elapsed_ms, "MCP server connected");
                drop(slot.connected(client.clone(), listing));
                Ok(client)
            }
            Err(error) => {
                // The attempt is dropped by now, and with it the server's processes: wait a
                // moment for what they last wrote, which usually says why.
                let _ = tokio::time::timeout(STDERR_GRACE, stderr_closed).await;
                let stderr = slot.stderr.lines().join("\n");
                tracing::warn!(server = %slot.name, elapsed_ms, error = %error, stderr = %stderr,
                    "MCP server connection failed");
                let old = {
                    let mut state = slot.state();
                    state.error = Some(error.to_string());
                    state.client.take()
                };
                drop(old);
                Err(error)
            }
        }
    }

    pub(crate) async fn refresh_slot(&self, slot: &Slot) -> RefreshReport {
        let mut report = RefreshReport {
            server: slot.name.clone(),
            ..RefreshReport::default()
        };
        if let Some(error) = &slot.invalid {
            report.error = Some(error.clone());
            return report;
        }
        let before: BTreeSet<String> = slot.tool_names().into_iter().collect();
        let outcome = {
            let _guard = slot.connect_lock.lock().await;
            match slot.live_client() {
                Some(client) => {
                    let listed = tokio::time::timeout(
                        self.options.call_timeout,
                        connection::list(&slot.name, &client),
                    )
                    .await;
                    match listed {
                        Ok(Ok(listing)) => {
                            slot.listed(listing);
                            slot.record_success();
                            Ok(())
                        }
                        Ok(Err(e)) if !matches!(e, ServiceError::McpError(_)) => {
                            // The connection is gone: start over.
                            drop(slot.take_client());
                            self.connect_slot(slot).await.map(drop)
                        }
                        Ok(Err(e)) => Err(classify(&slot.name, e, self.options.call_timeout)),
                        Err(_) => Err(McpError::Timeout {
                            server: slot.name.clone(),
                            after: self.options.call_timeout,
                        }),
                    }
                }
                None => self.connect_slot(slot).await.map(drop),
            }
        };
        if let Err(error) = outcome {
            if error.is_server_failure() {
                slot.record_failure(&error, None, &self.options);
            }
            report.error = Some(error.to_string());
        }
        self.rebuild_catalog();
        let after: BTreeSet<String> = slot.tool_names().into_iter().collect();
        report.added = after.difference(&before).cloned().collect();
        report.removed = before.difference(&after).cloned().collect();
        if !report.added.is_empty() || !report.removed.is_empty() {
            tracing::info!(server = %slot.name, added = ?report.added, removed = ?report.removed, "MCP tools changed");
        }
        report
    }

    /// Rebuilds the catalog from every server's listing; publishes it (and bumps the
    /// generation) only if something changed. The catalog lock is taken before any slot lock,
    /// so concurrent rebuilds cannot publish an older state last.
    pub(crate) fn rebuild_catalog(&self) {
        let mut current = self.catalog.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = McpCatalog::default();
        let mut owners: HashMap<String, String> = HashMap::new();
        for slot in self.slots.values() {
            let mut state = slot.state();
            let mut refused = Vec::new();
            for tool in &state.listing.tools {
                // Server names cannot collide (see `check_server_names`), but one server may
                // list a name twice: the later one is refused, never silently overwritten.
                if let Some(first) = owners.get(&tool.full_name) {
                    let error = McpError::DuplicateTool {
                        full_name: tool.full_name.clone(),
                        first: first.clone(),
                        second: format!("`{}` of server `{}`", tool.name, tool.server),
                    };
                    tracing::error!(server = %slot.name, error = %error, "MCP tool refused");
                    refused.push(error.to_string());
                    continue;
                }
                owners.insert(
                    tool.full_name.clone(),
                    format!("`{}` of server `{}`", tool.name, tool.server),
                );
                next.tools.push(tool.clone());
            }
            next.resources
                .extend(state.listing.resources.iter().cloned());
            next.templates
                .extend(state.listing.templates.iter().cloned());
            next.prompts.extend(state.listing.prompts.iter().cloned());
            if !refused.is_empty() {
                state.error = Some(refused.join("; "));
            }
            if !state.listed {
                next.unavailable.push(UnavailableServer {
                    server: slot.name.clone(),
                    state: match slot.server_state(&state) {
                        ServerState::Connected => ServerState::Connecting,
                        other => other,
                    },
                });
            }
        }
        if **current != next {
            *current = Arc::new(next);
            drop(current);
            self.generation.send_modify(|generation| *generation += 1);
        }
    }
}
