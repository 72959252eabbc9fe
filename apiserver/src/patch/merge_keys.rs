//! The slice of the Kubernetes schema that patching needs: which lists merge
//! by key, which are sets, and which maps are owned as a whole.
//!
//! For the built-in kinds this server serves, derived from the
//! `x-kubernetes-patch-merge-key`, `x-kubernetes-patch-strategy`,
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and
//! `x-kubernetes-map-type` annotations of the Kubernetes `OpenAPI`, and
//! kept here as tables. For a custom resource, read from the same
//! annotations of its CRD's `openAPIV3Schema`, walked as the object is
//! ([`Ty::Schema`]). Fields named by neither are granular maps or atomic
//! lists, which is also what server-side apply assumes for schemaless
//! custom resources and for fields a schema keeps with
//! `x-kubernetes-preserve-unknown-fields`.

use std::borrow::Cow;

use serde_json::Value;

/// A node type in the schema. Only built-in types with at least one
/// non-default field need a variant; everything else is [`Ty::Unknown`].
/// `'s` is the lifetime of a custom resource's schema.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Ty<'s> {
    /// The top level of an object of the given kind family.
    Root(Root),
    ObjectMeta,
    PodTemplateSpec,
    JobTemplateSpec,
    PodSpec,
    Container,
    PodStatus,
    /// Spec of `Deployment`, `StatefulSet`, `DaemonSet`, `ReplicaSet` and
    /// `ReplicationController`: a selector and a pod template.
    WorkloadSpec,
    JobSpec,
    CronJobSpec,
    ServiceSpec,
    NodeStatus,
    /// A status whose only special field is `conditions`, keyed by `type`.
    ConditionedStatus,
    ValidatingWebhookRoot,
    /// The top level of a custom resource whose CRD has a schema: its
    /// `metadata` is an `ObjectMeta`, everything else is read from the
    /// schema.
    SchemaRoot(&'s Value),
    /// A value of a custom resource, described by this node of its
    /// structural schema (for a list, the node of its items).
    Schema(&'s Value),
    Unknown,
}

/// Kind families that differ at the top level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Root {
    Pod,
    PodTemplate,
    Workload,
    Job,
    CronJob,
    Service,
    ServiceAccount,
    Node,
    /// A built-in kind with nothing special below `metadata` except
    /// `status.conditions`.
    Plain,
    /// A custom resource, or any kind we have no schema for.
    Custom,
}

/// One field of a built-in map-list key, with the default the schema
/// declares for it (server-side apply keys `ports` by `containerPort` and
/// `protocol`, and a port without `protocol` means TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyField {
    pub(crate) name: &'static str,
    pub(crate) default: Option<&'static str>,
}

/// The fields that identify an item of a map list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Keys<'s> {
    /// A built-in list's keys, from the tables below.
    Builtin(&'static [KeyField]),
    /// A custom resource's list: the strings of its
    /// `x-kubernetes-list-map-keys`, and the schema of its items, whose
    /// properties may give a key a `default`.
    Schema {
        names: &'s [Value],
        items: &'s Value,
    },
}

impl<'s> Keys<'s> {
    /// Each key field's name, and the value an item that omits it is
    /// keyed by, if the schema declares one.
    pub(crate) fn fields(self) -> Vec<(&'s str, Option<Cow<'s, Value>>)> {
        match self {
            Keys::Builtin(keys) => keys
                .iter()
                .map(|k| {
                    let default = k.default.map(|d| Cow::Owned(Value::String(d.to_owned())));
                    (k.name, default)
                })
                .collect(),
            Keys::Schema { names, items } => names
                .iter()
                .filter_map(Value::as_str)
                .map(|name| {
                    let default = items
                        .get("properties")
                        .and_then(|p| p.get(name))
                        .and_then(|p| p.get("default"))
                        .map(Cow::Borrowed);
                    (name, default)
                })
                .collect(),
        }
    }
}

/// How a list merges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ListKind<'s> {
    /// Replaced as a whole; owned as a whole.
    Atomic,
    /// A list of scalars merged as a set (`finalizers`).
    Set,
    /// A list of objects merged by key. `merge_key` is the strategic merge
    /// patch key; `keys` are the server-side apply list-map keys.
    Map { merge_key: &'s str, keys: Keys<'s> },
}

