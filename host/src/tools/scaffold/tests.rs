use std::collections::BTreeSet;
use std::path::Path;

use super::names::{CustomKind, PluginName, plural_of};
use super::sdk::{self, Files};
use super::*;

#[test]
fn names_are_checked_and_spelled_for_each_language() {
    let name = PluginName::parse("my-app2").unwrap();
    assert_eq!(name.snake, "my_app2");
    assert_eq!(name.pascal(), "MyApp2");
    for bad in [
        "",
        "My",
        "1app",
        "a_b",
        "a--b",
        "a-",
        "vendor",
        "class",
        &"a".repeat(41),
    ] {
        let e = PluginName::parse(bad).unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
}

#[test]
fn a_python_plugin_may_not_shadow_a_module_it_needs() {
    for shadowing in ["json", "secrets", "wit-world", "sre-compile"] {
        let Err(e) = PluginName::parse(shadowing).and_then(|n| n.check_python()) else {
            panic!("{shadowing} accepted");
        };
        assert!(e.to_string().contains("shadows"), "{e}");
    }
    PluginName::parse("json-operator")
        .unwrap()
        .check_python()
        .unwrap();
}

#[test]
fn kinds_default_from_the_name_and_are_checked() {
    let name = PluginName::parse("my-app").unwrap();
    let kind = CustomKind::parse(None, &name).unwrap();
    assert_eq!(
        (
            kind.group.as_str(),
            kind.version.as_str(),
            kind.kind.as_str()
        ),
        ("my-app.example.com", "v1alpha1", "MyApp")
    );
    assert_eq!(kind.crd_name(), "myapps.my-app.example.com");
    let given = CustomKind::parse(Some("demo.example.com/v1beta2/Policy"), &name).unwrap();
    assert_eq!(given.plural, "policies");
    for (bad, says) in [
        ("demo/v1/Thing", "DNS subdomain"),
        ("apps.k8s.io/v1/Thing", "Kubernetes' own"),
        ("demo.example.com/1/Thing", "version"),
        ("demo.example.com/v1alpha/Thing", "version"),
        ("demo.example.com/v1/thing", "PascalCase"),
        ("demo.example.com/Thing", "GROUP/VERSION/KIND"),
    ] {
        let e = CustomKind::parse(Some(bad), &name).unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn plurals_follow_kubernetes_defaults() {
    for (singular, plural) in [
        ("greeting", "greetings"),
        ("ingress", "ingresses"),
        ("box", "boxes"),
        ("match", "matches"),
        ("policy", "policies"),
        ("gateway", "gateways"),
    ] {
        assert_eq!(plural_of(singular), plural);
    }
}

#[test]
fn every_template_is_filled_in_for_every_language_and_owned_kind() {
    let name = PluginName::parse("greeter").unwrap();
    let kind = CustomKind::parse(None, &name).unwrap();
    let all: Vec<&'static OwnedKind> = shape::OWNABLE.iter().collect();
    for language in [Language::Rust, Language::Python, Language::JavaScript] {
        for owns in [&[][..], &all[..1], &all[..]] {
            let (project, _) = files(&name, &kind, owns, language).unwrap();
            for (path, text) in &project.files {
                if path.starts_with("vendor/") {
                    continue;
                }
                assert!(!text.contains("{{"), "{language} {path}: {text}");
                assert!(
                    !text.contains("MESSAGE") && !text.contains("LABELS"),
                    "{path}"
                );
            }
        }
    }
}

#[test]
fn the_grant_is_exactly_the_declared_permissions() {
    let name = PluginName::parse("greeter").unwrap();
    let kind = CustomKind::parse(Some("demo.example.com/v1/Greeting"), &name).unwrap();
    let owns = [OwnedKind::find("configmap").unwrap()];
    let permissions = shape::permissions(&kind, &owns);
    let config = shape::host_config("x.wasm", false, &name, &permissions);
    let grant: Vec<&str> = config.lines().filter(|l| l.contains("group:")).collect();
    assert_eq!(
        grant,
        [
            r#"      - { group: "demo.example.com", resources: ["greetings"], verbs: [get, list, watch, patch] }"#,
            r#"      - { group: "demo.example.com", resources: ["greetings/status"], verbs: [patch] }"#,
            r#"      - { group: "", resources: ["configmaps"], verbs: [list, watch, patch] }"#,
        ]
    );
    let (project, _) = files(&name, &kind, &owns, Language::Rust).unwrap();
    let lib = &project
        .files
        .iter()
        .find(|(p, _)| p == "src/lib.rs")
        .unwrap()
        .1;
    for line in [
        r#".permission("demo.example.com", &["greetings"], &["get", "list", "watch", "patch"])"#,
        r#".permission("demo.example.com", &["greetings/status"], &["patch"])"#,
        r#".permission("", &["configmaps"], &["list", "watch", "patch"])"#,
        ".owns(ConfigMap::gvk())",
    ] {
        assert!(lib.contains(line), "{line} in {lib}");
    }
}

#[test]
fn the_crd_and_sample_are_yaml_of_the_kind() {
    let name = PluginName::parse("greeter").unwrap();
    let kind = CustomKind::parse(Some("demo.example.com/v1/Greeting"), &name).unwrap();
    let crd: serde_json::Value = serde_norway::from_str(&shape::crd(&kind, &name)).unwrap();
    assert_eq!(crd["metadata"]["name"], "greetings.demo.example.com");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert_eq!(
        schema["properties"]["spec"]["properties"]["message"]["type"],
        "string"
    );
    assert_eq!(schema["properties"]["spec"]["required"][0], "message");
    let sample: serde_json::Value = serde_norway::from_str(&shape::sample(&kind)).unwrap();
    assert_eq!(sample["apiVersion"], "demo.example.com/v1");
    assert_eq!(sample["spec"]["message"], "Hello from wasmctrl");
}

#[test]
fn the_vendored_crates_stand_alone() {
    let (_, sdk) = sdk::RUST_SDK
        .iter()
        .find(|(p, _)| *p == "Cargo.toml")
        .unwrap();
    let manifest = sdk::standalone_manifest(
        "wasmctrl-sdk",
        sdk,
        &[("wasmctrl-apimachinery", "../wasmctrl-apimachinery")],
    )
    .unwrap();
    assert!(!manifest.contains("workspace"), "{manifest}");
    assert!(manifest.contains(r#"wasmctrl-apimachinery = { path = "../wasmctrl-apimachinery" }"#));
    assert!(manifest.contains(&format!("version = \"{}\"", env!("CARGO_PKG_VERSION"))));
    let (_, apimachinery) = sdk::APIMACHINERY
        .iter()
        .find(|(p, _)| *p == "Cargo.toml")
        .unwrap();
    let manifest = sdk::standalone_manifest("wasmctrl-apimachinery", apimachinery, &[]).unwrap();
    assert!(
        !manifest.contains("workspace") && !manifest.contains("proptest"),
        "{manifest}"
    );
    let e = sdk::standalone_manifest("x", "[dependencies]\nnope = { workspace = true }\n", &[])
        .unwrap_err();
    assert!(e.to_string().contains("no dependency nope"), "{e}");
}

/// Every file of an SDK directory that a project needs is embedded.
#[test]
fn the_embedded_sdks_are_complete() {
    fn on_disk(root: &Path, dir: &str, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            if entry.file_type().unwrap().is_dir() {
                if !matches!(name.as_str(), "node_modules" | "dist" | "__pycache__") {
                    on_disk(root, &path, out);
                }
            } else if !name.ends_with(".pyc") {
                out.insert(path);
            }
        }
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cases: [(&str, Files, &[&str], &[&str]); 4] = [
        ("guest-sdk", sdk::RUST_SDK, &["src"], &["Cargo.toml"]),
        ("apimachinery", sdk::APIMACHINERY, &["src"], &["Cargo.toml"]),
        ("guest-sdk-python", sdk::PYTHON_SDK, &["wasmctrl_sdk"], &[]),
        (
            "guest-sdk-js",
            sdk::TYPESCRIPT_SDK,
            &["src"],
            &["package.json", "tsconfig.json", "README.md"],
        ),
    ];
    for (dir, embedded, subdirs, top) in cases {
        let mut want: BTreeSet<String> = top.iter().map(|s| s.to_string()).collect();
        for sub in subdirs {
            on_disk(&repo.join(dir), sub, &mut want);
        }
        let have: BTreeSet<String> = embedded.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(have, want, "{dir}: add new files to scaffold/sdk.rs");
    }
}

#[test]
fn a_project_is_written_only_into_an_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("greeter");
    let options = NewOptions {
        name: "greeter".into(),
        language: Language::Python,
        kind: None,
        owns: vec!["ConfigMap".into()],
        dir: Some(dir.clone()),
    };
    let made = scaffold(&options).unwrap();
    assert_eq!(made.component, "target/greeter.wasm");
    for file in [
        "pyproject.toml",
        "greeter.py",
        "tests/__init__.py",
        "vendor/wasmctrl_sdk/api.py",
        "wasmctrl.yaml",
    ] {
        assert!(dir.join(file).is_file(), "{file}");
    }
    let e = scaffold(&options).unwrap_err().to_string();
    assert!(e.contains("not empty"), "{e}");
    let e = scaffold(&NewOptions {
        owns: vec!["Pod".into()],
        dir: Some(tmp.path().join("other")),
        ..options
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"Pod\"") && e.contains("ConfigMap, Deployment, Service"),
        "{e}"
    );
}
