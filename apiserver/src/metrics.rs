//! The server's own metrics, served at `GET /metrics`:
//!
//! - `wasmctrl_apiserver_limit_exceeded_total{limit}`: requests and
//!   connections refused (or closed) because they ran into one of the
//!   server's ceilings, one series per [`Limit`], all present from the start
//!   at 0 so a dashboard can tell "never happened" from "not exported".
//! - `wasmctrl_apiserver_requests_total{verb,code}`: every answered request
//!   by Kubernetes verb and HTTP status.
//! - upstream's admission webhook metrics, under upstream's names (a
//!   counter gains OpenMetrics' `_total`):
//!   `apiserver_admission_webhook_admission_duration_seconds{name,operation,rejected,type}`,
//!   `apiserver_admission_webhook_rejection_count_total{name,operation,rejection_code,error_type,type}`
//!   and `apiserver_admission_webhook_fail_open_count_total{name,type}`.
//!
//! Built on prometheus-client, as the host's metrics are, so both expose
//! the same text format. Every label value comes from a fixed set (a
//! [`Limit`], a known verb or `other`, a status code) or, for the webhook
//! metrics, from a webhook's name, which only a writer of webhook
//! configurations (the cluster's administrators) chooses: a client can
//! never mint a series. The registry lives in each server's state rather than in
//! a global, so two servers in one process count apart.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A ceiling the server enforces; its label is the `limit` label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// TLS handshake not finished within its timeout (connection closed).
    TlsHandshake,
    /// Request head not received within its timeout (connection closed).
    RequestHead,
    /// Keep-alive connection idle past its timeout (connection closed).
    IdleConnection,
    /// A response whose client took none of its bytes for the write
    /// timeout (connection closed).
    ResponseWrite,
    /// A list answered 429: the list answers on their way to clients
    /// already hold the server's budget.
    ListBytes,
    /// A connection past the 1,024 served at once (closed at once).
    Connections,
    /// A connection from an address that already has 64 open without a
    /// first request (closed at once).
    PeerConnections,
    /// Request body over 3 MiB (413).
    RequestBody,
    /// Request body not received within its timeout (504).
    BodyTime,
    /// JSON patch with more than 10 000 operations (413).
    JsonPatchOperations,
    /// JSON patch `copy` operations adding more than 3 MiB (422).
    JsonPatchCopyBytes,
    /// JSON patch operation nesting a value past 100 levels (422).
    JsonPatchDepth,
    /// JSON patch whose moves' depth checks walk past 16 Mi values (422).
    JsonPatchMoveWalk,
    /// JSON patch whose array insertions and removals shift past 16 Mi
    /// elements (422).
    JsonPatchArrayShift,
    /// JSON body nested past serde_json's 128 levels (400).
    JsonDepth,
    /// YAML body whose aliases expand it past its own size (400).
    YamlExpansion,
    /// YAML body nested past serde_norway's 128 levels (400).
    YamlDepth,
    /// Object over 3 MiB of JSON (413).
    ObjectSize,
    /// Object nested past 100 levels once stored (400).
    ObjectDepth,
    /// Invalid `metadata.name` for the kind (422).
    Name,
    /// Invalid namespace of a namespaced object (422).
    Namespace,
    /// Path segment not UTF-8 once percent-decoded (400).
    PathSegment,
    /// Watch from a resourceVersion older than the history (410).
    WatchExpired,
    /// Watcher fallen too far behind the event stream (closed with 410).
    SlowWatcher,
    /// Watch history events dropped early because the history's events
    /// held more than 256 MiB of JSON.
    WatchHistoryBytes,
    /// Bearer or reviewed token over 16 KiB (401, or unauthenticated).
    TokenSize,
    /// TokenRequest or TokenReview naming over 100 audiences, or one over
    /// 1 KiB (400).
    TokenAudiences,
    /// Request with over 64 impersonation headers (400).
    ImpersonationHeaders,
    /// A write of a role or binding granting over 10,000 permissions, by an
    /// author whose holdings they must be compared with (403).
    GrantedPermissions,
    /// Aggregated ClusterRoles whose rules still changed after 16 passes
    /// (roles aggregating each other), left as they were.
    AggregationPasses,
    /// SubjectAccessReview with over 1 000 groups, extra keys or values of
    /// one extra key (400).
    ReviewLists,
    /// A webhook configuration with over 64 webhooks (422), or a request
    /// matching over 128 mutating or validating webhooks (500).
    AdmissionWebhooks,
    /// A webhook's answer over 16 MiB, or over 10,000 values, or a patch
    /// in it over 3 MiB decoded (a failed call).
    WebhookResponse,
    /// Audit annotations of a webhook's answer dropped: past 32 in one
    /// answer or 256 in one request, or with a key that is not a name.
    WebhookAnnotations,
}

