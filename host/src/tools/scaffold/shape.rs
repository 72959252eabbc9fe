//! The one description of what a scaffolded reconciler reads, writes and
//! may do, from which every language's code, the CRD, the sample and the
//! host config's grant are generated, so they cannot disagree.

use super::names::{CustomKind, PluginName};

/// A field of the custom kind's `spec`.
pub(super) struct SpecField {
    /// The JSON name (camelCase).
    pub(super) name: &'static str,
    pub(super) ty: FieldType,
    pub(super) description: &'static str,
    /// What the sample sets it to, as JSON.
    pub(super) sample: &'static str,
}

#[derive(Clone, Copy)]
pub(super) enum FieldType {
    String,
}

impl FieldType {
    pub(super) fn openapi(self) -> &'static str {
        match self {
            FieldType::String => "string",
        }
    }

    pub(super) fn rust(self) -> &'static str {
        match self {
            FieldType::String => "String",
        }
    }

    pub(super) fn python(self) -> &'static str {
        match self {
            FieldType::String => "str",
        }
    }

    pub(super) fn typescript(self) -> &'static str {
        match self {
            FieldType::String => "string",
        }
    }
}

/// The skeleton's spec: every field required. The skeleton copies
/// `message` into its `Ready` condition and into what it owns.
pub(super) const SPEC: &[SpecField] = &[SpecField {
    name: "message",
    ty: FieldType::String,
    description: "A message the reconciler reports in the Ready condition and writes into the objects it owns.",
    sample: "\"Hello from wasmctrl\"",
}];

/// A built-in kind `--owns` may name, and the object the skeleton keeps
/// for each of its objects.
pub(super) struct OwnedKind {
    pub(super) kind: &'static str,
    pub(super) group: &'static str,
    pub(super) plural: &'static str,
    /// Its `k8s_openapi` type.
    pub(super) rust_path: &'static str,
    /// Its name in the Python SDK's `kinds` and the TypeScript SDK's `kinds`.
    pub(super) python_const: &'static str,
    /// The fields besides `metadata`, as a JSON object's members written so
    /// they are also a Python dict's and a TypeScript object's: `MESSAGE`
    /// and `LABELS` stand for the spec's message and the owned labels.
    pub(super) body: &'static str,
}

pub(super) const OWNABLE: &[OwnedKind] = &[
    OwnedKind {
        kind: "ConfigMap",
        group: "",
        plural: "configmaps",
        rust_path: "k8s_openapi::api::core::v1::ConfigMap",
        python_const: "CONFIG_MAP",
        body: r#""data": {"message": MESSAGE}"#,
    },
    OwnedKind {
        kind: "Deployment",
        group: "apps",
        plural: "deployments",
        rust_path: "k8s_openapi::api::apps::v1::Deployment",
        python_const: "DEPLOYMENT",
        body: r#""spec": {"replicas": 1, "selector": {"matchLabels": LABELS}, "template": {"metadata": {"labels": LABELS, "annotations": {"message": MESSAGE}}, "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}"#,
    },
    OwnedKind {
        kind: "Service",
        group: "",
        plural: "services",
        rust_path: "k8s_openapi::api::core::v1::Service",
        python_const: "SERVICE",
        body: r#""spec": {"selector": LABELS, "ports": [{"name": "http", "port": 80}]}"#,
    },
];

impl OwnedKind {
    /// The kind `--owns` names, case-insensitively.
    pub(super) fn find(name: &str) -> Option<&'static OwnedKind> {
        OWNABLE.iter().find(|k| k.kind.eq_ignore_ascii_case(name))
    }

    /// The body with `MESSAGE` and `LABELS` as the language spells them.
    pub(super) fn body_with(&self, message: &str, labels: &str) -> String {
        self.body
            .replace("MESSAGE", message)
            .replace("LABELS", labels)
    }
}

/// One permission the skeleton's metadata declares.
pub(super) struct Permission {
    pub(super) group: String,
    pub(super) resource: String,
    pub(super) verbs: &'static [&'static str],
}

