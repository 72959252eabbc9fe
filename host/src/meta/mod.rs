//! The Kubernetes vocabulary every layer speaks: kinds, the syntax of names
//! and selectors, normalized JSON, and PEM bundles of CA certificates; and
//! the bounded read of a local file another party may have put there. A
//! leaf: meta imports no other module of the crate.

pub mod address;
pub(crate) mod files;
pub mod kind;
pub mod normalized;
pub mod pem;
pub mod selector;
pub mod syntax;