impl Limit {
    pub(crate) const ALL: [Limit; 34] = [
        Limit::TlsHandshake,
        Limit::RequestHead,
        Limit::IdleConnection,
        Limit::ResponseWrite,
        Limit::ListBytes,
        Limit::Connections,
        Limit::PeerConnections,
        Limit::RequestBody,
        Limit::BodyTime,
        Limit::JsonPatchOperations,
        Limit::JsonPatchCopyBytes,
        Limit::JsonPatchDepth,
        Limit::JsonPatchMoveWalk,
        Limit::JsonPatchArrayShift,
        Limit::JsonDepth,
        Limit::YamlExpansion,
        Limit::YamlDepth,
        Limit::ObjectSize,
        Limit::ObjectDepth,
        Limit::Name,
        Limit::Namespace,
        Limit::PathSegment,
        Limit::WatchExpired,
        Limit::SlowWatcher,
        Limit::WatchHistoryBytes,
        Limit::TokenSize,
        Limit::TokenAudiences,
        Limit::ImpersonationHeaders,
        Limit::GrantedPermissions,
        Limit::AggregationPasses,
        Limit::ReviewLists,
        Limit::AdmissionWebhooks,
        Limit::WebhookResponse,
        Limit::WebhookAnnotations,
    ];

    /// The `limit` label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Limit::TlsHandshake => "tlsHandshake",
            Limit::RequestHead => "requestHead",
            Limit::IdleConnection => "idleConnection",
            Limit::ResponseWrite => "responseWrite",
            Limit::ListBytes => "listBytes",
            Limit::Connections => "connections",
            Limit::PeerConnections => "peerConnections",
            Limit::RequestBody => "requestBody",
            Limit::BodyTime => "bodyTime",
            Limit::JsonPatchOperations => "jsonPatchOperations",
            Limit::JsonPatchCopyBytes => "jsonPatchCopyBytes",
            Limit::JsonPatchDepth => "jsonPatchDepth",
            Limit::JsonPatchMoveWalk => "jsonPatchMoveWalk",
            Limit::JsonPatchArrayShift => "jsonPatchArrayShift",
            Limit::JsonDepth => "jsonDepth",
            Limit::YamlExpansion => "yamlExpansion",
            Limit::YamlDepth => "yamlDepth",
            Limit::ObjectSize => "objectSize",
            Limit::ObjectDepth => "objectDepth",
            Limit::Name => "name",
            Limit::Namespace => "namespace",
            Limit::PathSegment => "pathSegment",
            Limit::WatchExpired => "watchExpired",
            Limit::SlowWatcher => "slowWatcher",
            Limit::WatchHistoryBytes => "watchHistoryBytes",
            Limit::TokenSize => "tokenSize",
            Limit::TokenAudiences => "tokenAudiences",
            Limit::ImpersonationHeaders => "impersonationHeaders",
            Limit::GrantedPermissions => "grantedPermissions",
            Limit::AggregationPasses => "aggregationPasses",
            Limit::ReviewLists => "reviewLists",
            Limit::AdmissionWebhooks => "admissionWebhooks",
            Limit::WebhookResponse => "webhookResponse",
            Limit::WebhookAnnotations => "webhookAnnotations",
        }
    }

    fn from_label(label: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.label() == label)
    }
}

