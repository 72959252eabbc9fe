//! A TypeScript plugin: the reconciler, its entry module, a `node --test`
//! test, both tsconfigs, and the SDK package in `vendor/wasmctrl-sdk`.

use super::names::{CustomKind, PluginName};
use super::sdk::TYPESCRIPT_SDK;
use super::shape::{OwnedKind, Permission, SPEC, quoted_list};
use super::{Project, owned_doc, render};

const RECONCILER: &str = include_str!("templates/typescript/reconciler.ts");
const INDEX: &str = include_str!("templates/typescript/index.ts");
const TEST: &str = include_str!("templates/typescript/test.ts");
const PACKAGE_JSON: &str = include_str!("templates/typescript/package.json");
const TSCONFIG: &str = include_str!("templates/typescript/tsconfig.json");
const TSCONFIG_TEST: &str = include_str!("templates/typescript/tsconfig.test.json");

pub(super) fn project(
    name: &PluginName,
    kind: &CustomKind,
    owns: &[&'static OwnedKind],
    permissions: &[Permission],
    project: &mut Project,
) {
    let vars = vars(name, kind, owns, permissions);
    project.file("package.json", render(PACKAGE_JSON, &vars));
    project.file("tsconfig.json", render(TSCONFIG, &vars));
    project.file("tsconfig.test.json", render(TSCONFIG_TEST, &vars));
    project.file(&format!("src/{}.ts", name.name), render(RECONCILER, &vars));
    project.file("src/index.ts", render(INDEX, &vars));
    project.file(&format!("test/{}.test.ts", name.name), render(TEST, &vars));
    for (path, text) in TYPESCRIPT_SDK {
        project.file(&format!("vendor/wasmctrl-sdk/{path}"), (*text).to_string());
    }
}

fn vars(
    name: &PluginName,
    kind: &CustomKind,
    owns: &[&'static OwnedKind],
    permissions: &[Permission],
) -> Vec<(&'static str, String)> {
    let mut metadata = String::new();
    for o in owns {
        metadata.push_str(&format!("      .owns(kinds.{})\n", o.kind));
    }
    let last = permissions.len().saturating_sub(1);
    for (i, p) in permissions.iter().enumerate() {
        metadata.push_str(&format!(
            "      .permission({:?}, [{:?}], [{}])",
            p.group,
            p.resource,
            quoted_list(p.verbs)
        ));
        if i != last {
            metadata.push('\n');
        }
    }
    let mut apply_owned = String::new();
    let mut test_owned = String::new();
    if !owns.is_empty() {
        apply_owned.push_str(&format!(
            r#"  const owner = controllerOwnerRef({kind}, object);
  if (owner === undefined) throw new PermanentError("the {kind} has no uid");
  const name = nameOf(object);
  const message = spec.message;
  const labels = {{ "app.kubernetes.io/managed-by": MANAGER, "app.kubernetes.io/instance": name }};
  const metadata = {{ name, labels, ownerReferences: [owner] }};
"#,
            kind = kind.kind
        ));
        for o in owns {
            apply_owned.push_str(&format!(
                "  Api.namespaced(kinds.{}, namespace).apply({{ \"metadata\": metadata, {} }}, MANAGER, true);\n",
                o.kind,
                o.body_with("message", "labels")
            ));
            test_owned.push_str(&format!(
                "    const owned{k} = Api.namespaced<KubeObject>(kinds.{k}, \"default\").get(\"sample\");\n    assert.equal(owned{k}.metadata!.ownerReferences![0]!.uid, object.metadata!.uid);\n",
                k = o.kind
            ));
        }
    }
    let owned_doc = owned_doc(owns, " * ");
    let mut spec_fields = String::new();
    let mut spec_checks = String::new();
    let mut spec_sample = Vec::new();
    for f in SPEC {
        spec_fields.push_str(&format!(
            "  /** {} */\n  {}: {};\n",
            f.description,
            f.name,
            f.ty.typescript()
        ));
        spec_checks.push_str(&format!(
            "  if (typeof spec.{name} !== {ty:?}) throw new PermanentError(`{kind} ${{nameOf(object)}}: spec.{name} is not a {json}`);\n",
            name = f.name,
            ty = f.ty.typescript(),
            json = f.ty.openapi(),
            kind = kind.kind,
        ));
        spec_sample.push(format!("{}: {}", f.name, f.sample));
    }
    let (owner_import, kinds_import) = if owns.is_empty() {
        (String::new(), String::new())
    } else {
        (
            "\n  controllerOwnerRef,".to_string(),
            "\n  kinds,".to_string(),
        )
    };
    vec![
        ("plugin", name.name.clone()),
        ("Kind", kind.kind.clone()),
        ("Reconciler", format!("{}Reconciler", kind.kind)),
        ("group", kind.group.clone()),
        ("version", kind.version.clone()),
        ("plural", kind.plural.clone()),
        ("finalizer", super::finalizer(kind)),
        ("owned_doc", owned_doc),
        ("ts_owner_import", owner_import),
        ("kinds_import", kinds_import),
        ("metadata", metadata),
        ("apply_owned", apply_owned),
        ("spec_fields", spec_fields),
        ("spec_checks", spec_checks),
        ("spec_sample", format!("{{ {} }}", spec_sample.join(", "))),
        ("test_owned", test_owned),
        (
            "test_imports",
            if owns.is_empty() {
                ""
            } else {
                " kinds, type KubeObject,"
            }
            .to_string(),
        ),
    ]
}
