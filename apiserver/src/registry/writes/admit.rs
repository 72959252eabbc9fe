//! Admission for the writes of requests: what a write is as webhooks see
//! it ([`Admitting`]), and what they ask of the cluster (the
//! [`Lookup`] of [`Objects`]: namespace labels, Service addresses).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use serde_json::{Value, json};

use super::context::WriteCtx;
use super::rules::{is_namespace, webhook_configuration};
use crate::admission::{Attributes, Caller, Configs, Gvk, Gvr, Lookup, Operation};
use crate::error::{ApiError, Cause};
use crate::registry::Objects;
use crate::registry::resources::{GroupResource, ResourceInfo, View};
use crate::registry::storage::Stored;
use crate::values::{go_quote, meta_str};

/// Admission of one request's write: the configured webhooks as they stood
/// when it began, and what the write addresses.
pub(crate) struct Admitting<'a> {
    objects: &'a Objects,
    configs: Arc<Configs>,
    info: &'a ResourceInfo,
    ctx: &'a WriteCtx,
    caller: &'a Caller,
    subresource: &'a str,
    /// The kind of the object sent: the resource's, a Scale or a
    /// TokenRequest.
    kind: Gvk,
    equivalent_versions: Vec<String>,
}

impl Objects {
    /// Admission for a write of `info` (or its `subresource`) as `ctx`;
    /// `None`, at the cost of one atomic load, when no webhook is
    /// configured, for writes of webhook configurations (which upstream
    /// never sends to webhooks either), and for writes without a caller:
    /// the server's own bookkeeping (its bootstrap, and the finalizers and
    /// references its controllers remove). The garbage collector's and the
    /// namespace controller's deletes carry a caller and are admitted.
    pub(crate) fn admitting<'a>(
        &'a self,
        info: &'a ResourceInfo,
        subresource: Option<&'a str>,
        ctx: &'a WriteCtx,
    ) -> Option<Admitting<'a>> {
        let caller = ctx.caller.as_deref()?;
        let configs = self.admission.current()?;
        if webhook_configuration(info).is_some() {
            return None;
        }
        let kind = if subresource == Some("scale") {
            Gvk {
                group: "autoscaling".into(),
                version: "v1".into(),
                kind: "Scale".into(),
            }
        } else if subresource == Some("token") {
            Gvk {
                group: "authentication.k8s.io".into(),
                version: "v1".into(),
                kind: "TokenRequest".into(),
            }
        } else {
            Gvk {
                group: info.group.clone(),
                version: info.version.clone(),
                kind: info.kind.clone(),
            }
        };
        // Other versions of the same stored resource and group present the
        // same object with another apiVersion (a CRD's versions).
        let equivalent_versions = if info.view == View::Plain {
            self.registry()
                .groups()
                .iter()
                .filter(|g| g.name == info.group)
                .flat_map(|g| g.versions.iter())
                .flat_map(|(_, list)| list.iter())
                .filter(|r| {
                    r.storage == info.storage
                        && r.plural == info.plural
                        && r.view == View::Plain
                        && r.version != info.version
                })
                .map(|r| r.version.clone())
                .collect()
        } else {
            Vec::new()
        };
        Some(Admitting {
            objects: self,
            configs,
            info,
            ctx,
            caller,
            subresource: subresource.unwrap_or(""),
            kind,
            equivalent_versions,
        })
    }
}

