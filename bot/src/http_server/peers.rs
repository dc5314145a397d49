//! Connections per peer: one host may hold at most `max_connections_per_peer` of the server's
//! connections, so a single attacker cannot take every slot from Slack, the other nodes and
//! the load balancer. A peer is an IPv4 address or an IPv6 /64 (what one host is usually
//! given); an IPv4-mapped IPv6 address counts as its IPv4 address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

/// Who a connection counts against (and whose failed sign-ins the status page counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Peer {
    /// One IPv4 address.
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6Prefix([u8; 8]),
}

/// The peer an address counts against.
pub(crate) fn peer_of(ip: IpAddr) -> Peer {
    match ip.to_canonical() {
        IpAddr::V4(v4) => Peer::V4(v4.octets()),
        IpAddr::V6(v6) => Peer::V6Prefix(prefix64(v6)),
    }
}

fn prefix64(v6: Ipv6Addr) -> [u8; 8] {
    let octets = v6.octets();
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&octets[..8]);
    prefix
}

/// Open connections by peer, shared by the accept loop and the connections' tasks.
#[derive(Debug, Clone)]
pub(super) struct PeerLimit {
    max: usize,
    open: Arc<Mutex<HashMap<Peer, usize>>>,
}

/// A connection's place in its peer's count, given back when dropped.
#[derive(Debug)]
pub(super) struct PeerSlot {
    peer: Peer,
    open: Arc<Mutex<HashMap<Peer, usize>>>,
}

impl PeerLimit {
    /// At most `max` connections per peer.
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection from `ip`, or `None` when its peer holds `max` already.
    pub(super) fn admit(&self, ip: IpAddr) -> Option<PeerSlot> {
        let peer = peer_of(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(peer).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peer,
            open: self.open.clone(),
        })
    }

    /// Peers with a connection open (the map does not grow with peers that left).
    #[cfg(test)]
    fn peers(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn hosts_are_told_apart_by_ipv4_address_and_ipv6_slash_64() {
        for (a, b, same) in [
            ("10.0.0.1", "10.0.0.1", true),
            ("10.0.0.1", "10.0.0.2", false),
            ("::ffff:10.0.0.1", "10.0.0.1", true),
            ("2001:db8:1:2::1", "2001:db8:1:2:ffff::9", true),
            ("2001:db8:1:2::1", "2001:db8:1:3::1", false),
            ("127.0.0.1", "::1", false),
        ] {
            assert_eq!(peer_of(ip(a)) == peer_of(ip(b)), same, "{a} vs {b}");
        }
    }

    #[test]
    fn a_peer_at_its_cap_is_refused_until_one_of_its_connections_ends() {
        let limit = PeerLimit::new(2);
        let first = limit.admit(ip("10.0.0.1")).expect("first");
        let second = limit.admit(ip("10.0.0.1")).expect("second");
        assert!(
            limit.admit(ip("10.0.0.1")).is_none(),
            "a third from one host"
        );
        assert!(limit.admit(ip("10.0.0.2")).is_some(), "another host");
        drop(first);
        let third = limit.admit(ip("10.0.0.1")).expect("a slot came free");
        drop((second, third));
        assert_eq!(limit.peers(), 0);
    }
}
