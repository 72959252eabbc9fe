//! Name lookups of outbound requests: the platform's resolver, bounded.
//!
//! The host resolves a request's name itself (so that it connects to the
//! address it checked) with the platform's resolver, `getaddrinfo`, as
//! every other program on the machine does: `/etc/hosts`, nsswitch and
//! `resolv.conf` as the operator set them up. An asynchronous resolver
//! (hickory) could be cancelled, but reads `resolv.conf` and the hosts file
//! itself and skips nsswitch's other sources, so names would resolve
//! differently in the host than on its machine.
//!
//! `getaddrinfo` blocks a thread and cannot be cancelled: a lookup whose
//! reconcile's deadline passed keeps its thread until the resolver answers
//! or gives up (`resolv.conf`'s timeouts and attempts; a minute or more for
//! a name server that never answers). So each lookup holds, until its
//! thread returns and whether or not anyone still waits for it:
//! - one of its plugin's connections (`limits.httpConnections`): a plugin
//!   whose lookups hang holds no more than its ceiling of them;
//! - one of the host's [`MAX_LOOKUPS`] lookup slots: however many plugins'
//!   lookups hang, they hold a bounded number of threads, well below
//!   tokio's 512 blocking threads that the host's file reads share. A
//!   lookup that finds every slot taken is refused at once (reason
//!   `lookups`), not queued behind lookups that may never end.
//!
//! `wasmctrl_outbound_lookups_in_flight` shows the slots taken, abandoned
//! lookups included.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;

use super::connections::ConnectionPermit;
use crate::control::metrics::OUTBOUND_LOOKUPS;

/// Name lookups the host runs at once, across every plugin.
pub const MAX_LOOKUPS: usize = 128;

/// What resolves a name: `getaddrinfo`, or a test's stand-in.
type LookupFn = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// A bounded pool of name lookups on blocking threads.
pub(crate) struct Lookups {
    capacity: usize,
    /// The lookups running, abandoned ones included: the count the
    /// capacity bounds, and the host's gauge of it.
    running: Gauge,
    lookup: Arc<LookupFn>,
}

/// Why a lookup gave no addresses.
#[derive(Debug)]
pub(super) enum LookupError {
    /// Every one of the host's lookup slots is taken.
    Full(usize),
    /// The deadline passed first; the lookup goes on, holding its slot and
    /// connection, until it ends.
    Deadline,
    /// The resolver answered with an error.
    Failed(io::Error),
}

/// The host's lookups, with the platform's resolver, counted in
/// `wasmctrl_outbound_lookups_in_flight`.
pub(super) static SYSTEM: std::sync::LazyLock<Lookups> = std::sync::LazyLock::new(|| {
    Lookups::new(MAX_LOOKUPS, OUTBOUND_LOOKUPS.clone(), |name, port| {
        (name, port).to_socket_addrs().map(Iterator::collect)
    })
});

impl Lookups {
    /// At most `capacity` lookups at once with `lookup`, counted in
    /// `running`.
    pub(crate) fn new(
        capacity: usize,
        running: Gauge,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            capacity,
            running,
            lookup: Arc::new(lookup),
        }
    }

    /// Lookups running now, abandoned ones included.
    #[cfg(test)]
    fn running(&self) -> i64 {
        self.running.get()
    }

    /// The addresses of `name`, resolved on a blocking thread that holds
    /// `connection` and one of the host's slots until the lookup ends;
    /// the connection comes back with the addresses.
    pub(super) async fn resolve(
        &self,
        name: &str,
        port: u16,
        connection: ConnectionPermit,
        deadline: Instant,
    ) -> Result<(Vec<SocketAddr>, ConnectionPermit), LookupError> {
        let slot =
            Slot::take(&self.running, self.capacity).ok_or(LookupError::Full(self.capacity))?;
        let lookup = self.lookup.clone();
        let name = name.to_string();
        let thread = tokio::task::spawn_blocking(move || {
            let addrs = lookup(&name, port);
            drop(slot);
            (addrs, connection)
        });
        match tokio::time::timeout_at(deadline.into(), thread).await {
            Err(_) => Err(LookupError::Deadline),
            Ok(Err(join)) => Err(LookupError::Failed(io::Error::other(join.to_string()))),
            Ok(Ok((Err(e), _))) => Err(LookupError::Failed(e)),
            Ok(Ok((Ok(addrs), connection))) => Ok((addrs, connection)),
        }
    }
}

/// One of the host's lookup slots, given back when dropped.
struct Slot(Gauge);

impl Slot {
    fn take(running: &Gauge, capacity: usize) -> Option<Self> {
        let capacity = i64::try_from(capacity).unwrap_or(i64::MAX);
        running
            .inner()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < capacity).then_some(n + 1)
            })
            .ok()?;
        Some(Self(running.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Mutex, atomic::AtomicU32};
    use std::time::Duration;

    use wasmctrl_testkit::eventually;

    use super::super::connections::Connections;
    use super::*;

    /// How long the lookups' real threads get to end once released.
    const WAIT: Duration = Duration::from_secs(10);

    /// A resolver whose lookups hang until the test lets them go, as one
    /// whose name server never answers.
    fn hanging() -> (Lookups, mpsc::Sender<()>, Arc<AtomicU32>) {
        let (release, wait) = mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        let started = Arc::new(AtomicU32::new(0));
        let counted = started.clone();
        let lookups = Lookups::new(2, Gauge::default(), move |_, port| {
            counted.fetch_add(1, Ordering::AcqRel);
            let _ = wait.lock().unwrap().recv();
            Ok(vec![SocketAddr::from(([192, 0, 2, 1], port))])
        });
        (lookups, release, started)
    }

    #[tokio::test]
    async fn an_abandoned_lookup_holds_its_slot_and_connection_until_it_ends() {
        let (lookups, release, started) = hanging();
        let plugin = Connections::new();
        for _ in 0..2 {
            let deadline = Instant::now() + Duration::from_millis(20);
            let connection = plugin.try_take(4).unwrap();
            let r = lookups
                .resolve("hangs.example", 443, connection, deadline)
                .await;
            assert!(matches!(r, Err(LookupError::Deadline)), "{r:?}");
        }
        // Both lookups go on after their deadlines, each holding a slot
        // and one of the plugin's connections.
        assert_eq!(lookups.running(), 2);
        assert_eq!(plugin.held(), 2);
        let connection = plugin.try_take(4).unwrap();
        let far = Instant::now() + Duration::from_secs(600);
        let r = lookups.resolve("other.example", 443, connection, far).await;
        assert!(matches!(r, Err(LookupError::Full(2))), "{r:?}");
        // The refused lookup gave its connection back and started nothing.
        assert_eq!(plugin.held(), 2);
        eventually("both lookups run", WAIT, || async {
            started.load(Ordering::Acquire) == 2
        })
        .await;
        // Once the resolver answers, the slots and connections come back.
        release.send(()).unwrap();
        release.send(()).unwrap();
        eventually("the slots and connections come back", WAIT, || async {
            lookups.running() == 0 && plugin.held() == 0
        })
        .await;
        let connection = plugin.try_take(4).unwrap();
        release.send(()).unwrap();
        let (addrs, connection) = lookups
            .resolve("answers.example", 443, connection, far)
            .await
            .unwrap();
        assert_eq!(addrs, vec![SocketAddr::from(([192, 0, 2, 1], 443))]);
        assert_eq!(plugin.held(), 1);
        drop(connection);
        assert_eq!(plugin.held(), 0);
    }
}