impl Admitting<'_> {
    fn attributes<'b>(
        &'b self,
        operation: Operation,
        namespace: &'b str,
        name: &'b str,
        options: Value,
    ) -> Attributes<'b> {
        Attributes {
            operation,
            kind: self.kind.clone(),
            resource: Gvr {
                group: self.info.group.clone(),
                version: self.info.version.clone(),
                resource: self.info.plural.clone(),
            },
            subresource: self.subresource,
            name,
            // A Namespace is its own namespace, as upstream's requests say.
            namespace: if is_namespace(self.info) {
                name
            } else {
                namespace
            },
            dry_run: self.ctx.dry_run,
            options,
            caller: self.caller,
            equivalent_versions: &self.equivalent_versions,
            deadline: self.ctx.deadline,
        }
    }

    /// `CreateOptions` or `UpdateOptions` of this request (patches are
    /// admitted with `UpdateOptions`, or `CreateOptions` when an apply
    /// creates, as upstream converts them).
    pub(crate) fn write_options(&self, operation: Operation) -> Value {
        let kind = match operation {
            Operation::Create => "CreateOptions",
            _ => "UpdateOptions",
        };
        let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
        if self.ctx.dry_run {
            options["dryRun"] = json!(["All"]);
        }
        if let Some(manager) = &self.ctx.query.field_manager {
            options["fieldManager"] = json!(manager);
        }
        if let Some(validation) = self.ctx.query.field_validation {
            options["fieldValidation"] = json!(validation);
        }
        options
    }

    /// Gives `obj` the `apiVersion` and `kind` a client may leave out, so
    /// webhooks always see a typed object, as upstream sends it.
    pub(crate) fn typed(&self, obj: &mut Value) {
        let api_version = if self.kind.group.is_empty() {
            self.kind.version.clone()
        } else {
            format!("{}/{}", self.kind.group, self.kind.version)
        };
        if let Some(m) = obj.as_object_mut() {
            for (key, value) in [
                ("apiVersion", api_version),
                ("kind", self.kind.kind.clone()),
            ] {
                if m.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
                    m.insert(key.into(), json!(value));
                }
            }
        }
    }

    /// Runs the mutating webhooks on `object` (the served version; absent
    /// for a delete), with `old` the object as read.
    pub(crate) async fn mutate(
        &self,
        operation: Operation,
        (namespace, name): (&str, &str),
        object: Option<&mut Value>,
        old: Option<&Value>,
        options: Value,
    ) -> Result<(), ApiError> {
        let attrs = self.attributes(operation, namespace, name, options);
        self.objects
            .admission
            .mutate(&self.configs, &attrs, object, old, self.objects, self.ctx)
            .await
    }

    /// Runs the validating webhooks on `object` as it would be stored.
    pub(crate) async fn validate(
        &self,
        operation: Operation,
        (namespace, name): (&str, &str),
        object: Option<&Value>,
        old: Option<&Value>,
        options: Value,
    ) -> Result<(), ApiError> {
        let attrs = self.attributes(operation, namespace, name, options);
        self.objects
            .admission
            .validate(&self.configs, &attrs, object, old, self.objects, self.ctx)
            .await
    }

    /// Mutating webhooks on an update of the stored `cur` to `new` (views),
    /// with the update's options: what an update and a patch both run.
    /// What the webhooks leave is then held to upstream's checks of an
    /// updated object, which follow its mutation: a `resourceVersion` is a
    /// precondition (409 when it is not the stored one), and a `uid` other
    /// than the stored one is an immutable field changed (422).
    pub(crate) async fn mutate_update(
        &self,
        (namespace, name): (&str, &str),
        new: &mut Value,
        old: &Value,
        cur: &Stored,
    ) -> Result<(), ApiError> {
        let options = self.write_options(Operation::Update);
        self.mutate(
            Operation::Update,
            (namespace, name),
            Some(new),
            Some(old),
            options,
        )
        .await?;
        let info = self.info;
        if let Some(rv) = meta_str(new, "resourceVersion")
            && !rv.is_empty()
            && rv != cur.rv.to_string()
        {
            return Err(ApiError::stale(&info.group, &info.plural, name));
        }
        if let Some(uid) = meta_str(new, "uid")
            && !uid.is_empty()
            && Some(uid) != meta_str(&cur.obj, "uid")
        {
            return Err(ApiError::invalid(
                &info.group,
                &info.kind,
                name,
                vec![Cause::invalid(
                    "metadata.uid",
                    &go_quote(uid),
                    "field is immutable",
                )],
            ));
        }
        Ok(())
    }

    /// Validating webhooks on an update from `old` to `new` (views), with
    /// the update's options: what an update and a patch both run before
    /// they commit.
    pub(crate) async fn validate_update(
        &self,
        at: (&str, &str),
        new: &Value,
        old: &Value,
    ) -> Result<(), ApiError> {
        let options = self.write_options(Operation::Update);
        self.validate(Operation::Update, at, Some(new), Some(old), options)
            .await
    }
}

