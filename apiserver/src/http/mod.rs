//! Serving the Kubernetes API over HTTPS: connections, routing, and the
//! formats requests and responses take.
//!
//! [`state::ServerState`] is what every handler shares: the registry's
//! [`crate::registry::Objects`], [`crate::auth::Auth`], fault injection and
//! the write audit, and the signal that closes watches.
//!
//! | File | Job |
//! |---|---|
//! | [`conn`] | TLS, HTTP/1.1, connection timeouts, graceful shutdown |
//! | [`tls`] | the CA and the server certificate |
//! | [`routes`] | the Kubernetes URL grammar, query and body parsing, handlers |
//! | [`request_info`] | a request's verb, resource and name, as authorization sees it |
//! | [`response`] | JSON responses, `metav1.Status` for errors |
//! | [`watch`] | chunked watch streams, resumable, with bookmarks |
//! | [`discovery`] | `/version`, `/api`, `/apis`, aggregated discovery, OpenAPI v3 |
//! | [`table`] | `meta.k8s.io/v1` Table output for kubectl |
//! | [`protobuf`] | Kubernetes protobuf request bodies, decoded to JSON |
//! | [`faults`], [`audit`] | fault injection and the write audit (feature `testing`) |
//!
//! May import everything below it: [`crate::auth`], [`crate::registry`],
//! [`crate::patch`] and the leaf modules; never `persist` or `testing`.

pub(crate) mod audit;
pub(crate) mod conn;
pub(crate) mod discovery;
pub(crate) mod faults;
pub(crate) mod list_budget;
pub(crate) mod media;
pub mod peers;
pub(crate) mod protobuf;
pub(crate) mod request_info;
pub(crate) mod response;
pub(crate) mod routes;
pub(crate) mod state;
pub(crate) mod table;
pub(crate) mod tls;
pub(crate) mod watch;