/// What the schema says about one field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Field<'s> {
    /// The type of the value, or of each item for a list.
    pub(crate) ty: Ty<'s>,
    /// How the value merges if it is a list.
    pub(crate) list: ListKind<'s>,
    /// For a map value: owned and replaced as a whole by server-side apply
    /// (`x-kubernetes-map-type: atomic` or `structType: atomic`).
    pub(crate) atomic_map: bool,
}

impl<'s> Field<'s> {
    const fn of(ty: Ty<'s>) -> Self {
        Self {
            ty,
            list: ListKind::Atomic,
            atomic_map: false,
        }
    }

    const fn atomic() -> Self {
        Self {
            ty: Ty::Unknown,
            list: ListKind::Atomic,
            atomic_map: true,
        }
    }

    const fn set() -> Self {
        Self {
            ty: Ty::Unknown,
            list: ListKind::Set,
            atomic_map: false,
        }
    }

    const fn map_list(ty: Ty<'s>, merge_key: &'static str, keys: &'static [KeyField]) -> Self {
        Self {
            ty,
            list: ListKind::Map {
                merge_key,
                keys: Keys::Builtin(keys),
            },
            atomic_map: false,
        }
    }

    /// The field names that identify an item of a map list; server-side
    /// apply never prunes these from an item that survives.
    pub(crate) fn key_names(&self) -> Vec<&'s str> {
        match self.list {
            ListKind::Map { keys, .. } => keys.fields().into_iter().map(|(name, _)| name).collect(),
            _ => Vec::new(),
        }
    }
}

const fn key(name: &'static str) -> KeyField {
    KeyField {
        name,
        default: None,
    }
}

const NAME: &[KeyField] = &[key("name")];
const UID: &[KeyField] = &[key("uid")];
const TYPE: &[KeyField] = &[key("type")];
const IP: &[KeyField] = &[key("ip")];
const MOUNT_PATH: &[KeyField] = &[key("mountPath")];
const DEVICE_PATH: &[KeyField] = &[key("devicePath")];
const CONTAINER_PORT: &[KeyField] = &[
    key("containerPort"),
    KeyField {
        name: "protocol",
        default: Some("TCP"),
    },
];
const SERVICE_PORT: &[KeyField] = &[
    key("port"),
    KeyField {
        name: "protocol",
        default: Some("TCP"),
    },
];
const TOPOLOGY: &[KeyField] = &[key("topologyKey"), key("whenUnsatisfiable")];

/// The schema root for a built-in kind, or `None` when the kind is not one
/// whose patch metadata we know (custom resources and unknown built-ins).
pub(crate) fn builtin_root(api_version: &str, kind: &str) -> Option<Ty<'static>> {
    let group = match api_version.split_once('/') {
        Some((group, _)) => group,
        None => "",
    };
    let root = match (group, kind) {
        ("", "Pod") => Root::Pod,
        ("", "PodTemplate") => Root::PodTemplate,
        ("", "ReplicationController")
        | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") => Root::Workload,
        ("batch", "Job") => Root::Job,
        ("batch", "CronJob") => Root::CronJob,
        ("", "Service") => Root::Service,
        ("", "ServiceAccount") => Root::ServiceAccount,
        ("", "Node") => Root::Node,
        (
            "",
            "ConfigMap"
            | "Secret"
            | "Namespace"
            | "Event"
            | "Endpoints"
            | "PersistentVolumeClaim"
            | "PersistentVolume"
            | "LimitRange"
            | "ResourceQuota",
        )
        | ("apps", "ControllerRevision")
        | ("coordination.k8s.io", "Lease")
        | ("events.k8s.io", "Event")
        | ("networking.k8s.io", "Ingress" | "IngressClass" | "NetworkPolicy")
        | (
            "rbac.authorization.k8s.io",
            "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding",
        )
        | ("apiextensions.k8s.io", "CustomResourceDefinition")
        | ("policy", "PodDisruptionBudget")
        | ("autoscaling", "HorizontalPodAutoscaler")
        | ("storage.k8s.io", "StorageClass")
        | ("scheduling.k8s.io", "PriorityClass")
        | ("discovery.k8s.io", "EndpointSlice") => Root::Plain,
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => return Some(Ty::ValidatingWebhookRoot),
        _ => return None,
    };
    Some(Ty::Root(root))
}

