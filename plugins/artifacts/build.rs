//! Builds every plugin crate to a `wasm32-wasip2` component and writes their
//! paths into `$OUT_DIR/artifacts.rs` (wasmtime's test-programs pattern): the
//! components are always built from source, never committed.
//!
//! The Python and TypeScript plugins are built by the host's own build module
//! (`host/src/tools/build/`, included below as it is), through its toolchain
//! cache: `$WASMCTRL_TOOLCHAINS` if set, else `wasmctrl-toolchains/` in the
//! cargo target dir, so CI can cache it with the target dir. The first build
//! installs componentize-py and the npm tools there (python3 3.11+, node 20+
//! and npm needed).

#[allow(dead_code, unused_imports)]
#[path = "../../host/src/tools/build/mod.rs"]
mod polyglot;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest as _, Sha256};

/// (constant name, crate directory relative to the workspace root); each
/// package is named as its directory.
const PLUGINS: &[(&str, &str)] = &[
    ("NOOP", "plugins/noop"),
    ("NOOP_LEAN", "plugins/testing/noop-lean"),
    ("WEBAPP", "plugins/webapp"),
    ("DNS", "plugins/dns"),
    ("MISBEHAVE", "plugins/testing/misbehave"),
    ("WRONG_WORLD", "plugins/testing/wrong-world"),
    ("STAMP_V1", "plugins/testing/stamp"),
    ("BENCH_STATUS", "plugins/testing/bench-status"),
    ("MISSING_EXPORT", "plugins/testing/missing-export"),
    ("HOSTILE", "plugins/testing/hostile"),
    ("MIRROR", "plugins/testing/mirror"),
    ("COMPAT_0_1_0", "plugins/testing/compat-0-1-0"),
    ("OUTBOUND", "plugins/testing/outbound"),
    ("GATEKEEPER", "plugins/testing/gatekeeper"),
];

/// (constant name, package, features): further builds of a package with
/// features, each copied aside (a build overwrites the package's file) to
/// its [`component_file`].
const VARIANTS: &[(&str, &str, &str)] = &[
    ("WEBAPP_RELABEL", "webapp", "webapp/relabel"),
    ("STAMP_V2", "stamp", "stamp/v2"),
    ("STAMP_GREEDY", "stamp", "stamp/greedy"),
    ("STAMP_TRAP_IN_METADATA", "stamp", "stamp/trap-in-metadata"),
    ("HOSTILE_WATCH_SECRET", "hostile", "hostile/watch-secret"),
    (
        "HOSTILE_BLOCK_IN_METADATA",
        "hostile",
        "hostile/block-in-metadata",
    ),
    ("HOSTILE_HUGE_METADATA", "hostile", "hostile/huge-metadata"),
    (
        "GATEKEEPER_IGNORE",
        "gatekeeper",
        "gatekeeper/ignore-failures",
    ),
    (
        "GATEKEEPER_SECRETS",
        "gatekeeper",
        "gatekeeper/review-secrets",
    ),
];

/// (constant name, directory relative to the workspace root): plugins in
/// other languages, built by `polyglot::build` to their [`component_file`].
const POLYGLOT: &[(&str, &str)] = &[
    ("WEBAPP_PY", "plugins/webapp-py"),
    ("WEBAPP_TS", "plugins/webapp-ts"),
    ("MISBEHAVE_PY", "plugins/testing/misbehave-py"),
    ("MISBEHAVE_TS", "plugins/testing/misbehave-ts"),
    ("HOSTILE_PY", "plugins/testing/hostile-py"),
    ("HOSTILE_TS", "plugins/testing/hostile-ts"),
    ("DNS_PY", "plugins/dns-py"),
    ("DNS_TS", "plugins/dns-ts"),
];

