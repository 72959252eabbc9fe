//! The `version` label: which version of a plugin ran a reconcile, kept
//! ambient on the reconcile's task.

use std::cell::Cell;

/// Which version of a plugin ran a reconcile: the `version` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The plugin's running version (the only one, unless a candidate runs).
    Stable,
    /// A candidate running beside it (canary or shadow).
    Candidate,
}

impl Version {
    /// The label value: `stable` or `candidate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Stable => "stable",
            Version::Candidate => "candidate",
        }
    }
}

tokio::task_local! {
    /// The version the reconcile running on this task ran as.
    static RECONCILE_VERSION: Cell<Version>;
}

/// Runs `reconcile` as [`Version::Stable`] unless it calls [`ran_as`];
/// returns its output and the version it ran as.
pub async fn with_version<F: Future>(reconcile: F) -> (F::Output, Version) {
    RECONCILE_VERSION
        .scope(Cell::new(Version::Stable), async {
            let output = reconcile.await;
            (output, RECONCILE_VERSION.with(Cell::get))
        })
        .await
}

/// Marks the reconcile running on this task as run by `version` (no effect
/// outside [`with_version`]).
pub fn ran_as(version: Version) {
    let _ = RECONCILE_VERSION.try_with(|v| v.set(version));
}

/// The version the reconcile on this task runs as (`Stable` outside one).
pub fn current_version() -> Version {
    RECONCILE_VERSION
        .try_with(Cell::get)
        .unwrap_or(Version::Stable)
}