/// The limit a JSON body ran into, if that is why serde_json refused it.
pub(crate) fn json_limit(e: &serde_json::Error) -> Option<Limit> {
    // serde_json gives its nesting limit no error kind, only this message,
    // which starts the text (it never quotes the input).
    e.to_string()
        .starts_with("recursion limit exceeded")
        .then_some(Limit::JsonDepth)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    code: u16,
}

/// Why a webhook call ended a request, upstream's `error_type` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WebhookErrorType {
    /// The call failed under `failurePolicy: Fail`.
    CallingWebhook,
    /// The webhook denied the request.
    NoError,
    /// The server refused (a dry run the webhook cannot take, a patch that
    /// cannot apply).
    ApiserverInternal,
}

impl WebhookErrorType {
    fn label(self) -> &'static str {
        match self {
            WebhookErrorType::CallingWebhook => "calling_webhook_error",
            WebhookErrorType::NoError => "no_error",
            WebhookErrorType::ApiserverInternal => "apiserver_internal_error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookAdmissionLabels {
    name: String,
    operation: &'static str,
    rejected: &'static str,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookRejectionLabels {
    name: String,
    operation: &'static str,
    rejection_code: u16,
    error_type: &'static str,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookFailOpenLabels {
    name: String,
    r#type: &'static str,
}

/// Upstream's buckets for webhook call durations, in seconds.
const WEBHOOK_BUCKETS: [f64; 8] = [0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0];

fn webhook_histogram() -> Histogram {
    Histogram::new(WEBHOOK_BUCKETS)
}

/// Verbs a request is counted under; anything else (an unknown method) is
/// `other`.
const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "head",
    "post",
    "put",
    "options",
];

