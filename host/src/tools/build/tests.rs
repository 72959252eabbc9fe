use std::path::{Path, PathBuf};

use super::componentize::{ADMISSION_WORLD, TempDir, WORLD, file_stem_of, string_list};
use super::error::io_error;
use super::javascript::world_of;
use super::plugin::check_component;
use super::python::{is_module_name, missing_module, missing_module_hint};
use super::rust::ensure_target;
use super::toolchain::ensure_installed;
use super::*;

fn scratch(files: &[&str]) -> TempDir {
    let dir = TempDir::new("test").unwrap();
    for f in files {
        std::fs::write(dir.path.join(f), "").unwrap();
    }
    dir
}

#[test]
fn the_language_comes_from_the_project_file() {
    for (file, language) in [
        ("Cargo.toml", Language::Rust),
        ("pyproject.toml", Language::Python),
        ("package.json", Language::JavaScript),
    ] {
        let dir = scratch(&[file]);
        assert_eq!(detect(&dir.path, None).unwrap(), language);
    }
    let none = scratch(&[]);
    let err = detect(&none.path, None).unwrap_err();
    assert!(
        err.to_string()
            .contains("no Cargo.toml, pyproject.toml or package.json"),
        "{err}"
    );
    let both = scratch(&["pyproject.toml", "package.json"]);
    let err = detect(&both.path, None).unwrap_err();
    assert!(err.to_string().contains("pass --lang"), "{err}");
    assert_eq!(
        detect(&both.path, Some(Language::Python)).unwrap(),
        Language::Python
    );
    let err = detect(&both.path, Some(Language::Rust)).unwrap_err();
    assert!(err.to_string().contains("no Cargo.toml"), "{err}");
}

#[test]
fn dev_finds_the_source_of_a_missing_component() {
    let dir = scratch(&["pyproject.toml"]);
    let component = dir.path.join("target").join("webapp.wasm");
    let (source, options) = source_of(&component).unwrap();
    assert_eq!(source, dir.path);
    assert_eq!(options.language, Some(Language::Python));
    assert_eq!(options.out.as_deref(), Some(component.as_path()));

    let rust = Path::new("/ws/target/wasm32-wasip2/release/my_plugin.wasm");
    let (source, options) = source_of(rust).unwrap();
    assert_eq!(source, Path::new("/ws"));
    assert_eq!(options.package.as_deref(), Some("my-plugin"));
    assert_eq!(options.language, Some(Language::Rust));

    assert!(source_of(Path::new("/somewhere/plugin.wasm")).is_none());

    // A config in the current directory names its component relatively.
    let relative = Path::new("target/wasm32-wasip2/release/my_plugin.wasm");
    let (source, options) = source_of(relative).unwrap();
    assert_eq!(source, std::env::current_dir().unwrap());
    assert_eq!(
        options.out.as_deref(),
        Some(std::env::current_dir().unwrap().join(relative).as_path())
    );
}

#[test]
fn names_and_modules_are_checked() {
    assert_eq!(
        file_stem_of("@wasmctrl/webapp-ts").as_deref(),
        Some("webapp_ts")
    );
    assert_eq!(file_stem_of("hello").as_deref(), Some("hello"));
    assert_eq!(file_stem_of("../.."), None);
    assert!(is_module_name("webapp"));
    assert!(is_module_name("pkg.app_1"));
    for bad in ["", "1x", "a..b", "a-b", "a/b"] {
        assert!(!is_module_name(bad), "{bad}");
    }
    let list = serde_json::json!([".", "../sdk"]);
    assert_eq!(
        string_list(&list, "p").unwrap(),
        Some(vec![".".to_string(), "../sdk".to_string()])
    );
    assert!(string_list(&serde_json::json!("."), "p").is_err());
    assert!(string_list(&serde_json::json!([1]), "p").is_err());
}

#[test]
fn a_core_module_is_not_a_component() {
    let dir = scratch(&[]);
    let core = dir.path.join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    assert!(check_component(&core).is_err());
    let component = dir.path.join("c.wasm");
    std::fs::write(&component, b"\0asm\x0d\0\x01\0").unwrap();
    assert_eq!(check_component(&component).unwrap(), 8);
}

#[test]
fn an_install_that_fails_leaves_nothing_and_a_done_one_is_not_redone() {
    let root = scratch(&[]);
    let dir = root.path.join("tool-1.0");
    let err = ensure_installed(&dir, |d| {
        std::fs::create_dir_all(d).unwrap();
        Err(BuildError::NoCacheDir)
    })
    .unwrap_err();
    assert!(matches!(err, BuildError::NoCacheDir));
    assert!(!dir.exists() && !dir.with_extension("lock").exists());

    let (_, installed) =
        ensure_installed(&dir, |d| std::fs::create_dir_all(d).map_err(io_error(d))).unwrap();
    assert!(installed);
    let (_, installed) = ensure_installed(&dir, |_| panic!("installed twice")).unwrap();
    assert!(!installed);
}

