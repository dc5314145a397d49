//! The `services` table: the registry of running `sandpiper serve` nodes. Each node registers
//! at start, heartbeats every [`HEARTBEAT_EVERY`] and deregisters on a clean shutdown; a node
//! whose last heartbeat is older than [`STALE_AFTER`] is not offered to anyone. The notify
//! tool reads the healthy gateways here and POSTs to them (see `crate::tools::notify`).

use std::fmt;
use std::time::Duration;

use super::{Store, StoreError, now_ms};

/// How often a node renews its row.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(30);
/// After how long without a heartbeat a node counts as gone.
pub const STALE_AFTER: Duration = Duration::from_secs(120);

/// What a node does for the others. Stored as text in `services.role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceRole {
    /// Serves `POST /v1/api/notify`: delivers notifications to the chat platforms it is
    /// connected to.
    Gateway,
    /// A node without a service secret: it runs turns (and holds workstream leases) but
    /// serves no notifications, so it is never offered to the notify tool.
    Node,
}

impl ServiceRole {
    /// The stored text.
    pub const fn as_str(self) -> &'static str {
        match self {
            ServiceRole::Gateway => "gateway",
            ServiceRole::Node => "node",
        }
    }
}

impl fmt::Display for ServiceRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node as it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRecord {
    /// Unique per process (a UUID chosen at start).
    pub id: String,
    /// What it serves.
    pub role: ServiceRole,
    /// Base URL other nodes reach it at (`http://10.0.0.5:8090`).
    pub url: String,
    /// sandpiper version.
    pub version: String,
    /// Chat platforms it is connected to (`discord`, `slack`).
    pub platforms: Vec<String>,
    /// When it started (unix ms).
    pub started_at: i64,
    /// Its last heartbeat (unix ms).
    pub heartbeat_at: i64,
}

impl ServiceRecord {
    /// Whether the node says it is connected to `platform`.
    pub fn serves(&self, platform: &str) -> bool {
        self.platforms.iter().any(|p| p == platform)
    }
}

/// A `services` row, column for column.
#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    role: String,
    url: String,
    version: String,
    platforms: String,
    started_at: i64,
    heartbeat_at: i64,
}

fn record(row: Row) -> Result<ServiceRecord, StoreError> {
    let role = match row.role.as_str() {
        "gateway" => ServiceRole::Gateway,
        "node" => ServiceRole::Node,
        other => {
            return Err(StoreError::Corrupt {
                table: "services",
                message: format!("unknown role `{other}`"),
            });
        }
    };
    Ok(ServiceRecord {
        id: row.id,
        role,
        url: row.url,
        version: row.version,
        platforms: row
            .platforms
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect(),
        started_at: row.started_at,
        heartbeat_at: row.heartbeat_at,
    })
}

impl Store {
    /// Registers (or re-registers, after the row was removed as stale) a node; its heartbeat
    /// is now.
    pub async fn register_service(&self, service: &ServiceRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO services (id, role, url, version, platforms, started_at, heartbeat_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (id) DO UPDATE SET role = $2, url = $3, version = $4, platforms = $5, \
             heartbeat_at = $7",
        )
        .bind(&service.id)
        .bind(service.role.as_str())
        .bind(&service.url)
        .bind(&service.version)
        .bind(service.platforms.join(","))
        .bind(service.started_at)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Renews a node's heartbeat; false when its row is gone (pruned while the node was
    /// unreachable: the caller registers again).
    pub async fn heartbeat_service(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE services SET heartbeat_at = $1 WHERE id = $2")
            .bind(now_ms())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Removes a node (clean shutdown).
    pub async fn deregister_service(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM services WHERE id = $1")
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Nodes of `role` whose heartbeat is within [`STALE_AFTER`], longest-running first (the
    /// order the notify tool tries them in), then by id so every reader sees one order.
    pub async fn healthy_services(
        &self,
        role: ServiceRole,
    ) -> Result<Vec<ServiceRecord>, StoreError> {
        let fresh_since = now_ms() - i64::try_from(STALE_AFTER.as_millis()).unwrap_or(i64::MAX);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, role, url, version, platforms, started_at, heartbeat_at FROM services \
             WHERE role = $1 AND heartbeat_at >= $2 ORDER BY started_at, id",
        )
        .bind(role.as_str())
        .bind(fresh_since)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }

    /// Every registered node, stale ones included (for operators and tests).
    pub async fn all_services(&self) -> Result<Vec<ServiceRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, role, url, version, platforms, started_at, heartbeat_at FROM services \
             ORDER BY started_at, id",
        )
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }

    /// Sets a node's heartbeat to `at` (unix ms): tests make a node stale with it.
    pub async fn set_service_heartbeat(&self, id: &str, at: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE services SET heartbeat_at = $1 WHERE id = $2")
            .bind(at)
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn node(id: &str, started_at: i64, platforms: &[&str]) -> ServiceRecord {
        ServiceRecord {
            id: id.into(),
            role: ServiceRole::Gateway,
            url: format!("http://127.0.0.1:1/{id}"),
            version: "0.1.0".into(),
            platforms: platforms.iter().map(|p| (*p).to_owned()).collect(),
            started_at,
            heartbeat_at: 0,
        }
    }

    #[tokio::test]
    async fn nodes_register_heartbeat_go_stale_and_leave() {
        let store = Store::memory().await.unwrap();
        store
            .register_service(&node("b", 2, &["slack"]))
            .await
            .unwrap();
        store
            .register_service(&node("a", 1, &["discord", "slack"]))
            .await
            .unwrap();
        let ids = |v: Vec<ServiceRecord>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
        let healthy = store.healthy_services(ServiceRole::Gateway).await.unwrap();
        assert_eq!(healthy[0].platforms, vec!["discord", "slack"]);
        assert!(healthy[0].serves("discord") && !healthy[1].serves("discord"));
        assert_eq!(ids(healthy), vec!["a", "b"]);
        // Stale after 120 s without a heartbeat; a heartbeat brings it back.
        let old = now_ms() - 121_000;
        store.set_service_heartbeat("a", old).await.unwrap();
        assert_eq!(
            ids(store.healthy_services(ServiceRole::Gateway).await.unwrap()),
            vec!["b"]
        );
        assert!(store.heartbeat_service("a").await.unwrap());
        assert_eq!(
            ids(store.healthy_services(ServiceRole::Gateway).await.unwrap()),
            vec!["a", "b"]
        );
        store.deregister_service("a").await.unwrap();
        assert!(!store.heartbeat_service("a").await.unwrap());
        assert_eq!(ids(store.all_services().await.unwrap()), vec!["b"]);
    }
}
