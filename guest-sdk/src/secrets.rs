//! Secrets the host holds for the plugin: the `secrets` entries of its
//! host config, each a value (a key of a Kubernetes Secret, a file or an
//! environment variable) bound to the only destinations it may be sent to.
//!
//! Use a secret without seeing it: write [`placeholder`] into an outgoing
//! request's header value, and the host substitutes the value, only in
//! requests to the entry's `hosts`; to any other destination the request
//! is refused and nothing is sent. Whatever the server answers comes back
//! with the value redacted as `<secret:NAME>`. Placeholders are
//! substituted in header values only.
//!
//! ```no_run
//! use wasmctrl_sdk::{http, secrets};
//!
//! # fn f() -> Result<(), wasmctrl_sdk::Error> {
//! let request = http::Request::new("GET", "https://api.dns.example/zones")
//!     .header("authorization", &format!("Bearer {}", secrets::placeholder("dns-token")));
//! let answer = http::send(&request)?;
//! # Ok(()) }
//! ```
//!
//! [`reveal`] hands the value itself to the plugin, only where the entry
//! says `reveal: true`. Prefer the placeholder: a value the plugin never
//! holds cannot leak through it.

use crate::ApiError;
use crate::host::secrets as imports;

/// `${secret:NAME}`: what a header value carries for the host to replace
/// with secret `name`'s value.
pub fn placeholder(name: &str) -> String {
    format!("${{secret:{name}}}")
}

/// The value of secret `name`, where its entry says `reveal: true`.
///
/// # Errors
/// [`ApiError::Forbidden`] without `reveal: true`, [`ApiError::NotFound`]
/// for a name the plugin's secrets do not hold, [`ApiError::Unavailable`]
/// when the host cannot read the value now (a missing Secret or key).
/// Needs a host of WIT 0.1.2 or later.
pub fn reveal(name: &str) -> Result<String, ApiError> {
    imports::reveal(name).map_err(ApiError::from)
}
