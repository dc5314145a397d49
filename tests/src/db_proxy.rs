//! A TCP relay between sandpiper and PostgreSQL that a test can take away and bring back, as a
//! database restart or failover does: [`DbProxy::cut`] closes every open connection and stops
//! listening (new connections are refused), [`DbProxy::restore`] listens on the same port again.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A relay to one database server.
#[derive(Debug)]
pub struct DbProxy {
    addr: SocketAddr,
    upstream: String,
    /// Cancelled by `cut`: the accept loop and every relayed connection of this generation.
    alive: Mutex<CancellationToken>,
}

impl DbProxy {
    /// Relays a free local port to the host and port of `database_url`.
    pub async fn start(database_url: &str) -> Arc<Self> {
        let upstream = host_port(database_url).expect("a host:port in the database url");
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("relay address");
        let proxy = Arc::new(Self {
            addr,
            upstream,
            alive: Mutex::new(CancellationToken::new()),
        });
        proxy.serve(listener);
        proxy
    }

    /// `database_url` with its host and port replaced by the relay's.
    pub fn url(&self, database_url: &str) -> String {
        let upstream = host_port(database_url).expect("a host:port in the database url");
        database_url.replacen(&upstream, &self.addr.to_string(), 1)
    }

    /// The database goes away: open connections are closed, new ones refused.
    pub fn cut(&self) {
        self.lock().cancel();
    }

    /// The database is back on the same address.
    pub async fn restore(self: &Arc<Self>) {
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                // The old socket may linger for a moment after the cut.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        *self.lock() = CancellationToken::new();
        self.serve(listener);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CancellationToken> {
        self.alive.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn serve(self: &Arc<Self>, listener: TcpListener) {
        let alive = self.lock().clone();
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            loop {
                let client = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((client, _)) => client,
                        Err(_) => continue,
                    },
                    // Dropping the listener refuses new connections.
                    () = alive.cancelled() => return,
                };
                tokio::spawn(relay(client, upstream.clone(), alive.clone()));
            }
        });
    }
}

async fn relay(mut client: TcpStream, upstream: String, alive: CancellationToken) {
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        () = alive.cancelled() => {}
    }
}

/// `host:port` of a `postgres://user@host:port/db` url.
fn host_port(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    Some(if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_come_from_the_url() {
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1:5432/test?options=x").as_deref(),
            Some("127.0.0.1:5432")
        );
        assert_eq!(
            host_port("postgres://db.internal/test").as_deref(),
            Some("db.internal:5432")
        );
    }
}