/// The schema root used by server-side apply and managedFields tracking,
/// which work for every kind. `schema` is a custom resource's
/// `openAPIV3Schema`, for the kinds that are not built in; kinds with
/// neither get granular maps and atomic lists below a real `metadata`.
pub(crate) fn root<'s>(api_version: &str, kind: &str, schema: Option<&'s Value>) -> Ty<'s> {
    builtin_root(api_version, kind).unwrap_or(match schema {
        Some(schema) => Ty::SchemaRoot(schema),
        None => Ty::Root(Root::Custom),
    })
}

/// What the schema says about field `name` of a value of type `ty`.
pub(crate) fn field<'s>(ty: Ty<'s>, name: &str) -> Field<'s> {
    match (ty, name) {
        (Ty::Root(_) | Ty::ValidatingWebhookRoot | Ty::SchemaRoot(_), "metadata") => {
            Field::of(Ty::ObjectMeta)
        }
        (Ty::SchemaRoot(node) | Ty::Schema(node), _) => schema_field(node, name),
        (Ty::Root(root), _) => root_field(root, name),
        (Ty::ValidatingWebhookRoot, "webhooks") => Field::map_list(Ty::Unknown, "name", NAME),
        (Ty::ObjectMeta, "finalizers") => Field::set(),
        (Ty::ObjectMeta, "ownerReferences") => Field::map_list(Ty::Unknown, "uid", UID),
        (Ty::PodTemplateSpec | Ty::JobTemplateSpec, "metadata") => Field::of(Ty::ObjectMeta),
        (Ty::PodTemplateSpec, "spec") => Field::of(Ty::PodSpec),
        (Ty::JobTemplateSpec, "spec") => Field::of(Ty::JobSpec),
        (Ty::WorkloadSpec | Ty::JobSpec, "template") => Field::of(Ty::PodTemplateSpec),
        (Ty::WorkloadSpec | Ty::JobSpec, "selector") => Field::atomic(),
        (Ty::CronJobSpec, "jobTemplate") => Field::of(Ty::JobTemplateSpec),
        (Ty::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
            Field::map_list(Ty::Container, "name", NAME)
        }
        (Ty::PodSpec, "volumes" | "imagePullSecrets" | "schedulingGates" | "resourceClaims") => {
            Field::map_list(Ty::Unknown, "name", NAME)
        }
        (Ty::PodSpec, "hostAliases") => Field::map_list(Ty::Unknown, "ip", IP),
        (Ty::PodSpec, "topologySpreadConstraints") => {
            Field::map_list(Ty::Unknown, "topologyKey", TOPOLOGY)
        }
        (Ty::PodSpec | Ty::ServiceSpec, "nodeSelector" | "selector") => Field::atomic(),
        (Ty::Container, "ports") => Field::map_list(Ty::Unknown, "containerPort", CONTAINER_PORT),
        (Ty::Container, "env") => Field::map_list(Ty::Unknown, "name", NAME),
        (Ty::Container, "volumeMounts") => Field::map_list(Ty::Unknown, "mountPath", MOUNT_PATH),
        (Ty::Container, "volumeDevices") => Field::map_list(Ty::Unknown, "devicePath", DEVICE_PATH),
        (Ty::ServiceSpec, "ports") => Field::map_list(Ty::Unknown, "port", SERVICE_PORT),
        (Ty::PodStatus | Ty::NodeStatus | Ty::ConditionedStatus, "conditions") => {
            Field::map_list(Ty::Unknown, "type", TYPE)
        }
        (Ty::PodStatus, "podIPs" | "hostIPs") => Field::map_list(Ty::Unknown, "ip", IP),
        (Ty::NodeStatus, "addresses") => Field::map_list(Ty::Unknown, "type", TYPE),
        _ => Field::of(Ty::Unknown),
    }
}

