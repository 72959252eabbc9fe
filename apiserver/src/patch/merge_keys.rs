//! The slice of the Kubernetes schema that patching needs: which lists merge
//! by key, which are sets, and which maps are owned as a whole.
//!
//! Derived from the `x-kubernetes-patch-merge-key`,
//! `x-kubernetes-patch-strategy`, `x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys` and `x-kubernetes-map-type` annotations of
//! the Kubernetes `OpenAPI` for the built-in kinds this server serves. Fields
//! not named here are granular maps or atomic lists, which is also what
//! server-side apply assumes for schemaless custom resources.

/// A node type in the schema. Only types with at least one non-default
/// field need a variant; everything else is [`Ty::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
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

/// One field of a map-list key, with the default the schema declares for
/// it (server-side apply keys `ports` by `containerPort` and `protocol`,
/// and a port without `protocol` means TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyField {
    pub(crate) name: &'static str,
    pub(crate) default: Option<&'static str>,
}

/// How a list merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Replaced as a whole; owned as a whole.
    Atomic,
    /// A list of scalars merged as a set (`finalizers`).
    Set,
    /// A list of objects merged by key. `merge_key` is the strategic merge
    /// patch key; `keys` are the server-side apply list-map keys.
    Map {
        merge_key: &'static str,
        keys: &'static [KeyField],
    },
}

/// What the schema says about one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    /// The type of the value, or of each item for a list.
    pub(crate) ty: Ty,
    /// How the value merges if it is a list.
    pub(crate) list: ListKind,
    /// For a map value: owned and replaced as a whole by server-side apply
    /// (`x-kubernetes-map-type: atomic` or `structType: atomic`).
    pub(crate) atomic_map: bool,
}

impl Field {
    const fn of(ty: Ty) -> Self {
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

    const fn map_list(ty: Ty, merge_key: &'static str, keys: &'static [KeyField]) -> Self {
        Self {
            ty,
            list: ListKind::Map { merge_key, keys },
            atomic_map: false,
        }
    }

    /// The field names that identify an item of a map list; server-side
    /// apply never prunes these from an item that survives.
    pub(crate) fn key_names(&self) -> Vec<&'static str> {
        match self.list {
            ListKind::Map { keys, .. } => keys.iter().map(|k| k.name).collect(),
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
pub(crate) fn builtin_root(api_version: &str, kind: &str) -> Option<Ty> {
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
/// which work for every kind: unknown kinds get granular maps and atomic
/// lists below a real `metadata`.
pub(crate) fn root(api_version: &str, kind: &str) -> Ty {
    builtin_root(api_version, kind).unwrap_or(Ty::Root(Root::Custom))
}

/// What the schema says about field `name` of a value of type `ty`.
pub(crate) fn field(ty: Ty, name: &str) -> Field {
    match (ty, name) {
        (Ty::Root(_) | Ty::ValidatingWebhookRoot, "metadata") => Field::of(Ty::ObjectMeta),
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

fn root_field(root: Root, name: &str) -> Field {
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
        let root = root("example.com/v1", "Widget");
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
