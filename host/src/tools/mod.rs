//! The command-line tools: the `wasmctrl` command line itself, building a
//! plugin into a component, scaffolding a plugin project (`wasmctrl new`),
//! and applying manifests for `wasmctrl dev`. The
//! top layer: tools may import every other.

pub(crate) mod apply;
pub mod build;
pub mod cli;
pub mod scaffold;