/// What a polyglot build reads: the SDKs and the plugins, without their
/// node_modules, test output or components.
const POLYGLOT_INPUTS: &[&str] = &[
    "guest-sdk-python/wasmctrl_sdk",
    "guest-sdk-js/src",
    "guest-sdk-js/package.json",
    "plugins/webapp-py/webapp.py",
    "plugins/webapp-py/pyproject.toml",
    "plugins/webapp-ts/src",
    "plugins/webapp-ts/package.json",
    "plugins/webapp-ts/tsconfig.json",
    "plugins/testing/misbehave-py/misbehave.py",
    "plugins/testing/misbehave-py/pyproject.toml",
    "plugins/testing/misbehave-ts/src",
    "plugins/testing/misbehave-ts/package.json",
    "plugins/testing/misbehave-ts/tsconfig.json",
    "plugins/testing/hostile-py/hostile.py",
    "plugins/testing/hostile-py/pyproject.toml",
    "plugins/testing/hostile-ts/src",
    "plugins/testing/hostile-ts/package.json",
    "plugins/testing/hostile-ts/tsconfig.json",
    "plugins/dns-py/dns_operator.py",
    "plugins/dns-py/pyproject.toml",
    "plugins/dns-ts/src",
    "plugins/dns-ts/package.json",
    "plugins/dns-ts/tsconfig.json",
    "host/src/tools/build",
    "wit",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out. Guests go to one
    // directory per target dir so debug and release host builds share them.
    let target_root = out_dir.ancestors().nth(4).unwrap().to_path_buf();
    let wasm_target = target_root.join("wasm-plugins");

    // The workspace Cargo.toml holds the guests' release profiles.
    let rust_inputs: Vec<&str> = RUST_INPUTS
        .iter()
        .copied()
        .chain(PLUGINS.iter().map(|(_, dir)| *dir))
        .collect();
    for input in &rust_inputs {
        println!("cargo:rerun-if-changed={}", root.join(input).display());
    }

    let mut consts = String::new();
    let mut all = String::from("pub const ALL: &[(&str, &str)] = &[\n");
    let mut emit = |name: &str, package: &str, file: &Path| {
        assert!(file.exists(), "{} was not built", file.display());
        consts.push_str(&format!(
            "/// Path of the `{package}` component.\npub const {name}: &str = {:?};\n",
            file.display().to_string()
        ));
        all.push_str(&format!("    ({package:?}, {name}),\n"));
    };

    // Built again only when an input's content (or the compiler) changed:
    // cargo would rebuild every guest of a fresh clone, whose files are
    // all new to it.
    let rust_outputs = rust_outputs(&wasm_target);
    let inputs = format!(
        "{}\n{}",
        rustc_version(),
        inputs_digest(&root, &rust_inputs)
    );
    unless_built(
        &wasm_target.join("rust-inputs.sha256"),
        &inputs,
        rust_outputs.iter().map(|(_, _, file)| file.as_path()),
        || {
            let verbose = polyglot::BuildOptions {
                verbose: true,
                ..polyglot::BuildOptions::default()
            };
            polyglot::ensure_wasm_target(&root, &verbose)
                .unwrap_or_else(|e| panic!("the plugins cannot be built: {e}"));
            let packages: Vec<&str> = PLUGINS.iter().map(|(_, dir)| last_name(dir)).collect();
            cargo_build(&root, &wasm_target, &packages, None);
            // Variants of a package overwrite its output: keep a copy.
            for package in packages.iter().filter(|p| has_variants(p)) {
                fs::copy(
                    wasm_file(&wasm_target, package),
                    plugin_output(&wasm_target, package),
                )
                .unwrap();
            }
            for (name, package, features) in VARIANTS {
                cargo_build(&root, &wasm_target, &[package], Some(features));
                let copy = wasm_target.join(component_file(name));
                fs::copy(wasm_file(&wasm_target, package), &copy).unwrap();
            }
        },
    );
    for (name, package, file) in &rust_outputs {
        emit(name, package, file);
    }
    let many = wasm_target.join("many_memories.wasm");
    fs::write(&many, many_memories(&root.join("wit"))).unwrap();
    emit("MANY_MEMORIES", "many-memories", &many);
    let tables = wasm_target.join("many_tables.wasm");
    fs::write(&tables, many_tables(&root.join("wit"))).unwrap();
    emit("MANY_TABLES", "many-tables", &tables);
    let instances = wasm_target.join("many_instances.wasm");
    fs::write(&instances, many_instances(&root.join("wit"))).unwrap();
    emit("MANY_INSTANCES", "many-instances", &instances);
    println!("cargo:rerun-if-env-changed=WASMCTRL_TOOLCHAINS");
    for input in POLYGLOT_INPUTS {
        println!("cargo:rerun-if-changed={}", root.join(input).display());
    }
    let toolchains = env::var_os("WASMCTRL_TOOLCHAINS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| target_root.join("wasmctrl-toolchains"));
    // Built again only when an input's content changed: componentize-py
    // and componentize-js do not write the same bytes twice, and a new
    // digest would miss every compiled-component cache the tests keep in
    // the target dir. A fresh clone (new mtimes, same content) keeps them.
    let polyglot_outputs: Vec<PathBuf> = POLYGLOT
        .iter()
        .map(|(name, _)| wasm_target.join(component_file(name)))
        .collect();
    unless_built(
        &wasm_target.join("polyglot-inputs.sha256"),
        &inputs_digest(&root, POLYGLOT_INPUTS),
        polyglot_outputs.iter().map(PathBuf::as_path),
        || {
            for ((_, dir), out) in POLYGLOT.iter().zip(&polyglot_outputs) {
                let options = polyglot::BuildOptions {
                    out: Some(out.clone()),
                    toolchains: Some(toolchains.clone()),
                    ..polyglot::BuildOptions::default()
                };
                polyglot::build(&root.join(dir), &options)
                    .unwrap_or_else(|e| panic!("building {dir} failed: {e}"));
            }
        },
    );
    for ((name, dir), out) in POLYGLOT.iter().zip(&polyglot_outputs) {
        emit(name, last_name(dir), out);
    }
    all.push_str("];\n");
    fs::write(out_dir.join("artifacts.rs"), consts + &all).unwrap();
}

/// Runs `build` unless the `stamp` file holds `inputs` (a digest of what
/// the outputs are built from) and every one of `outputs` exists; then
/// stamps `inputs`. The stamp is removed first, so a build that fails
/// half-way is run again next time.
fn unless_built<'a>(
    stamp: &Path,
    inputs: &str,
    mut outputs: impl Iterator<Item = &'a Path>,
    build: impl FnOnce(),
) {
    let built_before =
        fs::read_to_string(stamp).is_ok_and(|s| s == inputs) && outputs.all(Path::is_file);
    if !built_before {
        let _ = fs::remove_file(stamp);
        build();
        fs::write(stamp, inputs).unwrap();
    }
}