/// Field `name` of a value described by the schema node `node`: one of its
/// `properties`, else what `additionalProperties` says of every field. An
/// embedded resource's `metadata` is an `ObjectMeta`, as at the top.
fn schema_field<'s>(node: &'s Value, name: &str) -> Field<'s> {
    if name == "metadata"
        && node
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true)
    {
        return Field::of(Ty::ObjectMeta);
    }
    let child = node
        .get("properties")
        .and_then(|p| p.get(name))
        .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()));
    match child {
        Some(child) => schema_value(child),
        None => Field::of(Ty::Unknown),
    }
}

/// How a value described by the schema node `node` merges and is owned:
/// a list by its `x-kubernetes-list-type` (atomic unless it says `set`,
/// or `map` with `x-kubernetes-list-map-keys`), a map by its
/// `x-kubernetes-map-type` (granular unless it says `atomic`).
fn schema_value(node: &Value) -> Field<'_> {
    let items = node.get("items").filter(|i| i.is_object());
    let list = match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListKind::Set,
        Some("map") => match node
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            Some(names @ [first, ..]) => match (first.as_str(), items) {
                (Some(merge_key), Some(items)) => ListKind::Map {
                    merge_key,
                    keys: Keys::Schema { names, items },
                },
                _ => ListKind::Atomic,
            },
            _ => ListKind::Atomic,
        },
        _ => ListKind::Atomic,
    };
    let ty = match (node.get("type").and_then(Value::as_str), items) {
        (Some("array"), Some(items)) => Ty::Schema(items),
        (Some("array"), None) => Ty::Unknown,
        _ => Ty::Schema(node),
    };
    Field {
        ty,
        list,
        atomic_map: is_atomic_map(node),
    }
}

/// Whether the schema node says its value is a map owned as a whole.
pub(crate) fn is_atomic_map(node: &Value) -> bool {
    node.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
}

fn root_field(root: Root, name: &str) -> Field<'static> {
    match (root, name) {
        (Root::Pod, "spec") => Field::of(Ty::PodSpec),
        (Root::Pod, "status") => Field::of(Ty::PodStatus),
        (Root::PodTemplate, "template") => Field::of(Ty::PodTemplateSpec),
        (Root::Workload, "spec") => Field::of(Ty::WorkloadSpec),
        (Root::Job, "spec") => Field::of(Ty::JobSpec),
        (Root::CronJob, "spec") => Field::of(Ty::CronJobSpec),
        (Root::Service, "spec") => Field::of(Ty::ServiceSpec),
        (Root::ServiceAccount, "secrets") => Field::map_list(Ty::Unknown, "name", NAME),
        (Root::Node, "status") => Field::of(Ty::NodeStatus),
        (Root::Custom, _) => Field::of(Ty::Unknown),
        (_, "status") => Field::of(Ty::ConditionedStatus),
        _ => Field::of(Ty::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_containers_merge_by_name() {
        let root = builtin_root("apps/v1", "Deployment").unwrap();
        let spec = field(root, "spec").ty;
        let template = field(spec, "template").ty;
        let pod = field(template, "spec").ty;
        let containers = field(pod, "containers");
        assert_eq!(containers.ty, Ty::Container);
        assert!(matches!(
            containers.list,
            ListKind::Map {
                merge_key: "name",
                ..
            }
        ));
        assert!(matches!(
            field(Ty::Container, "ports").list,
            ListKind::Map {
                merge_key: "containerPort",
                ..
            }
        ));
        assert_eq!(field(pod, "tolerations").list, ListKind::Atomic);
    }

    #[test]
    fn custom_resources_have_no_builtin_root_but_keep_object_meta() {
        assert_eq!(builtin_root("example.com/v1", "Widget"), None);
        let root = root("example.com/v1", "Widget", None);
        assert_eq!(field(root, "spec").ty, Ty::Unknown);
        assert_eq!(
            field(field(root, "metadata").ty, "finalizers").list,
            ListKind::Set
        );
    }

    #[test]
    fn core_group_is_distinguished_from_named_groups() {
        assert!(builtin_root("v1", "Pod").is_some());
        assert!(builtin_root("example.com/v1", "Pod").is_none());
        assert!(builtin_root("apps/v1", "ConfigMap").is_none());
    }
}
