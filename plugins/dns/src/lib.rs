//! An example operator of something outside the cluster: a `DNSRecord`
//! (demo.wasmctrl.dev/v1alpha1) becomes a record at an HTTP DNS provider
//! ([`provider`] has its API).
//!
//! - Every reconcile reads the remote record and puts it back when it is
//!   missing or differs from the spec (type, value, ttl), so a record
//!   changed outside the operator is repaired at the next reconcile; a
//!   synced record is looked at again after [`RESYNC`].
//! - The finalizer `dns.demo.wasmctrl.dev/record` deletes the remote record
//!   before the DNSRecord goes away; so does a change of `spec.name` (or of
//!   the configured zone) for the record at the old place, which
//!   `status.record` remembers.
//! - `status.conditions[Ready]` is True (`Synced`) once the provider holds
//!   the spec, else False: `ProviderError` with the provider's status code,
//!   or `InvalidSpec`. A provider error is transient: the key backs off and
//!   is retried.
//! - The plugin never sees the provider's token: its requests name the
//!   host's secret ([`provider::SECRET_PLACEHOLDER`]).
//!
//! Settings (the plugin's `settings` in the host config):
//! `{"endpoint": "http://127.0.0.1:8053", "zone": "example.com", "secret": "dns-token"}`,
//! `secret` optional. The plugin declares no outbound destination: the
//! endpoint is the config's to choose, so the host's `outbound` grant alone
//! decides where its requests may go.

pub mod provider;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmctrl_sdk::events::{EventType, Recorder};
use wasmctrl_sdk::finalizer::Event;
use wasmctrl_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use wasmctrl_sdk::{
    Action, Api, Context, Error, Metadata, ObjectKey, Reconciler, Resource, conditions, finalizer,
};

use provider::{Location, Provider, ProviderError, Record, Settings};

/// The field manager of every write, and the plugin's name.
const MANAGER: &str = "dns";
const FINALIZER: &str = "dns.demo.wasmctrl.dev/record";
/// How often a synced record is read again, to repair changes made at the
/// provider (which sends no events). The host's `resyncPeriod` does the
/// same for every key; this keeps the plugin correct without it.
pub const RESYNC: Duration = Duration::from_secs(300);
const READY: &str = "Ready";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DNSRecordSpec {
    /// The record's name within the zone (`www`).
    pub name: String,
    /// `A`, `AAAA`, `CNAME`, `TXT`, …
    #[serde(rename = "type")]
    pub type_: String,
    pub value: String,
    #[serde(default = "default_ttl")]
    pub ttl: u32,
}

fn default_ttl() -> u32 {
    300
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DNSRecordStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Where the provider holds (or may hold) this object's record: set when
    /// it is synced, so a later rename knows what to remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<Location>,
}

wasmctrl_sdk::custom_resource! {
    /// A DNS record at an HTTP DNS provider.
    pub struct DNSRecord {
        group: "demo.wasmctrl.dev",
        version: "v1alpha1",
        plural: "dnsrecords",
        scope: Namespaced,
        spec: DNSRecordSpec,
        status: DNSRecordStatus,
    }
}

struct DnsReconciler;

impl Reconciler for DnsReconciler {
    fn metadata() -> Metadata {
        // No `.outbound(…)`: the endpoint comes from the settings, so the
        // host's grant for this plugin is the only list of destinations.
        Metadata::new(MANAGER, env!("CARGO_PKG_VERSION"), DNSRecord::gvk())
            // get: read the object; list/watch: the host's informer; patch:
            // the finalizer (a JSON patch guarded by a test).
            .permission(
                DNSRecord::group(),
                &["dnsrecords"],
                &["get", "list", "watch", "patch"],
            )
            // Status is server-side applied, a patch.
            .permission(DNSRecord::group(), &["dnsrecords/status"], &["patch"])
            .permission("events.k8s.io", &["events"], &["create"])
    }

    fn reconcile(key: ObjectKey, ctx: &Context) -> Result<Action, Error> {
        let namespace = key.require_namespace()?;
        let records = Api::<DNSRecord>::namespaced(namespace);
        let Some(record) = records.get_opt(&key.name)? else {
            // Gone: its finalizer already removed the remote record.
            return Ok(Action::done());
        };
        let provider = Provider::new(ctx.settings::<Settings>()?)?;
        finalizer(&records, FINALIZER, record, |event| match event {
            Event::Apply(record) => apply(&records, &provider, &record),
            Event::Cleanup(record) => cleanup(&records, &provider, &record),
        })
    }
}

/// What a sync did at the provider.
enum Synced {
    Already,
    Created,
    Updated,
}