/// The Rust guests' files, with their components and the workspace's
/// lock file and profiles; each of [`PLUGINS`] too.
const RUST_INPUTS: &[&str] = &[
    "wit",
    "guest-sdk",
    "apimachinery",
    "Cargo.lock",
    "Cargo.toml",
    "rust-toolchain.toml",
];

/// Each Rust guest's component: (constant name, package, file). A package
/// with [`VARIANTS`] keeps its default build in `<package>_default.wasm`.
fn rust_outputs(wasm_target: &Path) -> Vec<(&'static str, &'static str, PathBuf)> {
    let mut outputs = Vec::new();
    for (name, dir) in PLUGINS {
        let package = last_name(dir);
        outputs.push((*name, package, plugin_output(wasm_target, package)));
    }
    for (name, package, _) in VARIANTS {
        outputs.push((*name, *package, wasm_target.join(component_file(name))));
    }
    outputs
}

fn has_variants(package: &str) -> bool {
    VARIANTS.iter().any(|v| v.1 == package)
}

/// Where `package`'s default build is kept: its build output, or a copy
/// of it when its variants' builds overwrite that.
fn plugin_output(wasm_target: &Path, package: &str) -> PathBuf {
    if has_variants(package) {
        wasm_target.join(format!("{}_default.wasm", package.replace('-', "_")))
    } else {
        wasm_file(wasm_target, package)
    }
}

/// `rustc -V` of the compiler cargo builds with.
fn rustc_version() -> String {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .arg("-V")
        .output()
        .unwrap_or_else(|e| panic!("{rustc} -V: {e}"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// SHA-256 over the path and content of every file of `inputs`, relative
/// to `root` (directories walked in name order, bytecode caches and
/// installed packages left out).
fn inputs_digest(root: &Path, inputs: &[&str]) -> String {
    fn add(root: &Path, path: &Path, hasher: &mut Sha256) {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = fs::read_dir(path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for entry in entries {
                let name = entry.file_name().unwrap_or_default();
                if name != "__pycache__" && name != "node_modules" {
                    add(root, &entry, hasher);
                }
            }
        } else if path.is_file() {
            let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let relative = path.strip_prefix(root).unwrap_or(path);
            hasher.update(relative.to_string_lossy().as_bytes());
            hasher.update([0]);
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(&bytes);
        }
    }
    let mut hasher = Sha256::new();
    for input in inputs {
        add(root, &root.join(input), &mut hasher);
    }
    hex::encode(hasher.finalize())
}

fn cargo_build(root: &Path, target_dir: &Path, packages: &[&str], features: Option<&str>) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "--target", polyglot::WASM_TARGET])
        .arg("--target-dir")
        .arg(target_dir);
    for package in packages {
        cmd.args(["-p", package]);
    }
    if let Some(f) = features {
        cmd.args(["--features", f]);
    }
    // The host build's flags and profile settings are not the guests'.
    for var in [
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().expect("failed to run cargo for the plugins");
    assert!(
        status.success(),
        "building the plugins for wasm32-wasip2 failed: cargo says why above"
    );
}

/// A component of the `reconciler` world whose core module defines four
/// linear memories of 30 MiB each: every one within a 64 MiB limit, their
/// sum far beyond it. Its functions trap; it exists to be refused at
/// instantiation. No Rust guest can define several memories, hence WAT.
fn many_memories(wit: &Path) -> Vec<u8> {
    component_of(
        wit,
        r#"(module
            (memory (export "memory") 480)
            (memory 480)
            (memory 480)
            (memory 480)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
            (func (export "metadata") (result i32) unreachable)
            (func (export "reconcile") (param i32 i32 i32 i32 i32) (result i32) unreachable))"#,
    )
}

