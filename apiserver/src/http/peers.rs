//! Connections one client address holds before its first request.
//!
//! Until a connection's first request head arrives, nothing about it is
//! known: it costs a slot of [`MAX_CONNECTIONS`](super::conn) for up to the
//! TLS handshake and request head timeouts (20 s) without a credential. A
//! single address opening connections that never finish could otherwise
//! hold every slot, again and again, and no one else would get in. So each
//! address may have [`MAX_UNPROVEN_PER_PEER`] such connections at once; past
//! it a new one from that address is closed at once. A connection stops
//! counting at its first request head (one without a valid credential is
//! answered 401 and closed, so it cannot linger past that either).
//!
//! IPv6 clients are counted per /64, the block one host is usually given.
//! Loopback clients are not counted: they are on this machine (the host's
//! own informers open one connection per watch, many at start).
//!
//! Many addresses together can still fill the slots for the length of the
//! timeouts, as they could fill kube-apiserver's file descriptors; that is
//! a matter for the network in front of the server.
//!
//! The host's own servers (webhook, admin) count their connections the
//! same way, through this module.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// Connections one address may hold before their first request: enough
/// for a client starting many watches at once, a sixteenth of the slots.
pub const MAX_UNPROVEN_PER_PEER: usize = 64;

/// The count of connections without a first request, per address.
#[derive(Debug)]
pub struct Unproven {
    max: usize,
    count_loopback: bool,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl Unproven {
    /// At most `max` per address; loopback addresses are counted only with
    /// `count_loopback` (tests).
    pub fn new(max: usize, count_loopback: bool) -> Arc<Self> {
        Arc::new(Unproven {
            max,
            count_loopback,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Counts a new connection from `peer`, or refuses it (`None`) when the
    /// address already has its share. The count ends when the guard drops.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<UnprovenGuard> {
        let peer = peer.to_canonical();
        if peer.is_loopback() && !self.count_loopback {
            return Some(UnprovenGuard { table: None });
        }
        let key = block(peer);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(UnprovenGuard {
            table: Some((self.clone(), key)),
        })
    }
}

/// The address a connection is counted under: itself, or an IPv6
/// address's /64.
fn block(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}

/// One connection still without a first request; dropping it ends the
/// count.
#[derive(Debug)]
pub struct UnprovenGuard {
    table: Option<(Arc<Unproven>, IpAddr)>,
}

impl Drop for UnprovenGuard {
    fn drop(&mut self) {
        let Some((table, key)) = self.table.take() else {
            return;
        };
        let mut open = table.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_share_and_gets_it_back() {
        let table = Unproven::new(2, false);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let first = table.admit(a).unwrap();
        let _second = table.admit(a).unwrap();
        assert!(table.admit(a).is_none(), "a third is refused");
        assert!(table.admit("192.0.2.2".parse().unwrap()).is_some());
        drop(first);
        assert!(table.admit(a).is_some(), "a slot given back is taken again");
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let table = Unproven::new(1, false);
        let _one = table.admit("2001:db8::1".parse().unwrap()).unwrap();
        assert!(table.admit("2001:db8::ffff:2".parse().unwrap()).is_none());
        assert!(table.admit("2001:db8:0:1::1".parse().unwrap()).is_some());
        let _v4 = table.admit("192.0.2.7".parse().unwrap()).unwrap();
        assert!(table.admit("::ffff:192.0.2.7".parse().unwrap()).is_none());
    }

    #[test]
    fn loopback_is_not_counted_unless_asked() {
        let table = Unproven::new(1, false);
        let _held: Vec<_> = (0..10)
            .map(|_| table.admit("127.0.0.1".parse().unwrap()).unwrap())
            .collect();
        assert!(table.open.lock().unwrap().is_empty());
        let counted = Unproven::new(1, true);
        let _one = counted.admit("::1".parse().unwrap()).unwrap();
        assert!(counted.admit("::1".parse().unwrap()).is_none());
    }
}
