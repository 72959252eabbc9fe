//! The `wasmctrl_hostapi_calls_total` counters of one plugin's calls.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::control::metrics::PluginFamily;
use prometheus_client::metrics::counter::Counter;

use crate::control::metrics::HostApiLabels;
use crate::sandbox::hostapi::api::KubeResponse;
use crate::sandbox::hostapi::error::ApiError;

/// The `wasmctrl_hostapi_calls_total` counters one plugin has counted on,
/// by resource, then verb and code: a call bumps its counter without
/// building the family's four-string label set. As many as the family
/// holds for the plugin (the resources the cluster serves, and
/// `<unresolved>`).
#[derive(Default)]
pub(super) struct CallCounters(Mutex<HashMap<Box<str>, Vec<CallCounter>>>);

/// One verb and code's counter of a resource's calls.
struct CallCounter {
    verb: &'static str,
    code: &'static str,
    counter: Counter,
}

impl CallCounters {
    /// Adds one to `family`'s counter of these labels.
    pub(super) fn inc(
        &self,
        family: &PluginFamily<HostApiLabels, Counter>,
        plugin: &str,
        verb: &'static str,
        resource: &str,
        code: &'static str,
    ) {
        let mut counters = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let known = counters
            .get(resource)
            .and_then(|c| c.iter().find(|c| c.verb == verb && c.code == code));
        if let Some(known) = known {
            known.counter.inc();
            return;
        }
        // A clone shares the family's value.
        let counter = family
            .get_or_create(&HostApiLabels {
                plugin: plugin.into(),
                verb: verb.into(),
                resource: resource.into(),
                code: code.into(),
            })
            .clone();
        counter.inc();
        counters
            .entry(resource.into())
            .or_default()
            .push(CallCounter {
                verb,
                code,
                counter,
            });
    }
}

/// The `code` label of a call that ended with `result`.
pub(super) fn code(result: &Result<KubeResponse, ApiError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}
