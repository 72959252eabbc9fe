//! `hotswap`: replacing the `stamp` reconciler under load.
//!
//! One process: the embedded API server, a [`Manager`] running the `stamp`
//! test plugin (`maxConcurrentReconciles: 2`, file watching off) on
//! `--keys` ConfigMaps, and a writer updating those ConfigMaps continuously
//! at `--rate` updates/s. Every update also *removes* the
//! `wasmctrl.dev/stamp` label, so a key carries a stamp only if some
//! reconcile wrote it after the key's last update.
//!
//! A swap copies the other version's component over the plugin file
//! (written aside, then renamed) and sends `POST /plugins/stamp/reload` to
//! the admin server (the admin path, not the file watcher, so the trigger
//! time is exact). Both versions are compiled once before measuring (v1 at
//! start-up, v2 by a warm-up swap), so the measured swaps hit the compile
//! cache.
//!
//! - **swap latency**: from just before the reload request is written to the
//!   moment a kube-rs watch on the ConfigMaps (opened at the start of the
//!   run) delivers the first ConfigMap whose stamp label is the new
//!   version's, at a resourceVersion after the request. Only a reconcile by
//!   the new version can write that label (writer updates remove it, the
//!   old version writes the other one). Also reported: the reload response
//!   time, and from the host's `reconcile` tracing spans the time to the
//!   first reconcile by the new digest returning.
//! - **cold swap**: one more swap, after the 20, to a component no cache has
//!   seen: the next version's bytes with a custom section appended (new
//!   digest, same code), so the reload compiles it.
//! - **lost**: after the last swap the writer stops; every ConfigMap must
//!   then carry the final version's stamp. Keys that do not within
//!   `--settle-secs` are lost: unstamped (the last update was never
//!   reconciled) or stamped by an older version.
//! - **overlapping**: keys reconciled by two versions at once, measured from
//!   the host's `reconcile` spans (created after a worker takes the key from
//!   the queue; the controller's disposition event is emitted before the
//!   worker releases it): two such spans of one key live at once with
//!   different digests. Concurrent spans of one key with any digests are
//!   counted too. By construction both are 0: the workqueue never hands a
//!   key to two workers, and a swap keeps the queue and workers and only
//!   replaces the plugin the next reconcile loads.
//!
//! The pieces: `version` (the two components and a cold copy), `keys` (the
//! ConfigMaps and their stamps), `writer` (the steady load), `watch` (the
//! label watch timing a swap), `probe` (the host's reconcile spans),
//! `admin` (requests to the admin server), `measure` (one run) and `run`
//! (the report).

mod admin;
mod keys;
mod measure;
mod probe;
mod run;
mod version;
mod watch;
mod writer;

pub(crate) use admin::http;
pub use measure::Options;
pub use run::run;