/// The first address of a Service's Endpoints or EndpointSlices that
/// serves `port` (matched by the Service port's name), as a headless
/// Service is reached.
fn endpoint_address(objects: &Objects, ns: &str, svc: &Value, port: u16) -> Option<SocketAddr> {
    let name = crate::values::meta_str(svc, "name")?;
    let service_port = svc["spec"]["ports"]
        .as_array()?
        .iter()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))?;
    let port_name = service_port["name"].as_str().unwrap_or("");
    let fallback = service_port["targetPort"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(port);
    // The endpoint's port named as the Service's port, else the only one.
    let pick = |ports: &Value| -> u16 {
        let ports = ports.as_array().map(Vec::as_slice).unwrap_or_default();
        ports
            .iter()
            .find(|p| p["name"].as_str().unwrap_or("") == port_name)
            .or(if ports.len() == 1 {
                ports.first()
            } else {
                None
            })
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(fallback)
    };
    let ip = |v: &Value| v.as_str()?.parse::<IpAddr>().ok();
    if let Some(ep) = objects
        .store
        .get(&GroupResource::new("", "endpoints"), ns, name)
    {
        for subset in ep.obj["subsets"].as_array().into_iter().flatten() {
            if let Some(addr) = subset["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|a| ip(&a["ip"]))
            {
                return Some(SocketAddr::new(addr, pick(&subset["ports"])));
            }
        }
    }
    let slices = objects.store.list(
        &GroupResource::new("discovery.k8s.io", "endpointslices"),
        Some(ns),
        None,
        None,
        Some(&|raw: &[u8]| {
            crate::registry::storage::parse_json(raw)
                .pointer("/metadata/labels/kubernetes.io~1service-name")
                == Some(&json!(name))
        }),
    );
    slices.items.iter().find_map(|slice| {
        let slice = crate::registry::storage::parse_json(slice);
        let addr = slice["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
            .find_map(|e| e["addresses"].as_array()?.iter().find_map(ip))?;
        Some(SocketAddr::new(addr, pick(&slice["ports"])))
    })
}

impl Lookup for Objects {
    fn namespace_labels(&self, name: &str) -> Option<Value> {
        let ns = self
            .store
            .get(&GroupResource::new("", "namespaces"), "", name)?;
        Some(
            ns.obj
                .pointer("/metadata/labels")
                .cloned()
                .unwrap_or(Value::Null),
        )
    }

    /// The Service's `spec.clusterIP` when it is an IP address (nothing
    /// routes a cluster IP here, so a Service meant for webhooks names the
    /// address the webhook listens on), else the first address of its
    /// Endpoints or EndpointSlices.
    fn service_address(&self, ns: &str, name: &str, port: u16) -> Result<SocketAddr, String> {
        let svc = self
            .store
            .get(&GroupResource::new("", "services"), ns, name)
            .ok_or_else(|| format!("service {} not found", go_quote(name)))?;
        if let Some(ip) = svc.obj["spec"]["clusterIP"]
            .as_str()
            .and_then(|s| s.parse::<IpAddr>().ok())
        {
            return Ok(SocketAddr::new(ip, port));
        }
        endpoint_address(self, ns, &svc.obj, port)
            .ok_or_else(|| format!("no endpoints available for service {}", go_quote(name)))
    }
}
