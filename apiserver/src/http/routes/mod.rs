//! HTTP routing: authentication, the Kubernetes URL grammar, query and body
//! parsing, and mapping results to responses. Everything answers
//! `application/json` whatever the Accept (clients that offer Table or
//! protobuf also accept JSON).
//!
//! | File | Job |
//! |---|---|
//! | `handler` | the router, authentication and authorization, the body, durable waits, the audit |
//! | `dispatch` | non-resource URLs (version, health, metrics, discovery, OpenAPI) |
//! | `target` | what a resource URL addresses, resolved against the registry |
//! | `resource` | resource requests, per subresource and method |
//! | `collection` | lists and their continue tokens, watches, collection deletes |
//! | `body` | request bodies, patch kinds, delete options, write parameters |
//! | `request`, `params` | a request as the handlers see it; query and headers |

mod body;
mod collection;
mod deadline;
mod dispatch;
mod handler;
mod params;
mod request;
mod resource;
mod target;

pub(crate) use handler::router;
