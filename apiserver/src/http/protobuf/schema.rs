//! The tables: each served message's numbered fields, their JSON names and
//! how each decodes, and the kinds decoded through them.

/// How one field decodes.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// Strings, ints and bools are `omitempty` in JSON: gogo-protobuf still
    /// sends their zero values, which are dropped here.
    Str,
    Int,
    Bool,
    /// Pointer fields (`*int32`, `*bool`): present only when set, so a zero
    /// is meaningful and kept.
    OptInt,
    OptBool,
    Time,
    Msg(&'static Schema),
    MapStr,
    MapBytes,
    /// map<string, Quantity>; a Quantity message holds its string at 1.
    MapQuantity,
    /// map<string, ExtraValue>; an ExtraValue holds repeated strings at 1.
    MapStrList,
    /// IntOrString: type = 1 (0 int, 1 string), intVal = 2, strVal = 3.
    IntOrStr,
    RepStr,
    RepMsg(&'static Schema),
}

/// The protobuf layout of one message: its name and numbered fields.
pub(super) struct Schema {
    pub(super) name: &'static str,
    pub(super) fields: &'static [(u64, &'static str, Kind)],
}

use Kind::*;

static OWNER_REF: Schema = Schema {
    name: "OwnerReference",
    fields: &[
        (1, "kind", Str),
        (3, "name", Str),
        (4, "uid", Str),
        (5, "apiVersion", Str),
        (6, "controller", OptBool),
        (7, "blockOwnerDeletion", OptBool),
    ],
};

static OBJECT_META: Schema = Schema {
    name: "ObjectMeta",
    fields: &[
        (1, "name", Str),
        (2, "generateName", Str),
        (3, "namespace", Str),
        (4, "selfLink", Str),
        (5, "uid", Str),
        (6, "resourceVersion", Str),
        (7, "generation", Int),
        (8, "creationTimestamp", Time),
        (9, "deletionTimestamp", Time),
        (10, "deletionGracePeriodSeconds", OptInt),
        (11, "labels", MapStr),
        (12, "annotations", MapStr),
        (13, "ownerReferences", RepMsg(&OWNER_REF)),
        (14, "finalizers", RepStr),
    ],
};

static CONFIG_MAP: Schema = Schema {
    name: "ConfigMap",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "data", MapStr),
        (3, "binaryData", MapBytes),
        (4, "immutable", OptBool),
    ],
};

static SECRET: Schema = Schema {
    name: "Secret",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "data", MapBytes),
        (3, "type", Str),
        (4, "stringData", MapStr),
        (5, "immutable", OptBool),
    ],
};

static NAMESPACE_SPEC: Schema = Schema {
    name: "NamespaceSpec",
    fields: &[(1, "finalizers", RepStr)],
};

static NAMESPACE_STATUS: Schema = Schema {
    name: "NamespaceStatus",
    fields: &[(1, "phase", Str)],
};

static NAMESPACE: Schema = Schema {
    name: "Namespace",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&NAMESPACE_SPEC)),
        (3, "status", Msg(&NAMESPACE_STATUS)),
    ],
};

static OBJECT_REF: Schema = Schema {
    name: "ObjectReference",
    fields: &[
        (1, "kind", Str),
        (2, "namespace", Str),
        (3, "name", Str),
        (4, "uid", Str),
        (5, "apiVersion", Str),
        (6, "resourceVersion", Str),
        (7, "fieldPath", Str),
    ],
};

static LOCAL_REF: Schema = Schema {
    name: "LocalObjectReference",
    fields: &[(1, "name", Str)],
};

static SERVICE_ACCOUNT: Schema = Schema {
    name: "ServiceAccount",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "secrets", RepMsg(&OBJECT_REF)),
        (3, "imagePullSecrets", RepMsg(&LOCAL_REF)),
        (4, "automountServiceAccountToken", OptBool),
    ],
};

static POLICY_RULE: Schema = Schema {
    name: "PolicyRule",
    fields: &[
        (1, "verbs", RepStr),
        (2, "apiGroups", RepStr),
        (3, "resources", RepStr),
        (4, "resourceNames", RepStr),
        (5, "nonResourceURLs", RepStr),
    ],
};

static ROLE: Schema = Schema {
    name: "Role",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "rules", RepMsg(&POLICY_RULE)),
    ],
};

static SUBJECT: Schema = Schema {
    name: "Subject",
    fields: &[
        (1, "kind", Str),
        (2, "apiGroup", Str),
        (3, "name", Str),
        (4, "namespace", Str),
    ],
};

