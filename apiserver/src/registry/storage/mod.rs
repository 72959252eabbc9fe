//! The object store: one global resourceVersion, per-resource ordered maps,
//! a bounded event history for watch resumption and a broadcast fan-out.
//!
//! Every method is synchronous and holds the lock only for map operations, so
//! callers compute patches and serialize outside it (optimistic concurrency:
//! read, compute, [`Store::commit`] with the expected resourceVersion, retry).
//!
//! With persistence (`--data-dir`) a write becomes visible only once it is
//! on disk. [`Store::commit`] *stages* it: conflict checks and
//! [`Store::latest`] see staged writes, so concurrent writers build on each
//! other without waiting, while reads ([`Store::get`], lists, watches) see
//! only durable state. The persister writes staged writes in batches and
//! hands each durable batch to [`Store::apply_durable`], which makes it
//! visible in resourceVersion order. If a batch cannot be written,
//! [`Store::abort_staged`] discards every staged write (later ones may build
//! on the failed ones), so memory never holds what the disk does not.
//! Without persistence a commit is applied at once.
//!
//! | File | Job |
//! |---|---|
//! | `store` | [`Store`], its setup, loading from disk and shutdown |
//! | `state` | what is behind the lock: tables, indexes, history, staged writes |
//! | `reads` | GET, lists and the index lookups |
//! | `commit` | optimistic writes, and making events visible |
//! | `watch` | the consistent start of a watch, and forced expiry |
//! | `event` | [`Event`], one change |
//! | `json` | objects as the store holds them: compact JSON, parsed on use |
//! | `durable` | staged writes and the persister's queue |

mod commit;
mod durable;
mod event;
mod json;
mod reads;
mod state;
mod store;
#[cfg(test)]
mod tests;
mod watch;

pub(crate) use commit::{
    Change, Committed, Expect, MAX_OBJECT_BYTES, MAX_OBJECT_DEPTH, StoreError,
};
pub(crate) use durable::{Durable, PersistOp};
pub(crate) use event::{Event, EventType};
pub(crate) use json::Json;
pub(crate) use json::{
    api_version as api_version_of, decode as parse_json, mentions, nests_deeper_than,
    resource_version, uid_and_owners,
};
pub(crate) use reads::Filter;
pub(crate) use state::{HISTORY_LEN, ObjKey, Stored, is_deleting};
pub(crate) use store::Store;
pub(crate) use watch::WatchFrom;
