//! Decoding of Kubernetes protobuf request bodies for the kinds kubectl's
//! imperative `create` subcommands send that way (`kubectl create configmap
//! | secret | namespace | serviceaccount | role | rolebinding | clusterrole |
//! clusterrolebinding | deployment | service | job | cronjob | token`) and
//! the reviews of `kubectl auth can-i | whoami`: client-go's typed
//! clientset always sends `application/vnd.kubernetes.protobuf` and has no
//! JSON fallback. Responses stay JSON, which those requests also accept.
//!
//! The envelope is the 4-byte magic `k8s\0` then a `runtime.Unknown`
//! (`typeMeta` = 1, `raw` = 2); `raw` is the object message. Only the fields
//! of the tables below are decoded; an unmodelled field is accepted only at
//! its zero value (gogo-protobuf sends every non-pointer field) and rejected
//! otherwise, rather than silently dropped.
//!
//! Why the tables, and not prost with kube-rs's generated `k8s-pb` types:
//! those decode every kind served here into Rust structs, but the server
//! stores and answers JSON, and `k8s-pb` has no JSON form (no serde). Each
//! table row says what a struct field would not: the field's JSON name and
//! whether Go omits its zero value (`omitempty`) or keeps it (a pointer),
//! and `metav1.Time`, `IntOrString`, `Quantity` and `[]byte` have JSON
//! forms of their own. Converting the structs would take that per-field
//! knowledge written out again for each message, and a decoded field the
//! conversion does not carry over would be lost silently, where these
//! tables refuse it.
//!
//! `wire` reads the wire format, `schema` holds the tables (one per
//! message) and the kinds they serve, `decode` turns an enveloped body into
//! JSON through them.

mod decode;
mod schema;
mod wire;

pub(crate) use decode::decode;
pub(crate) use wire::ProtobufError;
