//! A Rust plugin: a cdylib crate with the SDK vendored as path dependencies.

use super::names::PluginName;
use super::sdk::{APIMACHINERY, CARGO_LOCK, RUST_SDK, standalone_manifest, version};
use super::shape::{Skeleton, Spelling, common_vars, lines};
use super::{Project, ScaffoldError, owned_doc, render};

const CARGO_TOML: &str = include_str!("templates/rust/Cargo.toml");
const LIB_RS: &str = include_str!("templates/rust/lib.rs");
const TESTS_RS: &str = include_str!("templates/rust/tests.rs");

/// The spec's fields are checked by deserializing them: no check lines.
const SPELLING: Spelling = Spelling {
    indent: "            ",
    list: "&[",
    owned: |o| format!("{}::gvk()", o.kind),
    field: |f| {
        format!(
            "    /// {}\n    pub {}: {},",
            f.description,
            snake(f.name),
            f.ty.rust()
        )
    },
    check: |_, _| String::new(),
    sample: |f| format!("            {}: {}.into(),", snake(f.name), f.sample),
};

pub(super) fn project(s: Skeleton<'_>, project: &mut Project) -> Result<(), ScaffoldError> {
    let vars = vars(s);
    project.file("Cargo.toml", render(CARGO_TOML, &vars));
    project.file("src/lib.rs", render(LIB_RS, &vars));
    project.file("src/tests.rs", render(TESTS_RS, &vars));
    project.file("Cargo.lock", CARGO_LOCK.to_string());
    for (path, text) in RUST_SDK {
        let text = if *path == "Cargo.toml" {
            standalone_manifest(
                "wasmctrl-sdk",
                text,
                &[("wasmctrl-apimachinery", "../wasmctrl-apimachinery")],
            )?
        } else {
            (*text).to_string()
        };
        project.file(&format!("vendor/wasmctrl-sdk/{path}"), text);
    }
    for (path, text) in APIMACHINERY {
        let text = if *path == "Cargo.toml" {
            standalone_manifest("wasmctrl-apimachinery", text, &[])?
        } else {
            (*text).to_string()
        };
        project.file(&format!("vendor/wasmctrl-apimachinery/{path}"), text);
    }
    // The SDK's bindings read the world from `../wit`, beside the crate.
    project.file("vendor/wit/reconciler.wit", super::wit().to_string());
    Ok(())
}

/// Where `cargo build --release --target wasm32-wasip2` writes the component.
pub(super) fn component(name: &PluginName) -> String {
    format!("target/wasm32-wasip2/release/{}.wasm", name.snake)
}

fn vars(s: Skeleton<'_>) -> Vec<(&'static str, String)> {
    let Skeleton {
        name, kind, owns, ..
    } = s;
    let mut uses = String::new();
    let mut apply_owned = String::new();
    let mut helpers = String::new();
    let mut test_owned = String::new();
    if !owns.is_empty() {
        uses.push_str("use serde::de::DeserializeOwned;\n");
        for o in owns {
            uses.push_str(&format!("use wasmctrl_sdk::{};\n", o.rust_path));
        }
        uses.push_str("use wasmctrl_sdk::serde_json::{self, json};\n");
        apply_owned.push_str(&format!(
            r#"    let owner = object
        .controller_owner_ref()
        .ok_or_else(|| Error::permanent("the {kind} has no uid"))?;
    let name = object.name();
    let message = object.spec.message.as_str();
    let labels = json!({{"app.kubernetes.io/managed-by": MANAGER, "app.kubernetes.io/instance": name}});
    let metadata = json!({{"name": name, "labels": &labels, "ownerReferences": [owner]}});
"#,
            kind = kind.kind
        ));
        for o in owns {
            let var = snake(o.kind);
            apply_owned.push_str(&format!(
                "    let {var}: {k} = owned(json!({{\"metadata\": &metadata, {body}}}))?;\n    Api::<{k}>::namespaced(namespace).apply(&{var}, MANAGER, true)?;\n",
                k = o.kind,
                body = o.body_with("message", "&labels"),
            ));
            test_owned.push_str(&format!(
                "    let {var} = Api::<{k}>::namespaced(\"default\").get(\"sample\").unwrap();\n    assert_eq!({var}.metadata.owner_references.unwrap()[0].uid, object.metadata.uid.clone().unwrap());\n",
                k = o.kind,
            ));
        }
        apply_owned.push('\n');
        helpers.push_str(
            r#"
/// An owned object from its JSON: a mistake in it is the plugin's, and
/// retrying would not fix it.
fn owned<K: DeserializeOwned>(value: serde_json::Value) -> Result<K, Error> {
    serde_json::from_value(value)
        .map_err(|e| Error::permanent(format!("an owned object does not parse: {e}")))
}
"#,
        );
    }
    let spelled = SPELLING.spell(s);
    let mut vars = common_vars(s, owned_doc(owns, "//! "));
    vars.extend([
        ("name", name.name.clone()),
        ("sdk_version", version().to_string()),
        ("uses", uses),
        ("metadata", lines(&spelled.metadata)),
        ("apply_owned", apply_owned),
        ("helpers", helpers),
        ("spec_fields", lines(&spelled.spec_fields)),
        ("spec_sample", lines(&spelled.spec_sample)),
        ("test_owned", test_owned),
    ]);
    vars
}

/// `ConfigMap` → `config_map`, `observedGeneration` → `observed_generation`.
pub(super) fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
