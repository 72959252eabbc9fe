//! Builds every plugin crate to a `wasm32-wasip2` component and writes their
//! paths into `$OUT_DIR/artifacts.rs` (wasmtime's test-programs pattern): the
//! components are always built from source, never committed.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (constant name, cargo package, crate directory relative to the workspace root).
const PLUGINS: &[(&str, &str, &str)] = &[
    ("NOOP", "noop", "plugins/noop"),
    ("WEBAPP", "webapp", "plugins/webapp"),
    ("MISBEHAVE", "misbehave", "plugins/testing/misbehave"),
    ("WRONG_WORLD", "wrong-world", "plugins/testing/wrong-world"),
    ("STAMP_V1", "stamp", "plugins/testing/stamp"),
    (
        "MISSING_EXPORT",
        "missing-export",
        "plugins/testing/missing-export",
    ),
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

    for dir in ["wit", "guest-sdk", "Cargo.lock"]
        .iter()
        .map(|d| root.join(d))
        .chain(PLUGINS.iter().map(|(_, _, dir)| root.join(dir)))
    {
        println!("cargo:rerun-if-changed={}", dir.display());
    }

    let packages: Vec<&str> = PLUGINS.iter().map(|(_, package, _)| *package).collect();
    cargo_build(&root, &wasm_target, &packages, None);

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
    for (name, package, _) in PLUGINS {
        let mut file = wasm_file(&wasm_target, package);
        // The second build of `stamp` overwrites its output: keep a copy.
        if *package == "stamp" {
            let v1 = wasm_target.join("stamp_v1.wasm");
            fs::copy(&file, &v1).unwrap();
            file = v1;
        }
        emit(name, package, &file);
    }
    for (name, features, file) in [
        ("STAMP_V2", "stamp/v2", "stamp_v2.wasm"),
        ("STAMP_GREEDY", "stamp/greedy", "stamp_greedy.wasm"),
        (
            "STAMP_TRAP_IN_METADATA",
            "stamp/trap-in-metadata",
            "stamp_trap_in_metadata.wasm",
        ),
    ] {
        cargo_build(&root, &wasm_target, &["stamp"], Some(features));
        let copy = wasm_target.join(file);
        fs::copy(wasm_file(&wasm_target, "stamp"), &copy).unwrap();
        emit(name, "stamp", &copy);
    }
    all.push_str("];\n");
    fs::write(out_dir.join("artifacts.rs"), consts + &all).unwrap();
}

fn cargo_build(root: &Path, target_dir: &Path, packages: &[&str], features: Option<&str>) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
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
        "building the plugins for wasm32-wasip2 failed (is the target installed? `rustup target add wasm32-wasip2`)"
    );
}

fn wasm_file(target: &Path, package: &str) -> PathBuf {
    target
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{}.wasm", package.replace('-', "_")))
}
