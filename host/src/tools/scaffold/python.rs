//! A Python plugin: a module, its unittest, and the SDK in `vendor/`.

use super::names::{CustomKind, PluginName};
use super::sdk::{PYTHON_SDK, version};
use super::shape::{OwnedKind, Permission, SPEC, quoted_list};
use super::{Project, owned_doc, render};

const MODULE: &str = include_str!("templates/python/module.py");
const TEST: &str = include_str!("templates/python/test.py");
const TESTS_INIT: &str = include_str!("templates/python/tests_init.py");
const PYPROJECT: &str = include_str!("templates/python/pyproject.toml");

pub(super) fn project(
    name: &PluginName,
    kind: &CustomKind,
    owns: &[&'static OwnedKind],
    permissions: &[Permission],
    project: &mut Project,
) {
    let vars = vars(name, kind, owns, permissions);
    project.file("pyproject.toml", render(PYPROJECT, &vars));
    project.file(&format!("{}.py", name.snake), render(MODULE, &vars));
    // Without it, `python -m unittest` cannot import the tests.
    project.file("tests/__init__.py", TESTS_INIT.to_string());
    project.file(
        &format!("tests/test_{}.py", name.snake),
        render(TEST, &vars),
    );
    for (path, text) in PYTHON_SDK {
        project.file(&format!("vendor/{path}"), (*text).to_string());
    }
}

fn vars(
    name: &PluginName,
    kind: &CustomKind,
    owns: &[&'static OwnedKind],
    permissions: &[Permission],
) -> Vec<(&'static str, String)> {
    let constant = super::rust::snake(&kind.kind).to_ascii_uppercase();
    let mut metadata = String::new();
    for o in owns {
        metadata.push_str(&format!("            .owns(kinds.{})\n", o.python_const));
    }
    for p in permissions {
        metadata.push_str(&format!(
            "            .permission({:?}, [{:?}], [{}])\n",
            p.group,
            p.resource,
            quoted_list(p.verbs)
        ));
    }
    let mut apply_owned = String::new();
    let mut test_owned = String::new();
    if !owns.is_empty() {
        apply_owned.push_str(&format!(
            r#"    owner = {constant}.controller_owner_ref(obj)
    if owner is None:
        raise PermanentError("the {kind} has no uid")
    name = objects.name(obj)
    message = spec["message"]
    labels = {{"app.kubernetes.io/managed-by": MANAGER, "app.kubernetes.io/instance": name}}
    metadata = {{"name": name, "labels": labels, "ownerReferences": [owner]}}
"#,
            kind = kind.kind
        ));
        for o in owns {
            apply_owned.push_str(&format!(
                "    Api.namespaced(kinds.{}, namespace).apply({{\"metadata\": metadata, {}}}, MANAGER, True)\n",
                o.python_const,
                o.body_with("message", "labels")
            ));
            test_owned.push_str(&format!(
                "            owned = Api.namespaced(kinds.{}, \"default\").get(\"sample\")\n            self.assertEqual(owned[\"metadata\"][\"ownerReferences\"][0][\"uid\"], obj[\"metadata\"][\"uid\"])\n",
                o.python_const
            ));
        }
    }
    let owned_doc = owned_doc(owns, "");
    let mut spec_fields = String::new();
    let mut spec_checks = String::new();
    let mut spec_sample = Vec::new();
    for f in SPEC {
        spec_fields.push_str(&format!(
            "    #: {}\n    {}: {}\n",
            f.description,
            f.name,
            f.ty.python()
        ));
        spec_checks.push_str(&format!(
            "    if not isinstance(spec.get({name:?}), {ty}):\n        raise PermanentError(f\"{kind} {{objects.name(obj)}}: spec.{name} is not a {json}\")\n",
            name = f.name,
            ty = f.ty.python(),
            json = f.ty.openapi(),
            kind = kind.kind,
        ));
        spec_sample.push(format!("{:?}: {}", f.name, f.sample));
    }
    vec![
        ("plugin", name.name.clone()),
        ("module", name.snake.clone()),
        ("sdk_version", version().to_string()),
        ("Kind", kind.kind.clone()),
        ("KIND", constant),
        ("Reconciler", format!("{}Reconciler", kind.kind)),
        ("group", kind.group.clone()),
        ("version", kind.version.clone()),
        ("plural", kind.plural.clone()),
        ("finalizer", super::finalizer(kind)),
        ("owned_doc", owned_doc),
        (
            "kinds_import",
            if owns.is_empty() { "" } else { "\n    kinds," }.to_string(),
        ),
        ("metadata", metadata),
        ("apply_owned", apply_owned),
        ("spec_fields", spec_fields),
        ("spec_checks", spec_checks),
        ("spec_sample", format!("{{{}}}", spec_sample.join(", "))),
        ("test_owned", test_owned),
    ]
}
