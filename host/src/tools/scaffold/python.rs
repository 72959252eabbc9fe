//! A Python plugin: a module, its unittest, and the SDK in `vendor/`.

use super::sdk::{PYTHON_SDK, version};
use super::shape::{Skeleton, Spelling, common_vars, lines};
use super::{Project, owned_doc, render};

const MODULE: &str = include_str!("templates/python/module.py");
const TEST: &str = include_str!("templates/python/test.py");
const TESTS_INIT: &str = include_str!("templates/python/tests_init.py");
const PYPROJECT: &str = include_str!("templates/python/pyproject.toml");

const SPELLING: Spelling = Spelling {
    indent: "            ",
    list: "[",
    owned: |o| format!("kinds.{}", o.python_const),
    field: |f| {
        format!(
            "    #: {}\n    {}: {}",
            f.description,
            f.name,
            f.ty.python()
        )
    },
    check: |f, kind| {
        format!(
            "    if not isinstance(spec.get({name:?}), {ty}):\n        raise PermanentError(f\"{kind} {{objects.name(obj)}}: spec.{name} is not a {json}\")",
            name = f.name,
            ty = f.ty.python(),
            json = f.ty.openapi(),
        )
    },
    sample: |f| format!("{:?}: {}", f.name, f.sample),
};

pub(super) fn project(s: Skeleton<'_>, project: &mut Project) {
    let name = s.name;
    let vars = vars(s);
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

fn vars(s: Skeleton<'_>) -> Vec<(&'static str, String)> {
    let Skeleton {
        name, kind, owns, ..
    } = s;
    let constant = super::rust::snake(&kind.kind).to_ascii_uppercase();
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
    let spelled = SPELLING.spell(s);
    let mut vars = common_vars(s, owned_doc(owns, ""));
    vars.extend([
        ("module", name.snake.clone()),
        ("sdk_version", version().to_string()),
        ("KIND", constant),
        (
            "kinds_import",
            if owns.is_empty() { "" } else { "\n    kinds," }.to_string(),
        ),
        ("metadata", lines(&spelled.metadata)),
        ("apply_owned", apply_owned),
        ("spec_fields", lines(&spelled.spec_fields)),
        ("spec_checks", lines(&spelled.spec_checks)),
        (
            "spec_sample",
            format!("{{{}}}", spelled.spec_sample.join(", ")),
        ),
        ("test_owned", test_owned),
    ]);
    vars
}