/// One server's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    limits: Family<LimitLabel, Counter>,
    requests: Family<RequestLabels, Counter>,
    webhook_durations: Family<WebhookAdmissionLabels, Histogram, fn() -> Histogram>,
    webhook_rejections: Family<WebhookRejectionLabels, Counter>,
    webhook_fail_open: Family<WebhookFailOpenLabels, Counter>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let limits = Family::<LimitLabel, Counter>::default();
        for l in Limit::ALL {
            // Creating the series is the point; the guard is not needed.
            drop(limits.get_or_create(&LimitLabel { limit: l.label() }));
        }
        let requests = Family::<RequestLabels, Counter>::default();
        let mut registry = Registry::default();
        registry.register(
            "wasmctrl_apiserver_limit_exceeded",
            "Requests and connections refused because they ran into one of the server's limits",
            limits.clone(),
        );
        registry.register(
            "wasmctrl_apiserver_requests",
            "Requests answered, by verb and HTTP status code",
            requests.clone(),
        );
        let webhook_durations = Family::<_, _, fn() -> Histogram>::new_with_constructor(
            webhook_histogram as fn() -> Histogram,
        );
        registry.register(
            "apiserver_admission_webhook_admission_duration_seconds",
            "Admission webhook latency in seconds, by webhook name, operation, whether it rejected and type (validating or admit)",
            webhook_durations.clone(),
        );
        let webhook_rejections = Family::<WebhookRejectionLabels, Counter>::default();
        registry.register(
            "apiserver_admission_webhook_rejection_count",
            "Admission webhook rejections, by webhook name, operation, status code, error type and type (validating or admit)",
            webhook_rejections.clone(),
        );
        let webhook_fail_open = Family::<WebhookFailOpenLabels, Counter>::default();
        registry.register(
            "apiserver_admission_webhook_fail_open_count",
            "Admission webhook calls that failed and were ignored (failurePolicy Ignore), by webhook name and type",
            webhook_fail_open.clone(),
        );
        Metrics {
            registry,
            limits,
            requests,
            webhook_durations,
            webhook_rejections,
            webhook_fail_open,
        }
    }

    /// Times one webhook call (`kind`: `validating` or `admit`).
    pub(crate) fn webhook_admission(
        &self,
        name: &str,
        operation: &'static str,
        rejected: bool,
        kind: &'static str,
        seconds: f64,
    ) {
        self.webhook_durations
            .get_or_create(&WebhookAdmissionLabels {
                name: name.to_string(),
                operation,
                rejected: if rejected { "true" } else { "false" },
                r#type: kind,
            })
            .observe(seconds);
    }

    /// Counts a request a webhook call ended.
    pub(crate) fn webhook_rejection(
        &self,
        name: &str,
        operation: &'static str,
        code: u16,
        error_type: WebhookErrorType,
        kind: &'static str,
    ) {
        self.webhook_rejections
            .get_or_create(&WebhookRejectionLabels {
                name: name.to_string(),
                operation,
                rejection_code: code,
                error_type: error_type.label(),
                r#type: kind,
            })
            .inc();
    }

    /// Counts a failed call `failurePolicy: Ignore` let pass.
    pub(crate) fn webhook_fail_open(&self, name: &str, kind: &'static str) {
        self.webhook_fail_open
            .get_or_create(&WebhookFailOpenLabels {
                name: name.to_string(),
                r#type: kind,
            })
            .inc();
    }

    /// Counts one refusal by `limit`.
    pub(crate) fn exceeded(&self, limit: Limit) {
        self.limits
            .get_or_create(&LimitLabel {
                limit: limit.label(),
            })
            .inc();
    }

    /// Counts `n` refusals by `limit`.
    pub(crate) fn exceeded_by(&self, limit: Limit, n: u64) {
        self.limits
            .get_or_create(&LimitLabel {
                limit: limit.label(),
            })
            .inc_by(n);
    }

    /// Counts one refusal by `limit`, if it was one.
    pub(crate) fn exceeded_if(&self, limit: Option<Limit>) {
        if let Some(l) = limit {
            self.exceeded(l);
        }
    }

    /// Refusals counted for the limit labelled `label` (0 for an unknown
    /// label).
    pub(crate) fn exceeded_count(&self, label: &str) -> u64 {
        Limit::from_label(label).map_or(0, |l| {
            self.limits
                .get_or_create(&LimitLabel { limit: l.label() })
                .get()
        })
    }

    /// Counts one answered request.
    pub(crate) fn request(&self, verb: &str, code: u16) {
        let verb = VERBS
            .iter()
            .find(|v| **v == verb)
            .copied()
            .unwrap_or("other");
        self.requests
            .get_or_create(&RequestLabels { verb, code })
            .inc();
    }

    /// The text exposition of every metric.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_is_exported_from_the_start_and_counted_by_label() {
        let m = Metrics::new();
        let text = m.encode();
        for l in Limit::ALL {
            assert!(
                text.contains(&format!(
                    "wasmctrl_apiserver_limit_exceeded_total{{limit=\"{}\"}} 0",
                    l.label()
                )),
                "{text}"
            );
            assert_eq!(Limit::from_label(l.label()), Some(l));
        }
        m.exceeded(Limit::ObjectSize);
        assert_eq!(m.exceeded_count("objectSize"), 1);
        assert_eq!(m.exceeded_count("name"), 0);
        assert_eq!(m.exceeded_count("no such limit"), 0);
    }

    #[test]
    fn json_nesting_is_told_apart_from_other_errors() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let e = serde_json::from_str::<serde_json::Value>(&deep).unwrap_err();
        assert_eq!(json_limit(&e), Some(Limit::JsonDepth), "{e}");
        let e =
            serde_json::from_str::<serde_json::Value>("{\"recursion limit exceeded\"").unwrap_err();
        assert_eq!(json_limit(&e), None, "{e}");
    }

    #[test]
    fn request_labels_come_from_a_fixed_set() {
        let m = Metrics::new();
        m.request("get", 200);
        m.request("x-client-chosen-verb", 405);
        let text = m.encode();
        assert!(
            text.contains("wasmctrl_apiserver_requests_total{verb=\"get\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("wasmctrl_apiserver_requests_total{verb=\"other\",code=\"405\"} 1"),
            "{text}"
        );
        assert!(!text.contains("x-client-chosen-verb"));
    }
}