static ROLE_REF: Schema = Schema {
    name: "RoleRef",
    fields: &[(1, "apiGroup", Str), (2, "kind", Str), (3, "name", Str)],
};

static ROLE_BINDING: Schema = Schema {
    name: "RoleBinding",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "subjects", RepMsg(&SUBJECT)),
        (3, "roleRef", Msg(&ROLE_REF)),
    ],
};

static LABEL_SELECTOR_REQ: Schema = Schema {
    name: "LabelSelectorRequirement",
    fields: &[(1, "key", Str), (2, "operator", Str), (3, "values", RepStr)],
};

static LABEL_SELECTOR: Schema = Schema {
    name: "LabelSelector",
    fields: &[
        (1, "matchLabels", MapStr),
        (2, "matchExpressions", RepMsg(&LABEL_SELECTOR_REQ)),
    ],
};

static CONTAINER_PORT: Schema = Schema {
    name: "ContainerPort",
    fields: &[
        (1, "name", Str),
        (2, "hostPort", Int),
        (3, "containerPort", Int),
        (4, "protocol", Str),
        (5, "hostIP", Str),
    ],
};

static ENV_VAR: Schema = Schema {
    name: "EnvVar",
    fields: &[(1, "name", Str), (2, "value", Str)],
};

static RESOURCES: Schema = Schema {
    name: "ResourceRequirements",
    fields: &[(1, "limits", MapQuantity), (2, "requests", MapQuantity)],
};

static CONTAINER: Schema = Schema {
    name: "Container",
    fields: &[
        (1, "name", Str),
        (2, "image", Str),
        (3, "command", RepStr),
        (4, "args", RepStr),
        (5, "workingDir", Str),
        (6, "ports", RepMsg(&CONTAINER_PORT)),
        (7, "env", RepMsg(&ENV_VAR)),
        (8, "resources", Msg(&RESOURCES)),
        (13, "terminationMessagePath", Str),
        (14, "imagePullPolicy", Str),
        (16, "stdin", Bool),
        (17, "stdinOnce", Bool),
        (18, "tty", Bool),
        (20, "terminationMessagePolicy", Str),
    ],
};

static POD_SPEC: Schema = Schema {
    name: "PodSpec",
    fields: &[
        (2, "containers", RepMsg(&CONTAINER)),
        (3, "restartPolicy", Str),
        (4, "terminationGracePeriodSeconds", OptInt),
        (5, "activeDeadlineSeconds", OptInt),
        (6, "dnsPolicy", Str),
        (7, "nodeSelector", MapStr),
        (8, "serviceAccountName", Str),
        (9, "serviceAccount", Str),
        (10, "nodeName", Str),
        (11, "hostNetwork", Bool),
        (15, "imagePullSecrets", RepMsg(&LOCAL_REF)),
        (16, "hostname", Str),
        (17, "subdomain", Str),
        (19, "schedulerName", Str),
        (20, "initContainers", RepMsg(&CONTAINER)),
        (21, "automountServiceAccountToken", OptBool),
        (24, "priorityClassName", Str),
    ],
};

static POD_TEMPLATE_SPEC: Schema = Schema {
    name: "PodTemplateSpec",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&POD_SPEC)),
    ],
};

static DEPLOYMENT_STRATEGY: Schema = Schema {
    name: "DeploymentStrategy",
    fields: &[(1, "type", Str)],
};

static DEPLOYMENT_SPEC: Schema = Schema {
    name: "DeploymentSpec",
    fields: &[
        (1, "replicas", OptInt),
        (2, "selector", Msg(&LABEL_SELECTOR)),
        (3, "template", Msg(&POD_TEMPLATE_SPEC)),
        (4, "strategy", Msg(&DEPLOYMENT_STRATEGY)),
        (5, "minReadySeconds", Int),
        (6, "revisionHistoryLimit", OptInt),
        (7, "paused", Bool),
        (9, "progressDeadlineSeconds", OptInt),
    ],
};

/// Status messages imperative creates send empty.
static EMPTY_STATUS: Schema = Schema {
    name: "Status",
    fields: &[],
};

static DEPLOYMENT: Schema = Schema {
    name: "Deployment",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&DEPLOYMENT_SPEC)),
        (3, "status", Msg(&EMPTY_STATUS)),
    ],
};

