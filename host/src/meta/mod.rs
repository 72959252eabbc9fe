//! The Kubernetes vocabulary every layer speaks: kinds, the syntax of names
//! and selectors, normalized JSON, and PEM bundles of CA certificates. A leaf: meta imports no other module
//! of the crate.

pub mod address;
pub mod kind;
pub mod normalized;
pub mod pem;
pub mod selector;
pub mod syntax;
