//! End-to-end tests live in `e2e/`; this crate has no library code.