/// A component whose core module declares 33 tables, one past the
/// default `tables` ceiling.
fn many_tables(wit: &Path) -> Vec<u8> {
    let tables = "(table 1 funcref)\n".repeat(33);
    component_of(
        wit,
        &format!(
            r#"(module
            (memory (export "memory") 1)
            {tables}
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
            (func (export "metadata") (result i32) unreachable)
            (func (export "reconcile") (param i32 i32 i32 i32 i32) (result i32) unreachable))"#
        ),
    )
}

/// A component of the `reconciler` world that creates 33 core instances
/// of an empty module besides its own, one past the default `instances`
/// ceiling on their own. Nothing counts core instances before
/// instantiation, so this is what the store's limiter refuses.
fn many_instances(wit: &Path) -> Vec<u8> {
    let mut component = component_of(
        wit,
        r#"(module
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
            (func (export "metadata") (result i32) unreachable)
            (func (export "reconcile") (param i32 i32 i32 i32 i32) (result i32) unreachable))"#,
    );
    // Sections may follow the component's exports, and indices only grow,
    // so appending an empty core module and its instances leaves every
    // index the component already uses as it was.
    let modules = top_level_sections(&component)
        .filter(|&id| id == CORE_MODULE_SECTION)
        .count();
    section(&mut component, CORE_MODULE_SECTION, b"\0asm\x01\0\0\0");
    let mut instances = Vec::new();
    leb128(&mut instances, 33);
    for _ in 0..33 {
        // instantiate (0x00) module `modules` with no arguments
        instances.push(0x00);
        leb128(&mut instances, modules);
        leb128(&mut instances, 0);
    }
    section(&mut component, CORE_INSTANCE_SECTION, &instances);
    component
}

/// Component-model section ids (the component binary format).
const CORE_MODULE_SECTION: u8 = 1;
const CORE_INSTANCE_SECTION: u8 = 2;

/// The ids of a component binary's top-level sections.
fn top_level_sections(bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut at = 8;
    std::iter::from_fn(move || {
        let id = *bytes.get(at)?;
        at += 1;
        let (mut size, mut shift) = (0usize, 0);
        loop {
            let b = bytes[at];
            at += 1;
            size |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        at += size;
        Some(id)
    })
}

/// Appends section `id` holding `payload` to a binary.
fn section(bytes: &mut Vec<u8>, id: u8, payload: &[u8]) {
    bytes.push(id);
    leb128(bytes, payload.len());
    bytes.extend_from_slice(payload);
}

fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The reconciler-world component of the core module `wat`.
fn component_of(wit: &Path, wat: &str) -> Vec<u8> {
    let mut module = wat::parse_str(wat).expect("the core module parses");
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(wit).expect("the WIT package parses");
    let world = resolve
        .select_world(&[package], Some("reconciler"))
        .expect("the reconciler world");
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .expect("component metadata embeds");
    wit_component::ComponentEncoder::default()
        .module(&module)
        .expect("the module is a component's core module")
        .validate(true)
        .encode()
        .expect("the component encodes")
}

/// The file a component is copied or built to, named after its constant:
/// `WEBAPP_PY` → `webapp_py.wasm`.
fn component_file(name: &str) -> String {
    format!("{}.wasm", name.to_lowercase())
}

/// The last name of a directory relative to the workspace root: a crate's
/// package, a polyglot plugin's label.
fn last_name(dir: &str) -> &str {
    dir.rsplit('/').next().unwrap_or(dir)
}

fn wasm_file(target: &Path, package: &str) -> PathBuf {
    target
        .join(polyglot::WASM_TARGET)
        .join("release")
        .join(format!("{}.wasm", package.replace('-', "_")))
}
