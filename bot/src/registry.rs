//! This node in the `services` registry: registered when `serve` starts, a heartbeat every
//! 30 s (registering again if its row was removed meanwhile), and removed on a clean
//! shutdown. Other nodes' notify tools find gateways here
//! ([`sandpiper_agent::store::services`]).

use std::net::SocketAddr;

use sandpiper_agent::store::services::{HEARTBEAT_EVERY, ServiceRecord, ServiceRole};
use sandpiper_agent::store::{Store, StoreError, now_ms};
use tokio_util::sync::CancellationToken;

/// This build's version, as the registry and `/ready` report it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The URL other nodes reach this node at: `advertise` when configured, else the bound
/// address (with the loopback address for a wildcard bind, which serves only one machine).
pub fn node_url(advertise: Option<&str>, bound: SocketAddr) -> String {
    if let Some(url) = advertise.map(str::trim).filter(|u| !u.is_empty()) {
        return url.trim_end_matches('/').to_owned();
    }
    let ip = match bound.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, bound.port()))
}

/// A fresh node id (`node-<uuid>`): one per process, so a restarted node never mistakes the
/// leases its previous life left for its own.
pub fn node_id() -> String {
    format!("node-{}", uuid::Uuid::new_v4())
}

/// The gateway record of node `id`, started now.
pub fn gateway(id: String, url: String, platforms: Vec<String>) -> ServiceRecord {
    node(id, ServiceRole::Gateway, url, platforms)
}

/// The record of node `id` in `role`, started now.
pub fn node(id: String, role: ServiceRole, url: String, platforms: Vec<String>) -> ServiceRecord {
    ServiceRecord {
        id,
        role,
        url,
        version: VERSION.to_owned(),
        platforms,
        started_at: now_ms(),
        heartbeat_at: now_ms(),
    }
}

/// Registers `record`, then heartbeats until `shutdown`, then deregisters. A database that
/// does not answer is logged and tried again at the next beat: the node keeps serving.
pub async fn run(store: Store, record: ServiceRecord, shutdown: CancellationToken) {
    if let Err(e) = store.register_service(&record).await {
        tracing::warn!(node = %record.id, error = %e, "cannot register in the services registry; retrying at the next heartbeat");
    } else {
        tracing::info!(node = %record.id, url = %sandpiper_agent::config::redact_url(&record.url), role = %record.role, "registered in the services registry");
    }
    let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
    beat.tick().await;
    loop {
        tokio::select! {
            _ = beat.tick() => {
                if let Err(e) = heartbeat(&store, &record).await {
                    tracing::warn!(node = %record.id, error = %e, "services heartbeat failed");
                }
            }
            () = shutdown.cancelled() => break,
        }
    }
    match store.deregister_service(&record.id).await {
        Ok(()) => tracing::info!(node = %record.id, "left the services registry"),
        Err(e) => {
            tracing::warn!(node = %record.id, error = %e, "cannot leave the services registry; the row goes stale in 120 s")
        }
    }
}

async fn heartbeat(store: &Store, record: &ServiceRecord) -> Result<(), StoreError> {
    if !store.heartbeat_service(&record.id).await? {
        tracing::info!(node = %record.id, "registry row was gone; registering again");
        store.register_service(record).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_advertised_url_wins_and_wildcards_become_loopback() {
        let bound: SocketAddr = "0.0.0.0:8090".parse().unwrap();
        assert_eq!(node_url(None, bound), "http://127.0.0.1:8090");
        assert_eq!(
            node_url(Some("http://gw-1.internal:8090/"), bound),
            "http://gw-1.internal:8090"
        );
        let v6: SocketAddr = "[::]:9".parse().unwrap();
        assert_eq!(node_url(None, v6), "http://[::1]:9");
        let lo: SocketAddr = "127.0.0.1:7".parse().unwrap();
        assert_eq!(node_url(Some(" "), lo), "http://127.0.0.1:7");
    }

    #[tokio::test]
    async fn a_node_registers_and_leaves_at_shutdown() {
        let store = Store::memory().await.unwrap();
        let record = gateway(node_id(), "http://127.0.0.1:1".into(), vec!["slack".into()]);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(store.clone(), record.clone(), shutdown.clone()));
        for _ in 0..100 {
            if !store.all_services().await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let rows = store.all_services().await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].id.as_str(), rows[0].platforms.clone()),
            (record.id.as_str(), vec!["slack".to_owned()])
        );
        shutdown.cancel();
        task.await.unwrap();
        assert!(store.all_services().await.unwrap().is_empty());
    }
}