/// Everything the skeleton does, as permissions: read its kind (get; the
/// informer's list and watch), the finalizer's patches, the status written
/// by server-side apply (a patch of `<plural>/status`), and for each owned
/// kind its informer and its server-side apply.
pub(super) fn permissions(kind: &CustomKind, owns: &[&OwnedKind]) -> Vec<Permission> {
    let mut out = vec![
        Permission {
            group: kind.group.clone(),
            resource: kind.plural.clone(),
            verbs: &["get", "list", "watch", "patch"],
        },
        Permission {
            group: kind.group.clone(),
            resource: format!("{}/status", kind.plural),
            verbs: &["patch"],
        },
    ];
    out.extend(owns.iter().map(|o| Permission {
        group: o.group.to_string(),
        resource: o.plural.to_string(),
        verbs: &["list", "watch", "patch"],
    }));
    out
}

/// What `wasmctrl new` was asked for: every language's skeleton is
/// generated from it.
#[derive(Clone, Copy)]
pub(super) struct Skeleton<'a> {
    pub(super) name: &'a PluginName,
    pub(super) kind: &'a CustomKind,
    pub(super) owns: &'a [&'static OwnedKind],
    pub(super) permissions: &'a [Permission],
}

/// How one language spells the lines a skeleton has one of per item: its
/// metadata's owned kinds and permissions, and per spec field its
/// declaration, its check and its sample value (each without a newline).
pub(super) struct Spelling {
    /// Where a metadata line (`.owns(…)`, `.permission(…)`) starts.
    pub(super) indent: &'static str,
    /// How a list literal of strings opens: `[` or `&[`.
    pub(super) list: &'static str,
    /// An owned kind as `.owns(…)` takes it.
    pub(super) owned: fn(&OwnedKind) -> String,
    pub(super) field: fn(&SpecField) -> String,
    /// The check of a field of the kind named by the second argument.
    pub(super) check: fn(&SpecField, &str) -> String,
    pub(super) sample: fn(&SpecField) -> String,
}

/// The per-item lines of a skeleton, spelled in one language.
pub(super) struct Spelled {
    /// `.owns(…)` then `.permission(…)` lines.
    pub(super) metadata: Vec<String>,
    pub(super) spec_fields: Vec<String>,
    pub(super) spec_checks: Vec<String>,
    pub(super) spec_sample: Vec<String>,
}

impl Spelling {
    pub(super) fn spell(&self, s: Skeleton<'_>) -> Spelled {
        let Skeleton {
            kind,
            owns,
            permissions,
            ..
        } = s;
        Spelled {
            metadata: owns
                .iter()
                .map(|o| format!("{}.owns({})", self.indent, (self.owned)(o)))
                .chain(permissions.iter().map(|p| {
                    format!(
                        "{indent}.permission({:?}, {list}{:?}], {list}{}])",
                        p.group,
                        p.resource,
                        quoted_list(p.verbs),
                        indent = self.indent,
                        list = self.list,
                    )
                }))
                .collect(),
            spec_fields: SPEC.iter().map(|f| (self.field)(f)).collect(),
            spec_checks: SPEC.iter().map(|f| (self.check)(f, &kind.kind)).collect(),
            spec_sample: SPEC.iter().map(|f| (self.sample)(f)).collect(),
        }
    }
}

