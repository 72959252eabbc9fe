//! Paths of the plugin components in `plugins/`, built from source to
//! `wasm32-wasip2` by this crate's build script, for tests and benchmarks.

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
