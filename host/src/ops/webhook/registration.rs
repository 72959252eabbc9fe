//! The Validating- and MutatingWebhookConfiguration of each plugin that
//! serves webhooks: `wasmctrl-<plugin>`, applied server-side by the host
//! (field manager `wasmctrl`) whenever the plugin's webhooks change, and
//! deleted when it no longer serves one of that kind. Each names the
//! webhook server (`webhook.url` or `webhook.service`) with the CA bundle
//! that verifies it.

use base64::Engine;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::sandbox::admission::{Webhook, WebhookKind};

/// The field manager of the host's writes of webhook configurations.
const MANAGER: &str = "wasmctrl";

/// Where the API server reaches the webhook server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `https://host:port`, without a path.
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

/// The name of a plugin's configuration objects.
pub fn configuration_name(plugin: &str) -> String {
    format!("wasmctrl-{plugin}")
}

/// The name of a plugin's webhook of `kind` (three DNS segments, as the
/// API server requires).
pub fn webhook_name(plugin: &str, kind: WebhookKind) -> String {
    format!("{plugin}.{}.wasmctrl.dev", path_segment(kind))
}

/// `validate` or `mutate`: the first segment of the webhook's path.
pub fn path_segment(kind: WebhookKind) -> &'static str {
    match kind {
        WebhookKind::Validating => "validate",
        WebhookKind::Mutating => "mutate",
    }
}

fn resource(kind: WebhookKind) -> ApiResource {
    let k = match kind {
        WebhookKind::Validating => "ValidatingWebhookConfiguration",
        WebhookKind::Mutating => "MutatingWebhookConfiguration",
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        k,
    ))
}

/// The configuration object of `plugin`'s `webhook`.
pub fn configuration(
    plugin: &str,
    webhook: &Webhook,
    endpoint: &Endpoint,
    ca_bundle: Option<&str>,
) -> Value {
    let path = format!("/{}/{plugin}", path_segment(webhook.kind));
    let mut client_config = match endpoint {
        Endpoint::Url(base) => json!({"url": format!("{}{path}", base.trim_end_matches('/'))}),
        Endpoint::Service {
            namespace,
            name,
            port,
        } => json!({"service": {"namespace": namespace, "name": name, "port": port, "path": path}}),
    };
    if let Some(ca) = ca_bundle {
        client_config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let rules: Vec<Value> = webhook
        .rules
        .iter()
        .map(|r| {
            json!({
                "operations": r.operations,
                "apiGroups": r.groups,
                "apiVersions": r.versions,
                "resources": r.resources,
                "scope": r.scope,
            })
        })
        .collect();
    let selector = |s: &Option<crate::meta::selector::LabelSelector>| {
        s.as_ref().map_or(json!({}), |s| s.to_object())
    };
    let mut entry = json!({
        "name": webhook_name(plugin, webhook.kind),
        "clientConfig": client_config,
        "rules": rules,
        "failurePolicy": webhook.failure_policy.as_str(),
        "matchPolicy": "Equivalent",
        // During a review the host API is read-only and outbound requests
        // may only read: reviewing has no side effects, dry run or not.
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": webhook.timeout_seconds,
        "namespaceSelector": selector(&webhook.namespace_selector),
        "objectSelector": selector(&webhook.object_selector),
    });
    if webhook.kind == WebhookKind::Mutating {
        entry["reinvocationPolicy"] = json!("Never");
    }
    let ar = resource(webhook.kind);
    json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": {
            "name": configuration_name(plugin),
            "labels": {
                "app.kubernetes.io/managed-by": "wasmctrl",
                "wasmctrl.dev/plugin": plugin,
            },
        },
        "webhooks": [entry],
    })
}

/// Makes the cluster's configurations of `plugin` say `webhooks`: applies
/// each kind it serves, deletes each kind it does not.
pub async fn register(
    client: &kube::Client,
    plugin: &str,
    webhooks: &[Webhook],
    endpoint: &Endpoint,
    ca_bundle: Option<&str>,
) -> Result<(), kube::Error> {
    for kind in [WebhookKind::Validating, WebhookKind::Mutating] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
        let name = configuration_name(plugin);
        match webhooks.iter().find(|w| w.kind == kind) {
            Some(webhook) => {
                let object = configuration(plugin, webhook, endpoint, ca_bundle);
                api.patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(object),
                )
                .await?;
            }
            None => match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::selector::LabelSelector;
    use crate::sandbox::admission::{FailurePolicy, WebhookRule};

    #[test]
    fn a_configuration_names_the_server_the_ca_and_the_plugins_rules() {
        let webhook = Webhook {
            kind: WebhookKind::Mutating,
            rules: vec![WebhookRule {
                operations: vec!["CREATE".into()],
                groups: vec!["demo.wasmctrl.dev".into()],
                versions: vec!["v1alpha1".into()],
                resources: vec!["webapps".into()],
                scope: "Namespaced",
            }],
            failure_policy: FailurePolicy::Ignore,
            timeout_seconds: 5,
            namespace_selector: Some(LabelSelector::parse("env=prod").unwrap()),
            object_selector: None,
        };
        let url = Endpoint::Url("https://127.0.0.1:9443/".into());
        let c = configuration("webapp", &webhook, &url, Some("PEM"));
        assert_eq!(c["kind"], "MutatingWebhookConfiguration");
        assert_eq!(c["metadata"]["name"], "wasmctrl-webapp");
        let w = &c["webhooks"][0];
        assert_eq!(w["name"], "webapp.mutate.wasmctrl.dev");
        assert_eq!(
            w["clientConfig"]["url"],
            "https://127.0.0.1:9443/mutate/webapp"
        );
        assert_eq!(w["clientConfig"]["caBundle"], "UEVN");
        assert_eq!(w["failurePolicy"], "Ignore");
        assert_eq!(w["timeoutSeconds"], 5);
        assert_eq!(w["reinvocationPolicy"], "Never");
        assert_eq!(
            w["namespaceSelector"],
            json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]})
        );
        let service = Endpoint::Service {
            namespace: "wasmctrl".into(),
            name: "webhook".into(),
            port: 443,
        };
        let c = configuration("webapp", &webhook, &service, None);
        assert_eq!(
            c["webhooks"][0]["clientConfig"],
            json!({"service": {"namespace": "wasmctrl", "name": "webhook", "port": 443, "path": "/mutate/webapp"}})
        );
    }
}