/// Each line followed by a newline.
pub(super) fn lines(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The template variables every language's skeleton shares.
pub(super) fn common_vars(s: Skeleton<'_>, owned_doc: String) -> Vec<(&'static str, String)> {
    let Skeleton { name, kind, .. } = s;
    vec![
        ("plugin", name.name.clone()),
        ("Kind", kind.kind.clone()),
        ("Reconciler", format!("{}Reconciler", kind.kind)),
        ("group", kind.group.clone()),
        ("version", kind.version.clone()),
        ("plural", kind.plural.clone()),
        ("finalizer", super::finalizer(kind)),
        ("owned_doc", owned_doc),
    ]
}

/// `"a", "b"`: strings quoted for a list in Rust, Python, TypeScript or YAML.
pub(super) fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CustomResourceDefinition: the spec's fields, and the status the
/// skeleton writes (`observedGeneration`, `conditions`).
pub(super) fn crd(kind: &CustomKind, name: &PluginName) -> String {
    let mut properties = String::new();
    for f in SPEC {
        properties.push_str(&format!(
            "                {}:\n                  description: {:?}\n                  type: {}\n",
            f.name,
            f.description,
            f.ty.openapi()
        ));
    }
    let required = SPEC.iter().map(|f| f.name).collect::<Vec<_>>();
    format!(
        r#"# The {kind_name} kind, generated by `wasmctrl new` from the spec and status
# the reconciler reads and writes: keep them in step when either changes.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {crd_name}
spec:
  group: {group}
  scope: Namespaced
  names:
    plural: {plural}
    singular: {singular}
    kind: {kind_name}
    listKind: {kind_name}List
  versions:
    - name: {version}
      served: true
      storage: true
      subresources:
        status: {{}}
      additionalPrinterColumns:
        - {{ name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status' }}
        - {{ name: Age, type: date, jsonPath: .metadata.creationTimestamp }}
      schema:
        openAPIV3Schema:
          description: A {kind_name}, reconciled by the wasmctrl plugin {plugin}.
          type: object
          required: [spec]
          properties:
            apiVersion: {{ type: string }}
            kind: {{ type: string }}
            metadata: {{ type: object }}
            spec:
              type: object
              required: [{required}]
              properties:
{properties}            status:
              type: object
              properties:
                observedGeneration:
                  description: The metadata.generation the conditions describe.
                  type: integer
                  format: int64
                conditions:
                  type: array
                  items:
                    type: object
                    required: [type, status, lastTransitionTime, reason, message]
                    properties:
                      type: {{ type: string }}
                      status: {{ type: string, enum: ["True", "False", "Unknown"] }}
                      observedGeneration: {{ type: integer, format: int64 }}
                      lastTransitionTime: {{ type: string, format: date-time }}
                      reason: {{ type: string }}
                      message: {{ type: string }}
"#,
        kind_name = kind.kind,
        crd_name = kind.crd_name(),
        group = kind.group,
        plural = kind.plural,
        singular = kind.singular,
        version = kind.version,
        plugin = name.name,
        required = required.join(", "),
    )
}

/// The sample object `wasmctrl dev --apply .` creates.
pub(super) fn sample(kind: &CustomKind) -> String {
    let mut spec = String::new();
    for f in SPEC {
        spec.push_str(&format!("  {}: {}\n", f.name, f.sample));
    }
    format!(
        "apiVersion: {}/{}\nkind: {}\nmetadata:\n  name: sample\n  namespace: default\nspec:\n{spec}",
        kind.group, kind.version, kind.kind
    )
}

/// The host config: the plugin at the path its build writes, granted
/// exactly what its metadata declares.
pub(super) fn host_config(
    component: &str,
    interpreted: bool,
    name: &PluginName,
    permissions: &[Permission],
) -> String {
    let mut grant = String::new();
    for p in permissions {
        grant.push_str(&format!(
            "      - {{ group: {:?}, resources: [{:?}], verbs: [{}] }}\n",
            p.group,
            p.resource,
            p.verbs.join(", ")
        ));
    }
    let mode = if interpreted {
        "    instanceMode: auto          # warm instances: an interpreter starts slowly\n"
    } else {
        ""
    };
    format!(
        r#"# Run with: wasmctrl dev --config wasmctrl.yaml --apply .
# (`dev` builds the plugin first if its component is missing.)
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
plugins:
  - name: {plugin}
    path: {component}
{mode}    # Exactly what the plugin's metadata declares: the host refuses to
    # load a plugin that asks for more than its grant.
    permissions:
{grant}"#,
        plugin = name.name,
    )
}
