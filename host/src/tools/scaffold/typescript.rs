//! A TypeScript plugin: the reconciler, its entry module, a `node --test`
//! test, both tsconfigs, and the SDK package in `vendor/wasmctrl-sdk`.

use super::sdk::TYPESCRIPT_SDK;
use super::shape::{Skeleton, Spelling, common_vars, lines};
use super::{Project, owned_doc, render};

const RECONCILER: &str = include_str!("templates/typescript/reconciler.ts");
const INDEX: &str = include_str!("templates/typescript/index.ts");
const TEST: &str = include_str!("templates/typescript/test.ts");
const PACKAGE_JSON: &str = include_str!("templates/typescript/package.json");
const TSCONFIG: &str = include_str!("templates/typescript/tsconfig.json");
const TSCONFIG_TEST: &str = include_str!("templates/typescript/tsconfig.test.json");

const SPELLING: Spelling = Spelling {
    indent: "      ",
    list: "[",
    owned: |o| format!("kinds.{}", o.kind),
    field: |f| {
        format!(
            "  /** {} */\n  {}: {};",
            f.description,
            f.name,
            f.ty.typescript()
        )
    },
    check: |f, kind| {
        format!(
            "  if (typeof spec.{name} !== {ty:?}) throw new PermanentError(`{kind} ${{nameOf(object)}}: spec.{name} is not a {json}`);",
            name = f.name,
            ty = f.ty.typescript(),
            json = f.ty.openapi(),
        )
    },
    sample: |f| format!("{}: {}", f.name, f.sample),
};

pub(super) fn project(s: Skeleton<'_>, project: &mut Project) {
    let name = s.name;
    let vars = vars(s);
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

fn vars(s: Skeleton<'_>) -> Vec<(&'static str, String)> {
    let Skeleton { kind, owns, .. } = s;
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
    let spelled = SPELLING.spell(s);
    let (owner_import, kinds_import) = if owns.is_empty() {
        (String::new(), String::new())
    } else {
        (
            "\n  controllerOwnerRef,".to_string(),
            "\n  kinds,".to_string(),
        )
    };
    let mut vars = common_vars(s, owned_doc(owns, " * "));
    vars.extend([
        ("ts_owner_import", owner_import),
        ("kinds_import", kinds_import),
        // The last permission ends where the template's chain goes on.
        ("metadata", spelled.metadata.join("\n")),
        ("apply_owned", apply_owned),
        ("spec_fields", lines(&spelled.spec_fields)),
        ("spec_checks", lines(&spelled.spec_checks)),
        (
            "spec_sample",
            format!("{{ {} }}", spelled.spec_sample.join(", ")),
        ),
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
    ]);
    vars
}