/// An executable shell script in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_missing_wasm_target_is_added_with_rustup_and_otherwise_named() {
    let root = scratch(&[]);
    let libdir = root.path.join("sysroot/lib/rustlib/wasm32-wasip2/lib");
    let rustc = script(&root.path, "rustc", &format!("echo {}", libdir.display()));
    let absent = root.path.join("no-rustup");
    let quiet = BuildOptions::default();
    let ensure =
        |rustup: &Path| ensure_target(&root.path, rustc.as_os_str(), rustup.as_os_str(), &quiet);

    // No rustup: the error says which target is missing and where.
    let err = ensure(&absent).unwrap_err().to_string();
    assert!(
        err.contains("`rustup`") && err.contains("wasm32-wasip2 target is not installed"),
        "{err}"
    );
    assert!(err.contains(&libdir.display().to_string()), "{err}");

    // A rustup that fails: its output is in the error.
    let failing = script(
        &root.path,
        "rustup-offline",
        "echo 'error: could not download' >&2; exit 1",
    );
    let err = ensure(&failing).unwrap_err().to_string();
    assert!(
        err.contains("rustup target add") && err.contains("could not download"),
        "{err}"
    );

    // A rustup that installs it, asked for exactly that target.
    let rustup = script(
        &root.path,
        "rustup",
        &format!(
            "[ \"$*\" = \"target add wasm32-wasip2\" ] || exit 3; mkdir -p {}",
            libdir.display()
        ),
    );
    assert!(ensure(&rustup).unwrap());
    // Installed: rustup is not asked again.
    assert!(!ensure(&absent).unwrap());
}

#[test]
fn a_python_build_missing_the_sdk_says_so_in_one_line() {
    let output = "AssertionError: Traceback (most recent call last):\n  File \"/0/app.py\", line 1, in <module>\n    from wasmctrl_sdk import export\nModuleNotFoundError: No module named 'wasmctrl_sdk'\n\nCaused by:\n    ModuleNotFoundError: No module named 'wasmctrl_sdk'\n";
    let module = missing_module(output).unwrap();
    assert_eq!(module, "wasmctrl_sdk");
    let hint = missing_module_hint(&module, &[".".into()]);
    assert!(
        !hint.contains('\n') && hint.contains("python-path (.)") && hint.contains("vendor"),
        "{hint}"
    );
    assert_eq!(missing_module("SyntaxError: invalid syntax"), None);
    let other = missing_module_hint("yaml", &[".".into(), "lib".into()]);
    assert!(
        other.contains("module yaml") && other.contains("(., lib)"),
        "{other}"
    );
}

#[test]
fn a_build_directory_is_made_new_and_private() {
    use std::os::unix::fs::PermissionsExt;
    let (a, b) = (TempDir::new("t").unwrap(), TempDir::new("t").unwrap());
    assert_ne!(a.path, b.path);
    let mode = std::fs::metadata(&a.path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn a_javascript_entry_that_is_an_option_or_outside_the_project_is_refused() {
    for entry in ["--serve=127.0.0.1:0", "../outside.ts", "/etc/passwd"] {
        let root = scratch(&[]);
        let project = root.path.join("project");
        std::fs::create_dir(&project).unwrap();
        std::fs::write(
            project.join("package.json"),
            serde_json::json!({"name": "p", "wasmctrl": {"entry": entry}}).to_string(),
        )
        .unwrap();
        // The file is there, so only the entry's form refuses it.
        if !entry.starts_with('/') {
            std::fs::write(project.join(entry), "export {}").unwrap();
        }
        let options = BuildOptions {
            toolchains: Some(root.path.join("no-toolchains")),
            ..BuildOptions::default()
        };
        let e = build(&project, &options).unwrap_err().to_string();
        assert!(
            e.contains("must be a path inside the project") && e.contains(entry),
            "{entry}: {e}"
        );
        assert!(
            !root.path.join("no-toolchains").exists(),
            "nothing installed"
        );
    }
}

#[test]
fn a_javascript_entry_exporting_validate_is_built_against_the_admission_world() {
    let dir = scratch(&[]);
    let meta = dir.path.join("meta.json");
    let write = |exports: &str| {
        std::fs::write(
            &meta,
            format!(r#"{{"outputs": {{"plugin.js": {{"exports": {exports}}}}}}}"#),
        )
        .unwrap()
    };
    write(r#"["metadata", "reconcile"]"#);
    assert_eq!(world_of(&meta), WORLD);
    write(r#"["metadata", "reconcile", "outbound", "webhooks", "validate", "mutate"]"#);
    assert_eq!(world_of(&meta), ADMISSION_WORLD);
    std::fs::remove_file(&meta).unwrap();
    assert_eq!(world_of(&meta), WORLD, "no metafile: the reconciler world");
}
