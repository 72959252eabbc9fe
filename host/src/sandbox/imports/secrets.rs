//! `wasmctrl:reconciler/secrets`: `reveal`, on the plugin's secrets
//! (`sandbox/outbound/secret.rs`). A refusal is an `api-error` naming the
//! secret and why, counted in `wasmctrl_plugin_secret_refusals_total`;
//! it never carries a value. Reveals are not taped: a transcript never
//! holds a value, and a replay reads the replaying host's own secrets. A
//! revealed value is redacted from the call's log lines and error.

use wasmtime::component::HasData;

use super::kube::to_wit_error;
use crate::sandbox::hostapi::ApiError;
use crate::sandbox::outbound::{OutboundHooks, RevealRefusal};
use crate::sandbox::store::StoreState;
use crate::sandbox::wit::wasmctrl::reconciler::{secrets, types};

/// The longest name a guest may ask for (the names are DNS-1123 labels).
const MAX_NAME: usize = 63;

/// The `secrets` interface's view of a store.
pub(super) struct Secrets;

impl HasData for Secrets {
    type Data<'a> = SecretsView<'a>;
}

pub(super) struct SecretsView<'a> {
    http: &'a OutboundHooks,
}

pub(super) fn view(s: &mut StoreState) -> SecretsView<'_> {
    SecretsView { http: &s.http }
}

impl secrets::Host for SecretsView<'_> {
    async fn reveal(&mut self, name: String) -> wasmtime::Result<Result<String, types::ApiError>> {
        let (grant, call) = (self.http.grant(), self.http.call());
        let refused = |r: RevealRefusal| {
            call.metrics.count_secret_refused(&call.plugin, r.reason());
            Err(to_wit_error(match r {
                RevealRefusal::Unknown(m) => ApiError::NotFound(m),
                RevealRefusal::Forbidden(m) => ApiError::Forbidden(m),
                RevealRefusal::Unavailable(m) => ApiError::Unavailable(m),
            }))
        };
        if name.len() > MAX_NAME {
            return Ok(refused(RevealRefusal::Unknown(format!(
                "a secret name of {} bytes; names are at most {MAX_NAME}",
                name.len()
            ))));
        }
        Ok(match grant.secrets().reveal(&name, call.deadline).await {
            Err(r) => refused(r),
            Ok(value) => match String::from_utf8(value) {
                Ok(text) => {
                    call.revealed(&name, text.as_bytes());
                    Ok(text)
                }
                Err(_) => refused(RevealRefusal::Unavailable(format!(
                    "secret {name:?}: its value is not UTF-8 text"
                ))),
            },
        })
    }
}