static JOB_SPEC: Schema = Schema {
    name: "JobSpec",
    fields: &[
        (1, "parallelism", OptInt),
        (2, "completions", OptInt),
        (3, "activeDeadlineSeconds", OptInt),
        (4, "selector", Msg(&LABEL_SELECTOR)),
        (5, "manualSelector", OptBool),
        (6, "template", Msg(&POD_TEMPLATE_SPEC)),
        (7, "backoffLimit", OptInt),
        (8, "ttlSecondsAfterFinished", OptInt),
        (9, "completionMode", Str),
        (10, "suspend", OptBool),
        (14, "podReplacementPolicy", Str),
        (15, "managedBy", Str),
    ],
};

static JOB: Schema = Schema {
    name: "Job",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&JOB_SPEC)),
        (3, "status", Msg(&EMPTY_STATUS)),
    ],
};

static JOB_TEMPLATE_SPEC: Schema = Schema {
    name: "JobTemplateSpec",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&JOB_SPEC)),
    ],
};

static CRON_JOB_SPEC: Schema = Schema {
    name: "CronJobSpec",
    fields: &[
        (1, "schedule", Str),
        (2, "startingDeadlineSeconds", OptInt),
        (3, "concurrencyPolicy", Str),
        (4, "suspend", OptBool),
        (5, "jobTemplate", Msg(&JOB_TEMPLATE_SPEC)),
        (6, "successfulJobsHistoryLimit", OptInt),
        (7, "failedJobsHistoryLimit", OptInt),
        (8, "timeZone", Str),
    ],
};

static CRON_JOB: Schema = Schema {
    name: "CronJob",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&CRON_JOB_SPEC)),
        (3, "status", Msg(&EMPTY_STATUS)),
    ],
};

static SERVICE_PORT: Schema = Schema {
    name: "ServicePort",
    fields: &[
        (1, "name", Str),
        (2, "protocol", Str),
        (3, "port", Int),
        (4, "targetPort", IntOrStr),
        (5, "nodePort", Int),
        (6, "appProtocol", Str),
    ],
};

static SERVICE_SPEC: Schema = Schema {
    name: "ServiceSpec",
    fields: &[
        (1, "ports", RepMsg(&SERVICE_PORT)),
        (2, "selector", MapStr),
        (3, "clusterIP", Str),
        (4, "type", Str),
        (5, "externalIPs", RepStr),
        (7, "sessionAffinity", Str),
        (10, "externalName", Str),
        (18, "clusterIPs", RepStr),
    ],
};

static SERVICE: Schema = Schema {
    name: "Service",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&SERVICE_SPEC)),
        (3, "status", Msg(&EMPTY_STATUS)),
    ],
};

static BOUND_OBJECT_REF: Schema = Schema {
    name: "BoundObjectReference",
    fields: &[
        (1, "kind", Str),
        (2, "apiVersion", Str),
        (3, "name", Str),
        (4, "uid", Str),
    ],
};

static TOKEN_REQUEST_SPEC: Schema = Schema {
    name: "TokenRequestSpec",
    fields: &[
        (1, "audiences", RepStr),
        (3, "boundObjectRef", Msg(&BOUND_OBJECT_REF)),
        (4, "expirationSeconds", OptInt),
    ],
};

static TOKEN_REQUEST_STATUS: Schema = Schema {
    name: "TokenRequestStatus",
    fields: &[(1, "token", Str), (2, "expirationTimestamp", Time)],
};

static TOKEN_REQUEST: Schema = Schema {
    name: "TokenRequest",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&TOKEN_REQUEST_SPEC)),
        (3, "status", Msg(&TOKEN_REQUEST_STATUS)),
    ],
};

static SELECTOR_ATTRIBUTES: Schema = Schema {
    name: "SelectorAttributes",
    fields: &[(1, "rawSelector", Str)],
};

static RESOURCE_ATTRIBUTES: Schema = Schema {
    name: "ResourceAttributes",
    fields: &[
        (1, "namespace", Str),
        (2, "verb", Str),
        (3, "group", Str),
        (4, "version", Str),
        (5, "resource", Str),
        (6, "subresource", Str),
        (7, "name", Str),
        (8, "fieldSelector", Msg(&SELECTOR_ATTRIBUTES)),
        (9, "labelSelector", Msg(&SELECTOR_ATTRIBUTES)),
    ],
};

static NON_RESOURCE_ATTRIBUTES: Schema = Schema {
    name: "NonResourceAttributes",
    fields: &[(1, "path", Str), (2, "verb", Str)],
};

static ACCESS_REVIEW_STATUS: Schema = Schema {
    name: "SubjectAccessReviewStatus",
    fields: &[
        (1, "allowed", Bool),
        (2, "reason", Str),
        (3, "evaluationError", Str),
        (4, "denied", Bool),
    ],
};