fn apply(records: &Api<DNSRecord>, provider: &Provider, obj: &DNSRecord) -> Result<Action, Error> {
    let previous = obj.status.as_ref().and_then(|s| s.record.clone());
    let at = match provider.location(&obj.spec.name) {
        Ok(at) => at,
        Err(e) => {
            let status = Status::not_ready("InvalidSpec", e.message(), previous);
            if let Err(status_error) = write_status(records, obj, status) {
                wasmctrl_sdk::warn!("could not write the status: {status_error}");
            }
            return Err(e);
        }
    };
    match sync(provider, obj, &at, previous.as_ref()) {
        Ok(done) => {
            let message = format!(
                "{} {} {} (ttl {})",
                at, obj.spec.type_, obj.spec.value, obj.spec.ttl
            );
            write_status(records, obj, Status::ready(&message, at))?;
            let note = match done {
                Synced::Already => None,
                Synced::Created => Some(("Created", format!("created {message}"))),
                Synced::Updated => Some(("Updated", format!("updated {message}"))),
            };
            if let Some((reason, note)) = note {
                publish(obj, EventType::Normal, reason, &note);
            }
            Ok(Action::requeue_after(RESYNC))
        }
        Err(e) => Err(failed(records, obj, e, previous)),
    }
}

/// Brings the provider to the spec at `at`, first removing the record at
/// the place the object named before, if it moved.
fn sync(
    provider: &Provider,
    obj: &DNSRecord,
    at: &Location,
    previous: Option<&Location>,
) -> Result<Synced, ProviderError> {
    if let Some(old) = previous.filter(|old| *old != at) {
        provider.delete(old)?;
    }
    let desired = Record {
        type_: obj.spec.type_.clone(),
        value: obj.spec.value.clone(),
        ttl: obj.spec.ttl,
    };
    let remote = provider.get(at)?;
    let current = remote
        .clone()
        .and_then(|r| wasmctrl_sdk::serde_json::from_value::<Record>(r).ok());
    if current.as_ref() == Some(&desired) {
        return Ok(Synced::Already);
    }
    provider.put(at, &desired)?;
    Ok(if remote.is_some() {
        Synced::Updated
    } else {
        Synced::Created
    })
}

fn cleanup(
    records: &Api<DNSRecord>,
    provider: &Provider,
    obj: &DNSRecord,
) -> Result<Action, Error> {
    let previous = obj.status.as_ref().and_then(|s| s.record.clone());
    // A name that was never valid never reached the provider.
    let current = provider.location(&obj.spec.name).ok();
    let mut places: Vec<Location> = current.into_iter().collect();
    if let Some(old) = previous.clone().filter(|old| !places.contains(old)) {
        places.push(old);
    }
    for at in &places {
        if let Err(e) = provider.delete(at) {
            return Err(failed(records, obj, e, previous));
        }
    }
    Ok(Action::done())
}

/// Reports a provider failure in the status and as an event, and turns it into the reconcile's transient error.
fn failed(
    records: &Api<DNSRecord>,
    obj: &DNSRecord,
    e: ProviderError,
    record: Option<Location>,
) -> Error {
    let message = e.to_string();
    // One event when the failing starts, not one per retry.
    let already_failing = obj
        .status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, READY))
        .is_some_and(|c| c.status == "False" && c.reason == "ProviderError");
    // The provider's failure is the one to retry on; a status write that
    // fails as well is retried with it.
    if let Err(status_error) = write_status(
        records,
        obj,
        Status::not_ready("ProviderError", &message, record),
    ) {
        wasmctrl_sdk::warn!("could not write the status: {status_error}");
    }
    if !already_failing {
        publish(obj, EventType::Warning, "ProviderError", &message);
    }
    e.into()
}

/// The parts of the status a reconcile decides.
struct Status {
    ready: bool,
    reason: &'static str,
    message: String,
    record: Option<Location>,
}

impl Status {
    fn ready(message: &str, at: Location) -> Self {
        Self {
            ready: true,
            reason: "Synced",
            message: message.to_string(),
            record: Some(at),
        }
    }

    fn not_ready(reason: &'static str, message: &str, record: Option<Location>) -> Self {
        Self {
            ready: false,
            reason,
            message: message.to_string(),
            record,
        }
    }
}

/// Writes `status` for `obj`'s generation, unless it is already there.
fn write_status(records: &Api<DNSRecord>, obj: &DNSRecord, status: Status) -> Result<(), Error> {
    let old = obj.status.clone().unwrap_or_default();
    let mut new = DNSRecordStatus {
        observed_generation: obj.metadata.generation,
        record: status.record,
        ..old
    };
    let condition = Condition {
        observed_generation: obj.metadata.generation,
        ..conditions::new(READY, status.ready, status.reason, status.message)
    };
    conditions::set(&mut new.conditions, condition);
    if obj.status.as_ref() != Some(&new) {
        records.apply_status(obj.name(), &new, MANAGER, true)?;
    }
    Ok(())
}

/// Events are signals, not state: one that cannot be recorded does not
/// fail the reconcile.
fn publish(obj: &DNSRecord, type_: EventType, reason: &str, note: &str) {
    if let Err(e) = Recorder::new(obj).publish(type_, reason, "Reconcile", note) {
        wasmctrl_sdk::warn!("could not record an event: {e}");
    }
}

wasmctrl_sdk::export_reconciler!(DnsReconciler);

#[cfg(test)]
mod tests;
