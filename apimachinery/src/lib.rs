//! The Kubernetes API conventions every part of wasmctrl checks or computes,
//! in one place, named after Go's `k8s.io/apimachinery` that holds the same
//! helpers upstream:
//!
//! - [`names`]: the syntax of object names, label keys and values
//!   (DNS-1123 labels and subdomains, qualified names), with the API
//!   server's messages.
//! - [`selector`]: label selectors in their string form
//!   (`app=web,tier in (a,b),!legacy`): parsed, matched and printed back.
//! - [`time`]: RFC 3339 timestamps in the two precisions of `metav1.Time`
//!   and `metav1.MicroTime`, and in milliseconds for records people read.
//! - [`json`]: JSON text held to a depth and a count of values before it
//!   is parsed.
//! - [`patch`]: JSON merge patch (RFC 7386) and bounded JSON patch
//!   (RFC 6902) over `serde_json` values.
//!
//! The crate has no I/O and builds for `wasm32-wasip2`, so guests (through
//! the SDK), the host and the API server share one implementation.

#![warn(missing_docs)]

pub mod json;
pub mod names;
pub mod patch;
pub mod selector;
pub mod time;
