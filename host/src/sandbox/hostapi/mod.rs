//! The `kube` imports a guest sees: one request type for every verb
//! ([`KubeRequest`]), served by a [`KubeApi`] chosen by the host.
//!
//! # The stack
//! The API that reaches the cluster is a [`ClusterApi`] (or [`NoApiServer`]
//! without one). Every cross-cutting feature is a [`Layer`] over an inner
//! `KubeApi`, made a `KubeApi` again by [`Layered`], so a reconcile's calls
//! go through a stack built for it, outermost first:
//!
//! | layer | where | what it does |
//! |---|---|---|
//! | skip's `Tracker` | `ops/manager/skip.rs` | notes what the reconcile read and wrote |
//! | transcript `Taping` | `ops/transcript/record.rs` | keeps each call with its answer |
//! | shadow `Recording` | `ops/manager/shadow/` | keeps the stable version's reads and writes |
//! | shadow `Capture` | `ops/manager/shadow/` | answers a candidate from that recording, writes in the host |
//! | `Replayer` | `ops/transcript/replay.rs` | answers every call from a transcript |
//!
//! # Adding a cross-cutting feature
//! 1. Write a type holding the feature's state and implement [`Layer`] for
//!    it: its `call` sees each of the guest's calls as a [`Next`], and
//!    answers it or hands it on with [`Next::pass`]. The host's own reads
//!    and the admission check pass beneath every layer.
//! 2. Where the reconcile's API is put together (`PluginSlot` in
//!    `ops/manager/lifecycle.rs`, or the feature's own entry point), wrap
//!    the API below it: `Arc::new(Layered::new(feature, inner))`, and hand
//!    the result on as the next inner API or as the reconcile's
//!    [`crate::sandbox::Through`].
//! 3. Read what the layer kept through [`Layered::layer`] once the
//!    reconcile is over.
//!
//! A layer sees [`KubeRequest`]s as the guest made them: it may clone one
//! to keep it, but neither parses nor copies a body on the way through, so
//! a stack without the feature costs nothing.

mod answer;
mod api;
mod body;
mod cluster;
mod error;
mod grant;
mod layer;
mod request;

pub use crate::meta::kind::Gvk;
pub use crate::meta::selector::LabelSelector;
pub use api::{KubeApi, KubeResponse, NoApiServer};
pub use body::MAX_NESTING;
pub use cluster::{ApiLimits, ClusterApi, ClusterContext, map_error};
pub use error::ApiError;
pub use grant::{Access, Grant, PermissionRule, RuleProblem, VERBS};
pub use layer::{Layer, Layered, Next};
pub(crate) use request::check_size;
pub use request::{Address, Body, Event, EventType, KubeRequest, MAX_PAYLOAD, ObjectPatch};
