//! The connections one plugin's outbound requests hold at once
//! (`limits.httpConnections`), counted across its versions.
//!
//! A plugin runs as more than one version at a time: a hot swap's old
//! version finishes its reconciles while the new one starts, a canary
//! splits keys between two, a shadow candidate runs beside the stable
//! version. Each version's grant is built when that version loads, so a
//! count kept per grant would let a plugin hold its ceiling once per
//! version. The count is therefore the plugin's ([`Connections`], shared by
//! every grant of one plugin name), and each grant checks it against its
//! own version's ceiling: a new version's lower ceiling applies to its
//! requests at once, whatever the old one still holds.
//!
//! A connection is held from the request's name lookup to the end of its
//! response body. A lookup the system resolver cannot abandon (see
//! `lookup`) keeps its connection counted until it ends, even after its
//! reconcile gave up on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The connections a plugin holds now, shared by its versions' grants.
#[derive(Debug, Default)]
pub struct Connections {
    held: AtomicU32,
}

impl Connections {
    /// A count of none held, for one plugin.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Connections held now, by every version of the plugin.
    pub fn held(&self) -> u32 {
        self.held.load(Ordering::Relaxed)
    }

    /// One more connection, if fewer than `ceiling` are held; it is given
    /// back when the permit drops.
    pub(super) fn try_take(self: &Arc<Self>, ceiling: u32) -> Option<ConnectionPermit> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < ceiling).then_some(held + 1)
            })
            .ok()?;
        Some(ConnectionPermit(self.clone()))
    }
}

/// One connection of a plugin, counted until dropped.
#[derive(Debug)]
pub(super) struct ConnectionPermit(Arc<Connections>);

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_grant_applies_its_own_ceiling_to_the_plugin_s_count() {
        let shared = Connections::new();
        let old = shared.try_take(2).expect("the first of two");
        let _second = shared.try_take(2).expect("the second of two");
        assert!(shared.try_take(2).is_none(), "a third past a ceiling of 2");
        // A new version with a higher ceiling counts what the old holds.
        let third = shared.try_take(3).expect("the third of three");
        assert!(shared.try_take(3).is_none());
        // A lower ceiling refuses until enough are given back.
        drop(third);
        drop(old);
        assert_eq!(shared.held(), 1);
        assert!(shared.try_take(1).is_none());
        assert!(shared.try_take(2).is_some());
    }
}