static SELF_ACCESS_REVIEW_SPEC: Schema = Schema {
    name: "SelfSubjectAccessReviewSpec",
    fields: &[
        (1, "resourceAttributes", Msg(&RESOURCE_ATTRIBUTES)),
        (2, "nonResourceAttributes", Msg(&NON_RESOURCE_ATTRIBUTES)),
    ],
};

static SELF_ACCESS_REVIEW: Schema = Schema {
    name: "SelfSubjectAccessReview",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&SELF_ACCESS_REVIEW_SPEC)),
        (3, "status", Msg(&ACCESS_REVIEW_STATUS)),
    ],
};

static ACCESS_REVIEW_SPEC: Schema = Schema {
    name: "SubjectAccessReviewSpec",
    fields: &[
        (1, "resourceAttributes", Msg(&RESOURCE_ATTRIBUTES)),
        (2, "nonResourceAttributes", Msg(&NON_RESOURCE_ATTRIBUTES)),
        (3, "user", Str),
        (4, "groups", RepStr),
        (5, "extra", MapStrList),
        (6, "uid", Str),
    ],
};

static ACCESS_REVIEW: Schema = Schema {
    name: "SubjectAccessReview",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&ACCESS_REVIEW_SPEC)),
        (3, "status", Msg(&ACCESS_REVIEW_STATUS)),
    ],
};

static RULES_REVIEW_SPEC: Schema = Schema {
    name: "SelfSubjectRulesReviewSpec",
    fields: &[(1, "namespace", Str)],
};

static RULES_REVIEW_STATUS: Schema = Schema {
    name: "SubjectRulesReviewStatus",
    fields: &[(3, "incomplete", Bool), (4, "evaluationError", Str)],
};

static RULES_REVIEW: Schema = Schema {
    name: "SelfSubjectRulesReview",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&RULES_REVIEW_SPEC)),
        (3, "status", Msg(&RULES_REVIEW_STATUS)),
    ],
};

static USER_INFO: Schema = Schema {
    name: "UserInfo",
    fields: &[
        (1, "username", Str),
        (2, "uid", Str),
        (3, "groups", RepStr),
        (4, "extra", MapStrList),
    ],
};

static SELF_REVIEW_STATUS: Schema = Schema {
    name: "SelfSubjectReviewStatus",
    fields: &[(1, "userInfo", Msg(&USER_INFO))],
};

static SELF_REVIEW: Schema = Schema {
    name: "SelfSubjectReview",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "status", Msg(&SELF_REVIEW_STATUS)),
    ],
};

static TOKEN_REVIEW_SPEC: Schema = Schema {
    name: "TokenReviewSpec",
    fields: &[(1, "token", Str), (2, "audiences", RepStr)],
};

static TOKEN_REVIEW_STATUS: Schema = Schema {
    name: "TokenReviewStatus",
    fields: &[
        (1, "authenticated", Bool),
        (2, "user", Msg(&USER_INFO)),
        (3, "error", Str),
        (4, "audiences", RepStr),
    ],
};

static TOKEN_REVIEW: Schema = Schema {
    name: "TokenReview",
    fields: &[
        (1, "metadata", Msg(&OBJECT_META)),
        (2, "spec", Msg(&TOKEN_REVIEW_SPEC)),
        (3, "status", Msg(&TOKEN_REVIEW_STATUS)),
    ],
};

pub(super) fn schema_for(api_version: &str, kind: &str) -> Option<&'static Schema> {
    Some(match (api_version, kind) {
        ("v1", "ConfigMap") => &CONFIG_MAP,
        ("v1", "Secret") => &SECRET,
        ("v1", "Namespace") => &NAMESPACE,
        ("v1", "ServiceAccount") => &SERVICE_ACCOUNT,
        ("v1", "Service") => &SERVICE,
        ("apps/v1", "Deployment") => &DEPLOYMENT,
        ("batch/v1", "Job") => &JOB,
        ("batch/v1", "CronJob") => &CRON_JOB,
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => &ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => &ROLE_BINDING,
        ("authentication.k8s.io/v1", "TokenRequest") => &TOKEN_REQUEST,
        ("authentication.k8s.io/v1", "TokenReview") => &TOKEN_REVIEW,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => &SELF_REVIEW,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => &SELF_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SubjectAccessReview" | "LocalSubjectAccessReview") => {
            &ACCESS_REVIEW
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => &RULES_REVIEW,
        _ => return None,
    })
}
