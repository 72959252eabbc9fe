//! `wasmctrl build`: turn a plugin directory into a component of the
//! `wasmctrl:reconciler@0.1.3` world, whatever language it is written in.
//!
//! The language is detected from the project file in the directory:
//!
//! | file | language | toolchain |
//! |---|---|---|
//! | `Cargo.toml` | Rust | `cargo build --release --target wasm32-wasip2` |
//! | `pyproject.toml` | Python | componentize-py [`COMPONENTIZE_PY`] in a venv |
//! | `package.json` | JavaScript / TypeScript | tsc (type-check), esbuild (bundle), componentize-js |
//!
//! # Toolchains
//! The Python and JavaScript tools are installed on first use into a cache
//! outside the repository ([`toolchains_dir`]): a venv with componentize-py,
//! and an npm prefix with componentize-js, jco, typescript and esbuild, each
//! in a directory named after the pinned versions, so a second build
//! installs nothing and a version bump installs next to the old one. An
//! install is complete once its `.installed` marker exists; concurrent
//! builds serialise on a lock directory. A missing `python3`, `node` or
//! `npm`, or a failed download, is an error naming what is missing and how
//! to get it.
//!
//! The WIT world is the host's own (`wit/http.wit`'s `http-reconciler`: the
//! reconciler world plus `wasi:http/outgoing-handler`, embedded with the
//! WASI packages it uses), written to a temporary directory for each build:
//! a guest is always built against exactly the world this host checks.
//!
//! # Plugin configuration
//! - Python (`pyproject.toml`): `[project] name`, and `[tool.wasmctrl]`
//!   `module` (the module that calls `wasmctrl_sdk.export`, default `app`)
//!   and `python-path` (directories componentize-py searches, relative to
//!   the file, default `["."]`).
//! - JavaScript/TypeScript (`package.json`): `name`, and `wasmctrl.entry`
//!   (the module that exports `metadata` and `reconcile`, default
//!   `src/index.ts`). With a `tsconfig.json`, the plugin is type-checked
//!   first. Dependencies resolve as a bundler resolves them (esbuild, with
//!   the tsconfig's `paths`); run `npm install` first if the plugin has any.
//!
//! Python and JavaScript components go to `<dir>/target/<name>.wasm` unless
//! told otherwise; Rust ones stay where cargo puts them.
//!
//! This module uses only `std`, `serde_json` and `thiserror`: the build
//! script of `plugins/artifacts` includes it as it is, so the test
//! components are built by the same code, through the same toolchain cache.
//!
//! - `plugin`: [`build`], dispatching on the [`Language`] of a directory,
//!   and [`source_of`], the conventions read backwards.
//! - `rust`, `python`, `javascript`: one module per guest language.
//! - `toolchain`: the toolchain cache the Python and JavaScript tools are
//!   installed into; `componentize` what those two builds share.
//! - `command`: running a tool and keeping the tail of its output.
//! - `warm`: [`BuildSession`], toolchain processes kept warm between the
//!   builds of a watch.

mod command;
mod componentize;
mod error;
mod javascript;
mod language;
mod limits;
mod options;
mod plugin;
mod python;
mod rust;
#[cfg(test)]
mod tests;
mod toolchain;
mod warm;

pub use error::BuildError;
pub use javascript::JS_TOOLS;
pub use language::Language;
pub use options::{BuildOptions, Built};
pub use plugin::{build, detect, prewarm, source_of};
pub use python::COMPONENTIZE_PY;
pub use rust::{WASM_TARGET, ensure_wasm_target};
pub use toolchain::toolchains_dir;
pub use warm::BuildSession;
